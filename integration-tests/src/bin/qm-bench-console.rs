//! `make bench-console`: how long the web console takes to answer each of
//! its pages, with an empty queue (the baseline, in the same run) and with
//! `QM_BENCH_JOBS` (default 100,000) jobs waiting in it; from the console's
//! own server-time histogram (`qm_console_request_duration_seconds`: from
//! the request read to the answer written, its NATS calls included), and
//! as a client on the same host sees it (a TLS connection per request).
//!
//! The queue is the three-share story's: three instances, each share's
//! own running (QS1 also borrows QS2's), and the backlog spread over the
//! shares, each job expecting to run ten minutes (so a waiting job's
//! projected start is computed, not unknown).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qm_integration_tests::bench::{env_or, percentile};
use qm_integration_tests::browser::Console;
use qm_integration_tests::stack::running;
use qm_integration_tests::story::{sleeper, QUEUE_YAML};
use qm_wire::messages::SubmitServiceJobResponse;
use qm_wire::subjects::Operation;

/// Mean server seconds per route from a metrics scrape: (sum, count).
fn server_times(text: &str) -> BTreeMap<String, (f64, f64)> {
    let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        for (suffix, sum) in [("_sum{", true), ("_count{", false)] {
            let prefix = format!("qm_console_request_duration_seconds{suffix}");
            let Some(rest) = line.strip_prefix(&prefix) else {
                continue;
            };
            let Some(route) = rest
                .split("route=\"")
                .nth(1)
                .and_then(|r| r.split('"').next())
            else {
                continue;
            };
            let value: f64 = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            let e = out.entry(route.to_string()).or_default();
            if sum {
                e.0 += value;
            } else {
                e.1 += value;
            }
        }
    }
    out
}

async fn scrape(port: u16) -> String {
    qm_integration_tests::observe::get(port, "/metrics", None)
        .await
        .map(|(_, body)| body)
        .unwrap_or_default()
}

/// Each page `rounds` times: (route, client ms per request), server means
/// from the console's own histogram.
async fn measure(
    console: &Console,
    metrics_port: u16,
    cookie: &str,
    pages: &[(&str, String)],
    rounds: usize,
) -> Vec<(String, f64, u64, u64)> {
    let before = server_times(&scrape(metrics_port).await);
    let mut client: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for _ in 0..rounds {
        for (route, path) in pages {
            let started = Instant::now();
            let a = console.get(cookie, path).await;
            assert_eq!(a.status, 200, "{path}: {}", a.body);
            client
                .entry(route)
                .or_default()
                .push(started.elapsed().as_micros() as u64);
        }
    }
    let after = server_times(&scrape(metrics_port).await);
    pages
        .iter()
        .map(|(route, _)| {
            let (s1, c1) = after.get(*route).copied().unwrap_or_default();
            let (s0, c0) = before.get(*route).copied().unwrap_or_default();
            let mean_ms = (s1 - s0) / (c1 - c0).max(1.0) * 1000.0;
            let mut times = client.get(route).cloned().unwrap_or_default();
            times.sort_unstable();
            (
                route.to_string(),
                mean_ms,
                percentile(&times, 0.5),
                percentile(&times, 0.95),
            )
        })
        .collect()
}

