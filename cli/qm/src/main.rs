//! `qm`, Quartermaster's command line. This binary only parses arguments and
//! wires them to the libraries; all behaviour lives in the crates it calls.
//! The commands that talk to a running system are `live/`, a file per group
//! over `live/{failure,output,connect}.rs`; layers: `tests/layers.rs`.

mod live;
mod whatif;

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use qm_sim::{Options, SimError, Simulation};
use tracing::Instrument;

/// Quartermaster: share GPU training capacity between teams with quota shares.
#[derive(Parser, Debug)]
#[command(name = "qm", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// NATS server of the Quartermaster to talk to (default: the
    /// profile's, else nats://127.0.0.1:4222).
    #[arg(long, global = true, env = "QM_NATS_URL")]
    nats: Option<String>,
    /// The profile of ~/.config/quartermaster/config.yaml (or the file
    /// QM_CONFIG names) to take the server and credentials from (default:
    /// the file's `default`); flags and QM_NATS_* variables win over it.
    #[arg(long, global = true, env = "QM_PROFILE", value_name = "NAME")]
    profile: Option<String>,
    #[command(flatten)]
    credentials: live::Credentials,
    /// How to print results: readable tables, or JSON for scripts.
    #[arg(long, global = true, value_enum, default_value_t = Output::Table)]
    output: Output,
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
        /// Stop at this virtual time (seconds); the report shows the state then.
        #[arg(long, value_name = "SECONDS")]
        until: Option<f64>,
        /// Report the summary only and keep no timeline (for huge workloads).
        #[arg(long)]
        summary: bool,
        /// Check the scheduling invariants after every pass (slow).
        #[arg(long)]
        check: bool,
        /// Stop at the first action the scheduling core refuses (exit 2).
        /// Without it a refused action (an oversized job, a priority update
        /// of a job never submitted) is recorded in the report's `rejected`
        /// with the error a client would get, and the run goes on.
        #[arg(long)]
        strict: bool,
    },
    /// Compare sharing policies on a real trace: the same jobs under hard
    /// partitions, one pool and quota shares with several borrow limits and
    /// protections, on the simulator (the scheduling core itself). Writes an
    /// HTML report with plots, its JSON and a Markdown summary
    /// (docs/evaluation.md).
    #[command(
        after_help = "Examples:\n  qm whatif --trace traces/itp-2021/ --out eval/\n  qm whatif --trace traces/itp-2021/ --mapping teams --quota cluster_gpu_number.csv --seed 7 --out eval-teams/\n  qm whatif --trace cluster03.csv --max-jobs 2000 --policies partitions,borrow-100 --out /tmp/w"
    )]
    Whatif(Box<whatif::WhatifArgs>),
    /// Create or update job queues and all their quota shares from a YAML/JSON
    /// file (several queues: YAML documents separated by `---`, applied in
    /// order; all are parsed before any is applied, and the first refused
    /// stops the rest).
    #[command(after_help = "Example:\n  qm apply -f examples/queues/three-shares.yaml")]
    Apply {
        #[arg(short = 'f', long = "file")]
        file: std::path::PathBuf,
    },
    /// Submit a job: flags, or a YAML/JSON file of SubmitServiceJob fields
    /// (flags override the file). The command follows `--` (no shell).
    #[command(
        after_help = "Examples:\n  qm submit --queue training --share QS1 --type ml.g5.xlarge --checkpoint -- qm-trainer --steps 400\n  qm submit -f job.yaml --priority 50"
    )]
    Submit(Box<live::SubmitArgs>),
    /// Run a resume drill: the job twice on its share's own capacity, one
    /// copy stopped after its first committed checkpoint and resumed, one
    /// uninterrupted; it passes when both declare the same result
    /// ($QM_RESULT_FILE). A passed drill lets the class borrow for that
    /// image or command. Waits for the outcome (exit 1 if it fails).
    #[command(
        after_help = "Examples:\n  qm drill --queue training --share QS1 --type ml.g5.xlarge --class release --checkpoint -- qm-trainer --steps 2000 --step-delay-ms 20\n  qm drill -f job.yaml --class release --seed 7"
    )]
    Drill(Box<live::DrillArgs>),
    /// A queue's resume drills and their outcomes (of the shares you may read).
    Drills {
        #[arg(long)]
        queue: String,
        #[arg(long)]
        share: Option<String>,
    },
    /// The policy-stability record, per share and week: priority changes
    /// and terminations by whom, configuration changes, preemptions by kind
    /// and class, jobs preempted more than twice, owners' reclaim waits,
    /// drills, borrowing refused for a missing resume proof. `--output csv`
    /// for a spreadsheet.
    #[command(
        after_help = "Examples:\n  qm governance --queue training\n  qm governance --queue training --share QS1 --since 2026-11-01T00:00:00Z --output csv"
    )]
    Governance {
        #[arg(long)]
        queue: String,
        #[arg(long)]
        share: Option<String>,
        /// Weeks that end after this (RFC 3339, or ms since the epoch).
        #[arg(long)]
        since: Option<String>,
    },
    /// The usage ledger: per share, instance type, workload class and day
    /// (or week), instance-hours on own capacity, borrowed (and from whom),
    /// queued, recomputed by cause, and resume drills. `--output csv` for
    /// billing.
    #[command(
        after_help = "Examples:\n  qm usage --queue training\n  qm usage --queue training --from 2026-11-01 --to 2026-11-30 --by week\n  qm usage --queue training --share QS1 --from 2026-11-01 --output csv > november.csv\n\nDays are UTC. Without --from: the 7 days up to --to (default: today)."
    )]
    Usage {
        #[arg(long)]
        queue: String,
        #[arg(long)]
        share: Option<String>,
        /// The first day, YYYY-MM-DD (UTC).
        #[arg(long)]
        from: Option<String>,
        /// The last day, YYYY-MM-DD (UTC), included.
        #[arg(long)]
        to: Option<String>,
        /// One row per day or per week (weeks start Monday).
        #[arg(long, value_enum, default_value = "day")]
        by: live::UsagePeriod,
    },
    /// Show one job: status, reason, every attempt.
    Describe { job_id: String },
    /// What the next scheduling pass would do for a waiting job: start it
    /// (on whose capacity), preempt which jobs for it (their work at risk),
    /// or why it waits and behind whom.
    Explain { job_id: String },
    /// List a queue's jobs.
    List {
        #[arg(long)]
        queue: String,
        #[arg(long)]
        status: Option<String>,
        #[arg(long)]
        share: Option<String>,
    },
    /// Print job state changes and preemptions as they happen (of the
    /// shares you may read).
    Watch {
        #[arg(long)]
        queue: Option<String>,
        #[arg(long)]
        job: Option<String>,
    },
    /// Print the stored events (kept 7 days) of the shares you may read,
    /// oldest first: job state changes, preemptions and committed
    /// checkpoints. Each line ends with the event's cursor; pass it to
    /// --after to go on from there, missing nothing and repeating nothing.
    #[command(
        after_help = "Examples:\n  qm events --queue training --since 2026-12-07T09:00:00Z\n  qm events --job j-5e1f0c3a --follow\n  qm events --after 812-3-4410.0.2 --follow --output json"
    )]
    Events(live::EventsArgs),
    /// Change a job's schedulingPriority.
    Update {
        job_id: String,
        #[arg(long)]
        priority: u32,
    },
    /// Stop a job for good (SIGTERM, grace period, SIGKILL).
    Terminate {
        job_id: String,
        #[arg(long, default_value = "terminated with qm")]
        reason: String,
    },
    /// Print an attempt's output (the last attempt by default).
    Logs {
        job_id: String,
        #[arg(long)]
        attempt: Option<u32>,
        /// Standard error instead of standard output.
        #[arg(long)]
        stderr: bool,
    },
    /// Per-share usage (owned, used, borrowed, lent, idle) and the front of the queue.
    Snapshot {
        #[arg(long)]
        queue: String,
    },
    /// A live view of the queue's shares and front, refreshed until Ctrl-C.
    ///
    /// USE draws each share's instances: `#` used within what it owns, `+`
    /// borrowed beyond it, `.` owned and idle.
    #[command(after_help = "Example:\n  qm top --queue training --interval 2")]
    Top {
        /// The job queue to show.
        #[arg(long)]
        queue: String,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 2.0, value_name = "SECONDS")]
        interval: f64,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long, value_name = "N")]
        iterations: Option<u64>,
    },
    /// Every accepted write (submits, priority updates, terminates, queue
    /// and share changes) with who made it and when. A team sees its own
    /// shares' writes; admins and readers see all.
    #[command(
        after_help = "Examples:\n  qm audit --queue training --share QS1\n  qm audit --by alice --since 2026-12-01T00:00:00Z --output json"
    )]
    Audit {
        #[arg(long)]
        queue: Option<String>,
        #[arg(long)]
        share: Option<String>,
        /// Only the writes of this principal.
        #[arg(long, value_name = "PRINCIPAL")]
        by: Option<String>,
        /// From this time (RFC 3339, e.g. 2026-12-03T09:00:00Z, or ms since the epoch).
        #[arg(long)]
        since: Option<String>,
        /// Before this time (same forms as --since).
        #[arg(long)]
        until: Option<String>,
        /// At most this many entries (default: all).
        #[arg(long)]
        max: Option<usize>,
    },
    /// Who the server and admission take you for: principal, role, team, shares.
    Whoami,
    /// Print a shell completion script for qm.
    #[command(
        after_help = "Examples:\n  qm completions bash > /etc/bash_completion.d/qm\n  qm completions zsh > \"${fpath[1]}/_qm\"\n  qm completions fish > ~/.config/fish/completions/qm.fish"
    )]
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write qm's man pages into DIR: qm.1, and one per command
    /// (qm-submit.1, qm-tenancy-apply.1, ...).
    #[command(after_help = "Example:\n  qm man --out /usr/local/share/man/man1 && man qm-submit")]
    Man {
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
    },
    /// Change who may do what while everything runs: apply a tenancy file
    /// as a new revision (admins), compare, show, list the history, rotate
    /// a NATS key with an overlap, and keep NATS servers' authorization in
    /// step (docs/tenancy.md).
    #[command(subcommand)]
    Tenancy(live::TenancyCommand),
    /// A job queue's life: enable, disable, and delete a queue or one of
    /// its quota shares (admins only). A queue is
    /// deleted only once DISABLED and every job in it has finished.
    #[command(subcommand)]
    Queue(live::QueueCommand),
    /// Turn a tenancy file into the NATS server's authorization and one
    /// credentials file per principal.
    ///
    /// Writes into DIR: `nats-auth.conf` (an `authorization { users = [...] }`
    /// block to `include` from the nats-server configuration; each principal
    /// authenticated by its nkey, with least-privilege publish/subscribe
    /// permissions) and `<principal>.nk` for every principal (its nkey seed,
    /// mode 0600: give each to its owner only). Existing credentials files are
    /// kept, so after adding a team only the new principals get new keys.
    /// This sets a deployment up; to change the tenancy of a running one,
    /// use `qm tenancy apply` (no restart, NATS follows through `qm
    /// tenancy sync-nats`).
    #[command(
        after_help = "Example:\n  qm auth --tenancy deploy/tenancy.example.yaml --out /etc/quartermaster/auth\n  # nats-server.conf:  include /etc/quartermaster/auth/nats-auth.conf\n  qm --nkey /etc/quartermaster/auth/alice.nk whoami\n\nThe tenancy file's format: docs/tenancy.md"
    )]
    Auth {
        /// The tenancy file (YAML).
        #[arg(long)]
        tenancy: std::path::PathBuf,
        /// Where to write nats-auth.conf and the credentials files.
        #[arg(long, value_name = "DIR")]
        out: Option<std::path::PathBuf>,
        /// Only validate the tenancy file; write nothing.
        #[arg(long)]
        check: bool,
        /// Also write `<person>.config.yaml` for every admin, reader and
        /// team user: a qm profile naming the server (--nats, required)
        /// and their .nk file beside it (and --tls-ca, if given), to put
        /// at ~/.config/quartermaster/config.yaml.
        #[arg(long)]
        profiles: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    /// Timeline, jobs, shares and summary for a person.
    Table,
    /// One JSON document for scripts.
    Json,
    /// Comma-separated values, one row per record (qm governance and qm usage).
    Csv,
}

