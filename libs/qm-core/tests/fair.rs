//! FAIR_SHARE (`idleResourceAssignmentStrategy`), case by case: idle
//! capacity goes to borrowers by weight and recent borrowing, not to
//! whichever job waited longest; FIFO stays the default.

mod common;

use common::*;
use qm_core::config::IdleAssignment;
use qm_core::{QueueConfig, QuotaShare, Strategy, Time};

/// A lender with 4 idle instances, and borrowers with no capacity of their
/// own and these weights.
fn world(assignment: IdleAssignment, weights: &[(&str, u32)]) -> World {
    let mut shares: Vec<QuotaShare> = weights
        .iter()
        .map(|(name, w)| {
            let mut s = lab(name, 0, -1);
            s.fair_share_weight = *w;
            s
        })
        .collect();
    shares.push(share("L", Strategy::Lend, 4));
    let mut q = QueueConfig::new("q", shares);
    q.idle_assignment = assignment;
    World::with_queue(4, q)
}

fn started_by(w: &World, plan: &qm_core::Plan, prefix: &str) -> usize {
    w.started(plan)
        .iter()
        .filter(|n| n.starts_with(prefix))
        .count()
}

/// From `base` seconds, A submits 4 jobs, then B 4 (A's have waited
/// longer).
fn contend(w: &mut World, base: u64) -> qm_core::Plan {
    for i in 0..4 {
        w.at(base + i);
        w.submit(&format!("a{i}"), "A", 1, 0);
    }
    for i in 0..4 {
        w.at(base + 10 + i);
        w.submit(&format!("b{i}"), "B", 1, 0);
    }
    w.step()
}

#[test]
fn fifo_gives_idle_capacity_to_whoever_waited_longest() {
    let mut w = world(IdleAssignment::Fifo, &[("A", 1), ("B", 1)]);
    let plan = contend(&mut w, 0);
    assert_eq!(
        (started_by(&w, &plan, "a"), started_by(&w, &plan, "b")),
        (4, 0)
    );
}

#[test]
fn fair_share_splits_idle_capacity_equally_between_equal_weights() {
    let mut w = world(IdleAssignment::FairShare, &[("A", 1), ("B", 1)]);
    let plan = contend(&mut w, 0);
    assert_eq!(
        (started_by(&w, &plan, "a"), started_by(&w, &plan, "b")),
        (2, 2)
    );
    // Within a share, its own order holds: A's two oldest.
    assert!(w.started(&plan).contains(&"a0".to_string()));
    assert!(w.started(&plan).contains(&"a1".to_string()));
}

#[test]
fn fair_share_splits_by_weight() {
    let mut w = world(IdleAssignment::FairShare, &[("A", 1), ("B", 3)]);
    let plan = contend(&mut w, 0);
    assert_eq!(
        (started_by(&w, &plan, "a"), started_by(&w, &plan, "b")),
        (1, 3)
    );
}

#[test]
fn recent_borrowing_counts_against_a_share() {
    // A borrowed all 4 for a day; at the next contention B goes first.
    let mut w = world(IdleAssignment::FairShare, &[("A", 1), ("B", 1)]);
    for i in 0..4 {
        w.submit(&format!("early{i}"), "A", 1, 0);
    }
    w.step();
    w.at(24 * 3600);
    for i in 0..4 {
        w.exit(&format!("early{i}"), 0);
    }
    let a = w.c.share_idx("A").expect("A");
    let recent = w.c.fair_recent(a, w.now);
    // 4 instances for one half-life: 4 x (1 - 1/2) / ln 2.
    let expected = 4.0 * 0.5 / std::f64::consts::LN_2;
    assert!((recent - expected).abs() < 1e-3, "{recent} vs {expected}");
    // Eleven half-lives later it is (nearly) forgotten.
    assert!(w.c.fair_recent(a, Time::from_secs(24 * 3600 * 12)) < 0.01);
    // A's claim: 0 borrowed now + 2.9 recent; B's: 0. B takes three (its
    // claim grows by one with each), then A's 2.9 is below B's 3.
    let plan = contend(&mut w, 24 * 3600);
    assert_eq!(
        (started_by(&w, &plan, "a"), started_by(&w, &plan, "b")),
        (1, 3)
    );
}

