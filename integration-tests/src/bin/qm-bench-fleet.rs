//! `make bench-fleet`: Quartermaster at fleet scale, on real servers.
//!
//! - **fleet**: `QM_BENCH_EXECUTORS` (default 100) executor processes, each
//!   with its own NATS identity, connection and heartbeats, offering
//!   `QM_BENCH_SLOTS` (default 8) instances of one of 5 instance types; 20
//!   quota shares (4 per type, LEND_AND_BORROW) share them.
//! - **backlog**: `QM_BENCH_BACKLOG` (default 100,000) jobs (`true`) are
//!   submitted before the executors start, then drained: jobs/s from the
//!   first placement to the last SUCCEEDED.
//! - **steady**: `QM_BENCH_RATE` (default 500) jobs/s for
//!   `QM_BENCH_STEADY_SECS` (default 20): submit->RUNNING p50/p99, split
//!   into where the time goes.
//! - **heartbeats**: the scheduler's CPU per heartbeat while idle.
//! - **history and takeover**: jobs run until `QM_BENCH_HISTORY` (default
//!   1,000,000; 0 skips) have finished, then the leader is killed (-9) and
//!   the time until the standby places the next job is measured, with the
//!   standby's rebuild time and both schedulers' memory.
//!
//! CPU (user+system seconds) and memory (RSS) of every service are read
//! from /proc after each phase, and the messages each stream stored
//! (log + events + KV a job, the issue 34 yardstick; archive, audit and
//! snapshots beside it). `QM_BENCH_BATCH_REPORTS=0` runs the executors
//! without `batchReports`; `QM_BENCH_PERF_DIR=dir` records the leader, one
//! executor and NATS with `perf` during the steady phase and renders flame
//! graphs there (perf and inferno on PATH).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use qm_integration_tests::bench::{
    env_or, finished, record, report_latency, submit, wait_done, Timelines,
};
use qm_integration_tests::stack::{start_nats_for, Auth, Stack};
use qm_wire::messages::SubmitServiceJob;

const TYPES: usize = 5;
const SHARES: usize = 20;

fn type_name(t: usize) -> String {
    format!("cpu.t{t}")
}

fn share_name(s: usize) -> String {
    format!("s{s:02}")
}

/// 20 shares, 4 per type, each entitled to a quarter of its type's fleet
/// and lending and borrowing the rest.
fn queue_yaml(per_type: u32) -> String {
    let mut y = String::from("jobQueue: {jobQueueName: fleet}\nquotaShares:\n");
    for s in 0..SHARES {
        y.push_str(&format!(
            "  - quotaShareName: {}\n    capacityLimits: [{{capacityUnit: {}, maxCapacity: {}}}]\n    resourceSharingConfiguration: {{strategy: LEND_AND_BORROW, borrowLimit: 100}}\n",
            share_name(s),
            type_name(s % TYPES),
            (per_type / 4).max(1)
        ));
    }
    y
}

fn tenancy(executors: usize) -> String {
    let mut y = String::from(
        "teams:\n  bench:\n    shares: [fleet/*]\n    users: [bencher]\nadmins: [platform]\nservices:\n  admission: [admission]\n  scheduler: [scheduler]\n  executors:\n",
    );
    for i in 0..executors {
        y.push_str(&format!("    {0}: {{executors: [{0}]}}\n", executor_id(i)));
    }
    y
}

fn executor_id(i: usize) -> String {
    format!("fleet-{i:03}")
}

fn job(i: usize) -> SubmitServiceJob {
    let s = i % SHARES;
    SubmitServiceJob {
        job_name: format!("j{i}"),
        job_queue: "fleet".into(),
        quota_share_name: Some(share_name(s)),
        instance_type: type_name(s % TYPES),
        command: vec!["true".into()],
        client_token: Some(format!("fleet-{i}")),
        ..Default::default()
    }
}

/// CPU seconds (user + system) and resident memory of a process.
fn usage(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some((ticks as f64 / 100.0, rss_kb * 1024))
}