impl Command {
    /// The command's name, as typed.
    fn name(&self) -> &'static str {
        match self {
            Command::Simulate { .. } => "simulate",
            Command::Whatif(_) => "whatif",
            Command::Auth { .. } => "auth",
            Command::Audit { .. } => "audit",
            Command::Whoami => "whoami",
            Command::Tenancy(_) => "tenancy",
            Command::Queue(_) => "queue",
            Command::Completions { .. } => "completions",
            Command::Man { .. } => "man",
            Command::Apply { .. } => "apply",
            Command::Submit(_) => "submit",
            Command::Drill(_) => "drill",
            Command::Drills { .. } => "drills",
            Command::Governance { .. } => "governance",
            Command::Usage { .. } => "usage",
            Command::Describe { .. } => "describe",
            Command::Explain { .. } => "explain",
            Command::List { .. } => "list",
            Command::Watch { .. } => "watch",
            Command::Events(_) => "events",
            Command::Update { .. } => "update",
            Command::Terminate { .. } => "terminate",
            Command::Logs { .. } => "logs",
            Command::Snapshot { .. } => "snapshot",
            Command::Top { .. } => "top",
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let output = cli.output;
    match cli.command {
        Command::Simulate {
            scenario,
            until,
            summary,
            check,
            strict,
        } => match simulate(&scenario, output, until, summary, (check, strict)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("qm: error: {message}");
                ExitCode::from(2)
            }
        },
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "qm", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { out } => match man_pages(&out) {
            Ok(pages) => {
                println!("wrote {} man pages into {}", pages, out.display());
                ExitCode::SUCCESS
            }
            Err(message) => {
                eprintln!("qm: error: {message}");
                ExitCode::from(2)
            }
        },
        Command::Whatif(args) => match whatif::run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(message) => {
                eprintln!("qm: error: {message}");
                ExitCode::from(2)
            }
        },
        command => {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("qm: error: cannot start: {e}");
                    return ExitCode::from(3);
                }
            };
            // With OTEL_EXPORTER_OTLP_ENDPOINT set, the command is the root
            // span of the trace its requests start (a submitted job's trace).
            let telemetry = qm_service::telemetry::init_cli("qm");
            let span = tracing::info_span!(
                "qm",
                otel.name = %format!("qm {}", command.name()),
                otel.kind = "client",
                otel.status_code = tracing::field::Empty,
            );
            let result = runtime.block_on(
                run_live(
                    (cli.nats.as_deref(), cli.profile.as_deref()),
                    &cli.credentials,
                    (output == Output::Json, output == Output::Csv),
                    command,
                )
                .instrument(span.clone()),
            );
            if result.is_err() {
                span.record("otel.status_code", "ERROR");
            }
            drop(span);
            telemetry.shutdown();
            match result {
                Ok(()) => ExitCode::SUCCESS,
                Err(live::Failure(message, code)) => {
                    eprintln!("qm: error: {message}");
                    ExitCode::from(code)
                }
            }
        }
    }
}

