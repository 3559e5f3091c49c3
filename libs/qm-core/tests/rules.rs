//! One table test per rule of the scheduling contract (`semantics.md`),
//! named after the rule, asserting the exact decisions.

mod common;

use common::*;
use qm_core::{
    AttemptOutcome, JobError, JobStatus, NeverFits, PreemptionKind, QueueConfig, QueueingStrategy,
    State, StatusReason, Strategy, Time, WaitReason,
};

use PreemptionKind::{CrossShare, InShare, LimitReduced};

fn three_share_world() -> World {
    let mut s1 = lab("QS1", 1, 200);
    s1.in_share_preemption = true;
    World::new(
        3,
        vec![
            s1,
            share("QS2", Strategy::Lend, 1),
            share("QS3", Strategy::Reserve, 1),
        ],
    )
}

#[test]
fn worked_example_of_the_contract() {
    let mut w = three_share_world();
    w.submit("p3", "QS1", 1, 3);
    w.submit("p2", "QS1", 1, 2);
    w.submit("p1", "QS1", 1, 1);
    let plan = w.step();
    assert_eq!(
        w.started(&plan),
        names(&["p3", "p2"]),
        "p3 within quota, p2 borrows QS2's idle instance"
    );
    assert!(
        matches!(w.wait("p1"), Some(WaitReason::NoLendableCapacity { .. })),
        "QS3's idle instance is reserved: {:?}",
        w.wait("p1")
    );

    w.at(10).submit("s2", "QS2", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("p2".into(), CrossShare, "s2".into())]
    );
    assert!(plan.starts.is_empty(), "s2 waits until p2 has stopped");
    assert_eq!(w.wait("s2"), Some(WaitReason::WaitingForRelease));
    assert_eq!(
        w.exit("p2", 0),
        AttemptOutcome::PreemptedCrossShare,
        "exit 0 after SIGTERM is not success"
    );
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["s2"]));
    assert_eq!(w.status("p2"), JobStatus::Runnable);

    w.at(20);
    w.c.update_priority(w.id("p1"), 4).expect("p1 is RUNNABLE");
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("p3".into(), InShare, "p1".into())]
    );
    w.exit("p3", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["p1"]));
    assert_eq!(w.status("p3"), JobStatus::Runnable);
    assert_eq!(w.status("p2"), JobStatus::Runnable, "p3 and p2 wait");
}

#[test]
fn within_quota_job_starts_on_its_own_capacity() {
    let mut w = World::new(2, vec![share("A", Strategy::Reserve, 2)]);
    w.submit("a1", "A", 2, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["a1"]));
    assert_eq!(plan.starts[0].borrowed, 0);
}

#[test]
fn reserve_share_idle_capacity_is_never_lent() {
    let mut w = World::new(2, vec![lab("B", 1, -1), share("R", Strategy::Reserve, 1)]);
    w.submit("b1", "B", 1, 0);
    w.submit("b2", "B", 1, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["b1"]));
    assert!(matches!(
        w.wait("b2"),
        Some(WaitReason::NoLendableCapacity { lendable: 0, .. })
    ));
}

#[test]
fn lend_share_lends_its_idle_capacity() {
    let mut w = World::new(2, vec![lab("B", 1, -1), share("L", Strategy::Lend, 1)]);
    w.submit("b1", "B", 1, 0);
    w.submit("b2", "B", 1, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["b1", "b2"]));
    assert_eq!(plan.starts[1].borrowed, 1);
    assert!(w.c.is_on_borrowed_capacity(w.id("b2")));
    assert!(!w.c.is_on_borrowed_capacity(w.id("b1")));
    let l = w.c.share_idx("L").expect("L");
    let t = w.c.type_idx(T).expect("type");
    assert_eq!(w.c.share_usage(l, t).lent, 1);
}

#[test]
fn lend_and_reserve_shares_never_borrow() {
    for strategy in [Strategy::Lend, Strategy::Reserve] {
        let mut w = World::new(
            3,
            vec![share("S", strategy, 1), share("L", Strategy::Lend, 2)],
        );
        w.submit("s1", "S", 1, 0);
        w.submit("s2", "S", 1, 0);
        let plan = w.step();
        assert_eq!(w.started(&plan), names(&["s1"]));
        assert_eq!(
            w.wait("s2"),
            Some(WaitReason::OwnCapacityInUse {
                used: 1,
                entitlement: 1
            })
        );
    }
}

#[test]
fn borrow_limit_caps_what_a_share_holds() {
    // maxCapacity 2, borrowLimit 50%: at most 3 instances.
    let mut w = World::new(10, vec![lab("B", 2, 50), share("L", Strategy::Lend, 8)]);
    for i in 0..4 {
        w.submit(&format!("b{i}"), "B", 1, 0);
    }
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["b0", "b1", "b2"]));
    assert_eq!(
        w.wait("b3"),
        Some(WaitReason::BorrowLimitReached {
            used: 3,
            max_holding: 3
        })
    );
}

#[test]
fn borrow_limit_zero_allows_no_borrowing() {
    let mut w = World::new(4, vec![lab("B", 1, 0), share("L", Strategy::Lend, 3)]);
    w.submit("b0", "B", 1, 0);
    w.submit("b1", "B", 1, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["b0"]));
    assert_eq!(
        w.wait("b1"),
        Some(WaitReason::BorrowLimitReached {
            used: 1,
            max_holding: 1
        })
    );
}

#[test]
fn unassigned_capacity_is_lendable() {
    // Fleet 3, only 1 instance assigned to a share: 2 are lendable by anyone.
    let mut w = World::new(3, vec![lab("B", 1, -1)]);
    for i in 0..4 {
        w.submit(&format!("b{i}"), "B", 1, 0);
    }
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["b0", "b1", "b2"]));
    assert!(matches!(
        w.wait("b3"),
        Some(WaitReason::FleetFull { .. } | WaitReason::NoLendableCapacity { .. })
    ));
}

