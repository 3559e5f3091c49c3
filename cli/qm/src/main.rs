//! `qm`, Quartermaster's command line. This binary only parses arguments and
//! wires them to the libraries; all behaviour lives in the crates it calls.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand, ValueEnum};
use qm_sim::{Options, SimError, Simulation};

/// Quartermaster: share GPU training capacity between teams with quota shares.
#[derive(Parser, Debug)]
#[command(name = "qm", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the scheduling core on virtual time over a scenario file.
    ///
    /// The scenario gives a fleet, a job queue with its quota shares and timed
    /// actions (submit, updateServiceJob, terminateServiceJob, createQuotaShare,
    /// updateQuotaShare, deleteQuotaShare, setFleet), or a generated workload.
    /// See docs/simulate.md and examples/scenarios/.
    #[command(
        after_help = "Examples:\n  qm simulate examples/scenarios/three-shares.yaml\n  qm simulate examples/scenarios/three-shares.yaml --output json | jq .summary\n  qm simulate examples/scenarios/bench-1m.yaml --summary"
    )]
    Simulate {
        /// Scenario file (YAML or JSON).
        scenario: std::path::PathBuf,
        /// How to print the report.
        #[arg(long, value_enum, default_value_t = Output::Table)]
        output: Output,
        /// Stop at this virtual time (seconds); the report shows the state then.
        #[arg(long, value_name = "SECONDS")]
        until: Option<f64>,
        /// Report the summary only and keep no timeline (for huge workloads).
        #[arg(long)]
        summary: bool,
        /// Check the scheduling invariants after every pass (slow).
        #[arg(long)]
        check: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Timeline, jobs, shares and summary for a person.
    Table,
    /// One JSON document for scripts.
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Simulate {
            scenario,
            output,
            until,
            summary,
            check,
        } => match simulate(&scenario, output, until, summary, check) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("qm: error: {message}");
                ExitCode::from(2)
            }
        },
    }
}

fn simulate(
    path: &std::path::Path,
    output: Output,
    until: Option<f64>,
    summary: bool,
    check: bool,
) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if let Some(u) = until {
        if !(u.is_finite() && u >= 0.0) {
            return Err(format!("--until must be a number of seconds >= 0, got {u}"));
        }
    }
    let in_file = |e: SimError| format!("{}: {e}", path.display());
    let scenario = qm_sim::parse(&text).map_err(in_file)?;
    let options = Options {
        until: until.map(qm_core_time),
        record_timeline: !summary,
        check_invariants: check,
    };
    let started = Instant::now();
    let show_progress = std::io::stderr().is_terminal();
    let report = Simulation::new(scenario, options)
        .map_err(in_file)?
        .run(&mut |p| {
            if show_progress {
                eprint!(
                "\rqm: t={:.0}s virtual, {} jobs submitted, {} finished, {} passes, {:.1}s wall   ",
                p.now.as_secs_f64(),
                p.submitted,
                p.finished,
                p.passes,
                started.elapsed().as_secs_f64()
            );
            }
        });
    if show_progress {
        eprintln!();
    }
    let report = report.map_err(in_file)?;
    match (output, summary) {
        (Output::Json, false) => println!(
            "{}",
            serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
        ),
        (Output::Json, true) => println!(
            "{}",
            serde_json::to_string_pretty(&report.summary).map_err(|e| e.to_string())?
        ),
        (Output::Table, _) => print!("{}", report.to_table()),
    }
    Ok(())
}

fn qm_core_time(secs: f64) -> qm_sim::sim::Time {
    qm_sim::sim::Time::from_secs_f64(secs)
}
