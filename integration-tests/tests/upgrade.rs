//! Rolling upgrade: with every service in its own container (two admission
//! replicas, two schedulers, two GPU nodes each with an executor and a
//! checkpoint service), each container is replaced in turn, as an upgrade
//! replaces it: SIGTERM (`docker stop`), then a new container of the image
//! is started and must become ready before the next is touched. Jobs run
//! and are submitted the whole time.
//!
//! What users rely on: no submit is refused for longer than
//! [`REFUSAL_BOUND`] (a refused or unanswered submit is retried with its
//! client token, as `qm` and the SDKs do), no job is lost, no job runs
//! twice at once or succeeds twice, and a job stopped by a draining
//! executor resumes from its checkpoint to the digest of an uninterrupted
//! run. The figures are printed (docs/benchmarks.md quotes
//! them).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use qm_integration_tests::observe;
use qm_integration_tests::stack::{digest_in, reference_digest, running_in_containers, Stack};
use qm_service::client::Client;
use qm_wire::messages::{ErrorCode, SubmitServiceJob, SubmitServiceJobResponse};
use qm_wire::subjects::Operation;

/// One instance per share, QS1 may borrow the rest.
const QUEUE_YAML: &str = include_str!("../../examples/queues/three-shares.yaml");
/// Long jobs (about 4 s): running when executors are replaced.
const LONG: [&str; 6] = [
    "--steps",
    "200",
    "--checkpoint-every",
    "20",
    "--step-delay-ms",
    "20",
];
/// Short jobs (about 0.2 s): many submits while services are replaced.
const SHORT: [&str; 6] = [
    "--steps",
    "20",
    "--checkpoint-every",
    "10",
    "--step-delay-ms",
    "10",
];
/// A submit every this long; every sixth job is long.
const CADENCE: Duration = Duration::from_millis(250);
/// How long each service stays down before its new container starts (as a
/// slow image pull would): submits keep coming meanwhile.
const DOWN: Duration = Duration::from_secs(2);
/// The longest a submit may go unaccepted while services are replaced.
const REFUSAL_BOUND: Duration = Duration::from_secs(10);

/// One submit as a user sees it: sent at `at`, accepted after `waited`
/// (retries included).
struct Submitted {
    job_id: String,
    at: Instant,
    waited: Duration,
    retries: u32,
}

/// Submits until accepted, retrying refusals (TRANSIENT, or no reply) with
/// the same client token.
async fn submit_retrying(client: &Client, job: &SubmitServiceJob) -> Submitted {
    let started = Instant::now();
    let mut retries = 0;
    loop {
        match client
            .call::<_, SubmitServiceJobResponse>(Operation::SubmitServiceJob, job)
            .await
        {
            Ok(r) => {
                return Submitted {
                    job_id: r.job_id,
                    at: started,
                    waited: started.elapsed(),
                    retries,
                }
            }
            Err(e) if e.code().is_none_or(|c| c == ErrorCode::Transient) => {
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "{} refused for two minutes: {e}",
                    job.job_name
                );
                retries += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("{} refused for good: {e}", job.job_name),
        }
    }
}