#[test]
fn a_job_may_span_owned_and_borrowed_instances() {
    let mut w = World::new(4, vec![lab("B", 2, -1), share("L", Strategy::Lend, 2)]);
    w.submit("big", "B", 3, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["big"]));
    assert_eq!(
        plan.starts[0].borrowed, 3,
        "a job that does not fit within quota is borrowed as a whole"
    );
    assert!(w.c.is_on_borrowed_capacity(w.id("big")));
    let b = w.c.share_idx("B").expect("B");
    let t = w.c.type_idx(T).expect("type");
    assert_eq!(
        w.c.share_usage(b, t).borrowed,
        1,
        "but the share borrows only the instance beyond its entitlement"
    );
}

#[test]
fn reclaim_preempts_the_borrower_when_the_owner_returns() {
    let mut w = World::new(2, vec![lab("B", 1, -1), share("L", Strategy::Lend, 1)]);
    w.submit("b1", "B", 1, 0);
    w.submit("b2", "B", 1, 0);
    w.step();
    w.at(5).submit("l1", "L", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("b2".into(), CrossShare, "l1".into())]
    );
    assert!(w.stopping("b2"));
    assert!(matches!(
        w.reason("b2"),
        StatusReason::PreemptionInProgress {
            kind: CrossShare,
            ..
        }
    ));
    // The owner's job waits for the instance; nothing else takes it.
    assert_eq!(w.step().starts.len(), 0);
    w.exit("b2", 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["l1"]));
    assert_eq!(
        w.reason("b2"),
        StatusReason::Waiting(WaitReason::NoLendableCapacity {
            lendable: 0,
            borrowed: 0
        })
    );
    assert_eq!(w.c.job(w.id("b2")).expect("b2").preempted_attempts, 1);
}

#[test]
fn reclaim_starts_from_the_share_borrowing_most_relative_to_its_entitlement() {
    // A borrows 1 on entitlement 1 (100%); B borrows 1 on entitlement 4 (25%).
    let mut w = World::new(
        8,
        vec![
            lab("A", 1, -1),
            lab("B", 4, -1),
            share("L", Strategy::Lend, 3),
        ],
    );
    w.submit("b_own", "B", 4, 9);
    w.submit("a_own", "A", 1, 9);
    w.submit("b_borrow", "B", 1, 0);
    w.submit("a_borrow", "A", 1, 9);
    let plan = w.step();
    assert_eq!(plan.starts.len(), 4);
    // L takes 2 of its 3 back: one instance must be reclaimed. B's borrower
    // has the lower priority, but A borrows more relative to its entitlement,
    // and that decides first.
    w.at(5).submit("l", "L", 2, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("a_borrow".into(), CrossShare, "l".into())]
    );
}

#[test]
fn reclaim_victims_lowest_priority_then_least_work_at_risk_then_most_recent() {
    let mut w = World::new(5, vec![lab("B", 1, -1), share("L", Strategy::Lend, 4)]);
    w.submit("own", "B", 1, 9);
    w.submit("hi", "B", 1, 5);
    w.submit("lo_old_ckpt", "B", 1, 1);
    w.submit("lo_fresh_ckpt", "B", 1, 1);
    w.step();
    w.at(100).submit("lo_new", "B", 1, 1);
    w.step();
    // lo_old_ckpt checkpointed at 10 s, lo_fresh_ckpt at 90 s: the latter has
    // less work at risk; lo_new started at 100 s and has the least of all.
    w.at(10).checkpoint("lo_old_ckpt", 1);
    w.at(90).checkpoint("lo_fresh_ckpt", 1);
    w.at(110).submit("l1", "L", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("lo_new".into(), CrossShare, "l1".into())]
    );
    w.exit("lo_new", 0);
    w.at(120).submit("l2", "L", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("lo_fresh_ckpt".into(), CrossShare, "l2".into())]
    );
    w.exit("lo_fresh_ckpt", 0);
    w.at(130).submit("l3", "L", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("lo_old_ckpt".into(), CrossShare, "l3".into())],
        "lowest priority before higher"
    );
}

#[test]
fn reclaim_drops_victims_whose_release_is_not_needed() {
    // B borrows with a 1-instance job (lowest priority) and a 2-instance job.
    // L's 2-instance job needs 2 back: the small victim alone is not enough,
    // the big one alone is, so only the big one is preempted.
    let mut w = World::new(5, vec![lab("B", 1, -1), share("L", Strategy::Lend, 4)]);
    w.submit("own", "B", 1, 9);
    w.submit("small", "B", 1, 0);
    w.submit("big", "B", 2, 5);
    let plan = w.step();
    assert_eq!(plan.starts.len(), 3);
    w.at(5).submit("l", "L", 3, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("big".into(), CrossShare, "l".into())]
    );
}

#[test]
fn only_borrowed_jobs_are_reclaimed() {
    let mut w = World::new(3, vec![lab("B", 2, -1), share("L", Strategy::Lend, 1)]);
    w.submit("b_hi", "B", 1, 9);
    w.submit("b_mid", "B", 1, 5);
    w.submit("b_lo", "B", 1, 1);
    w.step();
    w.at(5).submit("l", "L", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("b_lo".into(), CrossShare, "l".into())],
        "b_lo is the one beyond B's entitlement"
    );
}

#[test]
fn borrowing_never_preempts_other_shares() {
    let mut w = World::new(2, vec![lab("A", 1, -1), share("B", Strategy::Lend, 1)]);
    w.submit("b1", "B", 1, 0);
    w.submit("a1", "A", 1, 0);
    w.step();
    w.at(5).submit("a2", "A", 1, 9999);
    let plan = w.step();
    assert!(plan.preemptions.is_empty());
    assert!(plan.starts.is_empty());
}

