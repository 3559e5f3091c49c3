//! The commands that talk to a running Quartermaster over NATS.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use qm_service::client::{CallError, Client};
use qm_wire::messages::{
    Caller, GetServiceJobLogs, JobOutlook, JobPreemptionConfiguration, JobQueueSnapshot, JobRef,
    ListAuditEvents, ListAuditEventsResponse, ListServiceJobs, ListServiceJobsResponse, QueueRef,
    RetryStrategy, ServiceJob, ShareLostWork, SubmitServiceJob, SubmitServiceJobResponse,
    TerminateServiceJob, TimeoutConfig, UpdateServiceJob,
};
use qm_wire::subjects::{self, Operation};
use qm_wire::system::{LogsResponse, QueueDocument};

/// A failure: one line for the user and the exit code.
pub struct Failure(pub String, pub u8);

impl From<CallError> for Failure {
    fn from(e: CallError) -> Self {
        let code = match e {
            CallError::NoReply { .. } | CallError::Transport(_) | CallError::Refused { .. } => 3,
            CallError::Api(_) => 1,
        };
        Failure(e.to_string(), code)
    }
}

fn usage(message: impl Into<String>) -> Failure {
    Failure(message.into(), 2)
}

/// Who `qm` is to NATS (global flags, or the same `QM_NATS_*` variables
/// the services read).
#[derive(Debug, Default, clap::Args)]
pub struct Credentials {
    /// Credentials file `qm auth` wrote for you (`<principal>.nk`).
    #[arg(long, global = true, env = "QM_NATS_NKEY_FILE", value_name = "FILE")]
    pub nkey: Option<String>,
    /// JWT credentials file (servers in operator mode; give --principal too).
    #[arg(long, global = true, env = "QM_NATS_CREDS", value_name = "FILE")]
    pub creds: Option<String>,
    #[arg(long, global = true, env = "QM_NATS_USER")]
    pub user: Option<String>,
    #[arg(long, global = true, env = "QM_NATS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// The principal you act as (default: the one your nkey file names).
    #[arg(long, global = true, env = "QM_NATS_PRINCIPAL")]
    pub principal: Option<String>,
    /// CA certificate (PEM) the server's certificate is checked against.
    #[arg(long, global = true, env = "QM_NATS_CA_FILE", value_name = "FILE")]
    pub tls_ca: Option<String>,
    /// Client certificate and key (PEM), for servers that verify clients.
    #[arg(long, global = true, env = "QM_NATS_CERT_FILE", value_name = "FILE")]
    pub tls_cert: Option<String>,
    #[arg(long, global = true, env = "QM_NATS_KEY_FILE", value_name = "FILE")]
    pub tls_key: Option<String>,
}

pub async fn connect(url: &str, c: &Credentials) -> Result<Client, Failure> {
    use qm_service::settings::{NatsSettings, Validate};
    let s = NatsSettings {
        nats_url: url.to_string(),
        nats_principal: c.principal.clone().unwrap_or_default(),
        nats_nkey_file: c.nkey.clone().unwrap_or_default(),
        nats_creds: c.creds.clone().unwrap_or_default(),
        nats_user: c.user.clone().unwrap_or_default(),
        nats_password: c.password.clone().unwrap_or_default(),
        nats_ca_file: c.tls_ca.clone().unwrap_or_default(),
        nats_cert_file: c.tls_cert.clone().unwrap_or_default(),
        nats_key_file: c.tls_key.clone().unwrap_or_default(),
    };
    let problems = s.problems();
    if !problems.is_empty() {
        let flags = problems
            .join("; ")
            .replace("natsNkeyFile", "--nkey")
            .replace("natsCreds", "--creds")
            .replace("natsUser", "--user")
            .replace("natsPassword", "--password")
            .replace("natsCaFile", "--tls-ca")
            .replace("natsCertFile", "--tls-cert")
            .replace("natsKeyFile", "--tls-key")
            .replace("natsUrl", "--nats")
            .replace("natsPrincipal", "--principal");
        return Err(usage(flags));
    }
    let (nats, principal) = qm_service::nats::connect(&s, "qm", Some(Duration::ZERO))
        .await
        .map_err(|e| {
            let hint = match e {
                qm_service::nats::ConnectError::Unreachable { .. } => {
                    " (set --nats or QM_NATS_URL)"
                }
                _ => "",
            };
            Failure(format!("{e}{hint}"), e.exit_code())
        })?;
    Ok(Client::new(nats, principal))
}

