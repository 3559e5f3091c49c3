//! Borrowing budgets (`budget.rs`), case by case: safe admission, what a
//! waiting job is told, exhaustion under FINISH and CHECKPOINT_AND_STOP,
//! refill of a rolling window and of a half-life, and validation.

mod common;

use common::*;
use qm_core::budget::HOUR_MS;
use qm_core::{
    AttemptOutcome, BorrowBudget, BudgetWindow, JobStatus, OnBudgetExhausted, QueueConfig,
    StatusReason, Strategy, Time, WaitReason,
};

const HOUR: u64 = 3600;

/// A borrows (1 of its own), B lends 3; A's budget is `hours`
/// instance-hours per `window` hours.
fn world(hours: u64, window: BudgetWindow, on: OnBudgetExhausted) -> World {
    let mut a = lab("A", 1, -1);
    a.borrow_budget = Some(BorrowBudget::hours(hours, window));
    a.on_budget_exhausted = on;
    World::new(4, vec![a, share("B", Strategy::Lend, 3)])
}

fn rolling(hours: u64) -> BudgetWindow {
    BudgetWindow::Rolling { hours }
}

/// A job of A asking for `count` with an expected run of `secs`.
fn job(w: &mut World, name: &str, count: u32, secs: Option<u64>) {
    let mut spec = w.spec(name, "A", count, 1);
    spec.estimated_runtime_secs = secs;
    w.submit_spec(spec);
}

fn budget_wait(w: &World, name: &str) -> (u32, u32, u32) {
    match w.wait(name) {
        // Instance-minutes, and the refill in seconds.
        Some(WaitReason::BorrowBudget {
            left_min,
            need_min,
            refills_at_min,
        }) => (left_min, need_min, refills_at_min.saturating_mul(60)),
        other => panic!("{name} waits for {other:?}, not its budget"),
    }
}

#[test]
fn a_job_whose_expected_run_exceeds_what_is_left_does_not_borrow() {
    // 10 instance-hours a day. A 2-instance job (1 own, 1 borrowed) of 6 h
    // needs 6; a second one would need 6 more of the 4 left.
    let mut w = world(10, rolling(24), OnBudgetExhausted::Finish);
    job(&mut w, "first", 2, Some(6 * HOUR));
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["first"]);
    job(&mut w, "second", 1, Some(6 * HOUR));
    let plan = w.step();
    assert!(plan.starts.is_empty(), "second would overrun the budget");
    let (left, need, _) = budget_wait(&w, "second");
    assert_eq!(
        (left, need),
        (4 * 60, 6 * 60),
        "4 h left once first's 6 are held back"
    );
    // A shorter job fits in what is left.
    job(&mut w, "short", 1, Some(3 * HOUR));
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["short"], "{:?}", w.wait("short"));
    // The rendered reason says what is left and what it needs.
    let text = w.reason("second").render(&|j| j.to_string());
    assert!(
        text.starts_with("BORROW_BUDGET: 1.00 instance-hours"),
        "{text}"
    );
    assert!(text.contains("it needs 6.00"), "{text}");
}

#[test]
fn jobs_admitted_together_never_overcommit_the_budget() {
    // 8 left: of three 1-instance borrowers of 3 h each, two start.
    let mut w = world(8, rolling(24), OnBudgetExhausted::Finish);
    job(&mut w, "own", 1, Some(3 * HOUR));
    for name in ["b1", "b2", "b3"] {
        job(&mut w, name, 1, Some(3 * HOUR));
    }
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["own", "b1", "b2"]);
    assert!(matches!(
        w.wait("b3"),
        Some(WaitReason::BorrowBudget { .. })
    ));
}

#[test]
fn the_attempt_timeout_is_the_expected_run_when_no_estimate_is_given() {
    let mut w = world(2, rolling(24), OnBudgetExhausted::Finish);
    let mut spec = w.spec("timed", "A", 2, 1);
    spec.attempt_timeout_secs = Some(3 * HOUR);
    w.submit_spec(spec);
    w.step();
    let (left, need, _) = budget_wait(&w, "timed");
    assert_eq!((left, need), (120, 180));
}

