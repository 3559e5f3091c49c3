//! `qm whatif`: a trace, under several sharing policies, side by side.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

use qm_eval::compare::{self, Policy};
use qm_eval::render::{self, Evaluation};
use qm_eval::trace::{self, BadLine, OnBadLine};
use qm_eval::workload::{self, Grouping, Mapping};

/// `qm whatif`'s arguments.
#[derive(clap::Args, Debug)]
pub struct WhatifArgs {
    /// ITP-2021 cluster files (`job_id,submission_time,duration,num_gpu`),
    /// or directories of them (every `*.csv` inside).
    #[arg(long = "trace", required = true, num_args = 1..)]
    traces: Vec<PathBuf>,
    /// How jobs form quota shares: `clusters` (each cluster a share of one
    /// fleet, sized by its demand) or `teams` (synthetic teams sized by
    /// --quota, jobs drawn to them with --seed).
    #[arg(long, default_value = "clusters", value_parser = ["clusters", "teams"])]
    mapping: String,
    /// The Helios quota table (`cluster_gpu_number.csv`), for --mapping teams.
    #[arg(long)]
    quota: Option<PathBuf>,
    /// Seed of every random choice (team draws, checkpoint intervals).
    #[arg(long, default_value_t = 2021)]
    seed: u64,
    /// GPUs per instance: a job of g GPUs needs ceil(g / this) instances.
    #[arg(long, default_value_t = 1)]
    gpus_per_instance: u32,
    /// The instance type's name in the report.
    #[arg(long, default_value = "gpu")]
    instance_type: String,
    /// The fleet is sized so that the mean demand is this fraction of it.
    #[arg(long, default_value_t = 0.9)]
    load: f64,
    /// Fraction of jobs that checkpoint (every 10-60 min, log-uniform).
    #[arg(long, default_value_t = 0.8)]
    checkpointing_fraction: f64,
    /// Only the first N jobs by submission time.
    #[arg(long)]
    max_jobs: Option<usize>,
    /// Policies to compare (default: all): partitions, pool, borrow-50,
    /// borrow-100, borrow-unlimited, borrow-100+min-runtime,
    /// borrow-100+cooldown, borrow-100+checkpointing-only,
    /// borrow-100+checkpoint-then-preempt, borrow-100+classes (jobs drawn
    /// into three workload classes by the seed).
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// A malformed trace line: `skip` it (reported) or `fail`.
    #[arg(long, default_value = "skip", value_parser = ["skip", "fail"])]
    on_bad_line: String,
    /// Policies simulated at once (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Where to write report.html, report.json and summary.md.
    #[arg(long)]
    out: PathBuf,
}

fn trace_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut inside: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| format!("{}: {e}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "csv"))
                .collect();
            inside.sort();
            if inside.is_empty() {
                return Err(format!("{}: no .csv files in it", p.display()));
            }
            files.extend(inside);
        } else {
            files.push(p.clone());
        }
    }
    Ok(files)
}

pub fn run(a: &WhatifArgs) -> Result<(), String> {
    let started = Instant::now();
    let on_bad = if a.on_bad_line == "fail" {
        OnBadLine::Fail
    } else {
        OnBadLine::Skip
    };
    let files = trace_files(&a.traces)?;
    let mut jobs = Vec::new();
    let mut bad: Vec<BadLine> = Vec::new();
    for f in &files {
        let name = f.display().to_string();
        let text = std::fs::read_to_string(f).map_err(|e| format!("{name}: {e}"))?;
        let (j, b) = trace::read_itp(&name, &text, on_bad)
            .map_err(|b| format!("{b} (--on-bad-line skip goes on without it)"))?;
        for line in &b {
            eprintln!("qm: skipped {line}");
        }
        jobs.extend(j);
        bad.extend(b);
    }
    let grouping = match a.mapping.as_str() {
        "teams" => {
            let q = a
                .quota
                .as_ref()
                .ok_or("--mapping teams needs --quota (the Helios cluster_gpu_number.csv)")?;
            let name = q.display().to_string();
            let text = std::fs::read_to_string(q).map_err(|e| format!("{name}: {e}"))?;
            Grouping::Teams {
                quota: trace::read_quota(&name, &text).map_err(|b| b.to_string())?,
            }
        }
        _ => Grouping::Clusters,
    };
    let mapping = Mapping {
        grouping,
        seed: a.seed,
        gpus_per_instance: a.gpus_per_instance,
        instance_type: a.instance_type.clone(),
        load: a.load,
        checkpointing_fraction: a.checkpointing_fraction,
        max_jobs: a.max_jobs,
        ..Mapping::default()
    };
    let w = workload::build(jobs, &mapping)?;
    let all = compare::default_policies();
    let policies: Vec<Policy> = if a.policies.is_empty() {
        all
    } else {
        a.policies
            .iter()
            .map(|n| {
                all.iter().find(|p| &p.name == n).cloned().ok_or_else(|| {
                    format!(
                        "no policy {n:?}; the policies are {}",
                        all.iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })
            })
            .collect::<Result<_, _>>()?
    };
    eprintln!(
        "qm: {} jobs, {} shares, a fleet of {} instances; {} policies",
        w.jobs.len(),
        w.shares.len(),
        w.fleet,
        policies.len()
    );
    let threads = a.threads.unwrap_or_else(|| {
        std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
    });
    let live = std::io::stderr().is_terminal();
    let shown: Mutex<std::collections::BTreeMap<String, u32>> = Mutex::new(Default::default());
    let progress = |name: &str, f: f64| {
        let pct = (f * 100.0) as u32;
        let Ok(mut shown) = shown.lock() else { return };
        let last = shown.entry(name.to_string()).or_insert(u32::MAX);
        // A line per policy every 10% (or at every percent on a terminal).
        let step = if live { 1 } else { 10 };
        if *last == u32::MAX || pct / step != *last / step {
            *last = pct;
            eprintln!(
                "qm: {name}: {pct:>3}% of the trace simulated ({:.0}s)",
                started.elapsed().as_secs_f64()
            );
        }
    };
    let results = compare::run_all(&w, &policies, threads, &progress)?;
    let evaluation = Evaluation {
        citation: qm_eval::CITATION.into(),
        trace_files: files
            .iter()
            .map(|f| {
                f.file_name().map_or_else(
                    || f.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                )
            })
            .collect(),
        mapping: w.mapping.clone(),
        bad_lines: bad,
        policies: results,
        wall_seconds: started.elapsed().as_secs_f64(),
    };
    write_report(&a.out, &evaluation)?;
    print!("{}", render::markdown(&evaluation));
    eprintln!(
        "qm: wrote {}/report.html, report.json and summary.md in {:.0}s",
        a.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

fn write_report(dir: &Path, e: &Evaluation) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|err| format!("{}: {err}", dir.display()))?;
    let json = serde_json::to_string(e).map_err(|err| err.to_string())?;
    let mut files = vec![
        ("report.html".to_string(), render::html(e)),
        ("report.json".to_string(), json),
        ("summary.md".to_string(), render::markdown(e)),
    ];
    // Each plot on its own too, for documents that embed them.
    for (id, svg, _) in render::plots(e) {
        files.push((format!("{id}.svg"), svg));
    }
    for (name, text) in files {
        let path = dir.join(&name);
        std::fs::write(&path, text).map_err(|err| format!("{}: {err}", path.display()))?;
    }
    Ok(())
}