/// `qm submit`'s flags (and the command after `--`).
#[derive(Debug, Default, clap::Args)]
pub struct SubmitArgs {
    #[arg(short = 'f', long = "file")]
    pub file: Option<std::path::PathBuf>,
    #[arg(long)]
    pub name: Option<String>,
    #[arg(long)]
    pub queue: Option<String>,
    #[arg(long)]
    pub share: Option<String>,
    /// Instance type, e.g. ml.g5.xlarge.
    #[arg(long = "type")]
    pub instance_type: Option<String>,
    #[arg(long)]
    pub count: Option<u32>,
    /// schedulingPriority, 0-9999 (higher first).
    #[arg(long)]
    pub priority: Option<u32>,
    /// preemptionRetriesBeforeTermination (0: fail at the first preemption).
    #[arg(long)]
    pub preemption_retries: Option<u32>,
    /// retryStrategy.attempts for failures (1-10).
    #[arg(long)]
    pub attempts: Option<u32>,
    /// timeoutConfig.attemptDurationSeconds.
    #[arg(long)]
    pub timeout: Option<u64>,
    /// terminationGracePeriodSeconds between SIGTERM and SIGKILL.
    #[arg(long)]
    pub grace: Option<u64>,
    /// The job checkpoints (QM_CHECKPOINT_DIR is synced and restored).
    #[arg(long)]
    pub checkpoint: bool,
    /// Where the checkpoints live, `s3://bucket/prefix` (implies
    /// --checkpoint; default: the checkpoint service's bucket, under
    /// <queue>/<jobId>).
    #[arg(long, value_name = "S3_URI")]
    pub checkpoint_s3_uri: Option<String>,
    /// Checkpoint-then-preempt: when preempted, first send the job its
    /// checkpoint signal and stop it once that checkpoint is committed or
    /// after this many seconds (implies --checkpoint; at most 3600).
    #[arg(long, value_name = "SECONDS")]
    pub checkpoint_before_preempt: Option<u64>,
    /// The signal that asks the job to checkpoint now: SIGUSR1 (default),
    /// SIGUSR2, SIGHUP or SIGINT (implies --checkpoint).
    #[arg(long, value_name = "SIGNAL")]
    pub checkpoint_signal: Option<String>,
    /// Run the job in this image (the container runtime, with the SageMaker
    /// /opt/ml contract); the command after `--` replaces the image's
    /// entrypoint, and without one the image's entrypoint runs with
    /// `train`. The share's imagePrefixes must allow it.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Where a successful container job's /opt/ml/model and
    /// /opt/ml/output/data go: s3://bucket/prefix gets
    /// <prefix>/<jobId>/output/model.tar.gz and output.tar.gz (within the
    /// share's checkpointS3Prefixes).
    #[arg(long, value_name = "S3_URI")]
    pub output_s3_uri: Option<String>,
    /// An input channel NAME=s3://bucket/prefix[,ShardedByS3Key]
    /// (repeatable): every object under the prefix downloaded into
    /// /opt/ml/input/data/NAME before the container starts (each node its
    /// share with ShardedByS3Key); within the share's inputS3Prefixes.
    #[arg(long = "input", value_name = "NAME=S3_URI")]
    pub inputs: Vec<String>,
    /// Hyperparameter NAME=VALUE (repeatable): in
    /// /opt/ml/input/config/hyperparameters.json, as SageMaker writes them
    /// (values as strings), and SM_HPS.
    #[arg(long = "hp", value_name = "NAME=VALUE")]
    pub hyperparameters: Vec<String>,
    /// Environment variable NAME=VALUE (repeatable).
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// clientToken: a retried submit with the same token makes no second job.
    #[arg(long)]
    pub token: Option<String>,
    /// Submit nothing: say what would happen now (start on own or borrowed
    /// capacity, preempt which jobs and their work at risk, or why it would
    /// wait and behind whom), from the scheduler's own pass on the live
    /// state. Checked exactly as a submit.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Builds the request: the file (if any), then flags on top.
pub fn submit_request(a: &SubmitArgs) -> Result<SubmitServiceJob, Failure> {
    let mut job: SubmitServiceJob = match &a.file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read {}: {e}", path.display())))?;
            serde_yaml_ng::from_str(&text).map_err(|e| usage(format!("{}: {e}", path.display())))?
        }
        None => SubmitServiceJob::default(),
    };
    if let Some(v) = &a.name {
        job.job_name.clone_from(v);
    }
    if let Some(v) = &a.queue {
        job.job_queue.clone_from(v);
    }
    if a.share.is_some() {
        job.quota_share_name.clone_from(&a.share);
    }
    if let Some(v) = &a.instance_type {
        job.instance_type.clone_from(v);
    }
    if a.count.is_some() {
        job.instance_count = a.count;
    }
    if a.priority.is_some() {
        job.scheduling_priority = a.priority;
    }
    if a.preemption_retries.is_some() {
        job.preemption_configuration = Some(JobPreemptionConfiguration {
            preemption_retries_before_termination: a.preemption_retries,
        });
    }
    if a.attempts.is_some() {
        job.retry_strategy = Some(RetryStrategy {
            attempts: a.attempts,
            ..Default::default()
        });
    }
    if let Some(t) = a.timeout {
        job.timeout_config = Some(TimeoutConfig {
            attempt_duration_seconds: t,
        });
    }
    if a.grace.is_some() {
        job.termination_grace_period_seconds = a.grace;
    }
    let wants_checkpoints = a.checkpoint
        || a.checkpoint_s3_uri.is_some()
        || a.checkpoint_before_preempt.is_some()
        || a.checkpoint_signal.is_some();
    if wants_checkpoints && job.checkpoint_config.is_none() {
        job.checkpoint_config = Some(Default::default());
    }
    if let Some(c) = job.checkpoint_config.as_mut() {
        if a.checkpoint_before_preempt.is_some() {
            c.checkpoint_before_preempt_seconds = a.checkpoint_before_preempt;
        }
        if a.checkpoint_signal.is_some() {
            c.checkpoint_signal.clone_from(&a.checkpoint_signal);
        }
    }
    if let (Some(uri), Some(c)) = (&a.checkpoint_s3_uri, job.checkpoint_config.as_mut()) {
        qm_wire::messages::parse_s3_uri(uri)
            .map_err(|e| usage(format!("--checkpoint-s3-uri: {e}")))?;
        c.s3_uri = Some(uri.clone());
    }
    for kv in &a.env {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| usage(format!("--env {kv:?}: expected NAME=VALUE")))?;
        job.environment.insert(k.into(), v.into());
    }
    if a.image.is_some() {
        job.container_image.clone_from(&a.image);
    }
    for spec in &a.inputs {
        let (name, rest) = spec.split_once('=').ok_or_else(|| {
            usage(format!(
                "--input {spec:?}: expected NAME=s3://bucket/prefix"
            ))
        })?;
        let (uri, distribution) = match rest.split_once(',') {
            Some((u, d)) => (u, Some(d.to_string())),
            None => (rest, None),
        };
        qm_wire::messages::check_channel_name(name)
            .map_err(|e| usage(format!("--input {spec:?}: {e}")))?;
        qm_wire::messages::parse_s3_uri(uri)
            .map_err(|e| usage(format!("--input {spec:?}: {e}")))?;
        job.input_data_config.push(qm_wire::messages::InputChannel {
            channel_name: name.to_string(),
            s3_uri: uri.to_string(),
            s3_data_distribution_type: distribution,
        });
    }
    if let Some(uri) = &a.output_s3_uri {
        qm_wire::messages::parse_s3_uri(uri).map_err(|e| usage(format!("--output-s3-uri: {e}")))?;
        job.output_data_config = Some(qm_wire::messages::OutputDataConfig {
            s3_output_path: uri.clone(),
        });
    }
    if !a.hyperparameters.is_empty() {
        let mut hps: std::collections::BTreeMap<String, String> =
            match job.environment.get("SM_HPS") {
                Some(text) => serde_json::from_str(text).map_err(|e| {
                    usage(format!(
                        "environment SM_HPS: not a JSON object of strings: {e}"
                    ))
                })?,
                None => Default::default(),
            };
        for kv in &a.hyperparameters {
            let (k, v) = kv
                .split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| usage(format!("--hp {kv:?}: expected NAME=VALUE")))?;
            hps.insert(k.into(), v.into());
        }
        let text = serde_json::to_string(&hps).map_err(|e| usage(format!("--hp: {e}")))?;
        job.environment.insert("SM_HPS".into(), text);
    }
    if a.token.is_some() {
        job.client_token.clone_from(&a.token);
    }
    if !a.command.is_empty() {
        job.command.clone_from(&a.command);
    }
    if job.job_name.is_empty() {
        // The program's name, or the image's repository name.
        let image_name = job.container_image.as_deref().map(|i| {
            let name = i.split('@').next().unwrap_or(i);
            let last = name.rsplit('/').next().unwrap_or(name);
            last.split(':').next().unwrap_or(last)
        });
        job.job_name = job
            .command
            .first()
            .and_then(|c| c.rsplit('/').next())
            .or(image_name)
            .unwrap_or("job")
            .to_string();
    }
    let mut missing = Vec::new();
    if job.job_queue.is_empty() {
        missing.push("--queue");
    }
    if job.quota_share_name.is_none() {
        missing.push("--share");
    }
    if job.instance_type.is_empty() {
        missing.push("--type");
    }
    if job.command.is_empty() && job.container_image.is_none() {
        missing.push("the command (after --) or --image");
    }
    if !missing.is_empty() {
        return Err(usage(format!("submit needs {}", missing.join(", "))));
    }
    Ok(job)
}

