//! What the services benchmarks share: following each job's events into
//! a timeline, submitting with timing, waiting for the jobs to finish, and
//! reporting latencies split into where the time goes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use qm_service::client::Client;
use qm_service::now_ms;
use qm_wire::messages::{SubmitServiceJob, SubmitServiceJobResponse};
use qm_wire::subjects::Operation;

use crate::stack::Stack;

pub fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The nearest-rank percentile of `sorted` (`qm_core::stats`, the rule
/// the simulator and the evaluation use); 0 for no values.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    qm_core::stats::nearest_rank(sorted, p).unwrap_or(0)
}

/// What was seen of one job, in milliseconds since the Unix epoch.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// The submit request left the client.
    pub sent: u64,
    /// The reply (the submit was stored) came back.
    pub replied: u64,
    /// `at` of each status the job's events reported (stored times).
    pub at: HashMap<String, u64>,
    /// The RUNNING event reached the client.
    pub running_seen: Option<u64>,
    pub succeeded: Option<Instant>,
}

pub type Timelines = Arc<Mutex<HashMap<String, Timeline>>>;

/// Records every job event of the bench queue into `timelines`.
/// Records every job event of `queue` into `timelines`; the receiver gets
/// one message per job that SUCCEEDED.
pub async fn record(
    client: &Client,
    queue: &str,
    timelines: Timelines,
) -> tokio::sync::mpsc::UnboundedReceiver<()> {
    let mut events = client
        .nats
        .subscribe(format!("qm.v1.events.job.{queue}.>"))
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

/// Submits `job`, noting when the request left and the reply came back.
/// A submit that times out is sent again, as `qm` and the SDKs do, when the
/// job has a client token (the retry then returns the job the first try
/// stored); the time counts from the first try.
pub async fn submit(client: &Client, job: &SubmitServiceJob, timelines: &Timelines) {
    let sent = now_ms();
    let mut tries = 0;
    let r: SubmitServiceJobResponse = loop {
        tries += 1;
        match client.call(Operation::SubmitServiceJob, job).await {
            Ok(r) => break r,
            Err(qm_service::client::CallError::Transport(e))
                if job.client_token.is_some() && tries < 5 =>
            {
                eprintln!(
                    "bench: submit of {} not answered ({e}); sending it again",
                    job.job_name
                );
            }
            Err(e) => panic!("submit: {e:?}"),
        }
    };
    let replied = now_ms();
    let mut t = timelines.lock().expect("lock");
    let line = t.entry(r.job_id).or_default();
    line.sent = sent;
    line.replied = replied;
}

pub async fn wait_done(
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
pub fn stats(lines: &[Timeline], f: impl Fn(&Timeline) -> Option<u64>) -> String {
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

pub fn at(line: &Timeline, status: &str) -> Option<u64> {
    line.at.get(status).copied()
}

pub fn span(from: Option<u64>, to: Option<u64>) -> Option<u64> {
    Some(to?.saturating_sub(from?))
}

/// One span of a job's timeline, in milliseconds.
pub type Measure = fn(&Timeline) -> Option<u64>;

pub fn report_latency(lines: &[Timeline]) {
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

pub fn finished(timelines: &Timelines) -> Vec<Timeline> {
    timelines
        .lock()
        .expect("lock")
        .values()
        .filter(|l| l.sent > 0)
        .cloned()
        .collect()
}