#[test]
fn weights_and_the_half_life_are_validated_by_field() {
    let mut a = lab("A", 1, -1);
    a.fair_share_weight = 0;
    let mut b = lab("B", 1, -1);
    b.fair_share_weight = 101;
    let mut q = QueueConfig::new("q", vec![a, b]);
    q.fair_share_half_life_hours = 0;
    let err = qm_core::validate_queue(&q).expect_err("three problems");
    let fields: Vec<&str> = err.0.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "fairShareHalfLifeHours",
            "quotaShares[0].fairShareWeight",
            "quotaShares[1].fairShareWeight"
        ],
        "{err}"
    );
}

/// FAIR_SHARE with rebalancing every `secs`.
fn rebalancing(secs: u64) -> World {
    let mut w = world(IdleAssignment::FairShare, &[("A", 1), ("B", 1)]);
    let mut q = w.c.queue_config();
    q.fair_share_rebalance_secs = Some(secs);
    w.c.update_queue(q, w.now).expect("valid");
    w
}

#[test]
fn rebalancing_moves_borrowed_places_until_the_claims_meet_and_no_further() {
    let mut w = rebalancing(60);
    for i in 0..4 {
        w.submit(&format!("a{i}"), "A", 1, 0);
    }
    let plan = w.step();
    assert_eq!(started_by(&w, &plan, "a"), 4, "A alone borrows everything");
    // B arrives before A's jobs ran the interval: nothing moves.
    w.at(30);
    for i in 0..4 {
        w.submit(&format!("b{i}"), "B", 1, 0);
    }
    let plan = w.step();
    assert!(
        plan.preemptions.is_empty() && plan.starts.is_empty(),
        "{plan:?}"
    );
    // From 60 s on A's jobs may give way, one per pass, until 2 and 2.
    w.at(60);
    let mut moved = Vec::new();
    for _ in 0..5 {
        let plan = w.step();
        for p in &plan.preemptions {
            assert_eq!(p.kind, qm_core::PreemptionKind::Rebalance);
            moved.push(w.name(p.job));
            w.exit(&w.name(p.job), 143);
        }
    }
    assert_eq!(moved.len(), 2, "{moved:?}");
    let running = |prefix: &str| {
        w.c.jobs()
            .filter(|j| j.status.holds_instances() && w.name(j.id).starts_with(prefix))
            .count()
    };
    assert_eq!((running("a"), running("b")), (2, 2));
    // The preempted jobs wait; they are not rebalanced back for B's.
    let plan = w.step();
    assert!(plan.preemptions.is_empty(), "{plan:?}");
    let a = w.c.job(w.id(&moved[0])).expect("job");
    assert_eq!(
        a.attempts[0].outcome,
        Some(qm_core::AttemptOutcome::PreemptedRebalance)
    );
}

#[test]
fn rebalancing_needs_fair_share_and_a_sensible_interval() {
    let mut q = QueueConfig::new("q", vec![lab("A", 1, -1)]);
    q.fair_share_rebalance_secs = Some(600);
    let err = qm_core::validate_queue(&q).expect_err("FIFO");
    assert_eq!(err.0[0].field, "fairShareRebalanceSeconds");
    q.idle_assignment = IdleAssignment::FairShare;
    q.fair_share_rebalance_secs = Some(5);
    let err = qm_core::validate_queue(&q).expect_err("too often");
    assert!(err.to_string().contains("must be 60..="), "{err}");
}

mod rebalancing_property {
    use super::{lab, share, IdleAssignment, QueueConfig, QuotaShare, Time, T};
    use proptest::prelude::{prop, prop_assert, prop_oneof, proptest, TestCaseError};
    use proptest::strategy::Strategy as _;
    use qm_core::invariants::check_plan;
    use qm_core::{Cluster, JobId, JobSpec, JobStatus, PreemptionKind};
    use std::collections::BTreeMap;

    #[derive(Clone, Debug)]
    enum Ev {
        Submit { share: usize, count: u32 },
        Advance { secs: u64 },
        Exit { nth: usize },
    }