pub async fn submit(c: &Client, job: &SubmitServiceJob, json: bool) -> Result<(), Failure> {
    let r: SubmitServiceJobResponse = c.call(Operation::SubmitServiceJob, job).await?;
    if json {
        print_json(&r);
    } else {
        println!("{}", r.job_id);
    }
    Ok(())
}

/// `qm submit --dry-run`.
pub async fn dry_run(c: &Client, job: &SubmitServiceJob, json: bool) -> Result<(), Failure> {
    let o: JobOutlook = c.call(Operation::DryRunServiceJob, job).await?;
    print_outlook(&o, json);
    Ok(())
}

/// `qm explain JOB`.
pub async fn explain(c: &Client, job_id: &str, json: bool) -> Result<(), Failure> {
    let o: JobOutlook = c
        .call(
            Operation::ExplainServiceJob,
            &JobRef {
                job_id: job_id.into(),
            },
        )
        .await?;
    print_outlook(&o, json);
    Ok(())
}

fn print_outlook(o: &JobOutlook, json: bool) {
    if json {
        print_json(o);
        return;
    }
    match o.outcome.as_str() {
        "STARTS" if o.borrowed_instances > 0 => println!(
            "would start now: {} instance(s) of its share's own, {} borrowed from the idle capacity of {}",
            o.own_instances,
            o.borrowed_instances,
            o.lending_shares.join(", ")
        ),
        "STARTS" => println!(
            "would start now on its share's own capacity ({} instance(s))",
            o.own_instances
        ),
        "PREEMPTS" => {
            println!("would start once these jobs are stopped for it:");
            for v in &o.victims {
                println!(
                    "  {} {}(share {}, {}): {:.0} s of work at risk",
                    v.job_id,
                    v.job_name.as_deref().map(|n| format!("{n} ")).unwrap_or_default(),
                    v.quota_share_name,
                    v.kind,
                    v.work_at_risk_seconds
                );
            }
        }
        "WAITS" => {
            println!(
                "would wait: {}",
                o.status_reason.as_deref().unwrap_or("(no reason given)")
            );
            if !o.ahead.is_empty() {
                println!("  behind: {}", o.ahead.join(", "));
            }
        }
        _ => println!(
            "not waiting: {}",
            o.status.as_deref().unwrap_or(o.outcome.as_str())
        ),
    }
}