#[test]
fn in_share_preemption_takes_strictly_lower_priority_jobs() {
    let mut s = share("S", Strategy::Reserve, 2);
    s.in_share_preemption = true;
    let mut w = World::new(2, vec![s]);
    w.submit("lo", "S", 1, 1);
    w.submit("mid", "S", 1, 5);
    w.step();
    w.at(5).submit("top", "S", 1, 9);
    w.submit("equal", "S", 1, 5);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("lo".into(), InShare, "top".into())]
    );
    w.exit("lo", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["top"]));
    assert_eq!(
        w.wait("equal"),
        Some(WaitReason::OwnCapacityInUse {
            used: 2,
            entitlement: 2
        }),
        "equal priority never preempts"
    );
    assert!(w.preempted(&w.c.schedule(w.now)).is_empty());
}

#[test]
fn in_share_preemption_disabled_never_preempts() {
    let mut w = World::new(1, vec![share("S", Strategy::Reserve, 1)]);
    w.submit("lo", "S", 1, 1);
    w.step();
    w.at(5).submit("hi", "S", 1, 9);
    let plan = w.step();
    assert!(plan.preemptions.is_empty());
    assert_eq!(
        w.wait("hi"),
        Some(WaitReason::OwnCapacityInUse {
            used: 1,
            entitlement: 1
        })
    );
}

#[test]
fn in_share_preemption_keeps_victims_it_does_not_need() {
    let mut s = share("S", Strategy::Reserve, 3);
    s.in_share_preemption = true;
    let mut w = World::new(3, vec![s]);
    w.submit("lo1", "S", 1, 1);
    w.submit("lo2", "S", 1, 2);
    w.submit("lo3", "S", 1, 3);
    w.step();
    w.at(5).submit("top", "S", 2, 9);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![
            ("lo1".into(), InShare, "top".into()),
            ("lo2".into(), InShare, "top".into())
        ]
    );
}

#[test]
fn best_effort_fifo_lets_smaller_jobs_pass_a_big_one() {
    let mut w = World::new(2, vec![share("S", Strategy::Reserve, 2)]);
    w.submit("running", "S", 1, 0);
    w.step();
    w.submit("big", "S", 2, 5);
    w.submit("small", "S", 1, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["small"]));
}

#[test]
fn strict_fifo_head_blocks_its_share() {
    let mut queue = QueueConfig::new(
        "q",
        vec![
            share("S", Strategy::Reserve, 2),
            share("O", Strategy::Reserve, 1),
        ],
    );
    queue.queueing_strategy = QueueingStrategy::StrictFifo;
    let mut w = World::with_queue(3, queue);
    w.submit("running", "S", 1, 0);
    w.step();
    w.submit("big", "S", 2, 5);
    w.submit("small", "S", 1, 0);
    w.submit("other", "O", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.started(&plan),
        names(&["other"]),
        "other shares are not blocked"
    );
    assert_eq!(
        w.c.explain(w.id("small"), w.now),
        Some(WaitReason::StrictFifoBehind(w.id("big")))
    );
}

#[test]
fn shares_are_interleaved_by_the_runnable_since_time_of_their_head() {
    // Two borrowers compete for one lendable instance: the earlier head wins.
    let mut w = World::new(
        3,
        vec![
            lab("A", 1, -1),
            lab("B", 1, -1),
            share("L", Strategy::Lend, 1),
        ],
    );
    w.submit("a_own", "A", 1, 0);
    w.submit("b_own", "B", 1, 0);
    w.step();
    w.at(1).submit("b_borrow", "B", 1, 0);
    w.at(2).submit("a_borrow", "A", 1, 9);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["b_borrow"]));
}

#[test]
fn never_fitting_jobs_are_rejected_or_explained() {
    let mut w = World::new(
        4,
        vec![
            share("R", Strategy::Reserve, 1),
            lab("B", 1, 100),
            lab("U", 1, -1),
            share("L", Strategy::Lend, 1),
        ],
    );
    let spec = w.spec("too_big", "R", 2, 0);
    let err = w.c.submit(spec, w.now).expect_err("over the share limit");
    assert!(
        err.to_string()
            .contains("MISCONFIGURATION: instanceCount 2 exceeds the share limit"),
        "{err}"
    );
    let spec = w.spec("too_big", "B", 3, 0);
    let err =
        w.c.submit(spec, w.now)
            .expect_err("over limit plus borrow limit");
    assert!(
        err.to_string()
            .contains("share limit plus its borrow limit (2 instances)"),
        "{err}"
    );
    // Fleet-dependent limits: accepted, waits with the reason.
    w.submit("wide", "U", 4, 0);
    w.step();
    assert_eq!(
        w.wait("wide"),
        Some(WaitReason::Misconfiguration(
            NeverFits::AllBorrowableCapacity {
                count: 4,
                reachable: 3
            }
        )),
        "U may use its own, unassigned (1) and L's; R's is reserved"
    );
    w.submit("huge", "U", 5, 0);
    w.step();
    assert_eq!(
        w.wait("huge"),
        Some(WaitReason::Misconfiguration(NeverFits::FleetMaximum {
            count: 5,
            fleet: 4
        }))
    );
}

#[test]
fn submissions_report_every_problem_at_once() {
    let mut w = World::new(1, vec![share("R", Strategy::Reserve, 1)]);
    let mut spec = w.spec("bad", "R", 0, 10_000);
    spec.retry_attempts = 11;
    // A grace period executors would wait on forever (u64::MAX seconds
    // overflowed the executor's shutdown deadline).
    spec.grace_period_secs = u64::MAX;
    let Err(JobError::Invalid(problems)) = w.c.submit(spec, w.now) else {
        panic!("invalid")
    };
    let fields: Vec<_> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "instanceCount",
            "schedulingPriority",
            "terminationGracePeriodSeconds",
            "retryStrategy.attempts"
        ]
    );
}

