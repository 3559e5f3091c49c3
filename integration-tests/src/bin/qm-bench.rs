//! `make bench-services`: throughput of the whole system. An executor offers
//! 1,000 instances; jobs run `true` (exit at once). Measures jobs/s from the
//! first submit to the last SUCCEEDED, and submit-to-RUNNING latency (p50,
//! p99) from the job events. `QM_BENCH_JOBS` (default 3000) jobs,
//! `QM_BENCH_CONCURRENCY` (default 64) submits in flight.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use qm_integration_tests::stack::{start_nats, Stack};
use qm_integration_tests::start_s3;
use qm_service::now_ms;
use qm_wire::messages::SubmitServiceJob;

const QUEUE: &str = "jobQueue: {jobQueueName: bench}
quotaShares:
  - quotaShareName: team
    capacityLimits: [{capacityUnit: cpu.small, maxCapacity: 1000}]
    resourceSharingConfiguration: {strategy: RESERVE}
";

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

#[tokio::main]
async fn main() {
    let jobs = env_or("QM_BENCH_JOBS", 3000);
    let concurrency = env_or("QM_BENCH_CONCURRENCY", 64);
    eprintln!("bench: starting NATS, S3 and the services");
    let nats = start_nats().await;
    let s3 = start_s3().await;
    let mut stack = Stack::new(&nats, &s3, "bench").await;
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(QUEUE).await;
    stack.executor("node-1", "bench", "cpu.small", 1000);
    let client = stack.client.clone();
    // Warm up: one job end to end (executor registered, caches filled).
    let warm = stack.submit(&job("warm-up")).await;
    stack
        .wait_for(&warm, 60, "SUCCEEDED", |j| j.status == "SUCCEEDED")
        .await;
    let mut events = client
        .nats
        .subscribe("qm.v1.events.job.bench.>")
        .await
        .expect("subscribe");
    let running: Arc<std::sync::Mutex<HashMap<String, u64>>> = Default::default();
    let seen = Arc::clone(&running);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    tokio::spawn(async move {
        while let Some(m) = events.next().await {
            let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap_or_default();
            let id = v["jobId"].as_str().unwrap_or("").to_string();
            match v["to"].as_str() {
                Some("RUNNING") => {
                    if let Ok(mut r) = seen.lock() {
                        r.entry(id).or_insert(now_ms());
                    }
                }
                Some("SUCCEEDED") => {
                    let _ = done_tx.send(Instant::now());
                }
                _ => {}
            }
        }
    });
    eprintln!("bench: submitting {jobs} jobs ({concurrency} in flight)");
    let started = Instant::now();
    let submitted: Arc<std::sync::Mutex<HashMap<String, u64>>> = Default::default();
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = Vec::new();
    for i in 0..jobs {
        let permit = Arc::clone(&sem).acquire_owned().await.expect("semaphore");
        let c = client.clone();
        let submitted = Arc::clone(&submitted);
        tasks.push(tokio::spawn(async move {
            let at = now_ms();
            let r: qm_wire::messages::SubmitServiceJobResponse = c
                .call(
                    qm_wire::subjects::Operation::SubmitServiceJob,
                    &job(&format!("j{i}")),
                )
                .await
                .expect("submit");
            if let Ok(mut s) = submitted.lock() {
                s.insert(r.job_id, at);
            }
            drop(permit);
        }));
    }
    for t in tasks {
        t.await.expect("submit task");
    }
    let submit_secs = started.elapsed().as_secs_f64();
    let mut finished = 0;
    let mut last = started;
    while finished < jobs {
        match tokio::time::timeout(Duration::from_secs(60), done_rx.recv()).await {
            Ok(Some(t)) => {
                finished += 1;
                last = t;
            }
            _ => panic!(
                "only {finished} of {jobs} jobs finished; logs:\n{}",
                stack.logs()
            ),
        }
    }
    let total = last.duration_since(started).as_secs_f64();
    let submitted = submitted.lock().expect("lock").clone();
    let running = running.lock().expect("lock").clone();
    let mut latency: Vec<u64> = submitted
        .iter()
        .filter_map(|(id, at)| running.get(id).map(|r| r.saturating_sub(*at)))
        .collect();
    latency.sort_unstable();
    println!("jobs                      {jobs}");
    println!(
        "submit rate               {:.0} jobs/s ({submit_secs:.2} s for all submits)",
        jobs as f64 / submit_secs
    );
    println!("submit -> SUCCEEDED       {:.0} jobs/s ({total:.2} s from the first submit to the last SUCCEEDED)", jobs as f64 / total);
    println!(
        "submit -> RUNNING latency p50 {} ms, p99 {} ms, max {} ms ({} samples)",
        percentile(&latency, 0.5),
        percentile(&latency, 0.99),
        latency.last().copied().unwrap_or(0),
        latency.len()
    );
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