pub async fn describe(c: &Client, job_id: &str, json: bool) -> Result<(), Failure> {
    let j: ServiceJob = c
        .call(
            Operation::DescribeServiceJob,
            &JobRef {
                job_id: job_id.into(),
            },
        )
        .await?;
    if json {
        print_json(&j);
        return Ok(());
    }
    println!("job        {} ({})", j.job_id, j.job_name);
    println!("queue      {} / share {}", j.job_queue, j.quota_share_name);
    println!("status     {}", j.status);
    println!("reason     {}", j.status_reason);
    if let Some(image) = &j.container_image {
        println!("image      {image}");
    }
    println!(
        "asks for   {} x {}, priority {}{}",
        j.instance_count,
        j.instance_type,
        j.scheduling_priority,
        if j.on_borrowed_capacity {
            ", on borrowed capacity"
        } else {
            ""
        }
    );
    if !j.attempts.is_empty() {
        let mut t = table(
            &[
                "ATTEMPT",
                "EXECUTOR",
                "OUTCOME",
                "EXIT",
                "RESTORED",
                "LAST CKPT",
                "RECOMPUTED",
                "FOR",
            ],
            &[0, 3, 4, 5, 6],
        );
        for a in &j.attempts {
            let step = |s: Option<u64>| s.map_or("-".to_string(), |s| format!("step {s}"));
            t.add_row(vec![
                a.attempt.to_string(),
                a.executor_id.clone().unwrap_or_else(|| "-".into()),
                a.outcome.clone().unwrap_or_else(|| "(running)".into()),
                a.exit_code.map_or("-".into(), |c| c.to_string()),
                match (a.restored_checkpoint_step, a.restored_bytes) {
                    (Some(s), Some(b)) => format!("step {s} ({})", human_bytes(b)),
                    (s, _) => step(s),
                },
                step(a.last_checkpoint_step),
                a.recomputed_ms
                    .map_or("-".into(), |ms| format!("{:.1} s", ms as f64 / 1000.0)),
                match (&a.preempted_for_job_id, &a.preempted_for_share) {
                    (Some(j), Some(s)) => format!("{j} ({s})"),
                    (Some(j), None) => j.clone(),
                    _ => "-".into(),
                },
            ]);
        }
        println!("\n{}", t.trim_fmt());
        // A restore that fell back says so: the newer checkpoints it
        // skipped were damaged or incomplete.
        for a in j.attempts.iter().filter(|a| !a.restore_skipped.is_empty()) {
            println!(
                "attempt {} restored an older checkpoint; skipped: {}",
                a.attempt,
                a.restore_skipped.join("; ")
            );
        }
        // Why an attempt failed, in the job's words (or the runtime's),
        // and what a starting attempt is doing (pulling, downloading).
        for a in &j.attempts {
            if let Some(why) = &a.status_reason {
                println!("attempt {}: {why}", a.attempt);
            }
            if let (Some(doing), None) = (&a.progress, &a.outcome) {
                println!("attempt {}: {doing}", a.attempt);
            }
        }
        // Checkpoints written but not uploaded: what a preemption now
        // would lose grows until the next commit.
        for a in &j.attempts {
            if let Some(since) = a.checkpoint_upload_failing_since {
                println!(
                    "attempt {}: checkpoints not uploaded since {} ({:.0} s ago): {}",
                    a.attempt,
                    rfc3339(since),
                    qm_service::now_ms().saturating_sub(since) as f64 / 1000.0,
                    a.checkpoint_upload_error
                        .as_deref()
                        .unwrap_or("unknown error")
                );
            }
        }
    }
    Ok(())
}

/// Bytes for a person: B, KiB, MiB, GiB or TiB with one decimal.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

pub async fn list(
    c: &Client,
    queue: &str,
    status: Option<String>,
    share: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let mut all = Vec::new();
    let mut token = None;
    loop {
        let r: ListServiceJobsResponse = c
            .call(
                Operation::ListServiceJobs,
                &ListServiceJobs {
                    job_queue: queue.into(),
                    job_status: status.clone(),
                    quota_share_name: share.clone(),
                    max_results: Some(1000),
                    next_token: token,
                },
            )
            .await?;
        all.extend(r.job_summary_list);
        token = r.next_token;
        if token.is_none() {
            break;
        }
    }
    if json {
        print_json(&all);
        return Ok(());
    }
    let mut t = table(
        &[
            "JOB", "NAME", "SHARE", "STATUS", "PRIO", "ATTEMPTS", "REASON",
        ],
        &[4, 5],
    );
    for j in &all {
        t.add_row(vec![
            j.job_id.clone(),
            j.job_name.clone(),
            j.quota_share_name.clone(),
            j.status.clone(),
            j.scheduling_priority.to_string(),
            j.attempts.len().to_string(),
            j.status_reason.clone(),
        ]);
    }
    println!("{}", t.trim_fmt());
    Ok(())
}