/// CPU and memory of each service (executors summed), by name.
struct Usage(BTreeMap<String, (f64, u64)>);

impl Usage {
    fn read(stack: &Stack, names: &[String]) -> Usage {
        let mut out = BTreeMap::new();
        for name in names {
            let group = if name.starts_with("fleet-") {
                "executors (all)".to_string()
            } else {
                name.clone()
            };
            if let Some((cpu, rss)) = stack.pid(name).and_then(usage) {
                let e = out.entry(group).or_insert((0.0, 0));
                e.0 += cpu;
                e.1 += rss;
            }
        }
        Usage(out)
    }

    fn report(&self, before: &Usage, secs: f64) {
        println!(
            "{:<22} {:>12} {:>10} {:>12}",
            "service", "CPU s", "CPU %", "RSS MiB"
        );
        for (name, (cpu, rss)) in &self.0 {
            let spent = cpu - before.0.get(name).map_or(0.0, |b| b.0);
            println!(
                "{name:<22} {spent:>12.1} {:>9.0}% {:>12.1}",
                100.0 * spent / secs.max(0.001),
                *rss as f64 / (1024.0 * 1024.0)
            );
        }
    }
}

/// Submits jobs `range` with `concurrency` in flight; returns jobs/s.
async fn submit_all(
    stack: &Stack,
    range: std::ops::Range<usize>,
    concurrency: usize,
    timelines: &Timelines,
) -> f64 {
    let started = Instant::now();
    let n = range.len();
    let sem = Arc::new(tokio::sync::Semaphore::new(concurrency));
    let mut tasks = Vec::with_capacity(n);
    for i in range {
        let permit = Arc::clone(&sem).acquire_owned().await.expect("semaphore");
        let (c, t) = (stack.client.clone(), Arc::clone(timelines));
        tasks.push(tokio::spawn(async move {
            submit(&c, &job(i), &t).await;
            drop(permit);
        }));
        if i % 10_000 == 0 && i > 0 {
            eprintln!("bench: {i} submitted");
        }
    }
    for t in tasks {
        t.await.expect("submit task");
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// The streams whose stored messages are counted: (stream, what it is).
/// "log + events + KV" is the yardstick; the archive, the audit
/// copy and the snapshots are shown beside it.
const STREAMS: [(&str, &str); 8] = [
    ("QM_LOG", "log"),
    ("QM_EVENTS", "events"),
    ("KV_qm_client_tokens", "KV"),
    ("KV_qm_config", "KV"),
    ("KV_qm_leader", "KV"),
    ("QM_ARCHIVE", "archive"),
    ("QM_AUDIT", "audit"),
    ("OBJ_qm_snapshots", "snapshots"),
];

/// Messages each stream has ever stored (its last sequence: purges and
/// truncation do not lower it), read as admission (which created them).
struct Stored(BTreeMap<&'static str, u64>);

impl Stored {
    async fn read(js: &async_nats::jetstream::Context) -> Stored {
        let mut out = BTreeMap::new();
        for (name, _) in STREAMS {
            if let Ok(mut stream) = js.get_stream(name).await {
                if let Ok(info) = stream.info().await {
                    out.insert(name, info.state.last_sequence);
                }
            }
        }
        Stored(out)
    }

    /// Stored messages a job since `before`, by kind, the yardstick first.
    fn report(&self, before: &Stored, jobs: usize) {
        let mut by_kind: BTreeMap<&str, u64> = BTreeMap::new();
        for (name, kind) in STREAMS {
            let count = |s: &Stored| s.0.get(name).copied().unwrap_or(0);
            let n = count(self).saturating_sub(count(before));
            *by_kind.entry(kind).or_default() += n;
        }
        let per = |n: u64| n as f64 / jobs.max(1) as f64;
        let yardstick = ["log", "events", "KV"]
            .iter()
            .map(|k| by_kind.get(k).copied().unwrap_or(0))
            .sum::<u64>();
        let detail: Vec<String> = by_kind
            .iter()
            .map(|(k, n)| format!("{k} {:.2}", per(*n)))
            .collect();
        println!(
            "stored messages a job           {:>8.2} (log + events + KV; by stream: {})",
            per(yardstick),
            detail.join(", ")
        );
    }
}

/// `perf record` of one process (call graphs from DWARF, 49 Hz) while the
/// steady phase runs, when `QM_BENCH_PERF_DIR` is set: the folded stacks
/// and a flame graph (inferno) of each go there.
struct Profile {
    runs: Vec<(String, std::process::Child)>,
    dir: std::path::PathBuf,
}

impl Profile {
    fn start(dir: &str, targets: &[(String, u32)]) -> Profile {
        let dir = std::path::PathBuf::from(dir);
        let _ = std::fs::create_dir_all(&dir);
        let mut runs = Vec::new();
        for (name, pid) in targets {
            let data = dir.join(format!("{name}.perf.data"));
            let child = std::process::Command::new("perf")
                .args(["record", "-F", "49", "--call-graph", "dwarf,16384", "-o"])
                .arg(&data)
                .args(["-p", &pid.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn();
            match child {
                Ok(c) => runs.push((name.clone(), c)),
                Err(e) => eprintln!("bench: perf not started for {name}: {e}"),
            }
        }
        Profile { runs, dir }
    }

    /// Stops the recordings and renders each as `<name>.svg`.
    fn finish(self) {
        for (name, mut child) in self.runs {
            let _ = std::process::Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let _ = child.wait();
            let data = self.dir.join(format!("{name}.perf.data"));
            let folded = self.dir.join(format!("{name}.folded"));
            let svg = self.dir.join(format!("{name}.svg"));
            let script = format!(
                "perf script -i {data} 2>/dev/null | inferno-collapse-perf > {folded} && inferno-flamegraph --title '{name}, steady phase' < {folded} > {svg}",
                data = data.display(),
                folded = folded.display(),
                svg = svg.display()
            );
            match std::process::Command::new("sh")
                .args(["-c", &script])
                .status()
            {
                Ok(s) if s.success() => println!("flame graph: {}", svg.display()),
                _ => eprintln!("bench: no flame graph for {name} (needs perf and inferno on PATH)"),
            }
        }
    }
}

/// The host pid of the NATS server in its container.
async fn nats_pid(nats: &qm_integration_tests::stack::Nats) -> Option<u32> {
    let out = tokio::process::Command::new("docker")
        .args(["inspect", "-f", "{{.State.Pid}}", nats.container.id()])
        .output()
        .await
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// A metric's value summed over its series, from a scrape.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter(|l| l[name.len()..].starts_with(['{', ' ']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn scrape(stack: &Stack, name: &str) -> String {
    let port = stack.metrics_port(name);
    let url = format!("http://127.0.0.1:{port}/metrics");
    let out = tokio::process::Command::new("curl")
        .args(["-sf", "--max-time", "5", &url])
        .output()
        .await;
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

#[tokio::main]
async fn main() {
    let executors = env_or("QM_BENCH_EXECUTORS", 100);
    let slots = env_or("QM_BENCH_SLOTS", 8) as u32;
    let backlog = env_or("QM_BENCH_BACKLOG", 100_000);
    let rate = env_or("QM_BENCH_RATE", 500).max(1);
    let steady_secs = env_or("QM_BENCH_STEADY_SECS", 20);
    let history = env_or("QM_BENCH_HISTORY", 1_000_000);
    let concurrency = env_or("QM_BENCH_CONCURRENCY", 128);
    let retention = env_or("QM_BENCH_FINISHED_RETENTION_SECONDS", 60);
    let per_type = executors.div_ceil(TYPES) as u32 * slots;
    println!(
        "== fleet: {executors} executors x {slots} instances, {SHARES} shares over {TYPES} types ({per_type} instances a type)"
    );
    println!("   scheduler: finishedRetentionSeconds {retention}, snapshots every 100000 entries (defaults otherwise)");

    let auth = Auth::generated("fleet", &tenancy(executors));
    let mut nats = start_nats_for(auth).await;
    // The services reach NATS as they would in production: directly, not
    // through Docker's userland port proxy.
    nats.url = nats.direct_url().await;
    let s3 = qm_integration_tests::start_s3().await;
    let mut stack = Stack::new(&nats, &s3, "fleet").await;
    configure(&mut stack, retention);
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(&queue_yaml(per_type)).await;
    stack.wait_leader("scheduler-1").await;
    stack.scheduler("scheduler-2");
    let mut names: Vec<String> = ["admission", "scheduler-1", "scheduler-2"]
        .map(String::from)
        .to_vec();
    let empty = Usage::read(&stack, &names);
    let counter = stack.auth.client(&nats.url, "admission").await;
    let js = async_nats::jetstream::new(counter.nats.clone());
    let stored_before = Stored::read(&js).await;

    // Backlog: submitted while no executor runs.
    let timelines: Timelines = Default::default();
    let mut done = record(&stack.client, "fleet", Arc::clone(&timelines)).await;
    eprintln!("bench: submitting a backlog of {backlog} jobs");
    let submit_rate = submit_all(&stack, 0..backlog, concurrency, &timelines).await;
    let loaded = Usage::read(&stack, &names);
    println!("== backlog: {backlog} jobs RUNNABLE");
    println!("submits stored                 {submit_rate:>8.0} jobs/s ({concurrency} in flight)");
    println!(
        "scheduler memory               {:>8.1} MiB with the backlog, {:.1} MiB empty",
        loaded.0["scheduler-1"].1 as f64 / 1048576.0,
        empty.0["scheduler-1"].1 as f64 / 1048576.0
    );

    // The fleet starts; the backlog drains.
    eprintln!("bench: starting {executors} executors");
    let fleet_started = Instant::now();
    for i in 0..executors {
        let id = executor_id(i);
        stack.executor_alone(&id, "fleet", &type_name(i % TYPES), slots);
        names.push(id);
    }
    let before = Usage::read(&stack, &names);
    wait_done(&mut done, backlog, &stack).await;
    let drain_secs = drain_secs(&finished(&timelines));
    let wall = fleet_started.elapsed().as_secs_f64();
    println!(
        "== drain: {backlog} jobs on {} instances",
        executors as u32 * slots
    );
    println!(
        "first RUNNING -> last SUCCEEDED {:>8.0} jobs/s ({drain_secs:.1} s; {wall:.1} s from starting the executors)",
        backlog as f64 / drain_secs.max(0.001)
    );
    let after = Usage::read(&stack, &names);
    after.report(&before, wall);
    Stored::read(&js).await.report(&stored_before, backlog);
    let sched = scrape(&stack, "scheduler-1").await;
    let passes = metric(&sched, "qm_scheduling_pass_duration_seconds_count");
    let pass_sum = metric(&sched, "qm_scheduling_pass_duration_seconds_sum");
    if passes > 0.0 {
        println!(
            "scheduler passes               {passes:>8.0} (mean {:.2} ms)",
            1000.0 * pass_sum / passes
        );
    }

    // Steady arrival: latency.
    let timelines: Timelines = Default::default();
    let mut done = record(&stack.client, "fleet", Arc::clone(&timelines)).await;
    let steady = rate * steady_secs;
    eprintln!("bench: steady: {steady} jobs at {rate} jobs/s");
    let mut pace = tokio::time::interval(Duration::from_micros(1_000_000 / rate as u64));
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let profile = start_profile(&stack, &nats).await;
    let started = Instant::now();
    let before = Usage::read(&stack, &names);
    let stored_before = Stored::read(&js).await;
    let mut tasks = Vec::new();
    for i in backlog..backlog + steady {
        pace.tick().await;
        let (c, t) = (stack.client.clone(), Arc::clone(&timelines));
        tasks.push(tokio::spawn(async move { submit(&c, &job(i), &t).await }));
    }
    for t in tasks {
        t.await.expect("submit task");
    }
    let offered = steady as f64 / started.elapsed().as_secs_f64();
    wait_done(&mut done, steady, &stack).await;
    if let Some(p) = profile {
        p.finish();
    }
    println!("== steady: {steady} jobs at {offered:.0} jobs/s offered");
    report_latency(&finished(&timelines));
    Usage::read(&stack, &names).report(&before, started.elapsed().as_secs_f64());
    Stored::read(&js).await.report(&stored_before, steady);

    idle_heartbeats(&stack, &names).await;

    // History, then takeover.
    let run = run_history(&stack, backlog + steady, history, concurrency).await;
    let leader = Usage::read(&stack, &names);
    println!("== takeover after {run} finished jobs of history");
    println!(
        "leader memory before           {:>8.1} MiB (empty at start: {:.1} MiB)",
        leader.0["scheduler-1"].1 as f64 / 1048576.0,
        empty.0["scheduler-1"].1 as f64 / 1048576.0
    );
    let timelines: Timelines = Default::default();
    let mut done = record(&stack.client, "fleet", Arc::clone(&timelines)).await;
    let killed = Instant::now();
    let killed_ms = qm_service::now_ms();
    stack.signal("scheduler-1", "KILL");
    let (c, t) = (stack.client.clone(), Arc::clone(&timelines));
    let probe = tokio::spawn(async move { submit(&c, &job(usize::MAX / 2), &t).await });
    probe.await.expect("probe submitted");
    wait_done(&mut done, 1, &stack).await;
    let line = finished(&timelines).pop().expect("the probe's timeline");
    let placed = line.at.get("SCHEDULED").copied().unwrap_or(0);
    println!(
        "kill -9 -> next placement      {:>8.0} ms ({:.1} s wall to SUCCEEDED)",
        placed.saturating_sub(killed_ms) as f64,
        killed.elapsed().as_secs_f64()
    );
    let log = stack.log_of("scheduler-2");
    print_takeover_log(&log);
    let now = Usage::read(&stack, &names);
    let mib = |b: u64| b as f64 / 1048576.0;
    let new_leader = mib(now.0["scheduler-2"].1);
    println!(
        "new leader memory              {:>8.1} MiB (old leader before the kill: {:.1} MiB; empty: {:.1} MiB)",
        new_leader,
        mib(leader.0["scheduler-1"].1),
        mib(empty.0["scheduler-1"].1)
    );
    // The target's yardstick: an empty scheduler plus the jobs the state
    // holds, each at what a job cost in the backlog phase (measured above).
    let held = held_jobs(&log);
    if let Some(jobs) = held {
        let per_job = (mib(loaded.0["scheduler-1"].1) - mib(empty.0["scheduler-1"].1))
            / backlog.max(1) as f64;
        let yardstick = mib(empty.0["scheduler-1"].1) + jobs * per_job;
        println!(
            "  against empty + held jobs    {:>8.2}x ({new_leader:.1} MiB vs {yardstick:.1} MiB: {jobs:.0} jobs held (finished in the last {retention} s, or live) at {:.2} KiB each)",
            new_leader / yardstick,
            per_job * 1024.0
        );
    }
    stack.stop_all();
}

/// The services' settings: the scheduler's retention and log level, the
/// executors' batched reports unless QM_BENCH_BATCH_REPORTS=0.
fn configure(stack: &mut Stack, retention: usize) {
    stack.scheduler_env = vec![
        (
            "QM_SCHEDULER_FINISHED_RETENTION_SECONDS".into(),
            retention.to_string(),
        ),
        ("RUST_LOG".into(), "warn,qm_scheduler=info".into()),
    ];
    stack.executor_env = vec![("RUST_LOG".into(), "warn".into())];
    // Batched reports (executor `batchReports`) unless QM_BENCH_BATCH_REPORTS=0
    // (the services of a release before it ignore the variable).
    if env_or("QM_BENCH_BATCH_REPORTS", 1) == 1 {
        stack
            .executor_env
            .push(("QM_EXECUTOR_BATCH_REPORTS".into(), "true".into()));
    }
    stack.admission_env = vec![("RUST_LOG".into(), "warn".into())];
}

/// From the first RUNNING to the last SUCCEEDED of `lines`, in seconds.
fn drain_secs(lines: &[qm_integration_tests::bench::Timeline]) -> f64 {
    let first_running = lines
        .iter()
        .filter_map(|l| l.at.get("RUNNING").copied())
        .min()
        .unwrap_or(0);
    let last_succeeded = lines
        .iter()
        .filter_map(|l| l.at.get("SUCCEEDED").copied())
        .max()
        .unwrap_or(0);
    (last_succeeded.saturating_sub(first_running)) as f64 / 1000.0
}

/// A perf profile of the scheduler, the first executor and NATS, where
/// QM_BENCH_PERF_DIR names a folder.
async fn start_profile(stack: &Stack, nats: &qm_integration_tests::stack::Nats) -> Option<Profile> {
    match std::env::var("QM_BENCH_PERF_DIR") {
        Ok(dir) if !dir.is_empty() => {
            let mut targets = Vec::new();
            for name in ["scheduler-1", executor_id(0).as_str()] {
                if let Some(pid) = stack.pid(name) {
                    targets.push((name.to_string(), pid));
                }
            }
            if let Some(pid) = nats_pid(nats).await {
                targets.push(("nats-server".to_string(), pid));
            }
            Some(Profile::start(&dir, &targets))
        }
        _ => None,
    }
}

/// Heartbeats while idle: how many in 10 s, and the scheduler's CPU.
async fn idle_heartbeats(stack: &Stack, names: &[String]) {
    let hb = |t: &str| metric(t, "qm_heartbeats_total");
    let (b, t0) = (Usage::read(stack, names), Instant::now());
    let hb0 = hb(&scrape(stack, "scheduler-1").await);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let hb1 = hb(&scrape(stack, "scheduler-1").await);
    let a = Usage::read(stack, names);
    let cpu = a.0["scheduler-1"].0 - b.0["scheduler-1"].0;
    let beats = hb1 - hb0;
    println!(
        "== idle: {beats:.0} heartbeats in {:.0} s; scheduler CPU {:.1}% ({:.0} µs a heartbeat, passes and resends included)",
        t0.elapsed().as_secs_f64(),
        100.0 * cpu / t0.elapsed().as_secs_f64(),
        1e6 * cpu / beats.max(1.0)
    );
}

/// Runs jobs (100,000 at a time) until `history` have finished; returns
/// how many have.
async fn run_history(stack: &Stack, first: usize, history: usize, concurrency: usize) -> usize {
    let mut run = first;
    if history > run {
        eprintln!("bench: running jobs until {history} have finished");
        let started = Instant::now();
        while run < history {
            let n = (history - run).min(100_000);
            let timelines: Timelines = Default::default();
            let mut done = record(&stack.client, "fleet", Arc::clone(&timelines)).await;
            submit_all(stack, run..run + n, concurrency, &timelines).await;
            wait_done(&mut done, n, stack).await;
            run += n;
            eprintln!(
                "bench: {run} finished ({:.0} jobs/s overall)",
                (run - first) as f64 / started.elapsed().as_secs_f64()
            );
        }
    }
    run
}

/// The new leader's log lines about loading the state and taking over.
fn print_takeover_log(log: &str) {
    for line in log.lines().filter(|l| {
        l.contains("snapshot loaded")
            || l.contains("state rebuilt")
            || l.contains("became the")
            || l.contains("took over")
            || l.contains("connection is gone")
            || l.contains("following the log")
    }) {
        println!("  scheduler-2: {}", strip_ansi(line));
    }
}

/// How many jobs the new leader's state held when it took over (its log
/// says).
fn held_jobs(log: &str) -> Option<f64> {
    log.lines()
        .map(strip_ansi)
        .filter(|l| l.contains("took over") || l.contains("state rebuilt"))
        .filter_map(|l| l.split("jobs=").nth(1).map(str::to_string))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
        .next_back()
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut skipping = false;
    for c in s.chars() {
        match (skipping, c) {
            (false, '\u{1b}') => skipping = true,
            (true, 'm') => skipping = false,
            (true, _) => {}
            (false, c) => out.push(c),
        }
    }
    out
}
