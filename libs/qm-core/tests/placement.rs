//! Table tests for placement (which nodes and slots a start gets) and the
//! gang rules of jobs spread over several nodes (`nodes.rs`).

mod common;

use common::*;
use qm_core::{
    AttemptOutcome, JobStatus, RankEnd, RankExit, StatusReason, Strategy, Time,
    LAUNCH_FAILED_EXIT_CODE,
};

fn one_share(entitlement: i64) -> Vec<qm_core::QuotaShare> {
    vec![share("A", Strategy::Reserve, entitlement)]
}

fn slots(v: &[(&str, &[u32])]) -> Vec<(String, Vec<u32>)> {
    v.iter().map(|(n, s)| (n.to_string(), s.to_vec())).collect()
}

#[test]
fn a_job_is_packed_on_the_node_with_the_fewest_free_slots_that_fits() {
    let mut w = World::with_nodes(&[("n1", 8), ("n2", 4), ("n3", 8)], one_share(20));
    w.submit("three", "A", 3, 0);
    w.step();
    assert_eq!(w.placed("three"), slots(&[("n2", &[0, 1, 2])]), "best fit");
    w.submit("two", "A", 2, 0);
    w.step();
    // n2 has 1 free: too few; n1 and n3 tie at 8: node name order.
    assert_eq!(w.placed("two"), slots(&[("n1", &[0, 1])]));
    w.submit("one", "A", 1, 0);
    w.step();
    assert_eq!(w.placed("one"), slots(&[("n2", &[3])]), "fills n2 up");
    w.submit("eight", "A", 8, 0);
    w.step();
    assert_eq!(
        w.placed("eight"),
        slots(&[("n3", &[0, 1, 2, 3, 4, 5, 6, 7])]),
        "a whole node was kept free for it"
    );
}

#[test]
fn a_gang_is_spread_only_when_no_single_node_fits_it() {
    let mut w = World::with_nodes(&[("n1", 4), ("n2", 4), ("n3", 2)], one_share(10));
    w.submit("small", "A", 1, 0);
    w.step();
    assert_eq!(w.placed("small"), slots(&[("n3", &[0])]));
    w.submit("gang", "A", 6, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["gang"]));
    // Most free first: n1 (4), then n2 (4), by name; n3 is not needed.
    assert_eq!(
        w.placed("gang"),
        slots(&[("n1", &[0, 1, 2, 3]), ("n2", &[0, 1])])
    );
    let a =
        w.c.job(w.id("gang"))
            .expect("gang")
            .attempts
            .last()
            .expect("attempt")
            .clone();
    assert_eq!(a.ranks.len(), 2, "one rank per node");
}

#[test]
fn a_job_waits_until_released_slots_are_free() {
    // The fleet has room in count only once the stopping job is gone; its
    // slots are not handed out while it stops.
    let mut w = World::with_nodes(
        &[("n1", 2)],
        vec![lab("B", 0, -1), share("L", Strategy::Lend, 2)],
    );
    w.submit("b", "B", 2, 0);
    w.step();
    w.at(5).submit("l", "L", 2, 0);
    let plan = w.step();
    assert_eq!(plan.preemptions.len(), 1);
    assert!(plan.starts.is_empty());
    w.exit("b", 143);
    w.step();
    assert_eq!(w.placed("l"), slots(&[("n1", &[0, 1])]));
}

/// A gang of 2 on nodes n1 and n2, started.
fn gang() -> World {
    // n3 is there but not used: the gang spreads over n1 and n2 (by name).
    let mut w = World::with_nodes(&[("n1", 1), ("n2", 1), ("n3", 1)], one_share(2));
    let mut spec = w.spec("g", "A", 2, 0);
    spec.retry_attempts = 1;
    w.submit_spec(spec);
    let plan = w.c.schedule(w.now);
    w.c.apply(&plan);
    assert_eq!(w.placed("g"), slots(&[("n1", &[0]), ("n2", &[0])]));
    w
}

#[test]
fn a_gang_is_running_once_every_rank_runs() {
    let mut w = gang();
    let id = w.id("g");
    w.c.rank_starting(id, 1, w.node("n2"), None.into(), Time::ZERO)
        .expect("rank");
    assert_eq!(
        w.status("g"),
        JobStatus::Starting,
        "the first rank starting"
    );
    w.c.rank_running(id, 1, w.node("n2"), Time::ZERO)
        .expect("rank");
    assert_eq!(w.status("g"), JobStatus::Starting, "one rank of two runs");
    w.c.rank_running(id, 1, w.node("n1"), Time::ZERO)
        .expect("rank");
    assert_eq!(w.status("g"), JobStatus::Running);
    assert!(
        w.c.rank_running(id, 1, w.node("n3"), Time::ZERO).is_err(),
        "a node the attempt is not on may not report it"
    );
    assert!(
        w.c.rank_running(id, 2, w.node("n1"), Time::ZERO).is_err(),
        "stale attempt"
    );
}