#[test]
fn limit_reduction_makes_the_excess_borrowed_and_reclaimable() {
    let mut w = World::new(
        2,
        vec![
            share("A", Strategy::Reserve, 2),
            share("B", Strategy::Reserve, 0),
        ],
    );
    w.submit("a1", "A", 1, 5);
    w.submit("a2", "A", 1, 1);
    w.step();
    let mut cfg = w.c.queue_config();
    cfg.shares[0].capacity_limits[0].max_capacity = 1;
    cfg.shares[1].capacity_limits[0].max_capacity = 1;
    w.at(5);
    let stops = w.c.update_queue(cfg, w.now).expect("valid change");
    assert!(stops.is_empty(), "lowering a limit stops nothing at once");
    let plan = w.step();
    assert!(plan.preemptions.is_empty(), "nobody needs it yet");
    assert!(w.c.is_on_borrowed_capacity(w.id("a2")));
    w.at(10).submit("b1", "B", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("a2".into(), LimitReduced, "b1".into())]
    );
    w.exit("a2", 143);
    w.step();
    assert_eq!(
        w.c.job(w.id("a2")).expect("a2").attempts[0].outcome,
        Some(AttemptOutcome::PreemptedLimitReduced)
    );
    assert_eq!(w.status("b1"), JobStatus::Running);
}

#[test]
fn preemption_retries_zero_fails_at_the_first_preemption() {
    let mut w = World::new(2, vec![lab("B", 1, -1), share("L", Strategy::Lend, 1)]);
    w.submit("b1", "B", 1, 0);
    let mut spec = w.spec("b2", "B", 1, 0);
    spec.preemption_retries = Some(0);
    w.submit_spec(spec);
    w.step();
    w.at(5).submit("l1", "L", 1, 0);
    w.step();
    w.exit("b2", 0);
    assert_eq!(w.status("b2"), JobStatus::Failed);
    assert_eq!(
        w.reason("b2"),
        StatusReason::PreemptionRetriesExhausted(AttemptOutcome::PreemptedCrossShare)
    );
}

#[test]
fn preemptions_do_not_spend_failure_retries_and_failures_do() {
    let mut s = share("S", Strategy::Reserve, 1);
    s.in_share_preemption = true;
    let mut w = World::new(1, vec![s]);
    let mut spec = w.spec("j", "S", 1, 1);
    spec.retry_attempts = 2;
    spec.preemption_retries = Some(1);
    w.submit_spec(spec);
    w.step();
    w.at(1).submit("urgent", "S", 1, 9);
    w.step();
    w.exit("j", 143);
    assert_eq!(w.status("j"), JobStatus::Runnable, "one preemption allowed");
    w.step();
    w.at(2).exit("urgent", 0);
    w.step();
    assert_eq!(w.status("j"), JobStatus::Running);
    w.at(3).exit("j", 1);
    assert_eq!(
        w.status("j"),
        JobStatus::Runnable,
        "first failure: 1 of 2 attempts used"
    );
    w.step();
    w.at(4).exit("j", 1);
    assert_eq!(w.status("j"), JobStatus::Failed);
    assert_eq!(
        w.reason("j"),
        StatusReason::AttemptsExhausted(AttemptOutcome::Failed)
    );
    let job = w.c.job(w.id("j")).expect("j");
    assert_eq!(
        (
            job.preempted_attempts,
            job.failed_attempts,
            job.attempts.len()
        ),
        (1, 2, 3)
    );
}

#[test]
fn evaluate_on_exit_can_end_retries() {
    let mut w = World::new(1, vec![share("S", Strategy::Reserve, 1)]);
    let mut spec = w.spec("j", "S", 1, 1);
    spec.retry_attempts = 5;
    spec.evaluate_on_exit = vec![qm_core::ExitRule {
        on_exit_code: Some("13*".into()),
        on_status_reason: None,
        action: qm_core::RetryAction::Exit,
    }];
    w.submit_spec(spec);
    w.step();
    w.exit("j", 137);
    assert_eq!(w.status("j"), JobStatus::Failed);
}

#[test]
fn host_lost_requeues_without_spending_budgets_up_to_the_cap() {
    let mut w = World::new(1, vec![share("S", Strategy::Reserve, 1)]);
    let mut spec = w.spec("j", "S", 1, 1);
    spec.preemption_retries = Some(0);
    w.submit_spec(spec);
    w.c.host_lost_cap = 2;
    for round in 1..=3 {
        w.step();
        w.lose_host("j");
        let expected = if round <= 2 {
            JobStatus::Runnable
        } else {
            JobStatus::Failed
        };
        assert_eq!(w.status("j"), expected, "after host loss {round}");
    }
    assert_eq!(w.reason("j"), StatusReason::HostLostCapExceeded);
}

#[test]
fn fleet_shrink_ends_the_newest_attempts_as_host_lost() {
    let mut w = World::new(2, vec![share("S", Strategy::Reserve, 2)]);
    w.submit("old", "S", 1, 0);
    w.step();
    w.at(5).submit("new", "S", 1, 0);
    w.step();
    let lost = w.c.set_fleet(T, 1, w.now);
    assert_eq!(lost, vec![w.id("new")]);
    assert_eq!(w.status("new"), JobStatus::Runnable);
    assert_eq!(
        w.c.job(w.id("new")).expect("new").attempts[0].outcome,
        Some(AttemptOutcome::HostLost)
    );
}

#[test]
fn attempt_timeout_stops_the_job_as_timed_out() {
    let mut w = World::new(1, vec![share("S", Strategy::Reserve, 1)]);
    let mut spec = w.spec("j", "S", 1, 0);
    spec.attempt_timeout_secs = Some(60);
    w.submit_spec(spec);
    let plan = w.step();
    assert_eq!(plan.wake_at, Some(Time::from_secs(60)));
    w.at(60);
    let plan = w.step();
    assert_eq!(plan.timeouts, vec![w.id("j")]);
    assert_eq!(w.exit("j", 143), AttemptOutcome::TimedOut);
    assert_eq!(w.status("j"), JobStatus::Failed);
}

