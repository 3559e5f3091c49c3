//! Property tests: random fleets, shares, jobs and event orders. After every
//! pass the contract's invariants hold (`invariants::check_plan`), passes are
//! deterministic, and no job is lost or counted twice.

mod common;

use std::collections::BTreeMap;

/// (share, instance type, class): a row of the usage ledger.
type UsageKey = (String, String, String);

use proptest::prelude::*;
use qm_core::invariants::{check_indexes, check_plan};
use qm_core::{
    Cluster, JobId, JobSpec, JobStatus, QueueConfig, QueueingStrategy, QuotaShare,
    Strategy as Sharing, Time, WaitReason,
};

const TYPES: [&str; 2] = ["ml.g5.xlarge", "ml.p4d.24xlarge"];

/// Nodes a generated fleet may have.
const NODES: usize = 4;

fn node_name(i: usize) -> String {
    format!("node-{i}")
}

#[derive(Clone, Debug)]
struct ShareGen {
    strategy: Sharing,
    limits: [i64; 2],
    borrow_limit: i64,
    in_share: bool,
    min_runtime: u64,
    cooldown: u64,
    requires_checkpoint: bool,
    /// Workload classes: None, or the knobs of three classes by band
    /// (`low` 0..=1, `mid` 2, `high` 3..=4).
    classes: Option<ClassGen>,
    /// A borrowing budget of 1 instance-hour per 2 h or with a 1 h
    /// half-life (LEND_AND_BORROW shares):
    /// (a half-life rather than a window, CHECKPOINT_AND_STOP rather than
    /// FINISH).
    budget: Option<(bool, bool)>,
}

#[derive(Clone, Debug)]
struct ClassGen {
    low_may_borrow: bool,
    low_min_runtime: Option<u64>,
    /// `mid` borrows only with a resume proof (LEND_AND_BORROW shares).
    mid_needs_proof: bool,
    /// `mid` may be preempted in-share only by `high`.
    mid_only_by_high: bool,
    /// `high` may not be preempted in-share at all.
    high_pinned: bool,
    high_checkpoint_first: Option<u64>,
}

fn class_gen() -> impl Strategy<Value = ClassGen> {
    (
        any::<bool>(),
        prop_oneof![Just(None), Just(Some(0u64)), Just(Some(20))],
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop_oneof![Just(None), Just(Some(0u64)), Just(Some(10))],
    )
        .prop_map(
            |(
                low_may_borrow,
                low_min_runtime,
                mid_needs_proof,
                mid_only_by_high,
                high_pinned,
                high_checkpoint_first,
            )| ClassGen {
                low_may_borrow,
                low_min_runtime,
                mid_needs_proof,
                mid_only_by_high,
                high_pinned,
                high_checkpoint_first,
            },
        )
}

/// The class whose band holds `priority` (classes `low`, `mid`, `high`).
fn class_of(priority: u32) -> &'static str {
    match priority {
        0..=1 => "low",
        2 => "mid",
        _ => "high",
    }
}

fn classes(g: &ClassGen, strategy: Sharing) -> Vec<qm_core::WorkloadClass> {
    use qm_core::WorkloadClass;
    let mut low = WorkloadClass::new("low", 0, 1);
    low.may_borrow = g.low_may_borrow;
    low.min_runtime_before_preemption_secs = g.low_min_runtime;
    let mut mid = WorkloadClass::new("mid", 2, 2);
    if g.mid_needs_proof && strategy == Sharing::LendAndBorrow {
        mid.borrow_requires_resume_proof = true;
        mid.requires_checkpoint = true;
    }
    if g.mid_only_by_high {
        mid.preemptible_by = Some(vec!["high".into()]);
    }
    let mut high = WorkloadClass::new("high", 3, 4);
    if g.high_pinned {
        high.preemptible_by = Some(Vec::new());
    }
    high.checkpoint_before_preempt_secs = g.high_checkpoint_first;
    vec![low, mid, high]
}

