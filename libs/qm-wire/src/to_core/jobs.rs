//! A job submission -> the core's job spec, and what a job runs as resume
//! drills name it.

use crate::messages as wire;
use qm_core::{Cluster, ConfigProblem, ExitRule, JobSpec, RetryAction, Runtime};

use super::fields::{one_of, problem};

/// What a job runs, as resume drills name it: `image:<reference>` for a
/// container job, else `command:<sha256 of the argv as JSON>`. A drill's
/// proof holds for exactly this.
pub fn artifact(job: &wire::SubmitServiceJob) -> String {
    use sha2::{Digest, Sha256};
    match &job.container_image {
        Some(image) => format!("image:{image}"),
        None => {
            let argv = serde_json::to_vec(&job.command).expect("strings serialize");
            format!("command:{}", hex::encode(Sha256::digest(&argv)))
        }
    }
}

/// A submit -> the core's job spec, resolving names on `cluster` (the
/// instance type is interned: a type no executor offers yet is allowed).
pub fn job_spec(
    job: &wire::SubmitServiceJob,
    cluster: &mut Cluster,
) -> Result<JobSpec, Vec<ConfigProblem>> {
    let mut problems = Vec::new();
    if job.job_name.is_empty() || job.job_name.len() > 128 {
        problems.push(problem("jobName", "must be 1-128 characters"));
    }
    check_program(job, &mut problems);
    check_data_config(job, &mut problems);
    check_checkpoint_config(job, &mut problems);
    let share_name = job.quota_share_name.as_deref().unwrap_or("");
    let share = cluster.share_idx(share_name);
    if share.is_none() {
        problems.push(problem(
            "quotaShareName",
            format!(
                "no quota share {share_name:?} in job queue {:?}",
                job.job_queue
            ),
        ));
    }
    let mut exit_rules = Vec::new();
    let mut retry_attempts = 1;
    if let Some(retry) = &job.retry_strategy {
        retry_attempts = retry.attempts.unwrap_or(1);
        for (i, r) in retry.evaluate_on_exit.iter().enumerate() {
            let allowed = [("RETRY", RetryAction::Retry), ("EXIT", RetryAction::Exit)];
            if let Some(action) = one_of(
                &format!("retryStrategy.evaluateOnExit[{i}].action"),
                &r.action.to_ascii_uppercase(),
                &allowed,
                &mut problems,
            ) {
                exit_rules.push(ExitRule {
                    on_exit_code: r.on_exit_code.clone(),
                    on_status_reason: r.on_status_reason.clone(),
                    action,
                });
            }
        }
    }
    let (Some(share), true) = (share, problems.is_empty()) else {
        return Err(problems);
    };
    let instance_type = cluster.intern_type(&job.instance_type);
    let mut spec = JobSpec::new(
        job.job_name.clone(),
        share,
        instance_type,
        job.instance_count.unwrap_or(1),
    );
    // Left out, the priority is the lowest of the job's class's band (0
    // when the share declares no class); the core checks the band.
    let rules = cluster
        .share_config(share)
        .rules(job.workload_class.as_deref());
    spec.class = job.workload_class.clone();
    spec.priority = job.scheduling_priority.unwrap_or(rules.priority_min);
    // Kept only where a class could ask for a resume proof: a share that
    // declares classes (a job submitted before its share declared any has
    // none, and a class that asks for a proof never lets it borrow).
    if !cluster.share_config(share).classes.is_empty() {
        spec.artifact = Some(artifact(job));
    }
    if rules.borrow_requires_resume_proof {
        if let Some(image) = job
            .container_image
            .as_deref()
            .filter(|i| !i.contains("@sha256:"))
        {
            return Err(vec![problem(
                "containerImage",
                format!(
                    "{image:?} names no digest, and its workload class borrows only with a resume proof, which holds for one image: pin it as name@sha256:<digest>"
                ),
            )]);
        }
    }
    spec.preemption_retries = job
        .preemption_configuration
        .as_ref()
        .and_then(|p| p.preemption_retries_before_termination);
    spec.retry_attempts = retry_attempts;
    spec.evaluate_on_exit = exit_rules;
    spec.attempt_timeout_secs = job
        .timeout_config
        .as_ref()
        .map(|t| t.attempt_duration_seconds);
    if job.estimated_runtime_seconds == Some(0) {
        return Err(vec![problem(
            "estimatedRuntimeSeconds",
            "must be at least 1 second (leave it out if unknown)",
        )]);
    }
    spec.estimated_runtime_secs = job.estimated_runtime_seconds;
    spec.grace_period_secs = job
        .termination_grace_period_seconds
        .unwrap_or(qm_core::DEFAULT_GRACE_PERIOD_SECS);
    spec.checkpoints = job.checkpoint_config.is_some();
    spec.checkpoint_before_preempt_secs = job
        .checkpoint_config
        .as_ref()
        .and_then(|c| c.checkpoint_before_preempt_seconds);
    if job.container_image.is_some() {
        spec.runtime = Runtime::Container;
    }
    Ok(spec)
}