#[test]
fn terminate_fails_runnable_at_once_and_stops_running_jobs() {
    let mut w = World::new(1, vec![share("S", Strategy::Reserve, 1)]);
    w.submit("running", "S", 1, 0);
    w.submit("waiting", "S", 1, 0);
    w.step();
    assert!(!w.c.terminate(w.id("waiting"), w.now).expect("known"));
    assert_eq!(w.status("waiting"), JobStatus::Failed);
    assert!(
        w.c.terminate(w.id("running"), w.now).expect("known"),
        "a stop must be sent"
    );
    assert_eq!(
        w.status("running"),
        JobStatus::Running,
        "stays running during its grace period"
    );
    assert_eq!(w.exit("running", 0), AttemptOutcome::Cancelled);
    assert_eq!(w.status("running"), JobStatus::Failed);
    assert_eq!(w.reason("running"), StatusReason::Cancelled);
    assert!(matches!(
        w.c.terminate(w.id("running"), w.now),
        Err(JobError::WrongState { .. })
    ));
}

#[test]
fn min_runtime_protects_victims_until_it_has_passed() {
    let mut b = lab("B", 1, -1);
    b.protections.min_runtime_before_preemption_secs = 300;
    let mut w = World::new(2, vec![b, share("L", Strategy::Lend, 1)]);
    w.submit("b1", "B", 1, 0);
    w.submit("b2", "B", 1, 0);
    w.step();
    w.at(100).submit("l1", "L", 1, 0);
    let plan = w.step();
    assert!(plan.preemptions.is_empty());
    assert_eq!(
        w.wait("l1"),
        Some(WaitReason::VictimsProtectedUntil(Time::from_secs(300)))
    );
    assert_eq!(plan.wake_at, Some(Time::from_secs(300)));
    w.at(300);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("b2".into(), CrossShare, "l1".into())]
    );
}

#[test]
fn reborrow_cooldown_keeps_a_reclaimed_share_from_borrowing_again() {
    let mut b = lab("B", 1, -1);
    b.protections.reborrow_cooldown_secs = 600;
    let mut w = World::new(3, vec![b, share("L", Strategy::Lend, 2)]);
    w.submit("b1", "B", 1, 0);
    w.submit("b2", "B", 1, 0);
    w.step();
    w.at(10).submit("l1", "L", 2, 0);
    w.step();
    w.exit("b2", 143);
    w.step();
    w.at(20).exit("l1", 0);
    let plan = w.step();
    assert!(
        plan.starts.is_empty(),
        "L is idle again but B is cooling down"
    );
    assert_eq!(
        w.wait("b2"),
        Some(WaitReason::ReborrowCooldownUntil(Time::from_secs(610)))
    );
    assert_eq!(plan.wake_at, Some(Time::from_secs(610)));
    w.at(610);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["b2"]));
}

#[test]
fn borrowing_can_require_checkpointing() {
    let mut b = lab("B", 1, -1);
    b.protections.borrow_requires_checkpoint = true;
    let mut w = World::new(3, vec![b, share("L", Strategy::Lend, 2)]);
    // Jobs that do not checkpoint are classified within quota first; `own`
    // fills the entitlement, so another one could only borrow.
    let mut spec = w.spec("own", "B", 1, 0);
    spec.checkpoints = false;
    w.submit_spec(spec);
    let mut spec = w.spec("no_ckpt", "B", 1, 0);
    spec.checkpoints = false;
    w.submit_spec(spec);
    w.submit("ckpt", "B", 1, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["own", "ckpt"]));
    assert_eq!(
        w.wait("no_ckpt"),
        Some(WaitReason::BorrowRequiresCheckpoint)
    );
    let mut spec = w.spec("wide_no_ckpt", "B", 2, 0);
    spec.checkpoints = false;
    let err =
        w.c.submit(spec, w.now)
            .expect_err("can only ever run by borrowing");
    assert!(
        err.to_string()
            .contains("lets only checkpointing jobs borrow"),
        "{err}"
    );
}

#[test]
fn overcommitted_shares_are_accepted_and_wait_for_the_fleet() {
    let mut w = World::new(
        2,
        vec![
            share("A", Strategy::Reserve, 2),
            share("B", Strategy::Reserve, 2),
        ],
    );
    w.submit("a", "A", 2, 0);
    w.submit("b", "B", 1, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["a"]));
    assert_eq!(
        w.wait("b"),
        Some(WaitReason::FleetFull {
            in_use: 2,
            fleet: 2
        })
    );
}

#[test]
fn a_disabled_share_rejects_new_jobs_but_runs_submitted_ones() {
    let mut w = World::new(1, vec![share("S", Strategy::Reserve, 1)]);
    w.submit("before", "S", 1, 0);
    let mut cfg = w.c.queue_config();
    cfg.shares[0].state = State::Disabled;
    w.c.update_queue(cfg, w.now).expect("valid");
    let spec = w.spec("after", "S", 1, 0);
    assert!(w
        .c
        .submit(spec, w.now)
        .expect_err("disabled")
        .to_string()
        .contains("DISABLED"));
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["before"]));
}