#[test]
fn the_first_failing_rank_fails_the_attempt_and_stops_the_others() {
    let mut w = gang();
    let id = w.id("g");
    for n in ["n1", "n2"] {
        let n = w.node(n);
        w.c.rank_running(id, 1, n, Time::ZERO).expect("rank");
    }
    let end =
        w.c.rank_ended(id, 1, w.node("n2"), RankExit::Exited(Some(3)), Time::ZERO);
    assert_eq!(end, Ok(RankEnd::StopOthers));
    assert_eq!(w.status("g"), JobStatus::Running, "until every rank ended");
    // The stopped rank ends by signal; the attempt's exit code is rank 1's.
    let end =
        w.c.rank_ended(id, 1, w.node("n1"), RankExit::Exited(None), Time::ZERO);
    assert_eq!(end, Ok(RankEnd::Ended(AttemptOutcome::Failed)));
    let a = w.c.job(id).expect("job").attempts[0].clone();
    assert_eq!(a.exit_code, Some(3));
    assert_eq!(w.status("g"), JobStatus::Failed);
    assert_eq!(
        w.c.free_slot_count(),
        3,
        "every node's slots are free again"
    );
}

#[test]
fn a_rank_that_cannot_be_launched_exits_127() {
    let mut w = gang();
    let id = w.id("g");
    let end =
        w.c.rank_ended(id, 1, w.node("n1"), RankExit::LaunchFailed, Time::ZERO);
    assert_eq!(end, Ok(RankEnd::StopOthers));
    let end =
        w.c.rank_ended(id, 1, w.node("n2"), RankExit::Exited(None), Time::ZERO);
    assert_eq!(end, Ok(RankEnd::Ended(AttemptOutcome::Failed)));
    let a = w.c.job(id).expect("job").attempts[0].clone();
    assert_eq!(a.exit_code, Some(LAUNCH_FAILED_EXIT_CODE));
}

#[test]
fn ranks_that_all_exit_zero_succeed_and_a_rank_ends_once() {
    let mut w = gang();
    let id = w.id("g");
    let end =
        w.c.rank_ended(id, 1, w.node("n1"), RankExit::Exited(Some(0)), Time::ZERO);
    assert_eq!(end, Ok(RankEnd::Waiting));
    let again =
        w.c.rank_ended(id, 1, w.node("n1"), RankExit::Exited(Some(1)), Time::ZERO);
    assert_eq!(
        again,
        Ok(RankEnd::Waiting),
        "a repeated report changes nothing"
    );
    let end =
        w.c.rank_ended(id, 1, w.node("n2"), RankExit::Exited(Some(0)), Time::ZERO);
    assert_eq!(end, Ok(RankEnd::Ended(AttemptOutcome::Succeeded)));
}

#[test]
fn a_lost_node_ends_its_attempts_host_lost_and_names_the_other_ranks() {
    let mut w = gang();
    let id = w.id("g");
    let lost = w.c.lose_node("n2", Time::ZERO);
    assert_eq!(lost.len(), 1);
    assert_eq!(lost[0].job, id);
    let n1 = w.c.node_id("n1").expect("n1");
    assert_eq!(lost[0].other_nodes, vec![n1], "rank 0 must be told to stop");
    assert_eq!(w.status("g"), JobStatus::Runnable);
    assert_eq!(
        w.reason("g"),
        StatusReason::Requeued(AttemptOutcome::HostLost)
    );
    assert_eq!(w.c.fleet_of(w.c.type_idx(T).expect("T")), 2);
}

#[test]
fn a_node_that_registers_again_keeps_its_attempts_only_in_the_same_incarnation() {
    let mut w = gang();
    let id = w.id("g");
    let lost = w.c.register_node(
        "n1",
        "1",
        &[(T, 1)],
        qm_core::Runtimes::default(),
        Time::ZERO,
    );
    assert!(lost.is_empty(), "a repeated registration changes nothing");
    assert_eq!(w.status("g"), JobStatus::Scheduled);
    let lost = w.c.register_node(
        "n1",
        "2",
        &[(T, 1)],
        qm_core::Runtimes::default(),
        Time::ZERO,
    );
    assert_eq!(lost.iter().map(|l| l.job).collect::<Vec<_>>(), vec![id]);
    assert_eq!(
        w.status("g"),
        JobStatus::Runnable,
        "a restart loses what ran"
    );
}

#[test]
fn a_rank_whose_executor_fenced_itself_ends_the_attempt_host_lost_and_stops_the_others() {
    let mut w = gang();
    let id = w.id("g");
    let end =
        w.c.rank_ended(id, 1, w.node("n2"), RankExit::Fenced, Time::ZERO)
            .expect("current attempt");
    let n1 = w.node("n1");
    match end {
        RankEnd::Lost(lost) => {
            assert_eq!((lost.job, lost.attempt), (id, 1));
            assert_eq!(lost.other_nodes, vec![n1], "rank 0 must be told to stop");
        }
        other => panic!("expected the attempt lost, got {other:?}"),
    }
    assert_eq!(w.status("g"), JobStatus::Runnable, "requeued, not failed");
    assert_eq!(
        w.reason("g"),
        StatusReason::Requeued(AttemptOutcome::HostLost)
    );
    // Its slots are free again; rank 0's late end is stale.
    assert_eq!(w.c.node(n1).free_count(w.c.type_idx(T).expect("T")), 1);
    assert!(w
        .c
        .rank_ended(id, 1, n1, RankExit::Exited(Some(143)), Time::ZERO)
        .is_err());
}