/// Waits until service `name` answers `/readyz` with 200.
async fn wait_ready(stack: &Stack, name: &str) -> Duration {
    let started = Instant::now();
    let port = stack.metrics_port(name);
    while started.elapsed() < Duration::from_secs(120) {
        if let Ok((200, _)) = observe::get(port, "/readyz", None).await {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{name} not ready within 120 s\n{}", stack.log_of(name));
}

/// Attempts one after another, never two at once: every attempt whose
/// process was launched (it has an output file; one stopped while restoring
/// never launched), and the one that succeeded, has its run record to
/// compare.
fn assert_attempts_one_after_another(
    stack: &Stack,
    name: &str,
    job_id: &str,
    j: &qm_wire::messages::ServiceJob,
) {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for a in &j.attempts {
        let node = a.executor_id.as_deref().unwrap_or("");
        let launched = stack
            .path()
            .join(node)
            .join(job_id)
            .join(format!("attempt-{}", a.attempt))
            .join("stdout.log")
            .exists();
        if launched || a.outcome.as_deref() == Some("SUCCEEDED") {
            let run = stack.attempt_run(node, job_id, a.attempt);
            runs.push(run.unwrap_or_else(|| {
                panic!(
                    "{name}: attempt {} on {node:?} ran but has no run record",
                    a.attempt
                )
            }));
        }
    }
    runs.sort();
    for w in runs.windows(2) {
        assert!(w[0].1 <= w[1].0, "{name}: attempts overlap: {runs:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_service_replaced_one_at_a_time_while_jobs_run_loses_no_job_and_runs_none_twice() {
    let (_nats, _s3, mut stack) = running_in_containers("rolling", QUEUE_YAML, Vec::new()).await;
    stack.admission_named("admission-2");
    stack.scheduler("scheduler-2");
    stack.executor("node-1", "training", "ml.g5.xlarge", 2);
    stack.executor("node-2", "training", "ml.g5.xlarge", 2);
    for name in ["admission-2", "scheduler-2", "node-1", "node-2"] {
        wait_ready(&stack, name).await;
    }
    let digests = [reference_digest(&LONG[..4]), reference_digest(&SHORT[..4])];

    // A user submitting every 250 ms for the whole upgrade, to all shares.
    let stop = Arc::new(AtomicBool::new(false));
    let submitter = {
        let client = stack.client.clone();
        let templates = [
            stack.trainer_job("long", "training", "QS1", 1, &LONG),
            stack.trainer_job("short", "training", "QS1", 1, &SHORT),
        ];
        let stop = Arc::clone(&stop);
        tokio::spawn(async move {
            let mut done = Vec::new();
            let mut i = 0;
            while !stop.load(Ordering::SeqCst) {
                let kind = usize::from(i % 6 != 0);
                let mut job = templates[kind].clone();
                job.job_name = format!("job-{i}");
                job.quota_share_name = Some(["QS1", "QS2", "QS3"][i % 3].into());
                job.client_token = Some(format!("rolling-{i}"));
                let submitted = submit_retrying(&client, &job).await;
                done.push((job.job_name.clone(), kind, submitted));
                i += 1;
                tokio::time::sleep(CADENCE).await;
            }
            done
        })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;

    // Each service in turn: the standby scheduler before the leader, each
    // executor before its node's checkpoint service.
    let order = [
        "admission",
        "admission-2",
        "scheduler-2",
        "scheduler-1",
        "node-1",
        "checkpoint-node-1",
        "node-2",
        "checkpoint-node-2",
    ];
    let mut figures = Vec::new();
    for name in order {
        let down_from = Instant::now();
        let Some(took) = stack.stop_within(name, "TERM", 120) else {
            panic!(
                "{name} did not stop by itself within 120 s of SIGTERM\n{}",
                stack.log_of(name)
            );
        };
        assert_eq!(
            stack.last_exit_code(name),
            Some(0),
            "{name} stops cleanly on SIGTERM\n{}",
            stack.log_of(name)
        );
        tokio::time::sleep(DOWN).await;
        stack.restart(name);
        let ready = wait_ready(&stack, name).await;
        figures.push((name, down_from, Instant::now(), took, ready));
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let submitted = submitter.await.expect("the submitter");

    println!(
        "rolling upgrade: service, stop (SIGTERM to exit), start to ready, submits accepted while it was out"
    );
    for (name, from, to, took, ready) in &figures {
        let during = submitted
            .iter()
            .filter(|(_, _, s)| s.at >= *from && s.at + s.waited <= *to)
            .count();
        println!(
            "  {name:<18} {:>6.2} s  {:>6.2} s  {during:>3}",
            took.as_secs_f64(),
            ready.as_secs_f64()
        );
        // The user kept submitting while each service was out: with two
        // admission replicas, a submit is answered by the other one.
        assert!(
            during >= 1,
            "no submit was accepted while {name} was replaced"
        );
    }
    let longest = submitted
        .iter()
        .map(|(_, _, s)| s.waited)
        .max()
        .unwrap_or_default();
    let retried = submitted.iter().filter(|(_, _, s)| s.retries > 0).count();
    println!(
        "  {} submits; {} needed a retry; the longest took {:.2} s (bound {} s)",
        submitted.len(),
        retried,
        longest.as_secs_f64(),
        REFUSAL_BOUND.as_secs()
    );
    assert!(
        longest <= REFUSAL_BOUND,
        "a submit went unaccepted for {longest:?}"
    );

    // No job lost: every accepted submit is a job that succeeds, each
    // client token one job; none ran twice at once or succeeded twice.
    let mut ids: Vec<&String> = submitted.iter().map(|(_, _, s)| &s.job_id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), submitted.len(), "one job per client token");
    let mut resumed = 0;
    for (name, kind, s) in &submitted {
        let j = stack.wait_final(&s.job_id, 300).await;
        assert_eq!(j.status, "SUCCEEDED", "{name}: {j:#?}\n{}", stack.logs());
        let succeeded = j
            .attempts
            .iter()
            .filter(|a| a.outcome.as_deref() == Some("SUCCEEDED"))
            .count();
        assert_eq!(succeeded, 1, "{name} succeeded once: {j:#?}");
        let last = j.attempts.last().expect("an attempt");
        let node = last.executor_id.clone().unwrap_or_default();
        let out = stack.attempt_stdout(&node, &s.job_id, last.attempt);
        assert_eq!(
            digest_in(&out).as_deref(),
            Some(digests[*kind].as_str()),
            "{name}: the digest of an uninterrupted run; output:\n{out}"
        );
        if j.attempts.len() > 1 {
            resumed += 1;
        }
        assert_attempts_one_after_another(&stack, name, &s.job_id, &j);
    }
    println!("  {resumed} jobs were stopped by a draining executor and resumed");
}