pub async fn update(c: &Client, job_id: &str, priority: u32, json: bool) -> Result<(), Failure> {
    let j: ServiceJob = c
        .call(
            Operation::UpdateServiceJob,
            &UpdateServiceJob {
                job_id: job_id.into(),
                scheduling_priority: priority,
            },
        )
        .await?;
    if json {
        print_json(&j);
    } else {
        println!(
            "{} priority {} ({})",
            j.job_id, j.scheduling_priority, j.status
        );
    }
    Ok(())
}

pub async fn terminate(c: &Client, job_id: &str, reason: &str, json: bool) -> Result<(), Failure> {
    let r: serde_json::Value = c
        .call(
            Operation::TerminateServiceJob,
            &TerminateServiceJob {
                job_id: job_id.into(),
                reason: reason.into(),
            },
        )
        .await?;
    if json {
        print_json(&r);
    } else {
        println!("{job_id} terminating");
    }
    Ok(())
}

pub async fn logs(
    c: &Client,
    job_id: &str,
    attempt: Option<u32>,
    stderr: bool,
) -> Result<(), Failure> {
    let r: LogsResponse = c
        .call(
            Operation::GetServiceJobLogs,
            &GetServiceJobLogs {
                job_id: job_id.into(),
                attempt,
                tail_bytes: None,
            },
        )
        .await?;
    if r.truncated {
        eprintln!("qm: (showing the end of the output)");
    }
    print!("{}", if stderr { r.stderr } else { r.stdout });
    Ok(())
}

pub async fn whoami(c: &Client, json: bool) -> Result<(), Failure> {
    let me: Caller = c.call(Operation::WhoAmI, &serde_json::json!({})).await?;
    if json {
        print_json(&me);
    } else {
        let team = me
            .team
            .as_deref()
            .map(|t| format!(", team {t}"))
            .unwrap_or_default();
        println!("{} ({}{team})", me.principal, me.role.to_lowercase());
        for s in &me.shares {
            println!("  owns {s}");
        }
    }
    Ok(())
}

/// Milliseconds since the Unix epoch from `2026-12-03T09:00:00Z` (or an
/// offset such as `+01:00`, fractions ignored) or a plain number of ms.
pub fn parse_time(flag: &str, text: &str) -> Result<u64, Failure> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let bad = || {
        usage(format!(
            "{flag}: {text:?} is not a time (use RFC 3339 such as 2026-12-03T09:00:00Z, or ms since the epoch)"
        ))
    };
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, Failure> {
        text.get(r).and_then(|s| s.parse().ok()).ok_or_else(bad)
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return Err(bad());
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        rest = frac.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
            let oh: i64 = o[1..3].parse().map_err(|_| bad())?;
            let om: i64 = o[4..6].parse().map_err(|_| bad())?;
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (oh * 3600 + om * 60)
        }
        _ => return Err(bad()),
    };
    // Days from 1970-01-01 (the proleptic Gregorian calendar).
    let (yy, mm) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    u64::try_from(secs * 1000).map_err(|_| bad())
}

pub fn audit_request(
    queue: &Option<String>,
    share: &Option<String>,
    principal: &Option<String>,
    since: &Option<String>,
    until: &Option<String>,
) -> Result<ListAuditEvents, Failure> {
    for (flag, v) in [("--queue", queue), ("--share", share), ("--by", principal)] {
        if let Some(v) = v {
            subjects::token(v).map_err(|e| usage(format!("{flag}: {e}")))?;
        }
    }
    Ok(ListAuditEvents {
        job_queue: queue.clone(),
        quota_share_name: share.clone(),
        principal: principal.clone(),
        since: since
            .as_deref()
            .map(|t| parse_time("--since", t))
            .transpose()?,
        until: until
            .as_deref()
            .map(|t| parse_time("--until", t))
            .transpose()?,
        max_results: None,
        next_token: None,
    })
}