#[derive(Clone, Debug)]
enum Event {
    Submit {
        share: usize,
        ty: usize,
        count: u32,
        priority: u32,
        checkpoints: bool,
        retries: Option<u32>,
    },
    /// The n-th running (not stopping) job exits with `code`.
    Exit {
        nth: usize,
        code: i32,
    },
    /// The n-th stopping job's attempt ends.
    StopDone {
        nth: usize,
    },
    LoseHost {
        nth: usize,
    },
    Checkpoint {
        nth: usize,
    },
    Priority {
        nth: usize,
        priority: u32,
    },
    Terminate {
        nth: usize,
    },
    SetFleet {
        ty: usize,
        count: u32,
    },
    /// One rank of the n-th running job ends (a gang's first failure stops
    /// the others).
    RankExit {
        nth: usize,
        rank: usize,
        code: i32,
    },
    /// A node stops heartbeating: what ran there ends HOST_LOST.
    LoseNode {
        node: usize,
    },
    /// A node registers (again): a new incarnation, or another offer.
    RegisterNode {
        node: usize,
        counts: [u32; 2],
    },
    SetLimit {
        share: usize,
        ty: usize,
        max: i64,
    },
    /// A resume drill of class `mid` passes or fails for an artifact.
    Drill {
        share: usize,
        artifact: u32,
        passed: bool,
    },
    /// A resume drill of class `mid` (a drill job's exit records the
    /// result "r": a drill passes when both runs succeed after its stop).
    StartDrill {
        share: usize,
        count: u32,
        seed: u64,
    },
    /// Every running drill subject commits a checkpoint (drills' stops
    /// follow their first).
    CheckpointDrills,
    /// Class `low`'s `mayBorrow` flips (a configuration change).
    ToggleLowBorrow {
        share: usize,
    },
    /// Class `high`'s band narrows to 3..=3 or widens back to 3..=4: jobs
    /// at 4 move to 3.
    ToggleHighBand {
        share: usize,
    },
    Advance {
        secs: u64,
    },
}

fn share_gen() -> impl Strategy<Value = ShareGen> {
    (
        prop_oneof![
            Just(Sharing::Reserve),
            Just(Sharing::Lend),
            Just(Sharing::LendAndBorrow)
        ],
        prop::array::uniform2(0i64..4),
        prop_oneof![Just(-1i64), Just(0), Just(50), Just(100), Just(300)],
        any::<bool>(),
        prop_oneof![3 => Just(0u64), 1 => Just(30)],
        prop_oneof![3 => Just(0u64), 1 => Just(60)],
        prop::bool::weighted(0.2),
        prop::option::weighted(0.4, class_gen()),
        prop::option::weighted(0.3, (any::<bool>(), any::<bool>())),
    )
        .prop_map(
            |(
                strategy,
                limits,
                borrow_limit,
                in_share,
                min_runtime,
                cooldown,
                requires_checkpoint,
                classes,
                budget,
            )| ShareGen {
                strategy,
                limits,
                borrow_limit,
                in_share,
                min_runtime,
                cooldown,
                requires_checkpoint,
                classes,
                budget,
            },
        )
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        6 => (0usize..4, 0usize..2, 1u32..4, 0u32..4, prop::bool::weighted(0.8), prop::option::of(0u32..3))
            .prop_map(|(share, ty, count, priority, checkpoints, retries)| Event::Submit { share, ty, count, priority, checkpoints, retries }),
        3 => (0usize..8, prop_oneof![Just(0), Just(1)]).prop_map(|(nth, code)| Event::Exit { nth, code }),
        3 => (0usize..8).prop_map(|nth| Event::StopDone { nth }),
        1 => (0usize..8).prop_map(|nth| Event::LoseHost { nth }),
        1 => (0usize..8).prop_map(|nth| Event::Checkpoint { nth }),
        1 => (0usize..8, 0u32..5).prop_map(|(nth, priority)| Event::Priority { nth, priority }),
        1 => (0usize..8).prop_map(|nth| Event::Terminate { nth }),
        1 => (0usize..2, 0u32..10).prop_map(|(ty, count)| Event::SetFleet { ty, count }),
        2 => (0usize..8, 0usize..4, prop_oneof![Just(0), Just(1), Just(2), Just(3)]).prop_map(|(nth, rank, code)| Event::RankExit { nth, rank, code }),
        1 => (0usize..NODES).prop_map(|node| Event::LoseNode { node }),
        1 => (0usize..NODES, prop::array::uniform2(0u32..4)).prop_map(|(node, counts)| Event::RegisterNode { node, counts }),
        1 => (0usize..4, 0usize..2, 0i64..4).prop_map(|(share, ty, max)| Event::SetLimit { share, ty, max }),
        1 => (0usize..4, 0u32..2, prop::bool::weighted(0.7)).prop_map(|(share, artifact, passed)| Event::Drill { share, artifact, passed }),
        1 => (0usize..4).prop_map(|share| Event::ToggleLowBorrow { share }),
        2 => (0usize..4, 1u32..3, any::<u64>()).prop_map(|(share, count, seed)| Event::StartDrill { share, count, seed }),
        2 => Just(Event::CheckpointDrills),
        1 => (0usize..4).prop_map(|share| Event::ToggleHighBand { share }),
        2 => (1u64..40).prop_map(|secs| Event::Advance { secs }),
        // Long enough for a borrowing budget (an instance-hour) to run out.
        1 => (300u64..3000).prop_map(|secs| Event::Advance { secs }),
    ]
}