#[test]
fn under_finish_a_job_without_an_expected_run_never_borrows_but_runs_on_its_own_capacity() {
    let mut w = world(100, rolling(24), OnBudgetExhausted::Finish);
    job(&mut w, "unbounded", 2, None);
    w.step();
    let (_, need, refills) = budget_wait(&w, "unbounded");
    assert_eq!((need, refills), (u32::MAX, u32::MAX));
    let text = w.reason("unbounded").render(&|j| j.to_string());
    assert!(text.contains("declares no expected run"), "{text}");
    job(&mut w, "small", 1, None);
    let plan = w.step();
    assert_eq!(
        w.started(&plan),
        vec!["small"],
        "within quota the budget plays no part"
    );
}

#[test]
fn finish_lets_running_borrowers_end_and_bars_new_borrowing_until_the_window_refills() {
    // 2 instance-hours per 3 h; a job with no limit that borrowed 1
    // instance before the budget was set runs past it and ends on its own.
    let mut w = world(2, rolling(3), OnBudgetExhausted::Finish);
    job(&mut w, "long", 2, Some(2 * HOUR));
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["long"]);
    w.at(2 * HOUR);
    let status =
        w.c.budget_status(w.c.share_idx("A").expect("A"), w.now)
            .expect("budget");
    assert_eq!(status.used_ms, 2 * HOUR_MS, "1 borrowed instance for 2 h");
    assert!(status.exhausted());
    let plan = w.step();
    assert!(plan.budget_stops.is_empty(), "FINISH stops nothing");
    w.exit("long", 0);
    job(&mut w, "next", 2, Some(HOUR));
    w.step();
    // Hours 0 and 1 hold one instance-hour each: once hour 0 leaves the
    // 3-hour window (at 3:00), one is left, enough for next's one.
    let (left, need, refills) = budget_wait(&w, "next");
    assert_eq!((left, need, refills), (0, 60, 3 * HOUR as u32));
    assert_eq!(w.step().wake_at, Some(Time::from_secs(3 * HOUR)));
    w.at(3 * HOUR);
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["next"]);
}

#[test]
fn checkpoint_and_stop_stops_borrowers_when_the_budget_runs_out_and_they_resume() {
    // 1 instance-hour per day; a 3-instance job borrows 2 with no expected
    // run: allowed while budget is left, stopped after 30 minutes.
    let mut w = world(1, rolling(24), OnBudgetExhausted::CheckpointAndStop);
    job(&mut w, "greedy", 3, None);
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["greedy"]);
    assert_eq!(
        plan.wake_at,
        Some(Time::from_secs(HOUR / 2)),
        "a pass when it runs out"
    );
    w.at(HOUR / 4);
    w.checkpoint("greedy", 7);
    w.at(HOUR / 2);
    let plan = w.step();
    assert_eq!(plan.budget_stops, vec![w.id("greedy")]);
    assert!(plan.preemptions.is_empty());
    assert!(matches!(
        w.reason("greedy"),
        StatusReason::PreemptionInProgress { .. }
    ));
    assert_eq!(w.exit("greedy", 143), AttemptOutcome::PreemptedBudget);
    assert_eq!(w.status("greedy"), JobStatus::Runnable);
    let job = w.c.job(w.id("greedy")).expect("job");
    assert_eq!(
        job.attempts[0].preempted_for, None,
        "stopped for no other job"
    );
    assert_eq!(
        job.last_checkpoint.map(|c| c.step),
        Some(7),
        "resumes from it"
    );
    // The lost work is counted under its own cause.
    let ledger = w.c.lost_work(w.c.share_idx("A").expect("A"));
    assert_eq!(ledger.preempted_budget.attempts, 1);
    assert!(ledger.lost_for_this_share.is_empty());
    // It waits for the budget, and fits again within its own capacity if
    // it asked for only that.
    w.step();
    assert!(matches!(
        w.wait("greedy"),
        Some(WaitReason::BorrowBudget { .. })
    ));
    let mut spec = w.spec("mine", "A", 1, 1);
    spec.estimated_runtime_secs = None;
    w.submit_spec(spec);
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["mine"]);
}