fn rfc3339(ms: u64) -> String {
    let secs = (ms / 1000) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

pub async fn audit(
    c: &Client,
    mut req: ListAuditEvents,
    max: Option<usize>,
    json: bool,
) -> Result<(), Failure> {
    let mut events = Vec::new();
    loop {
        let page: ListAuditEventsResponse = c.call(Operation::ListAuditEvents, &req).await?;
        events.extend(page.audit_events);
        if max.is_some_and(|m| events.len() >= m) {
            events.truncate(max.unwrap_or(usize::MAX));
            break;
        }
        match page.next_token {
            Some(t) => req.next_token = Some(t),
            None => break,
        }
    }
    if json {
        print_json(&events);
        return Ok(());
    }
    let mut t = table(
        &["TIME", "PRINCIPAL", "OPERATION", "SHARE", "JOB", "DETAIL"],
        &[],
    );
    for e in &events {
        let share = format!(
            "{}/{}",
            e.job_queue,
            e.quota_share_name.as_deref().unwrap_or("*")
        );
        t.add_row(vec![
            rfc3339(e.at),
            e.principal.clone(),
            e.operation.clone(),
            share,
            e.job_id.clone().unwrap_or_else(|| "-".into()),
            e.detail.clone(),
        ]);
    }
    println!("{}", t.trim_fmt());
    Ok(())
}

/// `qm auth`: the tenancy file -> nats-auth.conf and credentials files.
pub fn auth(
    tenancy: &std::path::Path,
    out: Option<&std::path::Path>,
    check: bool,
    json: bool,
) -> Result<(), Failure> {
    let t = qm_tenancy::Tenancy::load(tenancy).map_err(|e| Failure(e.to_string(), 1))?;
    let principals = t.principals();
    if check {
        println!(
            "{}: valid ({} team(s), {} principal(s))",
            tenancy.display(),
            t.teams.len(),
            principals.len()
        );
        return Ok(());
    }
    let out = out.ok_or_else(|| usage("--out DIR is required (or --check to only validate)"))?;
    let existing: Vec<bool> = principals
        .iter()
        .map(|p| qm_tenancy::nats::key_path(out, p).exists())
        .collect();
    let keys = qm_tenancy::nats::ensure_keys(&t, out).map_err(|e| Failure(e, 1))?;
    let aws = qm_tenancy::aws::ensure_secrets(&t, out).map_err(|e| Failure(e, 1))?;
    let conf = qm_tenancy::nats::authorization(&t, &keys).map_err(|e| Failure(e, 1))?;
    let conf_path = out.join("nats-auth.conf");
    let tmp = out.join(".nats-auth.conf.tmp");
    std::fs::write(&tmp, conf)
        .and_then(|()| std::fs::rename(&tmp, &conf_path))
        .map_err(|e| Failure(format!("cannot write {}: {e}", conf_path.display()), 1))?;
    if json {
        print_json(&serde_json::json!({
            "authorization": conf_path,
            "principals": principals.iter().zip(&existing).map(|(p, kept)| serde_json::json!({
                "principal": p,
                "role": t.role(p).map(|r| r.label()),
                "credentials": qm_tenancy::nats::key_path(out, p),
                "publicKey": keys.get(p),
                "new": !kept,
            })).collect::<Vec<_>>(),
            "awsAccessKeys": aws.iter().map(|k| serde_json::json!({
                "accessKeyId": k.id,
                "principal": k.principal,
                "credentials": qm_tenancy::aws::credentials_path(out, &k.principal),
                "new": k.new,
            })).collect::<Vec<_>>(),
            "gatewayKeysFile": (!aws.is_empty()).then(|| qm_tenancy::aws::keys_path(out)),
        }));
        return Ok(());
    }
    println!("wrote {}", conf_path.display());
    for (p, kept) in principals.iter().zip(&existing) {
        println!(
            "  {:<20} {:<20} {} ({})",
            p,
            t.role(p).map(|r| r.label()).unwrap_or_default(),
            qm_tenancy::nats::key_path(out, p).display(),
            if *kept { "kept" } else { "new" }
        );
    }
    if !aws.is_empty() {
        println!(
            "wrote {} (the AWS Batch gateway's keysFile)",
            qm_tenancy::aws::keys_path(out).display()
        );
        for k in &aws {
            println!(
                "  {:<20} {:<20} {} ({})",
                k.id,
                k.principal,
                qm_tenancy::aws::credentials_path(out, &k.principal).display(),
                if k.new { "new" } else { "kept" }
            );
        }
    }
    println!(
        "next: `include {}` in the nats-server configuration and reload it; give each principal its .nk file only{}",
        conf_path.display(),
        if aws.is_empty() { "" } else { " (and each person its .aws-credentials file)" }
    );
    Ok(())
}

pub async fn apply(c: &Client, file: &std::path::Path, json: bool) -> Result<(), Failure> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| usage(format!("cannot read {}: {e}", file.display())))?;
    let doc: QueueDocument =
        serde_yaml_ng::from_str(&text).map_err(|e| usage(format!("{}: {e}", file.display())))?;
    let r: QueueDocument = c.call(Operation::ApplyJobQueue, &doc).await?;
    if json {
        print_json(&r);
    } else {
        let names: Vec<&str> = r
            .quota_shares
            .iter()
            .map(|s| s.quota_share_name.as_str())
            .collect();
        println!(
            "job queue {} applied: {} quota share(s) {}",
            r.job_queue.job_queue_name,
            names.len(),
            names.join(", ")
        );
    }
    Ok(())
}

pub async fn snapshot(c: &Client, queue: &str, json: bool) -> Result<(), Failure> {
    let s = fetch_snapshot(c, queue).await?;
    if json {
        print_json(&s);
        return Ok(());
    }
    print!("{}", render_snapshot(&s));
    Ok(())
}

async fn fetch_snapshot(c: &Client, queue: &str) -> Result<JobQueueSnapshot, Failure> {
    Ok(c.call(
        Operation::GetJobQueueSnapshot,
        &QueueRef {
            job_queue: queue.into(),
        },
    )
    .await?)
}

/// A bar of `used` against `owned` (borrowed instances beyond it in `+`).
fn bar(used: u32, owned: u32) -> String {
    const WIDTH: u32 = 12;
    let scale = owned.max(used).max(1);
    let cells = |n: u32| ((n * WIDTH + scale / 2) / scale) as usize;
    let mine = cells(used.min(owned));
    let over = cells(used).saturating_sub(mine);
    let free = (WIDTH as usize).saturating_sub(mine + over);
    format!(
        "{}{}{}",
        "#".repeat(mine),
        "+".repeat(over),
        ".".repeat(free)
    )
}

