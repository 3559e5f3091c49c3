//! What the console answers from the core: a waiting job's position, its
//! projected start and what would unblock it, and a borrowing share's
//! reclaim exposure.

mod common;

use common::*;
use qm_core::dry_run::JobOutlook;
use qm_core::outlook::StartEstimate;
use qm_core::{PreemptionKind, Strategy, Time, WaitReason};

fn with_estimate(w: &World, name: &str, share: &str, count: u32, secs: u64) -> qm_core::JobSpec {
    let mut spec = w.spec(name, share, count, 0);
    spec.estimated_runtime_secs = Some(secs);
    spec
}

#[test]
fn a_waiting_job_is_projected_to_start_when_the_jobs_ahead_of_it_end() {
    let mut w = World::new(2, vec![share("A", Strategy::Reserve, 2)]);
    let r1 = with_estimate(&w, "r1", "A", 1, 100);
    let r2 = with_estimate(&w, "r2", "A", 1, 300);
    w.submit_spec(r1);
    w.submit_spec(r2);
    w.step();
    w.at(10);
    let w1 = with_estimate(&w, "w1", "A", 1, 50);
    let w2 = with_estimate(&w, "w2", "A", 2, 60);
    w.submit_spec(w1);
    w.submit_spec(w2);
    w.step();
    // w1 takes r1's instance when r1 ends at 100 s; w2 needs both, which
    // are free once r2 ends at 300 s (w1 is done at 150 s).
    assert_eq!(
        w.c.projected_start(w.id("w1"), w.now),
        Some(StartEstimate::At(Time::from_secs(100)))
    );
    assert_eq!(
        w.c.projected_start(w.id("w2"), w.now),
        Some(StartEstimate::At(Time::from_secs(300)))
    );
    // The outlook carries the line and the estimate.
    match w.c.outlook(w.id("w2"), w.now).expect("known") {
        JobOutlook::Waits {
            position,
            ahead,
            estimate,
            reason,
        } => {
            assert_eq!(position, 1);
            assert_eq!(ahead, vec![w.id("w1")]);
            assert_eq!(estimate, StartEstimate::At(Time::from_secs(300)));
            assert!(matches!(reason, WaitReason::OwnCapacityInUse { .. }));
            assert!(
                reason.unblock().contains("freeing capacity"),
                "{}",
                reason.unblock()
            );
        }
        other => panic!("{other:?}"),
    }
    // Nothing changed, and the projection is what then happens.
    assert_eq!(w.status("w1"), qm_core::JobStatus::Runnable);
    w.at(100);
    w.exit("r1", 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), ["w1"]);
    w.at(150);
    w.exit("w1", 0);
    assert!(w.step().starts.is_empty(), "w2 needs both instances");
    w.at(300);
    w.exit("r2", 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), ["w2"]);
}

#[test]
fn a_start_behind_a_job_without_an_estimate_is_unknown_and_says_why() {
    let mut w = World::new(1, vec![share("A", Strategy::Reserve, 1)]);
    w.submit("forever", "A", 1, 0);
    w.step();
    w.submit("next", "A", 1, 0);
    w.step();
    assert_eq!(
        w.c.projected_start(w.id("next"), w.now),
        Some(StartEstimate::Unknown {
            without_estimate: 1,
            beyond: None
        })
    );
    // A job that is not waiting has no projection.
    assert_eq!(w.c.projected_start(w.id("forever"), w.now), None);
}

#[test]
fn a_job_the_next_pass_places_starts_now() {
    let mut w = World::new(2, vec![share("A", Strategy::Reserve, 2)]);
    w.submit("a", "A", 1, 0);
    assert_eq!(
        w.c.projected_start(w.id("a"), w.now),
        Some(StartEstimate::Now)
    );
}

#[test]
fn a_borrowing_share_sees_which_jobs_each_lender_would_reclaim_and_the_work_lost() {
    // A (lab: entitlement 1, unlimited borrowing) borrows B's two instances.
    let mut w = World::new(3, vec![lab("A", 1, -1), share("B", Strategy::Lend, 2)]);
    w.submit("a_own", "A", 1, 0);
    w.submit("a_b1", "A", 1, 0);
    w.submit("a_b2", "A", 1, 5);
    w.step();
    w.at(40);
    w.checkpoint("a_b1", 7);
    w.at(100);
    let a = w.c.share_idx("A").expect("A");
    let b = w.c.share_idx("B").expect("B");
    let exposure = w.c.reclaim_exposure(a, w.now);
    assert_eq!(exposure.len(), 1, "{exposure:?}");
    let e = &exposure[0];
    assert_eq!((e.lender, e.lent, e.waits), (b, 2, None));
    let mut victims: Vec<(String, PreemptionKind, u64)> = e
        .victims
        .iter()
        .map(|v| (w.name(v.job), v.kind, v.work_at_risk_ms))
        .collect();
    victims.sort();
    assert_eq!(
        victims,
        [
            ("a_b1".to_string(), PreemptionKind::CrossShare, 60_000),
            ("a_own".to_string(), PreemptionKind::CrossShare, 100_000),
        ]
    );
    // A share borrows as a whole: the reclaim stops its two least urgent
    // jobs (a_b2 runs at priority 5), whichever instances they hold, as
    // the real pass would. The lender has nothing borrowed to lose.
    assert!(w.c.reclaim_exposure(b, w.now).is_empty());
    // Nothing changed.
    assert!(!w.stopping("a_b1"));
}

#[test]
fn borrowed_jobs_under_protection_show_the_lender_would_wait() {
    let mut borrower = lab("A", 1, -1);
    borrower.protections.min_runtime_before_preemption_secs = 600;
    let mut w = World::new(2, vec![borrower, share("B", Strategy::Lend, 1)]);
    w.submit("a_own", "A", 1, 0);
    w.submit("a_borrow", "A", 1, 0);
    w.step();
    w.at(60);
    let a = w.c.share_idx("A").expect("A");
    let exposure = w.c.reclaim_exposure(a, w.now);
    assert_eq!(exposure.len(), 1, "{exposure:?}");
    assert!(exposure[0].victims.is_empty(), "{exposure:?}");
    assert!(
        matches!(
            exposure[0].waits,
            Some(WaitReason::VictimsProtectedUntil(_))
        ),
        "{exposure:?}"
    );
}