#[test]
fn a_stop_hits_only_the_borrowed_jobs_and_the_share_keeps_its_own() {
    let mut w = world(1, rolling(24), OnBudgetExhausted::CheckpointAndStop);
    let mut spec = w.spec("important", "A", 1, 5);
    spec.estimated_runtime_secs = None;
    w.submit_spec(spec);
    job(&mut w, "extra", 1, None);
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["important", "extra"]);
    w.at(HOUR);
    let plan = w.step();
    assert_eq!(plan.budget_stops, vec![w.id("extra")]);
    assert!(!w.stopping("important"));
}

#[test]
fn a_half_life_refills_continuously() {
    // 1 instance-hour, halving every hour. One borrowed instance for an
    // hour counts 1/ln2 x (1 - 1/2) = 0.72 h; an hour later half that.
    let mut w = world(
        1,
        BudgetWindow::HalfLife { hours: 1 },
        OnBudgetExhausted::Finish,
    );
    job(&mut w, "a", 2, Some(HOUR));
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["a"]);
    w.at(HOUR);
    w.exit("a", 0);
    let s = w.c.share_idx("A").expect("A");
    let used = w.c.budget_status(s, w.now).expect("budget").used_ms;
    let expected = HOUR_MS as f64 / std::f64::consts::LN_2 * 0.5;
    assert!((used as f64 - expected).abs() < 2.0, "{used} vs {expected}");
    // Another hour-long borrower needs 1 h: it waits until usage has
    // decayed to zero... which never happens; half an hour fits once
    // usage is at most 0.5 h: log2(0.72 / 0.5) h later.
    job(&mut w, "b", 2, Some(HOUR / 2));
    w.step();
    let (_, _, refills) = budget_wait(&w, "b");
    let wait = (f64::from(refills) * 1000.0 - w.now.0 as f64) / HOUR_MS as f64;
    assert!(
        (wait - (expected / (HOUR_MS as f64 / 2.0)).log2()).abs() < 0.01,
        "{wait}"
    );
    w.at(u64::from(refills));
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["b"]);
    // Two whole hours of a 2-instance borrower can never fit: told so.
    w.exit("b", 0);
    job(&mut w, "huge", 3, Some(2 * HOUR));
    w.step();
    let (_, need, refills) = budget_wait(&w, "huge");
    assert_eq!((need, refills), (4 * 60, u32::MAX));
}

#[test]
fn the_status_counts_what_is_not_accrued_yet_and_names_when_it_runs_out() {
    // One borrowed instance since 0 and no event since 1 h: the status at
    // 2 h counts the pending hour as well (snapshots and log replay of the
    // count are tested in the scheduler and end to end).
    let mut w = world(3, rolling(24), OnBudgetExhausted::CheckpointAndStop);
    job(&mut w, "x", 2, None);
    w.step();
    w.at(HOUR);
    w.checkpoint("x", 1);
    let s = w.c.share_idx("A").expect("A");
    let status =
        w.c.budget_status(s, Time::from_secs(2 * HOUR))
            .expect("budget");
    assert_eq!(status.used_ms, 2 * HOUR_MS);
    assert_eq!(status.borrowing, 1);
    assert_eq!(status.exhausts_at, Some(Time::from_secs(3 * HOUR)));
    assert_eq!(status.left_ms(), HOUR_MS);
}

#[test]
fn budgets_are_validated_by_field() {
    let mut a = lab("A", 1, -1);
    a.borrow_budget = Some(BorrowBudget::hours(
        0,
        BudgetWindow::Rolling { hours: 10_000 },
    ));
    let mut b = share("B", Strategy::Lend, 1);
    b.borrow_budget = Some(BorrowBudget::hours(5, BudgetWindow::HalfLife { hours: 24 }));
    let mut c = share("C", Strategy::Reserve, 1);
    c.on_budget_exhausted = OnBudgetExhausted::CheckpointAndStop;
    let err =
        qm_core::validate_queue(&QueueConfig::new("q", vec![a, b, c])).expect_err("four problems");
    let fields: Vec<&str> = err.0.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "quotaShares[0].borrowBudget.instanceHours",
            "quotaShares[0].borrowBudget.windowHours",
            "quotaShares[1].borrowBudget",
            "quotaShares[2].onBudgetExhausted",
        ],
        "{err}"
    );
}