async fn run_live(
    (nats, profile): (Option<&str>, Option<&str>),
    credentials: &live::Credentials,
    (json, csv): (bool, bool),
    command: Command,
) -> Result<(), live::Failure> {
    if csv && !matches!(command, Command::Governance { .. } | Command::Usage { .. }) {
        return Err(live::Failure(
            "--output csv: only qm governance and qm usage write CSV".into(),
            2,
        ));
    }
    if let Command::Usage { from, to, .. } = &command {
        live::check_usage_days(from.as_deref(), to.as_deref())?;
    }
    let since = match &command {
        Command::Governance { since, .. } => since
            .as_deref()
            .map(|t| live::parse_time("--since", t))
            .transpose()?,
        _ => None,
    };
    // Bad usage is reported before anything is contacted.
    let submit = match &command {
        Command::Submit(args) => Some(live::submit_request(args)?),
        _ => None,
    };
    let drill = match &command {
        Command::Drill(args) => Some(live::drill_request(args)?),
        _ => None,
    };
    let env = |k: &str| std::env::var(k).ok();
    if let Command::Auth {
        tenancy,
        out,
        check,
        profiles,
    } = &command
    {
        let profiles = match (profiles, nats) {
            (false, _) => None,
            (true, Some(url)) => Some((url, credentials.tls_ca.as_deref())),
            (true, None) => {
                return Err(live::Failure(
                    "--profiles needs --nats URL: the server the people's profiles name".into(),
                    2,
                ))
            }
        };
        return live::auth(tenancy, out.as_deref(), (*check, profiles), json);
    }
    match &command {
        Command::Tenancy(live::TenancyCommand::SyncNats(args)) => {
            live::tenancy_ops::check_sync_args(args)?;
        }
        Command::Tenancy(
            live::TenancyCommand::Apply { file, .. } | live::TenancyCommand::Diff { file },
        ) => {
            qm_tenancy::Tenancy::load(file).map_err(|e| live::Failure(e.to_string(), 2))?;
        }
        _ => {}
    }
    let audit = match &command {
        Command::Audit {
            queue,
            share,
            by,
            since,
            until,
            ..
        } => Some(live::audit_request(queue, share, by, since, until)?),
        _ => None,
    };
    if let Command::Top { interval, .. } = &command {
        if !(interval.is_finite() && (0.2..=3600.0).contains(interval)) {
            return Err(live::Failure(
                format!("--interval {interval}: must be 0.2 to 3600 seconds"),
                2,
            ));
        }
    }
    let (url, credentials) = live::profile::resolve(nats, credentials, profile, &env)?;
    let c = live::connect(&url, &credentials).await?;
    match command {
        Command::Simulate { .. }
        | Command::Whatif(_)
        | Command::Auth { .. }
        | Command::Completions { .. }
        | Command::Man { .. } => Ok(()),
        Command::Audit { max, .. } => match audit {
            Some(req) => live::audit(&c, req, max, json).await,
            None => Ok(()),
        },
        Command::Whoami => live::whoami(&c, json).await,
        Command::Tenancy(t) => tenancy(&c, t, json).await,
        Command::Queue(q) => live::queue(&c, q, json).await,
        Command::Apply { file } => live::apply(&c, &file, json).await,
        Command::Submit(ref args) => match submit {
            Some(job) if args.dry_run => live::dry_run(&c, &job, json).await,
            Some(job) => live::submit(&c, &job, json).await,
            None => Ok(()),
        },
        Command::Drill(ref args) => match drill {
            Some(request) => live::drill(&c, &request, args, json).await,
            None => Ok(()),
        },
        Command::Drills { queue, share } => live::drills(&c, &queue, share, json).await,
        Command::Governance { queue, share, .. } => {
            live::governance(&c, &queue, share, since, json, csv).await
        }
        Command::Usage {
            queue,
            share,
            from,
            to,
            by,
        } => live::show_usage(&c, &queue, share, (from, to), by, (json, csv)).await,
        Command::Explain { job_id } => live::explain(&c, &job_id, json).await,
        Command::Describe { job_id } => live::describe(&c, &job_id, json).await,
        Command::List {
            queue,
            status,
            share,
        } => live::list(&c, &queue, status, share, json).await,
        Command::Watch { queue, job } => live::watch(&c, queue, job, json).await,
        Command::Events(args) => live::events(&c, args, json).await,
        Command::Update { job_id, priority } => live::update(&c, &job_id, priority, json).await,
        Command::Terminate { job_id, reason } => live::terminate(&c, &job_id, &reason, json).await,
        Command::Logs {
            job_id,
            attempt,
            stderr,
        } => live::logs(&c, &job_id, attempt, stderr).await,
        Command::Snapshot { queue } => live::snapshot(&c, &queue, json).await,
        Command::Top {
            queue,
            interval,
            iterations,
        } => {
            let every = std::time::Duration::from_secs_f64(interval);
            live::top(&c, &queue, every, iterations).await
        }
    }
}