#[tokio::main]
async fn main() {
    let jobs = env_or("QM_BENCH_JOBS", 100_000);
    let rounds = env_or("QM_BENCH_ROUNDS", 20);
    let concurrency = env_or("QM_BENCH_CONCURRENCY", 128);
    println!("== console page times: an empty queue, then {jobs} jobs waiting ({rounds} requests a page)");
    let (_nats, _s3, mut stack) = running("bench-console", QUEUE_YAML).await;
    stack.scheduler_env = vec![("RUST_LOG".into(), "warn".into())];
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let console = Console::start(&mut stack, "console", &[]).await;
    let metrics_port = stack.metrics_port("console");
    let cookie = console.sign_in("platform").await;
    // Running: QS1's own and one borrowed from QS2, QS3's own.
    let mut running_ids = Vec::new();
    for (name, share) in [("own-1", "QS1"), ("borrow-1", "QS1"), ("own-3", "QS3")] {
        running_ids.push(stack.submit(&sleeper(name, share, 3600)).await);
    }
    for id in &running_ids {
        stack
            .wait_for(id, 60, "RUNNING", |j| j.status == "RUNNING")
            .await;
    }
    let first_waiting = stack.submit(&sleeper("first-waiting", "QS3", 600)).await;
    let pages = |waiting: &str| -> Vec<(&'static str, String)> {
        vec![
            ("queues", "/queues".to_string()),
            ("queue", "/queues/training".to_string()),
            ("share", "/queues/training/shares/QS1".to_string()),
            ("job", format!("/jobs/{waiting}")),
            ("flows", "/queues/training/flows".to_string()),
            ("audit", "/audit?queue=training".to_string()),
            ("what-if", "/queues/training/what-if".to_string()),
        ]
    };
    let empty = measure(
        &console,
        metrics_port,
        &cookie,
        &pages(&first_waiting),
        rounds,
    )
    .await;

    eprintln!("bench: submitting {jobs} jobs");
    let started = Instant::now();
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = Vec::with_capacity(jobs);
    let shares = ["QS1", "QS2", "QS3"];
    for i in 0..jobs {
        let permit = Arc::clone(&sem).acquire_owned().await.expect("semaphore");
        let client = stack.client.clone();
        let job = sleeper(&format!("w{i}"), shares[i % 3], 600);
        tasks.push(tokio::spawn(async move {
            let r: Result<SubmitServiceJobResponse, _> =
                client.call(Operation::SubmitServiceJob, &job).await;
            drop(permit);
            r.map(|r| r.job_id)
        }));
        if i % 10_000 == 0 && i > 0 {
            eprintln!("bench: {i} submitted");
        }
    }
    let mut last = String::new();
    for t in tasks {
        last = t.await.expect("task").expect("submitted");
    }
    println!(
        "submitted {jobs} jobs in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // Every job has been looked at by a pass (its reason is not QUEUED).
    stack
        .wait_for(&last, 300, "a waiting reason", |j| {
            !j.status_reason.starts_with("QUEUED")
        })
        .await;
    // ...and the audit copier has caught up with the burst of submits
    // (a steady queue, not the moment after 100,000 writes).
    tokio::time::sleep(Duration::from_secs(15)).await;
    let full_front = measure(
        &console,
        metrics_port,
        &cookie,
        &pages(&first_waiting),
        rounds,
    )
    .await;
    let full_back = measure(
        &console,
        metrics_port,
        &cookie,
        &[("job", format!("/jobs/{last}"))],
        rounds,
    )
    .await;

    println!(
        "{:<10} {:>14} {:>14} {:>8} {:>16} {:>16}",
        "page", "empty srv ms", "full srv ms", "ratio", "full client p50", "full client p95"
    );
    for ((route, e, _, _), (_, f, p50, p95)) in empty.iter().zip(&full_front) {
        println!(
            "{route:<10} {e:>14.1} {f:>14.1} {:>7.1}x {:>13.1} ms {:>13.1} ms",
            f / e.max(0.001),
            *p50 as f64 / 1000.0,
            *p95 as f64 / 1000.0
        );
    }
    for (_, f, p50, p95) in &full_back {
        println!(
            "{:<10} {:>14} {f:>14.1} {:>8} {:>13.1} ms {:>13.1} ms",
            "job (back)",
            "",
            "",
            *p50 as f64 / 1000.0,
            *p95 as f64 / 1000.0
        );
    }
    println!("(job: the first waiting job of QS3, its projected start replayed; job (back): the last of the {jobs})");
    stack.stop_all();
}