fn render_snapshot(s: &JobQueueSnapshot) -> String {
    let mut out = format!("job queue {}\n\n", s.job_queue);
    let mut shares = table(
        &[
            "SHARE", "TYPE", "OWNED", "USED", "BORROWED", "LENT", "IDLE", "USE",
        ],
        &[2, 3, 4, 5, 6],
    );
    for u in &s.shares {
        shares.add_row(vec![
            u.quota_share_name.clone(),
            u.instance_type.clone(),
            u.entitlement.to_string(),
            u.used.to_string(),
            u.borrowed.to_string(),
            u.lent.to_string(),
            u.idle.to_string(),
            bar(u.used, u.entitlement),
        ]);
    }
    out.push_str(&format!("{}\n", shares.trim_fmt()));
    out.push_str(&format!(
        "\nfront of queue ({} shown)\n",
        s.front_of_queue.len()
    ));
    let mut front = table(&["JOB", "NAME", "SHARE", "PRIO", "REASON"], &[3]);
    for j in &s.front_of_queue {
        front.add_row(vec![
            j.job_id.clone(),
            j.job_name.clone(),
            j.quota_share_name.clone(),
            j.scheduling_priority.to_string(),
            j.status_reason.clone(),
        ]);
    }
    out.push_str(&format!("{}\n", front.trim_fmt()));
    if !s.lost_work.is_empty() {
        out.push_str(&format!("\n{}", render_lost_work(&s.lost_work)));
    }
    out
}

/// The lost-work ledger's totals: per share and cause, the attempts that
/// threw work away and the instance-seconds to compute again; and per
/// share, what other jobs lost being preempted for its jobs.
fn render_lost_work(lost: &[ShareLostWork]) -> String {
    let secs = |ms: u64| format!("{:.1}", ms as f64 / 1000.0);
    let mut t = table(
        &["SHARE", "CAUSE", "ATTEMPTS", "RECOMPUTED (instance-s)"],
        &[2, 3],
    );
    for share in lost {
        for (cause, w) in &share.by_cause {
            t.add_row(vec![
                share.quota_share_name.clone(),
                cause.clone(),
                w.attempts.to_string(),
                secs(w.recomputed_instance_ms),
            ]);
        }
        if share.restored_bytes > 0 {
            t.add_row(vec![
                share.quota_share_name.clone(),
                format!(
                    "(checkpoints restored: {})",
                    human_bytes(share.restored_bytes)
                ),
                "-".into(),
                "-".into(),
            ]);
        }
        let w = &share.lost_for_this_share;
        if w.attempts > 0 {
            t.add_row(vec![
                share.quota_share_name.clone(),
                "(others', for this share)".into(),
                w.attempts.to_string(),
                secs(w.recomputed_instance_ms),
            ]);
        }
    }
    format!("lost work (preemptions and lost hosts)\n{}\n", t.trim_fmt())
}