/// The runtimes node `i` offers: both, host processes only, or images
/// only, in turn (a pooled fleet offers both).
fn node_runtimes(i: usize) -> qm_core::Runtimes {
    match i % 3 {
        0 => qm_core::Runtimes::all(),
        1 => qm_core::Runtimes::only(qm_core::Runtime::Process),
        _ => qm_core::Runtimes::only(qm_core::Runtime::Container),
    }
}

/// A fleet: a pooled count per type, or nodes with instances of each type.
fn build_fleet(c: &mut Cluster, pooled: [u32; 2], nodes: &[[u32; 2]]) {
    if nodes.is_empty() {
        for (ty, count) in pooled.iter().enumerate() {
            c.set_fleet(TYPES[ty], *count, Time::ZERO);
        }
    }
    for (i, counts) in nodes.iter().enumerate() {
        let offers = [(TYPES[0], counts[0]), (TYPES[1], counts[1])];
        c.register_node(&node_name(i), "1", &offers, node_runtimes(i), Time::ZERO);
    }
}

fn build(shares: &[ShareGen], fleet: [u32; 2], strict: bool, fair: bool, grouped: bool) -> Cluster {
    let shares = shares
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut s = QuotaShare::new(
                format!("S{i}"),
                &[(TYPES[0], g.limits[0]), (TYPES[1], g.limits[1])],
            );
            s.strategy = g.strategy;
            s.borrow_limit = if g.strategy == Sharing::LendAndBorrow {
                g.borrow_limit
            } else {
                -1
            };
            s.in_share_preemption = g.in_share;
            s.fair_share_weight = 1 + (i as u32 % 2);
            // Grouped: the even shares form a department that may borrow
            // half its entitlement beyond it.
            if grouped && i % 2 == 0 {
                s.group = Some("even".into());
            }
            s.protections.min_runtime_before_preemption_secs = g.min_runtime;
            s.protections.reborrow_cooldown_secs = g.cooldown;
            s.protections.borrow_requires_checkpoint = g.requires_checkpoint;
            if let Some(cg) = &g.classes {
                s.classes = classes(cg, g.strategy);
            }
            if let Some((half_life, stop)) =
                g.budget.filter(|_| g.strategy == Sharing::LendAndBorrow)
            {
                s.borrow_budget = Some(qm_core::BorrowBudget::hours(
                    1,
                    if half_life {
                        qm_core::BudgetWindow::HalfLife { hours: 1 }
                    } else {
                        qm_core::BudgetWindow::Rolling { hours: 2 }
                    },
                ));
                if stop {
                    s.on_budget_exhausted = qm_core::OnBudgetExhausted::CheckpointAndStop;
                }
            }
            s
        })
        .collect();
    let mut queue = QueueConfig::new("q", shares);
    if strict {
        queue.queueing_strategy = QueueingStrategy::StrictFifo;
    }
    if grouped {
        queue.groups = vec![qm_core::config::ShareGroup {
            name: "even".into(),
            borrow_limit: 50,
        }];
    }
    if fair {
        queue.idle_assignment = qm_core::config::IdleAssignment::FairShare;
        queue.fair_share_half_life_hours = 1;
        // Rebalancing in most fair queues, at its shortest interval.
        if queue.shares.len() % 3 != 0 {
            queue.fair_share_rebalance_secs = Some(60);
        }
    }
    Cluster::new(queue, &[(TYPES[0], fleet[0]), (TYPES[1], fleet[1])])
        .expect("generated queue is valid")
}

fn holders(c: &Cluster, stopping: bool) -> Vec<JobId> {
    c.jobs()
        .filter(|j| j.status.holds_instances() && j.stopping.is_some() == stopping)
        .map(|j| j.id)
        .collect()
}

fn attempt(c: &Cluster, id: JobId) -> u32 {
    c.job(id).map_or(0, |j| j.attempts.len() as u32)
}

