//! Wire (AWS-shaped JSON) -> core types, with every problem named by its
//! camelCase field: the one conversion of a quota share, a queue and a job
//! submission to the scheduling core. Admission, the scheduler and the
//! simulator all convert through it, so a request admission accepted is one
//! the scheduler can apply, and a scenario means what the API means.

use crate::messages as wire;
use crate::system::QueueDocument;
use qm_core::{
    BorrowBudget, BudgetWindow, CapacityLimit, Cluster, ConfigProblem, ExitRule, JobSpec,
    OnBudgetExhausted, Protections, QueueConfig, QueueingStrategy, QuotaShare, RetryAction,
    Runtime, Runtimes, State, Strategy, WorkloadClass,
};

fn problem(field: impl Into<String>, message: impl Into<String>) -> ConfigProblem {
    ConfigProblem {
        field: field.into(),
        message: message.into(),
    }
}

fn one_of<T: Copy>(
    field: &str,
    value: &str,
    allowed: &[(&str, T)],
    problems: &mut Vec<ConfigProblem>,
) -> Option<T> {
    let found = allowed
        .iter()
        .find(|(name, _)| *name == value)
        .map(|(_, v)| *v);
    if found.is_none() {
        let names: Vec<&str> = allowed.iter().map(|(n, _)| *n).collect();
        problems.push(problem(
            field,
            format!("{value:?} is not one of {}", names.join(", ")),
        ));
    }
    found
}

fn state(field: &str, value: Option<&str>, problems: &mut Vec<ConfigProblem>) -> State {
    value
        .and_then(|v| {
            one_of(
                field,
                v,
                &[("ENABLED", State::Enabled), ("DISABLED", State::Disabled)],
                problems,
            )
        })
        .unwrap_or_default()
}

fn limits(list: &[wire::CapacityLimit]) -> Vec<CapacityLimit> {
    list.iter()
        .map(|l| CapacityLimit {
            capacity_unit: l.capacity_unit.clone(),
            max_capacity: l.max_capacity,
        })
        .collect()
}

/// A share as the wire states it (absent fields take the API's defaults).
pub fn share(s: &wire::QuotaShare, field: &str, problems: &mut Vec<ConfigProblem>) -> QuotaShare {
    let mut share = QuotaShare::new(s.quota_share_name.clone(), &[]);
    if s.capacity_limits.is_none() {
        problems.push(problem(format!("{field}.capacityLimits"), "is required"));
    }
    share_fields(&mut share, s, field, problems);
    share
}

/// The fields `s` states, read onto `share` (those it leaves out keep the
/// API's defaults). Updates are merged on the wire, once, before this
/// (`crate::updates`).
fn share_fields(
    share: &mut QuotaShare,
    s: &wire::QuotaShare,
    field: &str,
    problems: &mut Vec<ConfigProblem>,
) {
    if let Some(l) = &s.capacity_limits {
        share.capacity_limits = limits(l);
    }
    if let Some(v) = s.state.as_deref() {
        share.state = state(&format!("{field}.state"), Some(v), problems);
    }
    if let Some(rs) = &s.resource_sharing_configuration {
        let allowed = [
            ("RESERVE", Strategy::Reserve),
            ("LEND", Strategy::Lend),
            ("LEND_AND_BORROW", Strategy::LendAndBorrow),
        ];
        if let Some(v) = one_of(
            &format!("{field}.resourceSharingConfiguration.strategy"),
            &rs.strategy,
            &allowed,
            problems,
        ) {
            share.strategy = v;
        }
        share.borrow_limit = rs.borrow_limit.unwrap_or(-1);
    }
    if let Some(p) = &s.preemption_configuration {
        let allowed = [("ENABLED", true), ("DISABLED", false)];
        if let Some(v) = one_of(
            &format!("{field}.preemptionConfiguration.inSharePreemption"),
            &p.in_share_preemption,
            &allowed,
            problems,
        ) {
            share.in_share_preemption = v;
        }
    }
    if let Some(p) = &s.protections {
        let current = share.protections.clone();
        share.protections = Protections {
            min_runtime_before_preemption_secs: p
                .min_runtime_before_preemption_seconds
                .unwrap_or(current.min_runtime_before_preemption_secs),
            reborrow_cooldown_secs: p
                .reborrow_cooldown_seconds
                .unwrap_or(current.reborrow_cooldown_secs),
            borrow_requires_checkpoint: p
                .borrow_requires_checkpoint
                .unwrap_or(current.borrow_requires_checkpoint),
        };
    }
    if let Some(classes) = &s.workload_classes {
        share.classes = classes.iter().map(workload_class).collect();
    }
    if let Some(d) = &s.default_workload_class {
        share.default_class = Some(d.clone());
    }
    if let Some(budget) = &s.borrow_budget {
        share.borrow_budget = budget
            .as_ref()
            .and_then(|b| borrow_budget(b, &format!("{field}.borrowBudget"), problems));
        if budget.is_none() && s.on_budget_exhausted.is_none() {
            // Removing the budget removes what it did when spent.
            share.on_budget_exhausted = OnBudgetExhausted::Finish;
        }
    }
    if let Some(w) = s.fair_share_weight {
        share.fair_share_weight = w;
    }
    if let Some(g) = &s.share_group {
        share.group.clone_from(g);
    }
    if let Some(v) = s.on_budget_exhausted.as_deref() {
        let allowed = [
            ("FINISH", OnBudgetExhausted::Finish),
            ("CHECKPOINT_AND_STOP", OnBudgetExhausted::CheckpointAndStop),
        ];
        if let Some(v) = one_of(&format!("{field}.onBudgetExhausted"), v, &allowed, problems) {
            share.on_budget_exhausted = v;
        }
    }
}