async fn tenancy(
    c: &qm_service::client::Client,
    command: live::TenancyCommand,
    json: bool,
) -> Result<(), live::Failure> {
    use live::tenancy_ops as t;
    use live::TenancyCommand as T;
    match command {
        T::Apply {
            file,
            keys,
            dry_run,
            expect_revision,
        } => t::apply(c, &file, keys.as_deref(), (dry_run, expect_revision), json).await,
        T::Diff { file } => t::diff(c, &file, json).await,
        T::Show { revision } => t::show(c, revision, json).await,
        T::History => t::history(c, json).await,
        T::RotateKey { who, keys, finish } => t::rotate_key(c, &who, &keys, finish, json).await,
        T::SyncNats(args) => t::sync_nats(c, &args).await,
    }
}

/// Writes `qm.1` and a page per command and subcommand into `dir`; how
/// many were written.
fn man_pages(dir: &std::path::Path) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    fn write(dir: &std::path::Path, name: &str, cmd: clap::Command) -> Result<usize, String> {
        let cmd = cmd.name(name.to_string());
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd.clone())
            .render(&mut page)
            .map_err(|e| format!("cannot render {name}: {e}"))?;
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, page).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        let mut n = 1;
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            n += write(dir, &format!("{name}-{}", sub.get_name()), sub.clone())?;
        }
        Ok(n)
    }
    write(dir, "qm", Cli::command())
}