#[test]
fn deleting_a_share_needs_it_disabled_and_terminates_its_jobs() {
    let mut w = World::new(
        2,
        vec![
            share("A", Strategy::Reserve, 1),
            share("B", Strategy::Reserve, 1),
        ],
    );
    w.submit("b_run", "B", 1, 0);
    w.step();
    w.submit("b_wait", "B", 1, 0);
    let mut cfg = w.c.queue_config();
    cfg.shares.retain(|s| s.name == "A");
    let err =
        w.c.update_queue(cfg.clone(), w.now)
            .expect_err("B is ENABLED");
    assert!(
        err.to_string().contains("set its state to DISABLED first"),
        "{err}"
    );
    let mut disable = w.c.queue_config();
    disable.shares[1].state = State::Disabled;
    w.c.update_queue(disable, w.now).expect("valid");
    let stops = w.c.update_queue(cfg, w.now).expect("valid");
    assert_eq!(stops, vec![w.id("b_run")]);
    assert_eq!(w.status("b_wait"), JobStatus::Failed);
    assert_eq!(w.reason("b_wait"), StatusReason::ShareDeleted);
    w.exit("b_run", 143);
    assert_eq!(w.status("b_run"), JobStatus::Failed);
}

#[test]
fn a_queue_is_deleted_only_once_disabled_and_drained() {
    let mut w = World::new(1, vec![share("S", Strategy::Reserve, 1)]);
    w.submit("running", "S", 1, 0);
    w.step();
    w.submit("waiting", "S", 1, 0);
    w.submit("done", "S", 1, 0);
    let blockers = w.c.deletion_blockers().expect("ENABLED, with jobs");
    assert!(blockers.enabled);
    // DISABLED stops new jobs; the waiting and running ones go on.
    let mut cfg = w.c.queue_config();
    cfg.state = State::Disabled;
    w.c.update_queue(cfg, w.now).expect("valid");
    let spec = w.spec("late", "S", 1, 0);
    assert!(
        w.c.submit(spec, w.now).is_err(),
        "a DISABLED queue takes no job"
    );
    let blockers = w.c.deletion_blockers().expect("jobs unfinished");
    assert!(!blockers.enabled);
    assert_eq!(
        blockers.unfinished,
        [
            (JobStatus::Runnable, vec![w.id("waiting"), w.id("done")]),
            (JobStatus::Running, vec![w.id("running")]),
        ]
        .into_iter()
        .collect()
    );
    w.exit("running", 0);
    let plan = w.step();
    assert_eq!(
        w.started(&plan),
        names(&["waiting"]),
        "a DISABLED queue still runs its jobs"
    );
    w.c.terminate(w.id("done"), w.now).expect("terminated");
    w.exit("waiting", 1);
    assert_eq!(w.status("waiting"), JobStatus::Failed);
    assert_eq!(w.status("done"), JobStatus::Failed);
    assert_eq!(
        w.c.deletion_blockers(),
        None,
        "DISABLED and every job SUCCEEDED or FAILED: finished jobs do not block"
    );
}

#[test]
fn configuration_changes_are_validated_whole() {
    let mut w = World::new(1, vec![share("A", Strategy::Reserve, 1)]);
    let before = w.c.queue_config();
    let mut cfg = before.clone();
    cfg.shares[0].capacity_limits[0].max_capacity = -3;
    cfg.shares[0].borrow_limit = 20;
    let err = w.c.update_queue(cfg, w.now).expect_err("two problems");
    assert_eq!(err.0.len(), 2, "{err}");
    assert_eq!(w.c.queue_config(), before, "nothing changed");
}

#[test]
fn dry_run_reports_what_a_change_would_do() {
    let mut w = World::new(3, vec![share("A", Strategy::Lend, 2), lab("B", 1, -1)]);
    w.submit("a1", "A", 1, 0);
    w.submit("a2", "A", 1, 0);
    w.submit("waiting_big", "B", 3, 0);
    w.submit("b1", "B", 1, 0);
    w.step();
    let mut cfg = w.c.queue_config();
    cfg.shares[0].capacity_limits[0].max_capacity = 1;
    cfg.shares[1].borrow_limit = 0;
    let report = w.c.dry_run_queue(cfg, w.now).expect("valid");
    assert_eq!(report.become_preemptible, vec![w.id("a2")]);
    assert_eq!(
        report.become_unfittable,
        vec![(
            w.id("waiting_big"),
            NeverFits::ShareLimitPlusBorrowLimit {
                count: 3,
                max_holding: 1
            }
        )]
    );
    assert!(report.terminated.is_empty());
    assert_eq!(
        w.c.queue_config().shares[0].capacity_limits[0].max_capacity,
        2,
        "a dry run changes nothing"
    );
}

#[test]
fn the_fleet_lacking_a_type_is_a_reason() {
    let mut w = World::new(0, vec![share("A", Strategy::Reserve, 1)]);
    w.submit("a", "A", 1, 0);
    w.step();
    assert_eq!(w.wait("a"), Some(WaitReason::FleetLacksType));
    w.c.set_fleet(T, 1, w.now);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["a"]));
}

#[test]
fn a_preemption_frees_room_that_is_used_in_the_same_pass() {
    // L reclaims 2 instances from one 2-instance borrower but needs only 1:
    // the spare one goes to the next waiting job once the stop completes.
    let mut w = World::new(3, vec![lab("B", 1, -1), share("L", Strategy::Lend, 2)]);
    w.submit("own", "B", 1, 0);
    w.submit("wide", "B", 2, 0);
    w.step();
    w.at(5).submit("l1", "L", 1, 0);
    w.submit("b_small", "B", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("wide".into(), CrossShare, "l1".into())]
    );
    assert_eq!(plan.waiting_for_release, vec![w.id("l1"), w.id("b_small")]);
    w.exit("wide", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["l1", "b_small"]));
}

