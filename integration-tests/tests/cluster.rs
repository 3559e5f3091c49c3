//! The services on a three-server NATS cluster, every stream and bucket
//! kept in three copies (`streamReplicas: 3`), each service given all three
//! URLs: losing one server mid-run loses no submit and runs no job twice.

use std::time::Duration;

use qm_integration_tests::stack::{
    digest_in, reference_digest, start_nats_cluster, trainer_job, Stack,
};
use qm_integration_tests::start_s3;

const QUEUE_YAML: &str = include_str!("../../examples/queues/three-shares.yaml");
const ARGS: [&str; 6] = [
    "--steps",
    "200",
    "--checkpoint-every",
    "20",
    "--step-delay-ms",
    "25",
];

#[tokio::test(flavor = "multi_thread")]
async fn a_nats_server_lost_mid_run_loses_no_submit_and_runs_no_job_twice() {
    let cluster = start_nats_cluster().await;
    let s3 = start_s3().await;
    let replicated = vec![("QM_ADMISSION_STREAM_REPLICAS".to_string(), "3".to_string())];
    let mut stack = Stack::new_with(&cluster.nats, &s3, "nats-cluster", replicated).await;
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(QUEUE_YAML).await;
    stack.wait_leader("scheduler-1").await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 2);
    stack.executor("node-2", "training", "ml.g5.xlarge", 2);

    // The log is kept on all three servers.
    let scheduler = stack.auth.client(&stack.nats_url, "scheduler").await;
    let js = async_nats::jetstream::new(scheduler.nats.clone());
    let mut log = js.get_stream("QM_LOG").await.expect("the log");
    let info = log.info().await.expect("log info");
    assert_eq!(info.config.num_replicas, 3, "{info:?}");

    let expected = reference_digest(&ARGS[..4]);
    let job = |i: usize| {
        let mut j = trainer_job(&format!("job-{i}"), "training", "QS1", 1, &ARGS);
        // A submit retried because its reply was lost is stored once.
        j.client_token = Some(format!("cluster-{i}"));
        j
    };
    let mut jobs = Vec::new();
    for i in 0..4 {
        jobs.push(stack.submit(&job(i)).await);
    }
    stack
        .wait_for(&jobs[0], 60, "RUNNING", |j| j.status == "RUNNING")
        .await;

    // One server goes away while jobs run and more are submitted.
    cluster.others[0].stop().await.expect("a NATS server stops");
    for i in 4..8 {
        jobs.push(stack.submit(&job(i)).await);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    cluster.others[0]
        .start()
        .await
        .expect("the NATS server starts again");

    for id in &jobs {
        let j = stack.wait_final(id, 240).await;
        assert_eq!(j.status, "SUCCEEDED", "{j:#?}\n{}", stack.logs());
        // Ran once per attempt, and attempts never overlapped.
        let mut runs = Vec::new();
        for a in &j.attempts {
            let node = a.executor_id.as_deref().expect("placed");
            runs.push(
                stack
                    .attempt_run(node, id, a.attempt)
                    .unwrap_or_else(|| panic!("{node} ran attempt {} of {id}", a.attempt)),
            );
        }
        for pair in runs.windows(2) {
            assert!(pair[0].1 < pair[1].0, "attempts overlapped: {runs:?}");
        }
        let last = j.attempts.last().expect("an attempt");
        let out = stack.attempt_stdout(
            last.executor_id.as_deref().expect("placed"),
            id,
            last.attempt,
        );
        assert_eq!(digest_in(&out).as_deref(), Some(expected.as_str()), "{out}");
    }
    // Every submit was stored: the queue holds exactly these eight.
    assert_eq!(jobs.len(), 8);
    let mut unique = jobs.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 8, "eight distinct jobs: {jobs:?}");
    stack.stop_all();
}