fn simulate(
    path: &std::path::Path,
    output: Output,
    until: Option<f64>,
    summary: bool,
    (check, strict): (bool, bool),
) -> Result<(), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if let Some(u) = until {
        if !(u.is_finite() && u >= 0.0) {
            return Err(format!("--until must be a number of seconds >= 0, got {u}"));
        }
    }
    let in_file = |e: SimError| format!("{}: {e}", path.display());
    let options = Options {
        until: until.map(qm_core_time),
        record_timeline: !summary,
        check_invariants: check,
        record_inputs: false,
        sample_every: None,
        strict,
    };
    let started = Instant::now();
    let show_progress = std::io::stderr().is_terminal();
    let mut progress = |p: qm_sim::Progress| {
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
    };
    if qm_sim::is_environment(&text) {
        // Several queues on one fleet: a report per queue.
        let scenario = qm_sim::parse_environment(&text).map_err(in_file)?;
        let report = qm_sim::Environment::new(scenario, options)
            .map_err(in_file)?
            .run(&mut progress);
        if show_progress {
            eprintln!();
        }
        let report = report.map_err(in_file)?;
        return match (output, summary) {
            (Output::Json, false) => {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
                );
                Ok(())
            }
            (Output::Json, true) => {
                let summaries: Vec<serde_json::Value> = report
                    .queues
                    .iter()
                    .map(|q| {
                        serde_json::json!({
                            "jobQueueName": q.job_queue_name,
                            "priority": q.priority,
                            "summary": q.report.summary,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({
                        "serviceEnvironment": report.service_environment,
                        "queues": summaries,
                    }))
                    .map_err(|e| e.to_string())?
                );
                Ok(())
            }
            (Output::Table, _) => {
                print!("{}", report.to_table());
                Ok(())
            }
            (Output::Csv, _) => {
                Err("--output csv: only qm governance and qm usage write CSV".into())
            }
        };
    }
    let scenario = qm_sim::parse(&text).map_err(in_file)?;
    let report = Simulation::new(scenario, options)
        .map_err(in_file)?
        .run(&mut progress);
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
        (Output::Csv, _) => {
            return Err("--output csv: only qm governance and qm usage write CSV".into())
        }
    }
    Ok(())
}

fn qm_core_time(secs: f64) -> qm_sim::sim::Time {
    qm_sim::sim::Time::from_secs_f64(secs)
}
