//! Simulator throughput: `qm simulate` on the 1,000,000-job scenario
//! (`examples/scenarios/bench-1m.yaml`: 2,000 instances of five types, 20
//! shares), with the report reduced to its summary as `--summary` does.
//!
//! Prints wall time, jobs and passes per second and peak memory (VmHWM). As a
//! baseline measured in the same run it first simulates the first 10% of the
//! same workload, so the scaling from 100,000 to 1,000,000 jobs is visible.
//! `QM_BENCH_JOBS=N` runs N jobs instead of 1,000,000;
//! `QM_BENCH_INTERARRIVAL=2.0` runs the overloaded (about 93%) variant.

use std::time::Instant;

use qm_sim::{parse, Options, Simulation};

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn run(text: &str, jobs: u64) -> (f64, u64, u64, f64) {
    let mut scenario = parse(text).expect("bench scenario parses");
    scenario
        .generate
        .as_mut()
        .expect("bench scenario generates")
        .jobs = jobs;
    let options = Options {
        record_timeline: false,
        ..Options::default()
    };
    let started = Instant::now();
    let report = Simulation::new(scenario, options)
        .expect("valid")
        .run(&mut |_| {})
        .expect("runs");
    let wall = started.elapsed().as_secs_f64();
    let finished: u64 = report.summary.jobs_by_status.values().sum();
    (
        wall,
        finished,
        report.summary.passes,
        report.summary.end_time,
    )
}

fn main() {
    // `cargo bench` passes --bench; a plain `cargo test --benches` passes nothing.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/scenarios/bench-1m.yaml"
    );
    let text = std::fs::read_to_string(path).expect("bench scenario exists");
    let jobs: u64 = std::env::var("QM_BENCH_JOBS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let base_jobs = (jobs / 10).max(1);
    println!("simulate: bench-1m.yaml, baseline {base_jobs} jobs, then {jobs} jobs");
    let (base_wall, base_done, base_passes, _) = run(&text, base_jobs);
    println!(
        "  baseline: {base_done} jobs in {base_wall:.2} s wall ({:.0} jobs/s, {:.0} passes/s)",
        base_done as f64 / base_wall,
        base_passes as f64 / base_wall
    );
    let (wall, done, passes, end) = run(&text, jobs);
    println!(
        "  full:     {done} jobs in {wall:.2} s wall ({:.0} jobs/s, {:.0} passes/s, {passes} passes, {:.1} virtual days)",
        done as f64 / wall,
        passes as f64 / wall,
        end / 86_400.0
    );
    println!(
        "  scaling:  {:.2}x the baseline's wall time for {:.0}x the jobs",
        wall / base_wall,
        jobs as f64 / base_jobs as f64
    );
    if let Some(peak) = peak_rss_mib() {
        println!("  peak memory (VmHWM): {peak:.0} MiB");
    }
}