#[test]
fn removing_a_budget_lets_the_share_borrow_freely_again() {
    let mut w = world(1, rolling(24), OnBudgetExhausted::Finish);
    job(&mut w, "big", 2, Some(5 * HOUR));
    w.step();
    assert!(matches!(
        w.wait("big"),
        Some(WaitReason::BorrowBudget { .. })
    ));
    let mut config = w.c.queue_config();
    config.shares[0].borrow_budget = None;
    w.c.update_queue(config, w.now).expect("valid");
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["big"]);
    assert_eq!(
        w.c.budget_status(w.c.share_idx("A").expect("A"), w.now),
        None
    );
}

#[test]
fn a_budget_stop_stops_only_what_brings_the_share_within_its_entitlement() {
    // A owns 4 and runs 3 + 2 + 1 (2 borrowed): stopping the 2 suffices,
    // the 1 fits once it is gone.
    let mut a = lab("A", 4, -1);
    a.borrow_budget = Some(BorrowBudget::hours(1, rolling(24)));
    a.on_budget_exhausted = OnBudgetExhausted::CheckpointAndStop;
    let mut w = World::new(8, vec![a, share("B", Strategy::Lend, 4)]);
    for (name, count, priority) in [("three", 3, 3), ("two", 2, 2), ("one", 1, 1)] {
        let mut spec = w.spec(name, "A", count, priority);
        spec.estimated_runtime_secs = None;
        w.submit_spec(spec);
    }
    let plan = w.step();
    assert_eq!(plan.starts.len(), 3);
    w.at(HOUR / 2);
    let plan = w.step();
    assert_eq!(plan.budget_stops, vec![w.id("two")]);
    assert!(!w.stopping("one") && !w.stopping("three"));
}

#[test]
fn a_budget_stop_spends_no_preemption_retry() {
    let mut w = world(1, rolling(24), OnBudgetExhausted::CheckpointAndStop);
    let mut spec = w.spec("fragile", "A", 2, 1);
    spec.preemption_retries = Some(0);
    w.submit_spec(spec);
    w.step();
    w.at(HOUR);
    let plan = w.step();
    assert_eq!(plan.budget_stops, vec![w.id("fragile")]);
    assert_eq!(w.exit("fragile", 143), AttemptOutcome::PreemptedBudget);
    assert_eq!(
        w.status("fragile"),
        JobStatus::Runnable,
        "requeued, not failed"
    );
    let job = w.c.job(w.id("fragile")).expect("job");
    assert_eq!(
        (job.preempted_attempts, job.free_preemptions),
        (1, 1),
        "counted as a preemption, not as a spent retry"
    );
}

#[test]
fn a_job_without_an_expected_run_waits_for_a_useful_part_of_the_budget() {
    // Half-life budget of 1 instance-hour: after a stop, the first
    // millisecond of refill does not restart it; ten minutes per borrowed
    // instance (or a quarter of the budget) must be back.
    let mut w = world(
        1,
        BudgetWindow::HalfLife { hours: 1 },
        OnBudgetExhausted::CheckpointAndStop,
    );
    job(&mut w, "greedy", 2, None);
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["greedy"]);
    let out = plan.wake_at.expect("runs out");
    w.now = out;
    let plan = w.step();
    assert_eq!(plan.budget_stops, vec![w.id("greedy")]);
    w.exit("greedy", 143);
    w.step();
    let (left, need, refills) = budget_wait(&w, "greedy");
    assert_eq!(need, u32::MAX);
    assert!(left < 10, "{left}");
    // It restarts when ten minutes are back, not before.
    let back = Time::from_secs(u64::from(refills));
    assert!(back.millis_since(out) > 60_000, "{out:?} then {back:?}");
    w.now = Time(back.0 - 60_000);
    assert!(w.step().starts.is_empty());
    w.now = back;
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["greedy"]);
}