/// Applies one event (events that name no existing job do nothing).
fn apply_event(c: &mut Cluster, now: &mut Time, event: &Event) {
    match *event {
        Event::Submit {
            share,
            ty,
            count,
            priority,
            checkpoints,
            retries,
        } => {
            let spec = generated_spec(c, share, ty, count, priority, checkpoints, retries);
            // Rejections (never fits) are fine; they must change nothing.
            let before = c.jobs().count();
            if c.submit(spec, *now).is_err() {
                assert_eq!(c.jobs().count(), before);
            }
        }
        Event::Exit { nth, code } => {
            let running = holders(c, false);
            if let Some(&id) = running.get(nth % running.len().max(1)) {
                if c.job(id).is_some_and(|j| j.spec.drill.is_some()) {
                    c.attempt_result(id, attempt(c, id), "r".into())
                        .expect("current attempt");
                }
                c.attempt_ended(id, attempt(c, id), Some(code), *now)
                    .expect("current attempt");
            }
        }
        Event::StopDone { nth } => {
            let stopping = holders(c, true);
            if let Some(&id) = stopping.get(nth % stopping.len().max(1)) {
                c.attempt_ended(id, attempt(c, id), None, *now)
                    .expect("current attempt");
            }
        }
        Event::LoseHost { nth } => {
            let all: Vec<JobId> = holders(c, false)
                .into_iter()
                .chain(holders(c, true))
                .collect();
            if let Some(&id) = all.get(nth % all.len().max(1)) {
                c.attempt_lost(id, attempt(c, id), *now)
                    .expect("current attempt");
            }
        }
        Event::Checkpoint { nth } => {
            // Running jobs, and preempted ones waiting for a checkpoint.
            let running: Vec<JobId> = holders(c, false)
                .into_iter()
                .chain(holders(c, true))
                .collect();
            if let Some(&id) = running.get(nth % running.len().max(1)) {
                c.checkpoint_committed(
                    id,
                    attempt(c, id),
                    qm_core::CheckpointMark { at: *now, step: 1 },
                )
                .expect("current attempt");
            }
        }
        Event::Priority { nth, priority } => {
            // As the scheduler does before every entry: a priority update
            // takes no time of its own.
            c.advance_usage(*now);
            let live: Vec<JobId> = c
                .jobs()
                .filter(|j| !j.status.is_final())
                .map(|j| j.id)
                .collect();
            if let Some(&id) = live.get(nth % live.len().max(1)) {
                // A priority outside the job's class band is refused, and
                // changes nothing.
                let before = c.job(id).map(|j| j.spec.priority);
                if let Err(e) = c.update_priority(id, priority) {
                    assert!(matches!(e, qm_core::JobError::Invalid(_)), "{e}");
                    assert_eq!(c.job(id).map(|j| j.spec.priority), before);
                }
            }
        }
        Event::Terminate { nth } => {
            let live: Vec<JobId> = c
                .jobs()
                .filter(|j| !j.status.is_final())
                .map(|j| j.id)
                .collect();
            if let Some(&id) = live.get(nth % live.len().max(1)) {
                c.terminate(id, *now).expect("live job");
            }
        }
        Event::SetFleet { ty, count } => {
            c.set_fleet(TYPES[ty], count, *now);
        }
        Event::SetLimit { share, ty, max } => {
            let mut cfg = c.queue_config();
            let n = cfg.shares.len();
            let limit = &mut cfg.shares[share % n].capacity_limits[ty];
            limit.max_capacity = max;
            c.update_queue(cfg, *now).expect("valid change");
        }
        Event::Drill {
            share,
            artifact,
            passed,
        } => {
            let names: Vec<String> = c
                .queue_config()
                .shares
                .into_iter()
                .map(|s| s.name)
                .collect();
            let name = &names[share % names.len()];
            // An event that takes no time of its own: the driver moves the
            // usage ledger's clock first (`Cluster::advance_usage`).
            c.advance_usage(*now);
            c.record_resume_drill(name, "mid", &format!("a{artifact}"), passed);
        }
        Event::StartDrill { share, count, seed } => start_drill(c, *now, share, count, seed),
        Event::CheckpointDrills => checkpoint_drills(c, *now),
        Event::ToggleLowBorrow { share } => {
            let mut cfg = c.queue_config();
            let n = cfg.shares.len();
            if let Some(low) = cfg.shares[share % n].classes.first_mut() {
                low.may_borrow = !low.may_borrow;
                c.update_queue(cfg, *now).expect("valid change");
            }
        }
        Event::ToggleHighBand { share } => toggle_high_band(c, *now, share),
        Event::RankExit { nth, rank, code } => end_rank(c, *now, nth, rank, code),
        Event::LoseNode { node } => {
            c.lose_node(&node_name(node), *now);
        }
        Event::RegisterNode { node, counts } => {
            let incarnation = now.as_millis().to_string();
            let offers = [(TYPES[0], counts[0]), (TYPES[1], counts[1])];
            c.register_node(
                &node_name(node),
                &incarnation,
                &offers,
                node_runtimes(node),
                *now,
            );
        }
        Event::Advance { secs } => *now = now.plus_secs(secs),
    }
}

