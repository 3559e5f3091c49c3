//! `make bench-services`: speed of the whole system on real servers. An
//! executor offers 1,000 instances; jobs run `true` (exit at once).
//!
//! Two phases:
//! - **latency**: `QM_BENCH_LATENCY_JOBS` (default 400) submits at a steady
//!   `QM_BENCH_RATE` (default 100 jobs/s, well under capacity), each
//!   submit-to-RUNNING latency measured and split into where the time goes,
//!   from the timestamps JetStream stored with each log entry (the `at` of
//!   the job events);
//! - **throughput**: `QM_BENCH_JOBS` (default 3000) jobs, with
//!   `QM_BENCH_CONCURRENCY` (default 64) submits in flight: jobs/s from the
//!   first submit to the last SUCCEEDED, and the latency under that load.

use std::sync::Arc;
use std::time::{Duration, Instant};

use qm_integration_tests::bench::{
    env_or, finished, record, report_latency, submit, wait_done, Timelines,
};
use qm_integration_tests::stack::running;
use qm_wire::messages::SubmitServiceJob;

const QUEUE: &str = "jobQueue: {jobQueueName: bench}
quotaShares:
  - quotaShareName: team
    capacityLimits: [{capacityUnit: cpu.small, maxCapacity: 1000}]
    resourceSharingConfiguration: {strategy: RESERVE}
";

#[tokio::main]
async fn main() {
    let latency_jobs = env_or("QM_BENCH_LATENCY_JOBS", 400);
    let rate = env_or("QM_BENCH_RATE", 100).max(1);
    let jobs = env_or("QM_BENCH_JOBS", 3000);
    let concurrency = env_or("QM_BENCH_CONCURRENCY", 64);
    eprintln!("bench: starting NATS, S3 and the services");
    let (_nats, _s3, mut stack) = running("bench", QUEUE).await;
    stack.executor("node-1", "bench", "cpu.small", 1000);
    let client = stack.client.clone();
    // Warm up: one job end to end (executor registered, caches filled).
    let warm = stack.submit(&job("warm-up")).await;
    stack
        .wait_for(&warm, 60, "SUCCEEDED", |j| j.status == "SUCCEEDED")
        .await;

    // Phase 1: latency at a steady rate the system sustains.
    let timelines: Timelines = Default::default();
    let mut done = record(&client, "bench", Arc::clone(&timelines)).await;
    eprintln!("bench: latency: {latency_jobs} jobs at {rate} jobs/s");
    let mut pace = tokio::time::interval(Duration::from_micros(1_000_000 / rate as u64));
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = Vec::new();
    for i in 0..latency_jobs {
        pace.tick().await;
        let (c, t) = (client.clone(), Arc::clone(&timelines));
        tasks.push(tokio::spawn(async move {
            submit(&c, &job(&format!("l{i}")), &t).await
        }));
    }
    for t in tasks {
        t.await.expect("submit task");
    }
    wait_done(&mut done, latency_jobs, &stack).await;
    let lines = finished(&timelines);
    println!("== latency: {latency_jobs} jobs submitted at a steady {rate} jobs/s");
    report_latency(&lines);

    // Phase 2: throughput, submits as fast as `concurrency` allows.
    let timelines: Timelines = Default::default();
    let mut done = record(&client, "bench", Arc::clone(&timelines)).await;
    eprintln!("bench: throughput: {jobs} jobs ({concurrency} in flight)");
    let started = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = Vec::new();
    for i in 0..jobs {
        let permit = Arc::clone(&sem).acquire_owned().await.expect("semaphore");
        let (c, t) = (client.clone(), Arc::clone(&timelines));
        tasks.push(tokio::spawn(async move {
            submit(&c, &job(&format!("j{i}")), &t).await;
            drop(permit);
        }));
    }
    for t in tasks {
        t.await.expect("submit task");
    }
    let submit_secs = started.elapsed().as_secs_f64();
    wait_done(&mut done, jobs, &stack).await;
    let lines = finished(&timelines);
    let last = lines
        .iter()
        .filter_map(|l| l.succeeded)
        .max()
        .unwrap_or(started);
    let total = last.duration_since(started).as_secs_f64();
    println!("== throughput: {jobs} jobs, {concurrency} submits in flight");
    println!(
        "submits stored                                           {:.0} jobs/s ({submit_secs:.2} s for all)",
        jobs as f64 / submit_secs
    );
    println!(
        "submit -> SUCCEEDED                                      {:.0} jobs/s ({total:.2} s from the first submit to the last SUCCEEDED)",
        jobs as f64 / total
    );
    report_latency(&lines);
    stack.stop_all();
}

fn job(name: &str) -> SubmitServiceJob {
    SubmitServiceJob {
        job_name: name.into(),
        job_queue: "bench".into(),
        quota_share_name: Some("team".into()),
        instance_type: "cpu.small".into(),
        command: vec!["true".into()],
        ..Default::default()
    }
}