#[test]
fn in_share_preemption_preempts_nothing_when_the_job_still_would_not_fit() {
    // Stopping both small jobs would leave `urgent` 3 instances short of a
    // fleet of which L's own job holds one: no preemption lets it start, so
    // none happens, and it says why it waits.
    let mut b = lab("B", 2, -1);
    b.in_share_preemption = true;
    let mut w = World::new(3, vec![b, share("L", Strategy::Lend, 1)]);
    w.submit("l", "L", 1, 0);
    w.submit("s1", "B", 1, 1);
    w.submit("s2", "B", 1, 1);
    w.step();
    w.at(5).submit("urgent", "B", 3, 9);
    let plan = w.step();
    assert!(plan.preemptions.is_empty(), "{:?}", w.preempted(&plan));
    assert_eq!(
        w.wait("urgent"),
        Some(WaitReason::NoLendableCapacity {
            lendable: 0,
            borrowed: 0
        })
    );
}

/// Share A owns 2 instances and borrows B's 2 idle ones; four priority-1
/// jobs of A run, started one second apart.
fn a_borrows_two(in_share: bool) -> World {
    let mut a = lab("A", 2, -1);
    a.in_share_preemption = in_share;
    let mut w = World::new(4, vec![a, share("B", Strategy::Lend, 2)]);
    for (i, name) in ["a1", "a2", "a3", "a4"].into_iter().enumerate() {
        w.at(i as u64).submit(name, "A", 1, 1);
        let plan = w.step();
        assert_eq!(w.started(&plan), names(&[name]));
    }
    w
}

#[test]
fn in_share_preemption_stops_only_the_victims_the_job_needs() {
    // An urgent 1-instance job of A arrives at t=50: one victim is enough
    // (the urgent job takes a4's borrowed place), and it is a4, the job
    // with the least work at risk (47 s). Before, in-share preemption
    // could only make room within A's entitlement, stopped three jobs, and
    // two of them restarted on the capacity their own preemption freed.
    let mut w = a_borrows_two(true);
    w.at(50).submit("urgent", "A", 1, 9);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("a4".into(), InShare, "urgent".into())]
    );
    assert_eq!(w.wait("urgent"), Some(WaitReason::WaitingForRelease));
    w.at(55).exit("a4", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["urgent"]));
    assert_eq!(plan.starts[0].borrowed, 0, "urgent outranks every job of A");
    assert!(plan.preemptions.is_empty());
    assert_eq!(w.status("a4"), JobStatus::Runnable);
    for name in ["a1", "a2", "a3"] {
        assert_eq!(w.status(name), JobStatus::Running, "{name} kept running");
    }
}

#[test]
fn a_higher_priority_job_takes_the_place_of_a_lower_priority_one_on_borrowed_capacity() {
    // A owns 1 instance and may borrow B's idle one. A priority-9 job runs
    // on A's own instance, a priority-1 job borrows B's. A second
    // priority-9 job of A takes the priority-1 job's place at once,
    // although that place is borrowed (it used to wait with "no lendable
    // capacity" while the lower-priority job of its own share kept it).
    let mut a = lab("A", 1, -1);
    a.in_share_preemption = true;
    let mut w = World::new(2, vec![a, share("B", Strategy::Lend, 1)]);
    w.submit("high1", "A", 1, 9);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["high1"]));
    w.at(1).submit("low", "A", 1, 1);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["low"]));
    assert_eq!(plan.starts[0].borrowed, 1);
    w.at(10).submit("high2", "A", 1, 9);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("low".into(), InShare, "high2".into())]
    );
    w.exit("low", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["high2"]));
    assert_eq!(w.status("low"), JobStatus::Runnable);
    assert!(matches!(
        w.wait("low"),
        Some(WaitReason::NoLendableCapacity { .. } | WaitReason::FleetFull { .. })
    ));
}

#[test]
fn a_victim_never_takes_its_place_back_ahead_of_the_job_it_was_preempted_for() {
    // `urgent` needs 3 instances of a fleet of 3: B's two small jobs (each
    // within B's entitlement on its own) are stopped so that it can borrow
    // L's idle instance. Once they have stopped, they would fit within quota
    // at the next pass, ahead of a job that borrows; the claim of `urgent`
    // starts it first, so no preemption is ever repeated (ADR 0006).
    let mut b = lab("B", 2, -1);
    b.in_share_preemption = true;
    let mut w = World::new(3, vec![b, share("L", Strategy::Lend, 1)]);
    w.submit("s1", "B", 1, 1);
    w.submit("s2", "B", 1, 1);
    w.step();
    w.at(5).submit("urgent", "B", 3, 9);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![
            ("s2".into(), InShare, "urgent".into()),
            ("s1".into(), InShare, "urgent".into())
        ]
    );
    w.exit("s2", 143);
    let plan = w.step();
    assert!(plan.starts.is_empty() && plan.preemptions.is_empty());
    w.exit("s1", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["urgent"]));
    assert!(plan.preemptions.is_empty());
    let plan = w.step();
    assert!(plan.is_empty(), "nothing more happens at the same instant");
    assert_eq!(w.status("s1"), JobStatus::Runnable);
    assert_eq!(w.status("s2"), JobStatus::Runnable);
}

#[test]
fn with_borrow_requires_checkpoint_the_borrowed_jobs_are_the_checkpointing_ones() {
    let mut b = lab("B", 1, -1);
    b.protections.borrow_requires_checkpoint = true;
    let mut w = World::new(2, vec![b, share("L", Strategy::Lend, 1)]);
    w.submit("ckpt", "B", 1, 0);
    let mut spec = w.spec("no_ckpt", "B", 1, 9);
    spec.checkpoints = false;
    w.submit_spec(spec);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["no_ckpt", "ckpt"]));
    assert!(w.c.is_on_borrowed_capacity(w.id("ckpt")));
    assert!(!w.c.is_on_borrowed_capacity(w.id("no_ckpt")));
    // The owner's return takes back the checkpointing job, never the other.
    w.at(5).submit("l", "L", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("ckpt".into(), CrossShare, "l".into())]
    );
}