/// The spec of a generated submission: runtime, checkpointing, retries,
/// expected run and class all derived from its fields.
fn generated_spec(
    c: &Cluster,
    share: usize,
    ty: usize,
    count: u32,
    priority: u32,
    checkpoints: bool,
    retries: Option<u32>,
) -> JobSpec {
    let shares: Vec<_> = c.share_indices().collect();
    let s = shares[share % shares.len()];
    let t = c.type_idx(TYPES[ty]).expect("type exists");
    let mut spec = JobSpec::new("j", s, t, count);
    spec.priority = priority;
    spec.checkpoints = checkpoints;
    // A third of the jobs run in images (only some nodes run them).
    if priority % 3 == 1 {
        spec.runtime = qm_core::Runtime::Container;
    }
    // Half the checkpointing jobs ask to checkpoint before a
    // preemption (a window of 20 s that commits or time close).
    spec.checkpoint_before_preempt_secs = (priority % 2 == 0).then_some(20);
    spec.preemption_retries = retries;
    spec.retry_attempts = 2;
    // Expected runs for borrowing budgets: none, 5 or 30 minutes.
    spec.estimated_runtime_secs = [None, Some(300), Some(1800)][((count + priority) % 3) as usize];
    if !c.share_config(s).classes.is_empty() {
        spec.class = Some(class_of(priority).to_string());
    }
    spec.artifact = Some(format!("a{}", count % 2));
    spec
}

/// Starts a resume drill on a share (refusals must change nothing).
fn start_drill(c: &mut Cluster, now: Time, share: usize, count: u32, seed: u64) {
    let shares: Vec<_> = c.share_indices().collect();
    let s = shares[share % shares.len()];
    let t = c.type_idx(TYPES[0]).expect("type exists");
    let mut spec = JobSpec::new("drill", s, t, count);
    spec.priority = 2;
    spec.checkpoints = true;
    spec.class = Some("mid".into());
    spec.artifact = Some(format!("a{}", count % 2));
    // Refused (no classes, never fits) changes nothing.
    let before = c.jobs().count();
    if c.start_drill(spec, seed, now).is_err() {
        assert_eq!(c.jobs().count(), before);
    }
}

/// Commits a checkpoint for every running drill subject.
fn checkpoint_drills(c: &mut Cluster, now: Time) {
    let subjects: Vec<JobId> = holders(c, false)
        .into_iter()
        .filter(|id| {
            c.job(*id)
                .and_then(|j| j.spec.drill)
                .is_some_and(|r| !r.reference)
        })
        .collect();
    for id in subjects {
        c.checkpoint_committed(
            id,
            attempt(c, id),
            qm_core::CheckpointMark { at: now, step: 1 },
        )
        .expect("current attempt");
    }
}

/// Moves the top of a share's high class band, and checks every live job
/// stays within its band.
fn toggle_high_band(c: &mut Cluster, now: Time, share: usize) {
    let mut cfg = c.queue_config();
    let n = cfg.shares.len();
    if let Some(high) = cfg.shares[share % n].classes.get_mut(2) {
        high.priority_max = if high.priority_max == 4 { 3 } else { 4 };
        c.update_queue(cfg, now).expect("valid change");
        for job in c.jobs().filter(|j| !j.status.is_final()) {
            let (_, min, max) = c.priority_band(job.id).expect("a job");
            assert!(
                (min..=max).contains(&job.spec.priority),
                "{} left its band",
                job.id
            );
        }
    }
}

/// Ends one open rank of a running job, as its executor would report it.
fn end_rank(c: &mut Cluster, now: Time, nth: usize, rank: usize, code: i32) {
    let running = holders(c, false);
    if let Some(&id) = running.get(nth % running.len().max(1)) {
        let a = c.job(id).and_then(|j| j.attempts.last()).expect("attempt");
        let open: Vec<qm_core::NodeId> = a
            .placement
            .iter()
            .zip(&a.ranks)
            .filter(|(_, r)| !matches!(r, qm_core::RankState::Ended(_)))
            .map(|(r, _)| r.node)
            .collect();
        if let Some(node) = open.get(rank % open.len().max(1)) {
            let number = attempt(c, id);
            // 2: its executor fenced itself; 3: a stop answered
            // for a rank that never started.
            let exit = match code {
                2 => qm_core::RankExit::Fenced,
                3 => qm_core::RankExit::NotStarted,
                code => qm_core::RankExit::Exited(Some(code)),
            };
            c.rank_ended(id, number, *node, exit, now)
                .expect("a placed rank");
        }
    }
}