/// What the job runs: its image or command, instance type and environment.
fn check_program(job: &wire::SubmitServiceJob, problems: &mut Vec<ConfigProblem>) {
    match &job.container_image {
        Some(image) => {
            if let Err(e) = wire::check_image_reference(image) {
                problems.push(problem("containerImage", e));
            }
            // Empty: the image's entrypoint with `train`, as SageMaker does.
            if job.command.first().is_some_and(String::is_empty) {
                problems.push(problem(
                    "command",
                    "its first element, the program, must not be empty (leave command out to run the image's entrypoint with `train`)",
                ));
            }
        }
        None => {
            if job.command.is_empty() || job.command[0].is_empty() {
                problems.push(problem(
                    "command",
                    "must name the program to run (a list: program, then arguments), or give a containerImage",
                ));
            }
        }
    }
    if job.instance_type.is_empty() {
        problems.push(problem("instanceType", "is required"));
    }
    for key in job.environment.keys() {
        if key.is_empty() || key.contains('=') || key.contains('\0') || key.starts_with("QM_") {
            problems.push(problem(
                format!("environment.{key}"),
                "names must be non-empty, without '=' or NUL, and not start with QM_ (reserved)",
            ));
        }
    }
}

/// The job's input channels and output location (both need an image).
fn check_data_config(job: &wire::SubmitServiceJob, problems: &mut Vec<ConfigProblem>) {
    let mut channels = std::collections::BTreeSet::new();
    for (i, c) in job.input_data_config.iter().enumerate() {
        let field = format!("inputDataConfig[{i}]");
        if job.container_image.is_none() {
            problems.push(problem(
                &field,
                "needs a containerImage (channels are downloaded into the container's /opt/ml/input/data)",
            ));
        }
        // Two names that make the same SM_CHANNEL_<NAME> are one too many.
        let variable = c.channel_name.to_ascii_uppercase().replace(['.', '-'], "_");
        if let Err(e) = wire::check_channel_name(&c.channel_name) {
            problems.push(problem(format!("{field}.channelName"), e));
        } else if !channels.insert(variable) {
            problems.push(problem(
                format!("{field}.channelName"),
                format!(
                    "{:?} is given twice (names differing only in case, '.' or '-' are one channel)",
                    c.channel_name
                ),
            ));
        }
        if let Err(e) = wire::parse_s3_uri(&c.s3_uri) {
            problems.push(problem(format!("{field}.s3Uri"), e));
        }
        if let Some(d) = &c.s3_data_distribution_type {
            if d != "FullyReplicated" && d != "ShardedByS3Key" {
                problems.push(problem(
                    format!("{field}.s3DataDistributionType"),
                    format!("{d:?} is not FullyReplicated or ShardedByS3Key"),
                ));
            }
        }
    }
    if let Some(o) = &job.output_data_config {
        if job.container_image.is_none() {
            problems.push(problem(
                "outputDataConfig",
                "needs a containerImage (outputs are the container's /opt/ml/model and /opt/ml/output/data)",
            ));
        }
        if let Err(e) = wire::parse_s3_uri(&o.s3_output_path) {
            problems.push(problem("outputDataConfig.s3OutputPath", e));
        }
    }
}

/// The job's checkpoint configuration: where, how long before a
/// preemption, and which signal asks for one.
fn check_checkpoint_config(job: &wire::SubmitServiceJob, problems: &mut Vec<ConfigProblem>) {
    if let Some(c) = &job.checkpoint_config {
        if let Some(uri) = &c.s3_uri {
            if let Err(e) = wire::parse_s3_uri(uri) {
                problems.push(problem("checkpointConfig.s3Uri", e));
            }
        }
        if let Some(path) = &c.local_path {
            if let Err(e) = wire::check_local_path(path) {
                problems.push(problem("checkpointConfig.localPath", e));
            }
            // In a container it is /<localPath>, beside the contract's folders.
            let inside = format!("/{}", path.trim_matches('/'));
            let overlaps = ["/opt/ml/input", "/opt/ml/model", "/opt/ml/output"]
                .iter()
                .any(|f| {
                    inside == *f
                        || f.starts_with(&format!("{inside}/"))
                        || inside.starts_with(&format!("{f}/"))
                });
            if job.container_image.is_some() && overlaps {
                problems.push(problem(
                    "checkpointConfig.localPath",
                    format!("{inside} overlaps the container's /opt/ml/input, model or output (use /opt/ml/checkpoints)"),
                ));
            }
        }
        if c.checkpoint_before_preempt_seconds
            .is_some_and(|s| s > qm_core::MAX_CHECKPOINT_BEFORE_PREEMPT_SECS)
        {
            problems.push(problem(
                "checkpointConfig.checkpointBeforePreemptSeconds",
                format!(
                    "must be at most {} (the preempting job waits this long)",
                    qm_core::MAX_CHECKPOINT_BEFORE_PREEMPT_SECS
                ),
            ));
        }
        if let Some(signal) = &c.checkpoint_signal {
            if !wire::CHECKPOINT_SIGNALS.contains(&signal.as_str()) {
                problems.push(problem(
                    "checkpointConfig.checkpointSignal",
                    format!(
                        "{signal:?} is not one of {}",
                        wire::CHECKPOINT_SIGNALS.join(", ")
                    ),
                ));
            }
        }
    }
}
