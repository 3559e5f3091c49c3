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

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use qm_integration_tests::stack::{running, Stack};
use qm_service::client::Client;
use qm_service::now_ms;
use qm_wire::messages::{SubmitServiceJob, SubmitServiceJobResponse};
use qm_wire::subjects::Operation;

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

/// What was seen of one job, in milliseconds since the Unix epoch.
#[derive(Clone, Debug, Default)]
struct Timeline {
    /// The submit request left the client.
    sent: u64,
    /// The reply (the submit was stored) came back.
    replied: u64,
    /// `at` of each status the job's events reported (stored times).
    at: HashMap<String, u64>,
    /// The RUNNING event reached the client.
    running_seen: Option<u64>,
    succeeded: Option<Instant>,
}

type Timelines = Arc<Mutex<HashMap<String, Timeline>>>;

/// Records every job event of the bench queue into `timelines`.
async fn record(client: &Client, timelines: Timelines) -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let mut events = client
        .nats
        .subscribe("qm.v1.events.job.bench.>")
        .await
        .expect("subscribe");
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(m) = events.next().await {
            let seen = now_ms();
            let v: serde_json::Value = serde_json::from_slice(&m.payload).unwrap_or_default();
            let id = v["jobId"].as_str().unwrap_or("").to_string();
            let to = v["to"].as_str().unwrap_or("").to_string();
            let mut t = timelines.lock().expect("lock");
            let line = t.entry(id).or_default();
            if let Some(at) = v["at"].as_u64() {
                line.at.entry(to.clone()).or_insert(at);
            }
            match to.as_str() {
                "RUNNING" => {
                    line.running_seen.get_or_insert(seen);
                }
                "SUCCEEDED" => {
                    line.succeeded = Some(Instant::now());
                    let _ = done_tx.send(());
                }
                _ => {}
            }
        }
    });
    done_rx
}

async fn submit(client: &Client, name: &str, timelines: &Timelines) {
    let sent = now_ms();
    let r: SubmitServiceJobResponse = client
        .call(Operation::SubmitServiceJob, &job(name))
        .await
        .expect("submit");
    let replied = now_ms();
    let mut t = timelines.lock().expect("lock");
    let line = t.entry(r.job_id).or_default();
    line.sent = sent;
    line.replied = replied;
}

async fn wait_done(
    done: &mut tokio::sync::mpsc::UnboundedReceiver<()>,
    jobs: usize,
    stack: &Stack,
) {
    for finished in 0..jobs {
        if tokio::time::timeout(Duration::from_secs(60), done.recv())
            .await
            .ok()
            .flatten()
            .is_none()
        {
            panic!(
                "only {finished} of {jobs} jobs finished; logs:\n{}",
                stack.logs()
            );
        }
    }
}

/// p50/p99/max of `f` over the timelines where it is defined.
fn stats(lines: &[Timeline], f: impl Fn(&Timeline) -> Option<u64>) -> String {
    let mut v: Vec<u64> = lines.iter().filter_map(f).collect();
    v.sort_unstable();
    format!(
        "p50 {:>5} ms  p99 {:>5} ms  max {:>5} ms  ({} jobs)",
        percentile(&v, 0.5),
        percentile(&v, 0.99),
        v.last().copied().unwrap_or(0),
        v.len()
    )
}

fn at(line: &Timeline, status: &str) -> Option<u64> {
    line.at.get(status).copied()
}

fn span(from: Option<u64>, to: Option<u64>) -> Option<u64> {
    Some(to?.saturating_sub(from?))
}

/// One span of a job's timeline, in milliseconds.
type Measure = fn(&Timeline) -> Option<u64>;

fn report_latency(lines: &[Timeline]) {
    let rows: [(&str, Measure); 6] = [
        ("submit -> RUNNING (seen by the client)", |l| {
            span(Some(l.sent), l.running_seen)
        }),
        ("  request -> stored (admission append)", |l| {
            span(Some(l.sent), at(l, "RUNNABLE"))
        }),
        (
            "  stored -> placed (scheduler pass + decision append)",
            |l| span(at(l, "RUNNABLE"), at(l, "SCHEDULED")),
        ),
        (
            "  placed -> STARTING stored (command, executor, report)",
            |l| span(at(l, "SCHEDULED"), at(l, "STARTING")),
        ),
        ("  STARTING -> RUNNING stored (process spawned)", |l| {
            span(at(l, "STARTING"), at(l, "RUNNING"))
        }),
        ("  RUNNING stored -> event at the client", |l| {
            span(at(l, "RUNNING"), l.running_seen)
        }),
    ];
    for (name, f) in rows {
        println!("{name:<56} {}", stats(lines, f));
    }
}

fn finished(timelines: &Timelines) -> Vec<Timeline> {
    timelines
        .lock()
        .expect("lock")
        .values()
        .filter(|l| l.sent > 0)
        .cloned()
        .collect()
}

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
    let mut done = record(&client, Arc::clone(&timelines)).await;
    eprintln!("bench: latency: {latency_jobs} jobs at {rate} jobs/s");
    let mut pace = tokio::time::interval(Duration::from_micros(1_000_000 / rate as u64));
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut tasks = Vec::new();
    for i in 0..latency_jobs {
        pace.tick().await;
        let (c, t) = (client.clone(), Arc::clone(&timelines));
        tasks.push(tokio::spawn(async move {
            submit(&c, &format!("l{i}"), &t).await
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
    let mut done = record(&client, Arc::clone(&timelines)).await;
    eprintln!("bench: throughput: {jobs} jobs ({concurrency} in flight)");
    let started = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = Vec::new();
    for i in 0..jobs {
        let permit = Arc::clone(&sem).acquire_owned().await.expect("semaphore");
        let (c, t) = (client.clone(), Arc::clone(&timelines));
        tasks.push(tokio::spawn(async move {
            submit(&c, &format!("j{i}"), &t).await;
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
