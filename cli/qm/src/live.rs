//! The commands that talk to a running Quartermaster over NATS.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use qm_service::client::{CallError, Client};
use qm_wire::messages::{
    JobPreemptionConfiguration, JobQueueSnapshot, JobRef, ListServiceJobs, ListServiceJobsResponse,
    QueueRef, RetryStrategy, ServiceJob, SubmitServiceJob, SubmitServiceJobResponse,
    TerminateServiceJob, TimeoutConfig, UpdateServiceJob,
};
use qm_wire::subjects::{self, Operation};
use qm_wire::system::{LogsRequest, LogsResponse, QueueDocument};

/// A failure: one line for the user and the exit code.
pub struct Failure(pub String, pub u8);

impl From<CallError> for Failure {
    fn from(e: CallError) -> Self {
        let code = match e {
            CallError::NoReply { .. } | CallError::Transport(_) => 3,
            CallError::Api(_) => 1,
        };
        Failure(e.to_string(), code)
    }
}

fn usage(message: impl Into<String>) -> Failure {
    Failure(message.into(), 2)
}

pub async fn connect(url: &str) -> Result<Client, Failure> {
    let options = async_nats::ConnectOptions::new()
        .name("qm")
        .connection_timeout(Duration::from_secs(5));
    let nats = options.connect(url).await.map_err(|e| {
        Failure(
            format!("cannot connect to NATS at {url}: {e} (set --nats or QM_NATS_URL)"),
            3,
        )
    })?;
    Ok(Client::new(nats))
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
    /// Environment variable NAME=VALUE (repeatable).
    #[arg(long = "env")]
    pub env: Vec<String>,
    /// clientToken: a retried submit with the same token makes no second job.
    #[arg(long)]
    pub token: Option<String>,
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
    if (a.checkpoint || a.checkpoint_s3_uri.is_some()) && job.checkpoint_config.is_none() {
        job.checkpoint_config = Some(Default::default());
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
    if a.token.is_some() {
        job.client_token.clone_from(&a.token);
    }
    if !a.command.is_empty() {
        job.command.clone_from(&a.command);
    }
    if job.job_name.is_empty() {
        job.job_name = job
            .command
            .first()
            .and_then(|c| c.rsplit('/').next())
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
    if job.command.is_empty() {
        missing.push("the command (after --)");
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
        println!(
            "\n{:<8} {:<14} {:<24} {:>5} {:>9} {:>9}",
            "ATTEMPT", "EXECUTOR", "OUTCOME", "EXIT", "RESTORED", "LAST CKPT"
        );
        for a in &j.attempts {
            let step = |s: Option<u64>| s.map_or("-".to_string(), |s| format!("step {s}"));
            println!(
                "{:<8} {:<14} {:<24} {:>5} {:>9} {:>9}",
                a.attempt,
                a.executor_id.as_deref().unwrap_or("-"),
                a.outcome.as_deref().unwrap_or("(running)"),
                a.exit_code.map_or("-".into(), |c| c.to_string()),
                step(a.restored_checkpoint_step),
                step(a.last_checkpoint_step),
            );
        }
    }
    Ok(())
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
    println!(
        "{:<26} {:<16} {:<8} {:<10} {:>4} {:>8}  REASON",
        "JOB", "NAME", "SHARE", "STATUS", "PRIO", "ATTEMPTS"
    );
    for j in &all {
        println!(
            "{:<26} {:<16} {:<8} {:<10} {:>4} {:>8}  {}",
            j.job_id,
            j.job_name,
            j.quota_share_name,
            j.status,
            j.scheduling_priority,
            j.attempts.len(),
            j.status_reason
        );
    }
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
    let j: ServiceJob = c
        .call(
            Operation::DescribeServiceJob,
            &JobRef {
                job_id: job_id.into(),
            },
        )
        .await?;
    let a = match attempt {
        Some(n) => j
            .attempts
            .iter()
            .find(|a| a.attempt == n)
            .ok_or_else(|| Failure(format!("job {job_id} has no attempt {n}"), 1))?,
        None => j.attempts.last().ok_or_else(|| {
            Failure(
                format!("job {job_id} has not started yet ({})", j.status),
                1,
            )
        })?,
    };
    let executor = a
        .executor_id
        .as_deref()
        .ok_or_else(|| Failure("the attempt has no executor".into(), 1))?;
    let subject = subjects::executor_logs(executor).map_err(|e| Failure(e.to_string(), 1))?;
    let body = serde_json::to_vec(&LogsRequest {
        job_id: job_id.into(),
        attempt: a.attempt,
        tail_bytes: None,
    })
    .map_err(|e| Failure(e.to_string(), 1))?;
    let r: LogsResponse = c.request_raw(subject, body.into(), "executor").await?;
    if r.truncated {
        eprintln!("qm: (showing the end of the output)");
    }
    print!("{}", if stderr { r.stderr } else { r.stdout });
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
    let s: JobQueueSnapshot = c
        .call(
            Operation::GetJobQueueSnapshot,
            &QueueRef {
                job_queue: queue.into(),
            },
        )
        .await?;
    if json {
        print_json(&s);
        return Ok(());
    }
    println!("job queue {}\n", s.job_queue);
    println!(
        "{:<10} {:<16} {:>6} {:>5} {:>9} {:>5} {:>5}",
        "SHARE", "TYPE", "OWNED", "USED", "BORROWED", "LENT", "IDLE"
    );
    for u in &s.shares {
        println!(
            "{:<10} {:<16} {:>6} {:>5} {:>9} {:>5} {:>5}",
            u.quota_share_name, u.instance_type, u.entitlement, u.used, u.borrowed, u.lent, u.idle
        );
    }
    println!("\nfront of queue ({} shown)", s.front_of_queue.len());
    for j in &s.front_of_queue {
        println!(
            "  {:<26} {:<16} {:<8} prio {:>4}  {}",
            j.job_id, j.job_name, j.quota_share_name, j.scheduling_priority, j.status_reason
        );
    }
    Ok(())
}

/// Prints job and preemption events as they happen, until interrupted.
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
    let subject = format!("qm.v1.events.*.{q}.*.{j}.>");
    let mut sub = c
        .nats
        .subscribe(subject.clone())
        .await
        .map_err(|e| Failure(format!("cannot subscribe to {subject}: {e}"), 3))?;
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    eprintln!("qm: watching {subject} (Ctrl-C to stop)");
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

fn print_json<T: serde::Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("qm: cannot print JSON: {e}"),
    }
}