/// Reports started jobs as running, rank by rank, as executors would.
fn launch(c: &mut Cluster, plan: &qm_core::Plan) {
    for s in &plan.starts {
        let a = attempt(c, s.job);
        for r in &s.placement {
            c.rank_running(s.job, a, r.node, plan.now)
                .expect("just started");
        }
        let status = c.job(s.job).expect("job").status;
        assert_eq!(status, JobStatus::Running, "RUNNING once every rank runs");
    }
}

/// Room is served within-quota work first (`semantics.md` section 4, also
/// room a preemption frees beyond its beneficiary's need): once the pass's
/// stops complete, no job it started on borrowed capacity holds room that a
/// waiting within-quota job of another share would fit in.
fn within_quota_before_borrowing(
    after: &Cluster,
    plan: &qm_core::Plan,
    strict: bool,
) -> Result<(), String> {
    if strict {
        return Ok(()); // a share's head blocks the jobs behind it
    }
    for start in plan.starts.iter().filter(|s| s.borrowed > 0) {
        let t = start.instance_type;
        // Usage once the stops complete: running jobs and the jobs
        // admitted to the room being freed.
        let mut used: std::collections::BTreeMap<qm_core::ShareIdx, i64> =
            after.share_indices().map(|s| (s, 0)).collect();
        for job in after.jobs().filter(|j| j.spec.instance_type == t) {
            let holds = job.status.holds_instances() && job.stopping.is_none();
            if holds || plan.waiting_for_release.contains(&job.id) {
                *used.entry(job.spec.share).or_default() += i64::from(job.spec.count);
            }
        }
        *used.entry(start.share).or_default() -= i64::from(start.count);
        let fleet = i64::from(after.effective_fleet(t));
        let entitlements: std::collections::BTreeMap<qm_core::ShareIdx, i64> = after
            .usage_snapshot(t)
            .into_iter()
            .map(|(s, u)| (s, i64::from(u.entitlement)))
            .collect();
        let entitlement = |s: qm_core::ShareIdx| entitlements.get(&s).copied().unwrap_or(0);
        let sum_e: i64 = used.keys().map(|s| entitlement(*s)).sum();
        let totals = |extra: Option<(qm_core::ShareIdx, u32)>| {
            let (mut sum_u, mut borrowed, mut idle_lent) = (0i64, 0i64, 0i64);
            for (s, u) in &used {
                let u = u + extra
                    .filter(|(w, _)| w == s)
                    .map_or(0, |(_, c)| i64::from(c));
                let e = entitlement(*s);
                sum_u += u;
                borrowed += (u - e).max(0);
                if after.share_config(*s).strategy.lends() {
                    idle_lent += (e - u).max(0);
                }
            }
            (sum_u, borrowed - ((fleet - sum_e).max(0) + idle_lent))
        };
        let (_, debt) = totals(None);
        for job in after.jobs() {
            let (s, count) = (job.spec.share, job.spec.count);
            if job.status != JobStatus::Runnable
                || job.spec.instance_type != t
                // a share's own jobs go in its order (priority first)
                || s == start.share
                || plan.waiting_for_release.contains(&job.id)
                || after.never_fits(s, t, count, job.borrow_bar).is_some()
                || matches!(
                    job.status_reason.wait(),
                    Some(WaitReason::NoExecutorOffersRuntime { .. } | WaitReason::RuntimeInstancesBusy { .. })
                )
            {
                continue;
            }
            if used[&s] + i64::from(count) > entitlement(s) {
                continue; // not within quota
            }
            let (sum_u, debt_with) = totals(Some((s, count)));
            if sum_u <= fleet && debt_with <= debt.max(0) {
                return Err(format!(
                    "{} started on borrowed capacity that {} (within quota) waits for",
                    start.job, job.id
                ));
            }
        }
    }
    Ok(())
}