#[test]
fn the_lost_work_ledger_totals_each_share_by_cause_and_by_beneficiary() {
    let mut w = World::new(4, vec![lab("B", 2, -1), share("L", Strategy::Lend, 2)]);
    let b = w.c.share_idx("B").expect("B");
    let l = w.c.share_idx("L").expect("L");
    // b1 runs two instances on B's own capacity, b2 two borrowed from L.
    w.submit("b1", "B", 2, 0);
    w.submit("b2", "B", 2, 0);
    w.step();
    w.at(10).checkpoint("b2", 100);
    // L's owner returns at 30 s: b2 is reclaimed and stops at 32 s, 22 s
    // after its checkpoint, on two instances.
    w.at(30).submit("l1", "L", 2, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("b2".into(), CrossShare, "l1".into())]
    );
    w.at(32).exit("b2", 143);
    // b1's executor is lost at 40 s: no checkpoint, 40 s from its start.
    w.at(40).lose_host("b1");
    // A job that fails loses nothing to the ledger.
    w.step();
    w.at(50).exit("l1", 1);

    let lost = w.c.lost_work(b);
    assert_eq!(
        lost.preempted_cross_share,
        qm_core::LostWork {
            attempts: 1,
            recomputed_instance_ms: 2 * 22_000
        }
    );
    assert_eq!(
        lost.host_lost,
        qm_core::LostWork {
            attempts: 1,
            recomputed_instance_ms: 2 * 40_000
        }
    );
    assert!(lost.preempted_in_share.is_empty() && lost.lost_for_this_share.is_empty());
    assert_eq!(lost.total().attempts, 2);
    assert_eq!(lost.total().recomputed_instance_ms, 124_000);
    // L's job was the beneficiary of b2's preemption; L lost nothing itself.
    let owner = w.c.lost_work(l);
    assert_eq!(owner.lost_for_this_share, lost.preempted_cross_share);
    assert!(owner.total().is_empty());
}

#[test]
fn a_checkpoint_lag_keeps_its_first_moment_and_the_next_commit_ends_it() {
    let mut w = World::new(1, vec![share("A", Strategy::Reserve, 1)]);
    let id = w.submit("a", "A", 1, 0);
    w.step();
    w.at(10).checkpoint("a", 5);
    let lag = |w: &World| w.c.job(id).expect("a").attempts[0].checkpoint_lag.clone();
    assert_eq!(lag(&w), None);
    w.c.checkpoint_lagging(id, 1, Time::from_secs(20), "S3 timed out".into())
        .expect("current attempt");
    // Reported again with a newer error: still lagging since 20 s.
    w.c.checkpoint_lagging(id, 1, Time::from_secs(80), "connection refused".into())
        .expect("current attempt");
    assert_eq!(
        lag(&w),
        Some((Time::from_secs(20), "connection refused".to_string()))
    );
    // Another attempt's report is refused.
    assert!(w
        .c
        .checkpoint_lagging(id, 2, Time::from_secs(90), "x".into())
        .is_err());
    w.at(100).checkpoint("a", 9);
    assert_eq!(lag(&w), None);
}

#[test]
fn a_dry_run_submit_foresees_what_the_pass_then_does() {
    use qm_core::dry_run::JobOutlook;
    // B lends 2; A (lab: entitlement 1, unlimited borrowing) runs on its own
    // instance and borrows one of B's.
    let mut w = World::new(3, vec![lab("A", 1, -1), share("B", Strategy::Lend, 2)]);
    w.submit("a_own", "A", 1, 0);
    w.submit("a_borrow", "A", 1, 0);
    w.step();
    // 100 s later, with no checkpoint committed: all of it is at risk.
    w.at(100);
    // Another A job would borrow B's last idle instance.
    let spec = w.spec("a_more", "A", 1, 0);
    let b = w.c.share_idx("B").expect("B");
    assert_eq!(
        w.c.dry_run_submit(spec.clone(), w.now).expect("valid"),
        JobOutlook::Starts {
            borrowed: 1,
            own: 0,
            lenders: vec![b]
        }
    );
    // B's owner would start on its own idle instance...
    let b1 = w.spec("b1", "B", 1, 0);
    assert_eq!(
        w.c.dry_run_submit(b1, w.now).expect("valid"),
        JobOutlook::Starts {
            borrowed: 0,
            own: 1,
            lenders: vec![]
        }
    );
    // ...and a 2-instance one would reclaim the borrowed instance.
    let b2 = w.spec("b2", "B", 2, 0);
    let outlook = w.c.dry_run_submit(b2.clone(), w.now).expect("valid");
    let JobOutlook::Preempts { victims } = &outlook else {
        panic!("{outlook:?}");
    };
    assert_eq!(
        victims
            .iter()
            .map(|v| (w.name(v.job), v.kind))
            .collect::<Vec<_>>(),
        [("a_borrow".to_string(), CrossShare)]
    );
    assert_eq!(victims[0].work_at_risk_ms, 100_000, "{victims:?}");
    // Nothing changed; submitting it really does what the dry run said.
    assert!(w.c.job(w.id("a_borrow")).expect("job").stopping.is_none());
    w.submit_spec(b2);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        [("a_borrow".to_string(), CrossShare, "b2".to_string())]
    );
    // A job that can never fit is refused as a submit would be.
    let huge = w.spec("huge", "B", 9, 0);
    assert!(w.c.dry_run_submit(huge, w.now).is_err());
    // A waiting job's outlook (`qm explain`): why, and who is ahead.
    w.submit("a_wait1", "A", 3, 0);
    w.submit("a_wait2", "A", 1, 0);
    w.step();
    match w.c.outlook(w.id("a_wait2"), w.now).expect("known") {
        JobOutlook::Waits { ahead, .. } => {
            assert_eq!(ahead, vec![w.id("a_wait1")], "a_wait1 is ahead in line");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        w.c.outlook(w.id("a_own"), w.now),
        Some(JobOutlook::NotWaiting(JobStatus::Running))
    ));
}
