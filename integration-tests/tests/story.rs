//! The three-share story of the contract, end to end: real NATS (JetStream)
//! and S3 in containers, the four services as processes, the example
//! trainer as the workload.

use qm_integration_tests::stack::{digest_in, reference_digest, running, trainer_job};
use qm_wire::messages::{ServiceJob, UpdateServiceJob};
use qm_wire::subjects::Operation;

const QUEUE_YAML: &str = include_str!("../../examples/queues/three-shares.yaml");
const ARGS: [&str; 6] = [
    "--steps",
    "300",
    "--checkpoint-every",
    "10",
    "--step-delay-ms",
    "25",
];

fn outcomes(j: &ServiceJob) -> Vec<String> {
    j.attempts
        .iter()
        .map(|a| a.outcome.clone().unwrap_or_else(|| "(running)".into()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_share_story_reclaims_preempts_in_share_and_every_job_resumes_to_the_same_digest() {
    let (_nats, _s3, mut stack) = running("story", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let expected = reference_digest(&ARGS[..4]);

    // QS1's three jobs: p3 runs on QS1's instance, p2 borrows QS2's idle
    // one, p1 waits (QS3 is RESERVE).
    let p3 = stack
        .submit(&trainer_job("p3", "training", "QS1", 3, &ARGS))
        .await;
    stack
        .wait_for(&p3, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let p2 = stack
        .submit(&trainer_job("p2", "training", "QS1", 2, &ARGS))
        .await;
    let j = stack
        .wait_for(&p2, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    assert!(
        j.on_borrowed_capacity,
        "p2 runs on QS2's lent instance: {j:#?}"
    );
    let p1 = stack
        .submit(&trainer_job("p1", "training", "QS1", 1, &ARGS))
        .await;
    let j = stack
        .wait_for(&p1, 30, "a waiting reason", |j| {
            j.status == "RUNNABLE" && !j.status_reason.starts_with("QUEUED")
        })
        .await;
    assert!(j.attempts.is_empty(), "p1 must wait: {j:#?}");

    // QS2 needs its instance back: p2 is preempted (cross-share) and requeued.
    let q2 = stack
        .submit(&trainer_job("qs2_job", "training", "QS2", 1, &ARGS))
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
    let _: ServiceJob = stack
        .client
        .call(
            Operation::UpdateServiceJob,
            &UpdateServiceJob {
                job_id: p1.clone(),
                scheduling_priority: 4,
            },
        )
        .await
        .expect("priority updated");
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
    stack.stop_all();
}