/// A budget as the wire states it; its ranges are the core's to check.
fn borrow_budget(
    b: &wire::BorrowBudget,
    field: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Option<BorrowBudget> {
    let window = match (b.window_hours, b.half_life_hours) {
        (Some(hours), None) => BudgetWindow::Rolling { hours },
        (None, Some(hours)) => BudgetWindow::HalfLife { hours },
        _ => {
            problems.push(problem(
                field.to_string(),
                "give exactly one of windowHours (a rolling window) and halfLifeHours (decayed usage)",
            ));
            return None;
        }
    };
    let seconds = b.instance_hours * 3600.0;
    if !(seconds.is_finite() && seconds >= 0.5) {
        problems.push(problem(
            format!("{field}.instanceHours"),
            format!(
                "must be at least one instance-second (1/3600), got {}",
                b.instance_hours
            ),
        ));
        return None;
    }
    Some(BorrowBudget {
        instance_seconds: seconds.round().min(u64::MAX as f64) as u64,
        window,
    })
}

/// A workload class as the wire states it (absent fields: the defaults).
/// The core validates it with its share (`qm_core::class`).
fn workload_class(c: &wire::WorkloadClass) -> WorkloadClass {
    let mut class = WorkloadClass::new(c.name.clone(), c.priority_band.min, c.priority_band.max);
    class.may_borrow = c.may_borrow.unwrap_or(true);
    class.borrow_requires_resume_proof = c.borrow_requires_resume_proof.unwrap_or(false);
    class.preemptible_by = c.preemptible_by.clone();
    class.min_runtime_before_preemption_secs = c.min_runtime_before_preemption_seconds;
    class.checkpoint_before_preempt_secs = c.checkpoint_before_preempt_seconds;
    class.requires_checkpoint = c.requires_checkpoint.unwrap_or(false);
    class.result_tolerance_ppm = c.result_tolerance_ppm.unwrap_or(0);
    class
}

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

/// A whole queue document -> the core's configuration, validated whole.
pub fn queue(doc: &QueueDocument) -> Result<QueueConfig, Vec<ConfigProblem>> {
    let mut problems = Vec::new();
    for (i, s) in doc.quota_shares.iter().enumerate() {
        if s.job_queue != doc.job_queue.job_queue_name && !s.job_queue.is_empty() {
            problems.push(problem(
                format!("quotaShares[{i}].jobQueue"),
                format!(
                    "is {:?} but the document is for job queue {:?}",
                    s.job_queue, doc.job_queue.job_queue_name
                ),
            ));
        }
    }
    let shares = doc
        .quota_shares
        .iter()
        .enumerate()
        .map(|(i, s)| share(s, &format!("quotaShares[{i}]"), &mut problems))
        .collect();
    let q = &doc.job_queue;
    let mut config = QueueConfig::new(q.job_queue_name.clone(), shares);
    config.state = state("jobQueue.state", q.state.as_deref(), &mut problems);
    config.capacity_limits = limits(&q.capacity_limits);
    if let Some(secs) = q.checkpoint_before_preempt_seconds {
        if secs > qm_core::MAX_CHECKPOINT_BEFORE_PREEMPT_SECS {
            problems.push(problem(
                "jobQueue.checkpointBeforePreemptSeconds",
                format!(
                    "must be at most {} (a preempting job waits this long)",
                    qm_core::MAX_CHECKPOINT_BEFORE_PREEMPT_SECS
                ),
            ));
        }
        config.checkpoint_before_preempt_secs = secs;
    }
    if let Some(s) = q.idle_resource_assignment_strategy.as_deref() {
        let allowed = [
            ("FIFO", qm_core::config::IdleAssignment::Fifo),
            ("FAIR_SHARE", qm_core::config::IdleAssignment::FairShare),
        ];
        if let Some(v) = one_of(
            "jobQueue.idleResourceAssignmentStrategy",
            s,
            &allowed,
            &mut problems,
        ) {
            config.idle_assignment = v;
        }
    }
    if let Some(h) = q.fair_share_half_life_hours {
        config.fair_share_half_life_hours = h;
    }
    config.fair_share_rebalance_secs = q.fair_share_rebalance_seconds;
    config
        .service_environment
        .clone_from(&q.service_environment);
    config.priority = q.priority.unwrap_or(0);
    config.groups = q
        .share_groups
        .iter()
        .map(|g| qm_core::config::ShareGroup {
            name: g.share_group_name.clone(),
            borrow_limit: g.borrow_limit.unwrap_or(-1),
        })
        .collect();
    if let Some(s) = q.queueing_strategy.as_deref() {
        let allowed = [
            ("BEST_EFFORT_FIFO", QueueingStrategy::BestEffortFifo),
            ("STRICT_FIFO", QueueingStrategy::StrictFifo),
        ];
        if let Some(v) = one_of("jobQueue.queueingStrategy", s, &allowed, &mut problems) {
            config.queueing_strategy = v;
        }
    }
    if let Err(e) = qm_core::validate_queue(&config) {
        problems.extend(e.0);
    }
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
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

/// Runtime names (an executor's `runtimes` setting, a scenario's nodes) ->
/// the core's set; an unknown name is an error that lists the known ones.
pub fn runtimes(names: &[String]) -> Result<Runtimes, String> {
    let mut set = Runtimes::NONE;
    for name in names {
        match Runtime::from_name(name) {
            Some(r) => set.insert(r),
            None => {
                return Err(format!(
                    "{name:?} is not a runtime (known: {})",
                    Runtime::ALL.map(Runtime::name).join(", ")
                ))
            }
        }
    }
    if set.is_empty() {
        return Err("at least one runtime is required (process, container)".into());
    }
    Ok(set)
}

/// What a registration's runtime names offer, as far as this build knows
/// them: unknown names are left out, and none at all is `process` (an
/// executor from before runtimes existed).
pub fn known_runtimes(names: &[String]) -> Runtimes {
    let set: Runtimes = names.iter().filter_map(|n| Runtime::from_name(n)).collect();
    if names.is_empty() {
        Runtimes::default()
    } else {
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_jobs_keep_their_checkpoints_and_channels_apart_from_the_contract() {
        let doc = doc();
        let mut cluster = Cluster::new(queue(&doc).expect("valid"), &[]).expect("cluster");
        let base = wire::SubmitServiceJob {
            job_name: "j".into(),
            job_queue: "training".into(),
            quota_share_name: Some("QS1".into()),
            instance_type: "ml.g5.xlarge".into(),
            container_image: Some("team/trainer:1".into()),
            ..Default::default()
        };
        let problems = |job: &wire::SubmitServiceJob, c: &mut Cluster| {
            job_spec(job, c)
                .err()
                .unwrap_or_default()
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        };
        for (local, ok) in [
            ("opt/ml/checkpoints", true),
            ("opt/ml/model", false),
            ("opt/ml", false),
            ("opt/ml/input/data/x", false),
            ("ckpt", true),
        ] {
            let mut job = base.clone();
            job.checkpoint_config = Some(wire::CheckpointConfig {
                local_path: Some(local.into()),
                ..Default::default()
            });
            let p = problems(&job, &mut cluster);
            assert_eq!(p.is_empty(), ok, "{local}: {p}");
        }
        let channel = |name: &str| wire::InputChannel {
            channel_name: name.into(),
            s3_uri: "s3://data-bucket/p".into(),
            s3_data_distribution_type: None,
        };
        let mut job = base.clone();
        job.input_data_config = vec![channel("train.a"), channel("TRAIN-A")];
        assert!(problems(&job, &mut cluster).contains("given twice"));
        job.input_data_config = vec![channel("train"), channel("test")];
        let p = problems(&job, &mut cluster);
        assert!(p.is_empty(), "{p}");
    }

    fn doc() -> QueueDocument {
        serde_json::from_value(serde_json::json!({
            "jobQueue": {"jobQueueName": "training"},
            "quotaShares": [
                {"jobQueue": "training", "quotaShareName": "QS1",
                 "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 1}],
                 "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 200},
                 "preemptionConfiguration": {"inSharePreemption": "ENABLED"}},
                {"jobQueue": "training", "quotaShareName": "QS2",
                 "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 1}],
                 "resourceSharingConfiguration": {"strategy": "LEND"}}
            ]
        }))
        .expect("document")
    }

    #[test]
    fn a_queue_document_converts_with_its_strategies() {
        let q = queue(&doc()).expect("valid");
        assert_eq!(q.shares.len(), 2);
        assert_eq!(q.shares[0].strategy, Strategy::LendAndBorrow);
        assert_eq!(q.shares[0].borrow_limit, 200);
        assert!(q.shares[0].in_share_preemption);
        assert_eq!(q.shares[1].strategy, Strategy::Lend);
    }

    #[test]
    fn every_problem_of_a_queue_document_is_named() {
        let mut d = doc();
        d.quota_shares[0].resource_sharing_configuration =
            Some(wire::ResourceSharingConfiguration {
                strategy: "SHARE".into(),
                borrow_limit: None,
            });
        d.quota_shares[1].capacity_limits = None;
        let problems = queue(&d).expect_err("invalid");
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert!(
            fields.contains(&"quotaShares[0].resourceSharingConfiguration.strategy"),
            "{fields:?}"
        );
        assert!(
            fields.contains(&"quotaShares[1].capacityLimits"),
            "{fields:?}"
        );
    }

    #[test]
    fn a_submit_names_its_problems() {
        let q = queue(&doc()).expect("valid");
        let mut cluster = Cluster::new(q, &[]).expect("cluster");
        let job = wire::SubmitServiceJob {
            job_name: "j".into(),
            job_queue: "training".into(),
            quota_share_name: Some("QS9".into()),
            instance_type: "ml.g5.xlarge".into(),
            command: vec![],
            checkpoint_config: Some(wire::CheckpointConfig {
                s3_uri: Some("s3://bucket".into()),
                local_path: Some("/abs".into()),
                checkpoint_before_preempt_seconds: Some(3601),
                checkpoint_signal: Some("SIGKILL".into()),
            }),
            ..Default::default()
        };
        let problems = job_spec(&job, &mut cluster).expect_err("invalid");
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "command",
                "checkpointConfig.s3Uri",
                "checkpointConfig.localPath",
                "checkpointConfig.checkpointBeforePreemptSeconds",
                "checkpointConfig.checkpointSignal",
                "quotaShareName"
            ]
        );
    }

    fn classes_doc() -> QueueDocument {
        serde_yaml_ng::from_str(include_str!("../../../examples/queues/classes.yaml"))
            .expect("examples/queues/classes.yaml parses")
    }

    #[test]
    fn every_example_queue_converts() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/queues");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).expect("examples/queues") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "yaml") {
                // A file may hold several queues (`---`), as `qm apply -f`
                // takes them.
                use serde::Deserialize;
                let text = std::fs::read_to_string(&path).expect("readable");
                for d in serde_yaml_ng::Deserializer::from_str(&text) {
                    let doc = QueueDocument::deserialize(d)
                        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                    queue(&doc).unwrap_or_else(|p| panic!("{}: {p:?}", path.display()));
                    seen += 1;
                }
            }
        }
        assert!(seen >= 2, "the examples are there");
    }

    #[test]
    fn fairness_settings_convert_and_their_mistakes_are_named() {
        let doc: QueueDocument =
            serde_yaml_ng::from_str(include_str!("../../../examples/queues/fairness.yaml"))
                .expect("parses");
        let q = queue(&doc).expect("valid");
        assert_eq!(
            q.idle_assignment,
            qm_core::config::IdleAssignment::FairShare
        );
        assert_eq!(q.groups.len(), 1);
        let qs1 = &q.shares[0];
        assert_eq!(qs1.group.as_deref(), Some("research"));
        assert_eq!(qs1.fair_share_weight, 2);
        assert_eq!(
            qs1.borrow_budget,
            Some(BorrowBudget {
                instance_seconds: 24 * 3600,
                window: BudgetWindow::Rolling { hours: 168 }
            })
        );
        assert_eq!(
            qs1.on_budget_exhausted,
            OnBudgetExhausted::CheckpointAndStop
        );
        let mut bad = doc.clone();
        bad.quota_shares[0].borrow_budget = Some(Some(wire::BorrowBudget {
            instance_hours: 1.0,
            window_hours: Some(24),
            half_life_hours: Some(24),
        }));
        bad.quota_shares[0].on_budget_exhausted = Some("LATER".into());
        bad.job_queue.idle_resource_assignment_strategy = Some("ROUND_ROBIN".into());
        let problems = queue(&bad).expect_err("three problems");
        let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "quotaShares[0].borrowBudget",
                "quotaShares[0].onBudgetExhausted",
                "jobQueue.idleResourceAssignmentStrategy",
            ],
            "{problems:?}"
        );
        let mut tiny = doc;
        tiny.quota_shares[0].borrow_budget = Some(Some(wire::BorrowBudget {
            instance_hours: 0.0001,
            window_hours: Some(24),
            half_life_hours: None,
        }));
        let problems = queue(&tiny).expect_err("under a second");
        assert_eq!(
            problems[0].field,
            "quotaShares[0].borrowBudget.instanceHours"
        );
    }

    #[test]
    fn workload_classes_convert_with_their_defaults_and_a_job_gets_its_band() {
        let q = queue(&classes_doc()).expect("valid");
        let qs1 = &q.shares[0];
        assert_eq!(qs1.default_class.as_deref(), Some("exploratory"));
        let names: Vec<&str> = qs1.classes.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["exploratory", "release", "urgent"]);
        let release = &qs1.classes[1];
        assert!(
            release.may_borrow
                && release.borrow_requires_resume_proof
                && release.requires_checkpoint
        );
        assert_eq!(
            release.preemptible_by.as_deref(),
            Some(&["urgent".to_string()][..])
        );
        assert_eq!(release.checkpoint_before_preempt_secs, Some(60));
        assert_eq!(release.result_tolerance_ppm, 1_000);
        assert_eq!(qs1.classes[2].min_runtime_before_preemption_secs, Some(300));
        assert!(qs1.classes[0].preemptible_by.is_none());

        let mut cluster = Cluster::new(q, &[]).expect("cluster");
        let job = wire::SubmitServiceJob {
            job_name: "j".into(),
            job_queue: "training".into(),
            quota_share_name: Some("QS1".into()),
            instance_type: "ml.g5.xlarge".into(),
            workload_class: Some("urgent".into()),
            command: vec!["train".into()],
            ..Default::default()
        };
        let spec = job_spec(&job, &mut cluster).expect("valid");
        assert_eq!(
            (spec.class.as_deref(), spec.priority),
            (Some("urgent"), 200)
        );
        let artifact = spec.artifact.expect("an artifact");
        assert!(
            artifact.starts_with("command:") && artifact.len() == 8 + 64,
            "{artifact}"
        );
        // The same argv, the same artifact; another, another.
        assert_eq!(
            job_spec(&job, &mut cluster)
                .expect("valid")
                .artifact
                .as_deref(),
            Some(artifact.as_str())
        );
        let other = wire::SubmitServiceJob {
            command: vec!["train".into(), "--x".into()],
            ..job.clone()
        };
        assert_ne!(
            job_spec(&other, &mut cluster)
                .expect("valid")
                .artifact
                .as_deref(),
            Some(artifact.as_str())
        );
    }

    #[test]
    fn a_class_that_needs_a_resume_proof_needs_an_image_pinned_by_digest() {
        let mut cluster =
            Cluster::new(queue(&classes_doc()).expect("valid"), &[]).expect("cluster");
        let mut job = wire::SubmitServiceJob {
            job_name: "j".into(),
            job_queue: "training".into(),
            quota_share_name: Some("QS1".into()),
            instance_type: "ml.g5.xlarge".into(),
            workload_class: Some("release".into()),
            container_image: Some("registry.local/team/trainer:rc1".into()),
            checkpoint_config: Some(Default::default()),
            ..Default::default()
        };
        let problems = job_spec(&job, &mut cluster).expect_err("a tag moves");
        assert_eq!(problems[0].field, "containerImage");
        assert!(
            problems[0]
                .message
                .contains("pin it as name@sha256:<digest>"),
            "{problems:?}"
        );
        let digest = format!("registry.local/team/trainer@sha256:{}", "a".repeat(64));
        job.container_image = Some(digest.clone());
        let spec = job_spec(&job, &mut cluster).expect("pinned");
        assert_eq!(spec.artifact, Some(format!("image:{digest}")));
    }

    #[test]
    fn a_class_document_with_an_unknown_field_is_refused() {
        let text = include_str!("../../../examples/queues/classes.yaml")
            .replace("requiresCheckpoint: true", "requireCheckpoint: true");
        let e = serde_yaml_ng::from_str::<QueueDocument>(&text).expect_err("a typo");
        assert!(e.to_string().contains("requireCheckpoint"), "{e}");
    }
}