#[test]
fn a_stop_answered_for_a_rank_that_never_started_settles_the_stopping_attempt() {
    let mut w = World::with_nodes(
        &[("n1", 1)],
        vec![lab("B", 0, -1), share("L", Strategy::Lend, 1)],
    );
    w.submit("b", "B", 1, 0);
    w.step();
    w.at(5).submit("l", "L", 1, 0);
    let plan = w.step();
    assert_eq!(plan.preemptions.len(), 1, "b is reclaimed");
    // b's start never reached n1: the stop is answered as ended.
    let b = w.id("b");
    let end =
        w.c.rank_ended(b, 1, w.node("n1"), RankExit::NotStarted, w.now)
            .expect("current attempt");
    assert_eq!(end, RankEnd::Ended(AttemptOutcome::PreemptedCrossShare));
    assert_eq!(w.status("b"), JobStatus::Runnable);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["l"]), "its instance is free");
}

#[test]
fn an_executor_is_declared_lost_only_after_its_fencing_deadline_and_the_longest_grace() {
    let mut w = World::with_nodes(&[("n1", 2), ("n2", 1), ("n3", 4)], one_share(3));
    let mut short = w.spec("short", "A", 1, 0);
    short.grace_period_secs = 10;
    w.submit_spec(short);
    let mut long = w.spec("long", "A", 1, 0);
    long.grace_period_secs = 300;
    w.submit_spec(long);
    w.step();
    // Best fit: short on n2 (one slot), long on n1.
    assert_eq!(w.c.longest_grace_on("n2"), 10);
    assert_eq!(w.c.longest_grace_on("n1"), 300);
    assert_eq!(w.c.longest_grace_on("n3"), 0, "nothing there");
    assert_eq!(w.c.longest_grace_on("unknown"), 0);
    assert_eq!(
        qm_core::silence_before_lost(30, 300),
        30 + 300 + qm_core::FENCE_MARGIN_SECS
    );
    // A grace beyond the bound admission enforces cannot stall the fleet.
    assert_eq!(
        qm_core::silence_before_lost(30, u64::MAX),
        30 + qm_core::MAX_GRACE_PERIOD_SECS + qm_core::FENCE_MARGIN_SECS
    );
}

#[test]
fn only_ranks_an_executor_reported_are_expected_in_its_heartbeats() {
    let mut w = gang();
    let id = w.id("g");
    // Commanded on n1 and n2: nothing reported yet, so a heartbeat without
    // it proves nothing (its start may be on the way).
    assert!(w.c.reported_attempts_on("n1").is_empty());
    assert!(w.c.reported_attempts_on("n2").is_empty());
    w.c.rank_starting(id, 1, w.node("n2"), None.into(), Time::ZERO)
        .expect("rank");
    assert_eq!(w.c.reported_attempts_on("n2"), vec![(id, 1)]);
    assert!(
        w.c.reported_attempts_on("n1").is_empty(),
        "n1 has not reported"
    );
    w.c.rank_running(id, 1, w.node("n1"), Time::ZERO)
        .expect("rank");
    assert_eq!(w.c.reported_attempts_on("n1"), vec![(id, 1)]);
    // Ended ranks are not expected any more.
    w.c.rank_ended(id, 1, w.node("n1"), RankExit::Exited(Some(0)), Time::ZERO)
        .expect("rank");
    assert!(w.c.reported_attempts_on("n1").is_empty());
    assert!(w.c.reported_attempts_on("unknown").is_empty());
}

#[test]
fn every_ranks_restore_counts_once_in_the_attempt_and_the_ledger() {
    let mut w = gang();
    let id = w.id("g");
    let share = w.c.share_idx("A").expect("A");
    let restore = |bytes, skipped: &[&str]| qm_core::Restore {
        mark: Some(qm_core::CheckpointMark {
            at: Time::from_secs(1),
            step: 40,
        }),
        bytes,
        skipped: skipped.iter().map(|s| s.to_string()).collect(),
    };
    let corrupt = "7: blob 3f2a... does not match its digest";
    // n1 reports twice (the executor resends until acknowledged: the second
    // adds nothing), then n2 once.
    for node in ["n1", "n1", "n2"] {
        let n = w.node(node);
        w.c.rank_starting(id, 1, n, restore(1 << 30, &[corrupt]), Time::ZERO)
            .expect("rank");
    }
    let a = &w.c.job(id).expect("g").attempts[0];
    assert_eq!(a.restored_bytes, 2 << 30);
    assert_eq!(a.restore_skipped, vec![corrupt.to_string()]);
    assert_eq!(a.restored.map(|m| m.step), Some(40));
    assert_eq!(w.c.lost_work(share).restored_bytes, 2 << 30);
}