/// `qm top`: the snapshot of `queue`, refreshed every `interval` until
/// interrupted (or `iterations` times). On a terminal each refresh
/// replaces the screen; otherwise refreshes follow each other. A failed
/// refresh is shown and retried: the view outlives a restart of admission.
pub async fn top(
    c: &Client,
    queue: &str,
    interval: std::time::Duration,
    iterations: Option<u64>,
) -> Result<(), Failure> {
    use std::io::{IsTerminal, Write};
    subjects::token(queue).map_err(|e| usage(format!("--queue: {e}")))?;
    let terminal = std::io::stdout().is_terminal();
    let mut n = 0u64;
    loop {
        let view = match fetch_snapshot(c, queue).await {
            Ok(s) => render_snapshot(&s),
            // A queue that does not exist (or no service) is an error at
            // once, not a blank screen; later, a failed refresh is shown.
            Err(e) if n == 0 => return Err(e),
            Err(e) => format!("job queue {queue}\n\nrefresh failed: {}\n", e.0),
        };
        let now = utc_clock();
        let header = format!(
            "qm top  {now}  every {}s  (Ctrl-C to quit)\n\n",
            interval.as_secs_f64()
        );
        let mut stdout = std::io::stdout().lock();
        if terminal {
            let _ = write!(stdout, "\x1b[H\x1b[2J");
        } else if n > 0 {
            let _ = writeln!(stdout);
        }
        let _ = write!(stdout, "{header}{view}");
        let _ = stdout.flush();
        drop(stdout);
        n += 1;
        if iterations.is_some_and(|max| n >= max) {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// The wall-clock time, UTC, to the second (`HH:MM:SS UTC`).
fn utc_clock() -> String {
    let secs = qm_service::now_ms() / 1000;
    format!(
        "{:02}:{:02}:{:02} UTC",
        (secs / 3600) % 24,
        (secs / 60) % 60,
        secs % 60
    )
}

/// Prints job and preemption events as they happen, until interrupted:
/// of every share for admins and readers, of the caller's own shares for a
/// team (the server refuses a team a subscription to anyone else's).
pub async fn watch(
    c: &Client,
    queue: Option<String>,
    job: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let q = queue.as_deref().unwrap_or("*");
    let j = job.as_deref().unwrap_or("*");
    for t in [q, j] {
        if t != "*" {
            subjects::token(t).map_err(|e| usage(e.to_string()))?;
        }
    }
    let me: Caller = c.call(Operation::WhoAmI, &serde_json::json!({})).await?;
    let mut patterns = Vec::new();
    if qm_tenancy::sees_all(&me) {
        patterns.push(subjects::events_of(q, j).map_err(|e| usage(e.to_string()))?);
    } else {
        for grant in me
            .shares
            .iter()
            .filter_map(|s| qm_tenancy::Grant::parse(s).ok())
        {
            if q != "*" && grant.queue != q {
                continue;
            }
            let share = grant.share.as_deref().unwrap_or("*");
            let subjects =
                subjects::share_events(&grant.queue, share, j).map_err(|e| usage(e.to_string()))?;
            patterns.extend(subjects);
        }
    }
    if patterns.is_empty() {
        return Err(Failure(
            format!(
                "principal {} owns no share{} to watch",
                me.principal,
                queue.map(|q| format!(" of queue {q}")).unwrap_or_default()
            ),
            1,
        ));
    }
    let mut subs = Vec::new();
    for subject in &patterns {
        subs.push(
            c.nats
                .subscribe(subject.clone())
                .await
                .map_err(|e| Failure(format!("cannot subscribe to {subject}: {e}"), 3))?,
        );
    }
    let mut sub = futures::stream::select_all(subs);
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    eprintln!("qm: watching {} (Ctrl-C to stop)", patterns.join(", "));
    while let Some(msg) = sub.next().await {
        if json {
            println!("{}", String::from_utf8_lossy(&msg.payload));
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap_or_default();
        let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
        let id = s("jobId");
        if let Some(n) = v.get("jobName").and_then(|x| x.as_str()) {
            names.insert(id.clone(), n.to_string());
        }
        let name = names.get(&id).cloned().unwrap_or_else(|| id.clone());
        if msg.subject.starts_with(subjects::PREEMPTION_EVENTS) {
            println!(
                "{} preemption {} of {} ({}) for {}",
                s("phase"),
                s("kind"),
                name,
                id,
                s("forJobId")
            );
        } else {
            println!(
                "{:<16} {:<10} -> {:<10} {}",
                name,
                s("from"),
                s("to"),
                s("statusReason")
            );
        }
    }
    Ok(())
}

/// A borderless table whose columns are as wide as their widest cell (ids
/// of any length stay aligned); `right` lists the numeric columns.
fn table(header: &[&str], right: &[usize]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(header.to_vec());
    for &i in right {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    t
}

fn print_json<T: serde::Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("qm: cannot print JSON: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_and_print_in_rfc3339() {
        let ms = |t: &str| parse_time("--since", t).ok();
        assert_eq!(ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(ms("2026-12-03T09:00:00Z"), Some(1_796_288_400_000));
        assert_eq!(ms("2026-12-03T10:00:00+01:00"), Some(1_796_288_400_000));
        assert_eq!(ms("2026-12-03T09:00:00.250Z"), Some(1_796_288_400_000));
        assert_eq!(ms("1796288400123"), Some(1_796_288_400_123));
        assert_eq!(ms("2026-13-03T09:00:00Z"), None);
        assert_eq!(ms("tomorrow"), None);
        assert_eq!(rfc3339(1_796_288_400_123), "2026-12-03T09:00:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn the_snapshot_shows_lost_work_per_share_and_cause_and_for_whom() {
        let total = |attempts, ms| qm_wire::messages::LostWorkTotal {
            attempts,
            recomputed_instance_ms: ms,
        };
        let mut s = JobQueueSnapshot {
            job_queue: "q".into(),
            ..Default::default()
        };
        assert!(
            !render_snapshot(&s).contains("lost work"),
            "nothing lost, no table"
        );
        s.lost_work = vec![
            ShareLostWork {
                quota_share_name: "borrower".into(),
                by_cause: [
                    ("HOST_LOST".to_string(), total(1, 80_000)),
                    ("PREEMPTED_CROSS_SHARE".to_string(), total(3, 44_500)),
                ]
                .into(),
                lost_for_this_share: total(0, 0),
                restored_bytes: 3 << 30,
            },
            ShareLostWork {
                quota_share_name: "owner".into(),
                by_cause: Default::default(),
                lost_for_this_share: total(3, 44_500),
                restored_bytes: 0,
            },
        ];
        let text = render_snapshot(&s);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip_while(|l| !l.starts_with("lost work"))
            .skip(2)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            vec![
                vec!["borrower", "HOST_LOST", "1", "80.0"],
                vec!["borrower", "PREEMPTED_CROSS_SHARE", "3", "44.5"],
                vec![
                    "borrower",
                    "(checkpoints",
                    "restored:",
                    "3.0",
                    "GiB)",
                    "-",
                    "-"
                ],
                vec!["owner", "(others',", "for", "this", "share)", "3", "44.5"],
            ],
            "{text}"
        );
    }

    #[test]
    fn bytes_read_as_a_person_would_write_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(2 << 30), "2.0 GiB");
        assert_eq!(human_bytes(5 << 40), "5.0 TiB");
        assert_eq!(human_bytes(3 << 50), "3072.0 TiB");
    }

    #[test]
    fn tables_fit_their_widest_cell_and_align_numbers_right() {
        let mut t = table(&["JOB", "PRIO", "REASON"], &[1]);
        t.add_row(vec!["0b6f7c1e-2a4d-4b9e-9a51-3f1d2c7e8a90", "5", "waiting"]);
        t.add_row(vec!["j-1", "10", ""]);
        let text = t.trim_fmt();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        // Every row's second column ends where the header's does.
        let end = lines[0].find("PRIO").expect("header") + "PRIO".len();
        assert_eq!(&lines[1][end - 1..end], "5", "{text}");
        assert_eq!(&lines[2][end - 2..end], "10", "{text}");
        assert!(lines[1].contains("0b6f7c1e-2a4d-4b9e-9a51-3f1d2c7e8a90"));
        // A table without rows is its header line alone.
        assert_eq!(
            table(&["TIME", "DETAIL"], &[]).trim_fmt().lines().count(),
            1
        );
    }
}
