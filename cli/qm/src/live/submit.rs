//! `qm submit` (and `--dry-run`) and `qm explain`.

use qm_service::client::Client;
use qm_wire::messages::{
    JobOutlook, JobPreemptionConfiguration, JobRef, RetryStrategy, SubmitServiceJob,
    SubmitServiceJobResponse, TimeoutConfig,
};

use super::failure::{usage, Failure};
use super::output::print_json;

/// `qm submit`'s flags (and the command after `--`).
#[derive(Debug, Default, clap::Args)]
pub struct SubmitArgs {
    /// A YAML or JSON file of SubmitServiceJob fields (flags override it).
    #[arg(short = 'f', long = "file", visible_alias = "job-spec")]
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
    /// schedulingPriority, 0-9999 (higher first); with workload classes,
    /// within the class's band (default: the band's lowest).
    #[arg(long)]
    pub priority: Option<u32>,
    /// The share's workload class to run in (default: the share's default
    /// class); the share's `workloadClasses` in its queue document.
    #[arg(long, value_name = "CLASS")]
    pub class: Option<String>,
    /// estimatedRuntimeSeconds: how long one attempt is expected to run.
    /// A share with a borrowing budget lets the job borrow only if this
    /// (else --timeout) times the instances it borrows fits in what is left.
    #[arg(long, value_name = "SECONDS")]
    pub estimated_runtime: Option<u64>,
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
    if a.class.is_some() {
        job.workload_class.clone_from(&a.class);
    }
    if a.estimated_runtime.is_some() {
        job.estimated_runtime_seconds = a.estimated_runtime;
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
    apply_data_channels(a, &mut job)?;
    apply_hyperparameters(a, &mut job)?;
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

/// `--input` and `--output-s3-uri`: the job's data channels and output.
fn apply_data_channels(a: &SubmitArgs, job: &mut SubmitServiceJob) -> Result<(), Failure> {
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
    Ok(())
}

/// `--hp`: hyperparameters merged into the job's `SM_HPS` (a JSON object).
fn apply_hyperparameters(a: &SubmitArgs, job: &mut SubmitServiceJob) -> Result<(), Failure> {
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
    Ok(())
}

pub async fn submit(c: &Client, job: &SubmitServiceJob, json: bool) -> Result<(), Failure> {
    let r: SubmitServiceJobResponse = c.submit(job).await?;
    if json {
        print_json(&r);
    } else {
        println!("{}", r.job_id);
    }
    Ok(())
}

/// `qm submit --dry-run`.
pub async fn dry_run(c: &Client, job: &SubmitServiceJob, json: bool) -> Result<(), Failure> {
    let o: JobOutlook = c.dry_run_service_job(job).await?;
    print_outlook(&o, json);
    Ok(())
}

/// `qm explain JOB`.
pub async fn explain(c: &Client, job_id: &str, json: bool) -> Result<(), Failure> {
    let o: JobOutlook = c
        .explain_service_job(&JobRef {
            job_id: job_id.into(),
        })
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
                let more = o
                    .position_in_line
                    .map(|n| n as usize)
                    .filter(|n| *n > o.ahead.len())
                    .map(|n| format!(" and {} more", n - o.ahead.len()))
                    .unwrap_or_default();
                println!("  behind: {}{more}", o.ahead.join(", "));
            }
            match (o.estimated_start, &o.estimate_note) {
                (Some(ms), _) => println!("  expected to start: {}", super::output::rfc3339(ms)),
                (None, Some(note)) => println!("  expected to start: {note}"),
                (None, None) => {}
            }
            if let Some(unblock) = &o.unblock {
                println!("  would start on: {unblock}");
            }
        }
        _ => println!(
            "not waiting: {}",
            o.status.as_deref().unwrap_or(o.outcome.as_str())
        ),
    }
}