    fn ev() -> impl proptest::strategy::Strategy<Value = Ev> {
        prop_oneof![
            4 => (0usize..3, 1u32..3).prop_map(|(share, count)| Ev::Submit { share, count }),
            3 => (1u64..200).prop_map(|secs| Ev::Advance { secs }),
            1 => (0usize..8).prop_map(|nth| Ev::Exit { nth }),
        ]
    }

    fn cluster(weights: [u32; 3]) -> Cluster {
        let mut shares: Vec<QuotaShare> = ["A", "B", "C"]
            .iter()
            .zip(weights)
            .map(|(n, w)| {
                let mut s = lab(n, 0, -1);
                s.fair_share_weight = w;
                s
            })
            .collect();
        shares.push(share("L", qm_core::Strategy::Lend, 6));
        let mut q = QueueConfig::new("q", shares);
        q.idle_assignment = IdleAssignment::FairShare;
        q.fair_share_half_life_hours = 1;
        q.fair_share_rebalance_secs = Some(60);
        Cluster::new(q, &[(T, 6)]).expect("valid")
    }

    /// Applies a pass as a driver would: starts run at once, stops end at
    /// once. Returns the rebalancing preemptions (victim, from, to share).
    fn pass(c: &mut Cluster, now: Time) -> Result<Vec<(JobId, usize, usize)>, TestCaseError> {
        let plan = c.schedule(now);
        check_plan(c, &plan).map_err(|v| TestCaseError::fail(format!("{v}\n{plan:?}")))?;
        c.apply(&plan);
        for s in &plan.starts {
            let a = c.next_attempt(s.job) - 1;
            c.attempt_starting(s.job, a, None, now).expect("starting");
            c.attempt_running(s.job, a, now).expect("running");
        }
        let mut moved = Vec::new();
        for p in &plan.preemptions {
            let share_of = |j: JobId| c.job(j).expect("job").spec.share.index();
            if p.kind == PreemptionKind::Rebalance {
                moved.push((p.job, share_of(p.job), share_of(p.for_job)));
            }
            let a = c.job(p.job).expect("job").attempts.len() as u32;
            c.attempt_ended(p.job, a, Some(143), now).expect("ended");
        }
        Ok(moved)
    }

    proptest! {

        /// No job is preempted to rebalance more than once per interval of
        /// its run, and at a fixed time passes settle: two borrowers never
        /// take places back and forth.
        #[test]
        fn rebalancing_respects_its_interval_and_never_cycles(
            weights in prop::array::uniform3(1u32..4),
            events in prop::collection::vec(ev(), 1..80),
        ) {
            let mut c = cluster(weights);
            let mut now = Time::ZERO;
            let mut last: BTreeMap<JobId, Time> = BTreeMap::new();
            for e in &events {
                match *e {
                    Ev::Submit { share, count } => {
                        let s = c.share_idx(["A", "B", "C"][share]).expect("share");
                        let t = c.type_idx(T).expect("type");
                        let mut spec = JobSpec::new("j", s, t, count);
                        spec.checkpoints = true;
                        c.submit(spec, now).expect("valid");
                    }
                    Ev::Advance { secs } => now = now.plus_secs(secs),
                    Ev::Exit { nth } => {
                        let running: Vec<JobId> = c
                            .jobs()
                            .filter(|j| j.status == JobStatus::Running && j.stopping.is_none())
                            .map(|j| j.id)
                            .collect();
                        if !running.is_empty() {
                            let id = running[nth % running.len()];
                            let a = c.job(id).expect("job").attempts.len() as u32;
                            c.attempt_ended(id, a, Some(0), now).expect("ended");
                        }
                    }
                }
                // Passes at this instant until nothing more moves.
                let mut settled = false;
                for _ in 0..20 {
                    let moved = pass(&mut c, now)?;
                    for (job, _, _) in &moved {
                        if let Some(before) = last.insert(*job, now) {
                            prop_assert!(
                                now.millis_since(before) >= 60_000,
                                "{job} rebalanced at {before} and again at {now}"
                            );
                        }
                    }
                    if moved.is_empty() {
                        settled = true;
                        break;
                    }
                }
                prop_assert!(settled, "rebalancing did not settle at {now}");
            }
        }
    }
}
