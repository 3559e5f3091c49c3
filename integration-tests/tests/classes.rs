//! Workload classes end to end, through admission and the scheduler on a
//! real NATS: a job's class and band, what a class refuses, the resume
//! proof a class asks for before it borrows, and in-share preemption by
//! class.

use qm_integration_tests::stack::running;
use qm_wire::messages::{ServiceJob, SubmitServiceJob};
use qm_wire::subjects::Operation;

/// The three-share example with workload classes in QS1: exploratory
/// work (the default), release work that must checkpoint and borrows only
/// once a resume drill passed, and urgent work.
const CLASSES_QUEUE: &str = include_str!("../../examples/queues/classes.yaml");

const LONG: [&str; 6] = [
    "--steps",
    "5000",
    "--checkpoint-every",
    "50",
    "--step-delay-ms",
    "20",
];

#[tokio::test(flavor = "multi_thread")]
async fn classes_set_the_band_refuse_what_they_forbid_and_gate_borrowing_on_a_resume_proof() {
    let (_nats, _s3, mut stack) = running("classes", CLASSES_QUEUE).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 2);
    let job = |name: &str, class: Option<&str>, priority: Option<u32>| {
        let mut j: SubmitServiceJob = stack.trainer_job(name, "training", "QS1", 0, &LONG);
        j.workload_class = class.map(String::from);
        j.scheduling_priority = priority;
        j
    };
    let refused = |j: SubmitServiceJob| {
        let c = stack.client.clone();
        async move {
            c.call::<_, serde_json::Value>(Operation::SubmitServiceJob, &j)
                .await
                .expect_err("refused")
                .to_string()
        }
    };

    // No class and no priority: the default class, at its band's lowest.
    let explore = stack.submit(&job("explore", None, None)).await;
    let j: ServiceJob = stack
        .wait_for(&explore, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    assert_eq!(j.workload_class.as_deref(), Some("exploratory"), "{j:#?}");
    assert_eq!(j.scheduling_priority, 0);

    // Outside the band, an unknown class, release work without a
    // checkpoint: each refused, naming the problem.
    let e = refused(job("high", Some("exploratory"), Some(150))).await;
    assert!(
        e.contains("schedulingPriority: must lie in class \"exploratory\"'s band 0..=99, got 150"),
        "{e}"
    );
    let e = refused(job("who", Some("research"), None)).await;
    assert!(e.contains("has no class \"research\""), "{e}");
    let mut no_ckpt = job("rc0", Some("release"), None);
    no_ckpt.checkpoint_config = None;
    let e = refused(no_ckpt).await;
    assert!(
        e.contains("checkpointConfig: is required: class \"release\""),
        "{e}"
    );

    // Release work with no resume proof never borrows: r1 takes the share's
    // own instance (the exploratory job becomes the borrowed one), r2
    // waits, saying why.
    let r1 = stack.submit(&job("r1", Some("release"), None)).await;
    let j = stack
        .wait_for(&r1, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    assert_eq!(j.scheduling_priority, 100);
    assert!(!j.on_borrowed_capacity, "{j:#?}");
    let j = stack
        .wait_for(&explore, 30, "borrowed", |j| j.on_borrowed_capacity)
        .await;
    assert_eq!(j.status, "RUNNING");
    let r2 = stack.submit(&job("r2", Some("release"), Some(150))).await;
    stack
        .wait_for(&r2, 30, "RESUME_NOT_VERIFIED", |j| {
            j.status_reason.starts_with("RESUME_NOT_VERIFIED")
        })
        .await;

    // Urgent work preempts the exploratory job in-share (release work may
    // only be preempted by urgent, and has the higher priority anyway).
    let urgent = stack.submit(&job("incident", Some("urgent"), None)).await;
    let j = stack
        .wait_for(&urgent, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    assert_eq!(j.scheduling_priority, 200);
    let j = stack
        .wait_for(&explore, 30, "preempted", |j| {
            j.attempts.first().is_some_and(|a| a.outcome.is_some())
        })
        .await;
    assert_eq!(
        j.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_IN_SHARE"),
        "{j:#?}"
    );
    let j = stack
        .wait_for(&r1, 5, "still running", |j| j.status == "RUNNING")
        .await;
    assert_eq!(j.attempts.len(), 1, "release work was not touched");

    // Another team can neither use QS1's classes nor claim them in its own
    // share.
    let bob = stack.auth.client(&stack.nats_url, "bob").await;
    let e = bob
        .call::<_, serde_json::Value>(
            Operation::SubmitServiceJob,
            &job("b1", Some("urgent"), None),
        )
        .await
        .expect_err("not bob's share");
    assert_eq!(
        e.code(),
        Some(qm_wire::messages::ErrorCode::AccessDenied),
        "{e}"
    );
    let mut in_qs2 = job("b2", Some("urgent"), None);
    in_qs2.quota_share_name = Some("QS2".into());
    let e = bob
        .call::<_, serde_json::Value>(Operation::SubmitServiceJob, &in_qs2)
        .await
        .expect_err("QS2 has no classes")
        .to_string();
    assert!(e.contains("declares no workload classes"), "{e}");

    for id in [&explore, &r1, &r2, &urgent] {
        stack
            .client
            .call::<_, serde_json::Value>(
                Operation::TerminateServiceJob,
                &serde_json::json!({"jobId": id, "reason": "test over"}),
            )
            .await
            .expect("terminated");
    }
    stack.stop_all();
}
