//! The three-share story of the contract (semantics.md, section 4) as a
//! user sees it, on any running Quartermaster a [`Stack`] drives: services
//! it started (processes or containers) or a deployment it attached to
//! (the compose file). The end-to-end tests and their deployments share it.

use std::time::Duration;

use qm_wire::messages::{ServiceJob, SubmitServiceJob};

use crate::observe::Metrics;
use crate::stack::{digest_in, reference_digest, Stack};

/// The queue of the story: one ml.g5.xlarge per share (QS1
/// LEND_AND_BORROW, QS2 LEND, QS3 RESERVE); the story needs an executor
/// offering three.
pub const QUEUE_YAML: &str = include_str!("../../examples/queues/three-shares.yaml");
/// The trainer's arguments: 300 steps of 25 ms, a checkpoint every 10.
pub const ARGS: [&str; 6] = [
    "--steps",
    "300",
    "--checkpoint-every",
    "10",
    "--step-delay-ms",
    "25",
];

/// The story's jobs.
pub struct StoryJobs {
    pub p1: String,
    pub p2: String,
    pub p3: String,
    pub q2: String,
}

/// Polls `name`'s metrics until `done` holds (gauges refresh every second).
pub async fn metrics_until(
    stack: &Stack,
    name: &str,
    what: &str,
    done: impl Fn(&Metrics) -> bool,
) -> Metrics {
    for _ in 0..100 {
        let m = stack.scrape(name).await;
        if done(&m) {
            return m;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{name}'s metrics never showed {what}");
}

fn outcomes(j: &ServiceJob) -> Vec<String> {
    j.attempts
        .iter()
        .map(|a| a.outcome.clone().unwrap_or_else(|| "(running)".into()))
        .collect()
}

/// QS1 runs p3 and borrows QS2's instance for p2 while p1 waits; QS2
/// reclaims (p2 preempted across shares), p1 raised to the top preempts p3
/// in its share; every job succeeds, and each resumed one ends with the
/// digest of an uninterrupted run. `submit_p2` submits p2 another way (the
/// `qm` command line); `scheduler` names the scheduler whose metrics must
/// show the borrowing (None: not checked).
pub async fn three_shares(
    stack: &Stack,
    submit_p2: Option<&dyn Fn(&SubmitServiceJob) -> String>,
    scheduler: Option<&str>,
) -> StoryJobs {
    let expected = reference_digest(&ARGS[..4]);

    // QS1's three jobs: p3 runs on QS1's instance, p2 borrows QS2's idle
    // one, p1 waits (QS3 is RESERVE).
    let p3 = stack
        .submit(&stack.trainer_job("p3", "training", "QS1", 3, &ARGS))
        .await;
    stack
        .wait_for(&p3, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let p2_job = stack.trainer_job("p2", "training", "QS1", 2, &ARGS);
    let p2 = match submit_p2 {
        Some(submit) => submit(&p2_job),
        None => stack.submit(&p2_job).await,
    };
    let j = stack
        .wait_for(&p2, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    assert!(
        j.on_borrowed_capacity,
        "p2 runs on QS2's lent instance: {j:#?}"
    );
    // The scheduler's metrics show it: QS1 borrows one instance, QS2 lends it.
    let share = |m: &Metrics, share: &str, state: &str| {
        m.value("qm_share_instances", &[("share", share), ("state", state)])
    };
    if let Some(scheduler) = scheduler {
        let m = metrics_until(stack, scheduler, "QS1 borrowing QS2's instance", |m| {
            share(m, "QS1", "borrowed") == 1.0
        })
        .await;
        assert_eq!(share(&m, "QS1", "used"), 2.0);
        assert_eq!(share(&m, "QS1", "entitled"), 1.0);
        assert_eq!(share(&m, "QS2", "lent"), 1.0);
        assert_eq!(share(&m, "QS2", "used"), 0.0);
    }
    let p1 = stack
        .submit(&stack.trainer_job("p1", "training", "QS1", 1, &ARGS))
        .await;
    let j = stack
        .wait_for(&p1, 30, "a waiting reason", |j| {
            j.status == "RUNNABLE" && !j.status_reason.starts_with("QUEUED")
        })
        .await;
    assert!(j.attempts.is_empty(), "p1 must wait: {j:#?}");

    // QS2 needs its instance back: p2 is preempted (cross-share) and requeued.
    let q2 = stack
        .submit(&stack.trainer_job("qs2_job", "training", "QS2", 1, &ARGS))
        .await;
    stack
        .wait_for(&q2, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let j = stack
        .wait_for(&p2, 60, "a cross-share preemption", |j| {
            !j.attempts.is_empty() && j.attempts[0].outcome.is_some()
        })
        .await;
    assert_eq!(
        j.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_CROSS_SHARE"),
        "{j:#?}"
    );

    // p1 raised to the top priority: in-share preemption stops p3.
    stack.update_priority_as(&stack.client, &p1, 4).await;
    let j = stack
        .wait_for(&p3, 60, "an in-share preemption", |j| {
            j.attempts[0].outcome.is_some()
        })
        .await;
    assert_eq!(
        j.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_IN_SHARE"),
        "{j:#?}"
    );
    stack
        .wait_for(&p1, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;

    // Everything finishes, and every resumed job ends with the digest of an
    // uninterrupted run.
    for (name, id) in [("p1", &p1), ("p2", &p2), ("p3", &p3), ("qs2_job", &q2)] {
        let j = stack.wait_final(id, 180).await;
        assert_eq!(j.status, "SUCCEEDED", "{name}: {j:#?}\n{}", stack.logs());
        let last = j.attempts.last().expect("attempts");
        let out = stack.attempt_stdout("node-1", id, last.attempt);
        assert_eq!(
            digest_in(&out).as_deref(),
            Some(expected.as_str()),
            "{name} digest; output:\n{out}"
        );
        if j.attempts.len() > 1 {
            assert!(
                last.restored_checkpoint_step.unwrap_or(0) > 0,
                "{name} resumed from a checkpoint: {j:#?}"
            );
            assert!(out.contains("resumed from step"), "{name}: {out}");
        }
    }
    assert_eq!(
        outcomes(&stack.describe(&p2).await.expect("p2")),
        ["PREEMPTED_CROSS_SHARE", "SUCCEEDED"]
    );
    assert_eq!(
        outcomes(&stack.describe(&p3).await.expect("p3")),
        ["PREEMPTED_IN_SHARE", "SUCCEEDED"]
    );
    assert_eq!(
        outcomes(&stack.describe(&p1).await.expect("p1")),
        ["SUCCEEDED"]
    );

    // The events tell the same story.
    let e = &stack.events;
    assert_eq!(
        e.preemptions(&p2),
        [
            ("CROSS_SHARE".to_string(), "started".to_string()),
            ("CROSS_SHARE".into(), "completed".into())
        ]
    );
    assert_eq!(
        e.preemptions(&p3),
        [
            ("IN_SHARE".to_string(), "started".to_string()),
            ("IN_SHARE".into(), "completed".into())
        ]
    );
    // Consecutive events with the same status are reason changes
    // (e.g. PREEMPTION_IN_PROGRESS while still RUNNING).
    let mut p2_statuses = e.statuses(&p2);
    p2_statuses.dedup();
    assert_eq!(
        p2_statuses.first().map(String::as_str),
        Some("RUNNABLE"),
        "{p2_statuses:?}"
    );
    assert_eq!(
        p2_statuses.last().map(String::as_str),
        Some("SUCCEEDED"),
        "{p2_statuses:?}"
    );
    assert_eq!(
        p2_statuses,
        [
            "RUNNABLE",
            "SCHEDULED",
            "STARTING",
            "RUNNING",
            "RUNNABLE",
            "SCHEDULED",
            "STARTING",
            "RUNNING",
            "SUCCEEDED"
        ],
        "p2 ran, was preempted and requeued, ran again and succeeded"
    );

    StoryJobs { p1, p2, p3, q2 }
}

/// A job of the story's queue that holds one instance for `secs` and says
/// it expects to (`/bin/sleep`: no checkpoint).
pub fn sleeper(name: &str, share: &str, secs: u64) -> SubmitServiceJob {
    SubmitServiceJob {
        job_name: name.into(),
        job_queue: "training".into(),
        quota_share_name: Some(share.into()),
        instance_type: "ml.g5.xlarge".into(),
        instance_count: Some(1),
        termination_grace_period_seconds: Some(5),
        estimated_runtime_seconds: Some(secs),
        command: vec!["/bin/sleep".into(), secs.to_string()],
        ..Default::default()
    }
}