proptest! {
    // 256 cases by default; PROPTEST_CASES=20000 for a deeper search.

    #[test]
    fn every_pass_keeps_the_invariants(
        shares in prop::collection::vec(share_gen(), 1..5),
        fleet in prop::array::uniform2(0u32..8),
        nodes in prop_oneof![Just(Vec::new()), prop::collection::vec(prop::array::uniform2(0u32..4), 1..=NODES)],
        strict in prop::bool::weighted(0.2),
        fair in prop::bool::weighted(0.3),
        grouped in prop::bool::weighted(0.3),
        events in prop::collection::vec(event(), 1..60),
    ) {
        let mut c = build(&shares, [0, 0], strict, fair, grouped);
        build_fleet(&mut c, fleet, &nodes);
        let mut now = Time::ZERO;
        let mut submitted = 0usize;
        // The usage ledger's reference: the state's rates integrated over
        // every stretch of time, computed from scratch.
        let mut reference: BTreeMap<UsageKey, qm_core::Usage> = BTreeMap::new();
        // (borrower, lender or "-" for unassigned capacity): instance-ms.
        let mut lent_reference: BTreeMap<(String, String), f64> = BTreeMap::new();
        for event in &events {
            if let Event::Advance { secs } = event {
                for t in 0..c.type_count() {
                    let t = qm_core::TypeIdx(t as u16);
                    let w = c.lend_weights(t);
                    for b in c.share_indices() {
                        let borrowed = f64::from(c.borrowed_now(b, t));
                        for (i, weight) in w.iter().enumerate().filter(|(_, w)| **w > 0.0) {
                            let lender = match i {
                                0 => "-".to_string(),
                                i => c.share_config(qm_core::ShareIdx((i - 1) as u16)).name.clone(),
                            };
                            *lent_reference.entry((c.share_config(b).name.clone(), lender)).or_default() +=
                                borrowed * weight * (*secs * 1000) as f64;
                        }
                    }
                }
                for (key, r) in c.usage_rates() {
                    let u = reference.entry(key).or_default();
                    let ms = secs * 1000;
                    u.own_ms += u64::from(r.own) * ms;
                    u.borrowed_ms += u64::from(r.borrowed) * ms;
                    u.waiting_ms += r.waiting * ms;
                    u.drill_ms += u64::from(r.drill) * ms;
                }
            }
            apply_event(&mut c, &mut now, event);
            check_indexes(&c).map_err(|v| TestCaseError::fail(v.to_string()))?;
            let plan = c.schedule(now);
            check_plan(&c, &plan).map_err(|v| TestCaseError::fail(format!("{v}\nafter {event:?}\nplan {plan:?}")))?;
            // Deterministic: the same state and clock give the same plan, also
            // from a copy.
            prop_assert_eq!(&plan, &c.clone().schedule(now));
            // Skipping settled types changes no decision.
            let full = qm_core::schedule_exhaustive(&c, now);
            prop_assert_eq!(&plan.starts, &full.starts);
            prop_assert_eq!(&plan.preemptions, &full.preemptions);
            prop_assert_eq!(&plan.timeouts, &full.timeouts);
            prop_assert_eq!(&plan.drill_stops, &full.drill_stops);
            prop_assert_eq!(&plan.waiting_for_release, &full.waiting_for_release);
            c.apply(&plan);
            launch(&mut c, &plan);
            within_quota_before_borrowing(&c, &plan, strict).map_err(TestCaseError::fail)?;
            // Only a preemption's beneficiary holds a claim and is told it
            // waits for the room being freed (WAITING_FOR_RECLAIM), and that
            // does not flicker: a pass at the same instant that decides
            // nothing new tells each job it examines the same.
            for (id, reason) in &plan.reasons {
                if *reason == WaitReason::WaitingForRelease {
                    prop_assert!(c.holds_claim(*id), "{} is told WAITING_FOR_RECLAIM without a claim", id);
                }
            }
            let again = c.schedule(now);
            if again.is_empty() {
                for (id, reason) in &again.reasons {
                    if let Ok(i) = plan.reasons.binary_search_by_key(id, |(j, _)| *j) {
                        let before = &plan.reasons[i].1;
                        prop_assert_eq!(
                            *before == WaitReason::WaitingForRelease,
                            *reason == WaitReason::WaitingForRelease,
                            "{}'s reason changed at the same instant from {:?} to {:?} after {:?}", id, before, reason, event
                        );
                    }
                }
            }
            // Passes converge: repeated at the same time, with nothing else
            // happening, they soon decide nothing more (a later pass may
            // still use room an earlier one freed, but never flaps).
            let mut probe = c.clone();
            let mut quiet = false;
            for _ in 0..10 {
                let again = probe.step(now);
                launch(&mut probe, &again);
                if again.starts.is_empty() && again.preemptions.is_empty() && again.timeouts.is_empty() {
                    quiet = true;
                    break;
                }
            }
            prop_assert!(quiet, "passes at a fixed time kept deciding");
            // No job lost or counted twice.
            let total = c.jobs().count();
            prop_assert!(total >= submitted);
            submitted = total;
            let by_status: usize = [
                JobStatus::Runnable, JobStatus::Scheduled, JobStatus::Starting, JobStatus::Running,
                JobStatus::Succeeded, JobStatus::Failed,
            ]
            .iter()
            .map(|s| c.jobs().filter(|j| j.status == *s).count())
            .sum();
            prop_assert_eq!(by_status, total);
            prop_assert_eq!(c.runnable_count(), c.jobs().filter(|j| j.status == JobStatus::Runnable).count());
        }
        // Liveness: with the clock stopped, letting every stop complete and
        // passing again settles; preemptions never chase each other forever.
        let mut settled = false;
        for _ in 0..50 {
            let stopping = holders(&c, true);
            for id in &stopping {
                c.attempt_ended(*id, attempt(&c, *id), None, now).expect("current attempt");
            }
            let plan = c.step(now);
            launch(&mut c, &plan);
            if stopping.is_empty() && plan.is_empty() {
                settled = true;
                break;
            }
        }
        prop_assert!(settled, "passes at a fixed time did not settle");
        // The usage ledger is the integral of the state, and adds up to
        // what the attempts themselves record.
        let report = c.usage_report(0, u32::MAX - 1, now);
        let mut ledger: BTreeMap<UsageKey, (u64, u64, u64, u64)> = BTreeMap::new();
        for r in &report.rows {
            let e = ledger.entry((r.share.clone(), r.instance_type.clone(), r.class.clone())).or_default();
            e.0 += r.usage.own_ms;
            e.1 += r.usage.borrowed_ms;
            e.2 += r.usage.waiting_ms;
            e.3 += r.usage.drill_ms;
        }
        ledger.retain(|_, v| *v != (0, 0, 0, 0));
        let expected: BTreeMap<UsageKey, (u64, u64, u64, u64)> = reference
            .into_iter()
            .map(|(k, u)| (k, (u.own_ms, u.borrowed_ms, u.waiting_ms, u.drill_ms)))
            .filter(|(_, v)| *v != (0, 0, 0, 0))
            .collect();
        prop_assert_eq!(&ledger, &expected, "the usage ledger is not the integral of the state");
        let held: u64 = c
            .jobs()
            .flat_map(|j| j.attempts.iter().map(move |a| {
                a.stopped_at.unwrap_or(now).millis_since(a.scheduled_at) * u64::from(j.spec.count)
            }))
            .sum();
        let used: u64 = report.rows.iter().map(|r| r.usage.used_ms()).sum();
        prop_assert_eq!(used, held, "the ledger's held time is not the attempts'");
        // Lending, to the millisecond per day and pair.
        let mut lent: BTreeMap<(String, String), f64> = BTreeMap::new();
        for l in &report.lending {
            *lent.entry((l.borrower.clone(), l.lender.clone().unwrap_or_else(|| "-".into()))).or_default() += l.ms as f64;
        }
        let days = f64::from(qm_core::day_of(now) + 1);
        for key in lent_reference.keys().chain(lent.keys()) {
            let (want, got) = (lent_reference.get(key).copied().unwrap_or(0.0), lent.get(key).copied().unwrap_or(0.0));
            prop_assert!(
                (want - got).abs() <= 2.0 * days + want * 1e-9,
                "{:?} borrowed {} ms by the ledger, {} integrated", key, got, want
            );
        }
    }

    #[test]
    fn a_share_gets_its_lent_capacity_back_in_the_same_pass(
        borrowers in 1u32..4,
        entitlement in 1u32..4,
        extra in 0u32..3,
    ) {
        // A lender's idle capacity is fully borrowed; when the lender's own
        // jobs arrive, the pass that sees them starts the reclaim for all.
        let fleet = entitlement * 2 + extra;
        let mut b = QuotaShare::new("B", &[(TYPES[0], i64::from(entitlement))]);
        b.strategy = Sharing::LendAndBorrow;
        let mut l = QuotaShare::new("L", &[(TYPES[0], i64::from(entitlement))]);
        l.strategy = Sharing::Lend;
        let mut c = Cluster::new(QueueConfig::new("q", vec![b, l]), &[(TYPES[0], fleet)]).expect("valid");
        let (bs, ls) = (c.share_idx("B").expect("B"), c.share_idx("L").expect("L"));
        let t = c.type_idx(TYPES[0]).expect("type");
        for _ in 0..(entitlement + borrowers) {
            c.submit(JobSpec::new("b", bs, t, 1), Time::ZERO).expect("valid");
        }
        let plan = c.step(Time::ZERO);
        let borrowed = borrowers.min(entitlement + extra);
        prop_assert_eq!(plan.starts.len() as u32, entitlement + borrowed);
        for _ in 0..entitlement {
            c.submit(JobSpec::new("l", ls, t, 1), Time::from_secs(1)).expect("valid");
        }
        let plan = c.schedule(Time::from_secs(1));
        check_plan(&c, &plan).map_err(|v| TestCaseError::fail(v.to_string()))?;
        // B may keep only what unassigned capacity backs.
        let expected_victims = borrowed.saturating_sub(extra);
        prop_assert_eq!(plan.preemptions.len() as u32, expected_victims);
    }
}
