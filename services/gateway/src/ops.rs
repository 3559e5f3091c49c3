//! Each AWS Batch operation, translated onto the NATS API (made as the
//! signer, so admission and the scheduler authorize it) and its answer
//! translated back into the service model's shape.

use std::collections::BTreeMap;

use qm_service::client::{CallError, Client};
use qm_tenancy::{authorize, Action};
use qm_wire::messages::{
    self as wire, Caller, ErrorCode, JobPreemptionConfiguration, JobQueueSnapshot, ListServiceJobs,
    ListServiceJobsResponse, RetryStrategy, ServiceJob, TimeoutConfig,
};
use qm_wire::subjects::Operation;
use qm_wire::system::QueueDocument;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::arn::Resource;
use crate::http::{AwsError, Op};
use crate::store::{
    self, EnvironmentRecord, JobRecord, PolicyRecord, QueueRecord, Tags, TagsRecord,
};
use crate::Gateway;

/// One authenticated request.
pub struct Call<'a> {
    pub caller: &'a Caller,
    pub body: &'a [u8],
    /// The `{resourceArn}` of the tag routes.
    pub arn: Option<&'a str>,
    pub query: &'a str,
}

type Answer = Result<Value, AwsError>;

const JOB_TYPE: &str = "SAGEMAKER_TRAINING";
/// AWS's page size, and its largest.
const PAGE: usize = 100;

fn input<T: DeserializeOwned>(body: &[u8]) -> Result<T, AwsError> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| {
        AwsError::client(format!(
            "the request body is not valid for this operation: {e}"
        ))
    })
}

fn store_failed(e: store::StoreError) -> AwsError {
    AwsError::server(e.to_string())
}

impl From<store::StoreError> for AwsError {
    fn from(e: store::StoreError) -> AwsError {
        store_failed(e)
    }
}

/// A NATS API failure, as AWS answers it.
fn api_failed(e: CallError) -> AwsError {
    match &e {
        CallError::Api(api) => match api.code {
            ErrorCode::AccessDenied => AwsError {
                status: 403,
                code: "AccessDeniedException",
                message: e.to_string(),
            },
            ErrorCode::Invalid | ErrorCode::NotFound | ErrorCode::Conflict => {
                AwsError::client(e.to_string())
            }
            ErrorCode::Transient | ErrorCode::Internal => AwsError::server(e.to_string()),
        },
        _ => AwsError::server(e.to_string()),
    }
}

fn is_not_found(e: &CallError) -> bool {
    e.code() == Some(ErrorCode::NotFound)
}

/// AWS's tag rules: at most 50, keys 1-128 characters, values at most 256,
/// no `aws:` prefix.
fn check_tags(tags: &Tags) -> Result<(), AwsError> {
    if tags.len() > 50 {
        return Err(AwsError::client(format!(
            "tags: {} tags; a resource has at most 50",
            tags.len()
        )));
    }
    for (k, v) in tags {
        if k.is_empty() || k.chars().count() > 128 {
            return Err(AwsError::client(format!(
                "tags: key {k:?} is not 1 to 128 characters"
            )));
        }
        if k.to_ascii_lowercase().starts_with("aws:") {
            return Err(AwsError::client(format!(
                "tags: key {k:?}: the aws: prefix is reserved"
            )));
        }
        if v.chars().count() > 256 {
            return Err(AwsError::client(format!(
                "tags: the value of {k:?} is longer than 256 characters"
            )));
        }
    }
    Ok(())
}

fn range(field: &str, v: i64, lo: i64, hi: i64) -> Result<i64, AwsError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(AwsError::client(format!(
            "{field}: {v} is not {lo} to {hi}"
        )))
    }
}

fn page_size(max: Option<i64>) -> Result<usize, AwsError> {
    match max {
        None => Ok(PAGE),
        Some(m) => Ok(range("maxResults", m, 1, PAGE as i64)? as usize),
    }
}

/// One page of `items` from an offset token.
fn page<T: Clone>(
    items: &[T],
    max: usize,
    token: Option<&str>,
) -> Result<(Vec<T>, Option<String>), AwsError> {
    let start = match token {
        None => 0,
        Some(t) => t.parse::<usize>().map_err(|_| {
            AwsError::client(format!("nextToken {t:?} is not one this endpoint returned"))
        })?,
    };
    let end = (start + max).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((items.get(start..end).unwrap_or_default().to_vec(), next))
}

fn is_admin(caller: &Caller) -> Result<(), AwsError> {
    if caller.role == "ADMIN" {
        Ok(())
    } else {
        Err(AwsError {
            status: 403,
            code: "AccessDeniedException",
            message: format!(
                "principal {:?} may not change scheduling policies or service environments (admins only)",
                caller.principal
            ),
        })
    }
}

fn status_ok(s: &str) -> Result<(), AwsError> {
    const ALL: [&str; 8] = [
        "SUBMITTED",
        "PENDING",
        "RUNNABLE",
        "SCHEDULED",
        "STARTING",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
    ];
    if ALL.contains(&s) {
        Ok(())
    } else {
        Err(AwsError::client(format!(
            "jobStatus: {s:?} is not one of {}",
            ALL.join(", ")
        )))
    }
}

fn state_ok(field: &str, s: &Option<String>) -> Result<(), AwsError> {
    match s.as_deref() {
        None | Some("ENABLED" | "DISABLED") => Ok(()),
        Some(other) => Err(AwsError::client(format!(
            "{field}: {other:?} is not ENABLED or DISABLED"
        ))),
    }
}

// ----- request shapes (the service model's members; others are ignored) --

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubmitIn {
    job_name: String,
    job_queue: String,
    #[serde(default)]
    retry_strategy: Option<RetryStrategy>,
    #[serde(default)]
    scheduling_priority: Option<i64>,
    service_request_payload: String,
    service_job_type: String,
    #[serde(default)]
    share_identifier: Option<String>,
    #[serde(default)]
    quota_share_name: Option<String>,
    #[serde(default)]
    preemption_configuration: Option<JobPreemptionConfiguration>,
    #[serde(default)]
    timeout_config: Option<TimeoutConfig>,
    #[serde(default)]
    tags: Option<Tags>,
    #[serde(default)]
    client_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobIdIn {
    job_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct UpdateJobIn {
    job_id: String,
    scheduling_priority: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TerminateManyIn {
    #[serde(default)]
    jobs: Vec<String>,
    reason: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TerminateIn {
    job_id: String,
    reason: String,
}

#[derive(Deserialize)]
struct Filter {
    #[serde(default)]
    name: String,
    #[serde(default)]
    values: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListJobsIn {
    #[serde(default)]
    job_queue: Option<String>,
    #[serde(default)]
    job_status: Option<String>,
    #[serde(default)]
    max_results: Option<i64>,
    #[serde(default)]
    next_token: Option<String>,
    #[serde(default)]
    filters: Vec<Filter>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ShareIn {
    #[serde(default)]
    quota_share_name: Option<String>,
    #[serde(default)]
    quota_share_arn: Option<String>,
    #[serde(default)]
    job_queue: Option<String>,
    #[serde(default)]
    capacity_limits: Option<Vec<wire::CapacityLimit>>,
    #[serde(default)]
    resource_sharing_configuration: Option<wire::ResourceSharingConfiguration>,
    #[serde(default)]
    preemption_configuration: Option<wire::SharePreemptionConfiguration>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    tags: Option<Tags>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct QueueIn {
    #[serde(default)]
    job_queue: Option<String>,
    #[serde(default)]
    max_results: Option<i64>,
    #[serde(default)]
    next_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyIn {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arn: Option<String>,
    #[serde(default)]
    quota_share_policy: Option<Value>,
    #[serde(default)]
    fairshare_policy: Option<Value>,
    #[serde(default)]
    tags: Option<Tags>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArnsIn {
    #[serde(default)]
    arns: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvOrder {
    #[serde(default)]
    order: i64,
    service_environment: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct JobQueueIn {
    #[serde(default)]
    job_queue_name: Option<String>,
    #[serde(default)]
    job_queue: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    scheduling_policy_arn: Option<String>,
    #[serde(default)]
    priority: Option<i64>,
    #[serde(default)]
    compute_environment_order: Vec<Value>,
    #[serde(default)]
    service_environment_order: Option<Vec<EnvOrder>>,
    #[serde(default)]
    job_queue_type: Option<String>,
    #[serde(default)]
    tags: Option<Tags>,
    #[serde(default)]
    job_state_time_limit_actions: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeQueuesIn {
    #[serde(default)]
    job_queues: Vec<String>,
    #[serde(default)]
    max_results: Option<i64>,
    #[serde(default)]
    next_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EnvIn {
    #[serde(default)]
    service_environment_name: Option<String>,
    #[serde(default)]
    service_environment: Option<String>,
    #[serde(default)]
    service_environment_type: Option<String>,
    #[serde(default)]
    state: Option<String>,
    #[serde(default)]
    capacity_limits: Option<Vec<Value>>,
    #[serde(default)]
    tags: Option<Tags>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeEnvsIn {
    #[serde(default)]
    service_environments: Vec<String>,
    #[serde(default)]
    max_results: Option<i64>,
    #[serde(default)]
    next_token: Option<String>,
}

#[derive(Deserialize)]
struct TagIn {
    #[serde(default)]
    tags: Tags,
}

/// `ListServiceJobs`' own pagination over the NATS API's, when the gateway
/// filters: the NATS page to read again and how many of it were served.
#[derive(serde::Serialize, Deserialize)]
struct ListToken {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    t: Option<String>,
    #[serde(default)]
    s: usize,
}

impl Gateway {
    fn api(&self, caller: &Caller) -> Client {
        self.client.acting_for(&caller.principal)
    }

    async fn call<Q: serde::Serialize, R: DeserializeOwned>(
        &self,
        caller: &Caller,
        op: Operation,
        req: &Q,
    ) -> Result<R, AwsError> {
        self.api(caller).call(op, req).await.map_err(api_failed)
    }

    fn bad(&self, e: String) -> AwsError {
        AwsError::client(e)
    }

    /// Runs one operation.
    pub async fn run(&self, op: Op, c: Call<'_>) -> Answer {
        match op {
            Op::SubmitServiceJob => self.submit(c.caller, input(c.body)?).await,
            Op::DescribeServiceJob => self.describe_job(c.caller, input(c.body)?).await,
            Op::ListServiceJobs => self.list_jobs(c.caller, input(c.body)?).await,
            Op::UpdateServiceJob => self.update_job(c.caller, input(c.body)?).await,
            Op::TerminateServiceJob => {
                let t: TerminateIn = input(c.body)?;
                let _: Value = self
                    .call(
                        c.caller,
                        Operation::TerminateServiceJob,
                        &wire::TerminateServiceJob {
                            job_id: t.job_id,
                            reason: t.reason,
                        },
                    )
                    .await?;
                Ok(json!({}))
            }
            Op::TerminateServiceJobs => self.terminate_jobs(c.caller, input(c.body)?).await,
            Op::ListSchedulingPolicies => {
                let q: QueueIn = input(c.body)?;
                let names = self
                    .store
                    .config
                    .names(store::POLICY_PREFIX)
                    .await
                    .map_err(store_failed)?;
                let (names, next) =
                    page(&names, page_size(q.max_results)?, q.next_token.as_deref())?;
                let mut v = json!({
                    "schedulingPolicies": names.iter().map(|n| json!({"arn": self.arns.of(&Resource::SchedulingPolicy(n.clone()))})).collect::<Vec<_>>(),
                });
                if let Some(n) = next {
                    v["nextToken"] = json!(n);
                }
                Ok(v)
            }
            Op::DeleteSchedulingPolicy => {
                let p: PolicyIn = input(c.body)?;
                self.delete_named(c.caller, p.arn.as_deref().unwrap_or_default(), true)
                    .await
            }
            Op::DeleteServiceEnvironment => {
                let e: EnvIn = input(c.body)?;
                self.delete_named(
                    c.caller,
                    e.service_environment.as_deref().unwrap_or_default(),
                    false,
                )
                .await
            }
            Op::CreateQuotaShare | Op::UpdateQuotaShare => {
                self.put_share(c.caller, input(c.body)?, op == Op::CreateQuotaShare)
                    .await
            }
            Op::DescribeQuotaShare => self.describe_share(c.caller, input(c.body)?).await,
            Op::ListQuotaShares => self.list_shares(c.caller, input(c.body)?).await,
            Op::DeleteQuotaShare => {
                let s: ShareIn = input(c.body)?;
                let (queue, share) = self
                    .arns
                    .share_of(
                        "quotaShareArn",
                        s.quota_share_arn.as_deref().unwrap_or_default(),
                    )
                    .map_err(|e| self.bad(e))?;
                let _: Value = self
                    .call(
                        c.caller,
                        Operation::DeleteQuotaShare,
                        &wire::ShareRef {
                            job_queue: queue.clone(),
                            quota_share_name: share.clone(),
                        },
                    )
                    .await?;
                self.store
                    .config
                    .delete(&store::share_key(&queue, &share))
                    .await
                    .map_err(store_failed)?;
                Ok(json!({}))
            }
            Op::GetJobQueueSnapshot => self.snapshot(c.caller, input(c.body)?).await,
            Op::CreateSchedulingPolicy | Op::UpdateSchedulingPolicy => {
                self.put_policy(c.caller, input(c.body)?, op == Op::CreateSchedulingPolicy)
                    .await
            }
            Op::DescribeSchedulingPolicies => self.describe_policies(input(c.body)?).await,
            Op::CreateJobQueue | Op::UpdateJobQueue => {
                self.put_queue(c.caller, input(c.body)?, op == Op::CreateJobQueue)
                    .await
            }
            Op::DescribeJobQueues => self.describe_queues(c.caller, input(c.body)?).await,
            Op::CreateServiceEnvironment | Op::UpdateServiceEnvironment => {
                self.put_environment(c.caller, input(c.body)?, op == Op::CreateServiceEnvironment)
                    .await
            }
            Op::DescribeServiceEnvironments => self.describe_environments(input(c.body)?).await,
            Op::TagResource | Op::UntagResource | Op::ListTagsForResource => self.tags(op, c).await,
        }
    }

    // ----- service jobs ---------------------------------------------------

    async fn submit(&self, caller: &Caller, s: SubmitIn) -> Answer {
        if s.service_job_type != JOB_TYPE {
            return Err(self.bad(format!(
                "serviceJobType: {:?} is not supported (only {JOB_TYPE})",
                s.service_job_type
            )));
        }
        if s.share_identifier.is_some() {
            return Err(self.bad(
                "shareIdentifier: fair-share scheduling is not supported; give quotaShareName"
                    .into(),
            ));
        }
        let queue = self
            .arns
            .queue_name("jobQueue", &s.job_queue)
            .map_err(|e| self.bad(e))?;
        let priority = match s.scheduling_priority {
            Some(p) => Some(range("schedulingPriority", p, 0, 9999)? as u32),
            None => None,
        };
        let t = crate::payload::parse(
            &s.service_request_payload,
            &self.settings.host_command_images,
        )
        .map_err(|e| self.bad(e))?;
        let mut tags = t.tags.clone();
        tags.extend(s.tags.clone().unwrap_or_default());
        check_tags(&tags)?;
        let timeout = match (s.timeout_config.clone(), t.max_runtime_seconds) {
            (Some(a), Some(b)) => Some(TimeoutConfig {
                attempt_duration_seconds: a.attempt_duration_seconds.min(b),
            }),
            (a, b) => a.or(b.map(|b| TimeoutConfig {
                attempt_duration_seconds: b,
            })),
        };
        let job = wire::SubmitServiceJob {
            job_name: s.job_name.clone(),
            job_queue: queue,
            quota_share_name: s.quota_share_name.clone(),
            instance_type: t.instance_type,
            instance_count: Some(t.instance_count),
            scheduling_priority: priority,
            preemption_configuration: s.preemption_configuration.clone(),
            retry_strategy: s.retry_strategy.clone(),
            timeout_config: timeout,
            termination_grace_period_seconds: None,
            checkpoint_config: t.checkpoint,
            command: t.command,
            container_image: t.container_image,
            output_data_config: t
                .output_path
                .map(|p| wire::OutputDataConfig { s3_output_path: p }),
            input_data_config: t.channels,
            environment: t.environment,
            tags: tags.clone(),
            client_token: s.client_token.clone(),
        };
        let done: wire::SubmitServiceJobResponse =
            self.call(caller, Operation::SubmitServiceJob, &job).await?;
        let mut request = json!({
            "jobName": s.job_name,
            "jobQueue": s.job_queue,
            "serviceRequestPayload": s.service_request_payload,
            "serviceJobType": s.service_job_type,
        });
        if let Some(o) = request.as_object_mut() {
            let mut add = |k: &str, v: Option<Value>| {
                if let Some(v) = v {
                    o.insert(k.into(), v);
                }
            };
            add("retryStrategy", s.retry_strategy.map(|r| json!(r)));
            add("timeoutConfig", s.timeout_config.map(|r| json!(r)));
            add(
                "preemptionConfiguration",
                s.preemption_configuration.map(|r| json!(r)),
            );
        }
        // The job is stored; a record that cannot be is only a loss of
        // what DescribeServiceJob shows, so the submit still succeeds.
        let record = JobRecord { request, tags };
        if let Err(e) = self
            .store
            .jobs
            .put(&store::job_key(&done.job_id), &record)
            .await
        {
            tracing::warn!(job = %done.job_id, error = %e, "the job's AWS request was not recorded");
        }
        Ok(json!({
            "jobArn": self.arns.job(&done.job_id),
            "jobName": done.job_name,
            "jobId": done.job_id,
        }))
    }

    /// `TerminateServiceJobs`: up to 50, each answered on its own.
    async fn terminate_jobs(&self, caller: &Caller, t: TerminateManyIn) -> Answer {
        if t.jobs.is_empty() || t.jobs.len() > 50 {
            return Err(self.bad(format!("jobs: {} job ids; give 1 to 50", t.jobs.len())));
        }
        let mut successful = Vec::new();
        let mut errors = Vec::new();
        for job in t.jobs {
            let r: Result<Value, AwsError> = self
                .call(
                    caller,
                    Operation::TerminateServiceJob,
                    &wire::TerminateServiceJob {
                        job_id: job.clone(),
                        reason: t.reason.clone(),
                    },
                )
                .await;
            match r {
                Ok(_) => successful.push(job),
                Err(e) => errors.push(json!({"job": job, "code": e.code, "message": e.message})),
            }
        }
        Ok(json!({ "successful": successful, "errors": errors }))
    }

    /// Deletes a scheduling policy (`policy`) or a service environment: an
    /// admin's, and only when no job queue uses it (an environment must be
    /// DISABLED first, as in AWS).
    async fn delete_named(&self, caller: &Caller, given: &str, policy: bool) -> Answer {
        is_admin(caller)?;
        let field = if policy { "arn" } else { "serviceEnvironment" };
        let name = self
            .arns
            .named(field, given, policy)
            .map_err(|e| self.bad(e))?;
        let prefix = if policy {
            store::POLICY_PREFIX
        } else {
            store::ENVIRONMENT_PREFIX
        };
        let key = format!("{prefix}{name}");
        let Some(record) = self
            .store
            .config
            .get::<Value>(&key)
            .await
            .map_err(store_failed)?
        else {
            return Err(self.bad(format!("{field}: no such resource {name:?}")));
        };
        if !policy && record["state"] != "DISABLED" {
            return Err(self.bad(format!(
                "service environment {name:?} is ENABLED: disable it with UpdateServiceEnvironment first"
            )));
        }
        for (queue, q) in self.queue_records().await? {
            let uses = if policy {
                q.scheduling_policy_arn
                    .as_deref()
                    .and_then(|a| self.arns.named("arn", a, true).ok())
                    .as_deref()
                    == Some(name.as_str())
            } else {
                q.service_environment.as_deref() == Some(name.as_str())
            };
            if uses {
                return Err(self.bad(format!(
                    "job queue {queue:?} uses {name:?}; update the queue first"
                )));
            }
        }
        self.store.config.delete(&key).await.map_err(store_failed)?;
        Ok(json!({}))
    }

    /// Every job queue's AWS-only record.
    async fn queue_records(&self) -> Result<Vec<(String, QueueRecord)>, AwsError> {
        let mut out = Vec::new();
        for queue in self
            .store
            .config
            .names("queue.")
            .await
            .map_err(store_failed)?
        {
            let record: Option<QueueRecord> = self
                .store
                .config
                .get(&store::queue_key(&queue))
                .await
                .map_err(store_failed)?;
            if let Some(r) = record {
                out.push((queue, r));
            }
        }
        Ok(out)
    }

    async fn job(&self, caller: &Caller, id: &str) -> Result<ServiceJob, AwsError> {
        self.call(
            caller,
            Operation::DescribeServiceJob,
            &wire::JobRef { job_id: id.into() },
        )
        .await
    }

    /// A job as `DescribeServiceJob` (`full`) or a `ListServiceJobs`
    /// summary shows it.
    fn job_view(&self, j: &ServiceJob, record: Option<&JobRecord>, full: bool) -> Value {
        let attempt = |a: &wire::AttemptDetail| {
            let mut v = json!({
                "serviceResourceId": {
                    "name": "TrainingJobArn",
                    "value": self.arns.training_job(&j.job_id, a.attempt),
                },
            });
            if let Some(o) = v.as_object_mut() {
                if let Some(t) = a.started_at {
                    o.insert("startedAt".into(), json!(t));
                }
                if let Some(t) = a.stopped_at {
                    o.insert("stoppedAt".into(), json!(t));
                }
                if let Some(r) = &a.outcome {
                    o.insert("statusReason".into(), json!(r));
                }
            }
            v
        };
        let finished = matches!(j.status.as_str(), "SUCCEEDED" | "FAILED");
        let mut v = json!({
            "jobArn": self.arns.job(&j.job_id),
            "jobId": j.job_id,
            "jobName": j.job_name,
            "serviceJobType": JOB_TYPE,
            "quotaShareName": j.quota_share_name,
            "status": j.status,
            "statusReason": j.status_reason,
            "createdAt": j.created_at,
            "isTerminated": j.status_reason.starts_with("CANCELLED"),
            "capacityUsage": [{"capacityUnit": j.instance_type, "quantity": f64::from(j.instance_count)}],
        });
        let Some(o) = v.as_object_mut() else {
            return v;
        };
        if let Some(last) = j.attempts.last() {
            o.insert(
                "latestAttempt".into(),
                json!({"serviceResourceId": attempt(last)["serviceResourceId"]}),
            );
            if finished {
                if let Some(t) = last.stopped_at {
                    o.insert("stoppedAt".into(), json!(t));
                }
            }
        }
        if let Some(t) = j.attempts.iter().find_map(|a| a.started_at) {
            o.insert("startedAt".into(), json!(t));
        }
        if !full {
            return v;
        }
        o.insert("jobQueue".into(), json!(self.arns.queue(&j.job_queue)));
        o.insert("schedulingPriority".into(), json!(j.scheduling_priority));
        o.insert(
            "attempts".into(),
            Value::Array(j.attempts.iter().map(attempt).collect()),
        );
        if let Some(p) = &j.preemption_summary {
            o.insert(
                "preemptionSummary".into(),
                json!({
                    "preemptedAttemptCount": p.preempted_attempt_count,
                    "recentPreemptedAttempts": p.recent_preempted_attempts.iter().map(attempt).collect::<Vec<_>>(),
                }),
            );
        }
        let tags = record.map_or_else(|| j.tags.clone(), |r| r.tags.clone());
        o.insert("tags".into(), json!(tags));
        if let Some(Value::Object(req)) = record.map(|r| &r.request) {
            for k in [
                "serviceRequestPayload",
                "retryStrategy",
                "timeoutConfig",
                "preemptionConfiguration",
            ] {
                if let Some(x) = req.get(k) {
                    o.insert(k.into(), x.clone());
                }
            }
        }
        v
    }

    async fn describe_job(&self, caller: &Caller, r: JobIdIn) -> Answer {
        let j = self.job(caller, &r.job_id).await?;
        let record: Option<JobRecord> = self
            .store
            .jobs
            .get(&store::job_key(&j.job_id))
            .await
            .map_err(store_failed)?;
        Ok(self.job_view(&j, record.as_ref(), true))
    }

    async fn update_job(&self, caller: &Caller, u: UpdateJobIn) -> Answer {
        let priority = range("schedulingPriority", u.scheduling_priority, 0, 9999)? as u32;
        let _: Value = self
            .call(
                caller,
                Operation::UpdateServiceJob,
                &wire::UpdateServiceJob {
                    job_id: u.job_id.clone(),
                    scheduling_priority: priority,
                },
            )
            .await?;
        let j = self.job(caller, &u.job_id).await?;
        Ok(json!({
            "jobArn": self.arns.job(&j.job_id),
            "jobName": j.job_name,
            "jobId": j.job_id,
        }))
    }

    /// `ListServiceJobs`: AWS's defaults (RUNNING when no status and no
    /// filter), its filters (one at a time; a share filter may go with a
    /// status), and pages of at most 100.
    async fn list_jobs(&self, caller: &Caller, l: ListJobsIn) -> Answer {
        let queue = self
            .arns
            .queue_name("jobQueue", l.job_queue.as_deref().unwrap_or_default())
            .map_err(|e| self.bad(format!("{e} (jobQueue is required)")))?;
        let max = page_size(l.max_results)?;
        if l.filters.len() > 1 {
            return Err(self.bad("filters: only one filter can be used at a time".into()));
        }
        if let Some(s) = &l.job_status {
            status_ok(s)?;
        }
        let filter = l.filters.first();
        let mut status = l.job_status.clone();
        let mut share = None;
        let mut keep: Box<dyn Fn(&ServiceJob) -> bool + Send> = Box::new(|_| true);
        match filter {
            None => {
                status.get_or_insert_with(|| "RUNNING".into());
            }
            Some(f) => {
                let [value] = &f.values[..] else {
                    return Err(self.bad(format!("filters: {:?} takes exactly one value", f.name)));
                };
                match f.name.as_str() {
                    "QUOTA_SHARE_NAME" => share = Some(value.clone()),
                    "SHARE_IDENTIFIER" => {
                        return Err(self.bad(
                            "filters: SHARE_IDENTIFIER is fair-share scheduling, which is not supported; use QUOTA_SHARE_NAME".into(),
                        ))
                    }
                    "JOB_NAME" => {
                        status = None;
                        let want = value.to_lowercase();
                        keep = match want.strip_suffix('*') {
                            Some(prefix) => {
                                let prefix = prefix.to_string();
                                Box::new(move |j| j.job_name.to_lowercase().starts_with(&prefix))
                            }
                            None => Box::new(move |j| j.job_name.to_lowercase() == want),
                        };
                    }
                    "BEFORE_CREATED_AT" | "AFTER_CREATED_AT" => {
                        status = None;
                        let at: u64 = value.parse().map_err(|_| {
                            self.bad(format!(
                                "filters: {}: {value:?} is not milliseconds since the epoch",
                                f.name
                            ))
                        })?;
                        keep = if f.name == "BEFORE_CREATED_AT" {
                            Box::new(move |j| j.created_at < at)
                        } else {
                            Box::new(move |j| j.created_at > at)
                        };
                    }
                    other => {
                        return Err(self.bad(format!(
                            "filters: {other:?} is not JOB_NAME, BEFORE_CREATED_AT, AFTER_CREATED_AT or QUOTA_SHARE_NAME"
                        )))
                    }
                }
            }
        }
        let mut token: ListToken = match &l.next_token {
            None => ListToken { t: None, s: 0 },
            Some(t) => {
                serde_json::from_slice(&decode_hex(t).unwrap_or_default()).map_err(|_| {
                    self.bad(format!("nextToken {t:?} is not one this endpoint returned"))
                })?
            }
        };
        let mut out = Vec::new();
        loop {
            let request = ListServiceJobs {
                job_queue: queue.clone(),
                job_status: status.clone(),
                quota_share_name: share.clone(),
                max_results: Some(PAGE as u32),
                next_token: token.t.clone(),
            };
            let got: ListServiceJobsResponse = self
                .call(caller, Operation::ListServiceJobs, &request)
                .await?;
            let mut served = token.s;
            for j in got.job_summary_list.iter().skip(token.s) {
                served += 1;
                if keep(j) {
                    out.push(self.job_view(j, None, false));
                    if out.len() == max {
                        break;
                    }
                }
            }
            let page_done = served >= got.job_summary_list.len();
            if out.len() == max || got.next_token.is_none() {
                let next = match (page_done, got.next_token) {
                    (false, _) => Some(ListToken {
                        t: token.t,
                        s: served,
                    }),
                    (true, Some(t)) => Some(ListToken { t: Some(t), s: 0 }),
                    (true, None) => None,
                };
                let mut v = json!({ "jobSummaryList": out });
                if let Some(n) = next {
                    let raw = serde_json::to_vec(&n).unwrap_or_default();
                    v["nextToken"] = json!(encode_hex(&raw));
                }
                return Ok(v);
            }
            token = ListToken {
                t: got.next_token,
                s: 0,
            };
        }
    }

    // ----- quota shares -----------------------------------------------------

    fn share_view(&self, queue: &str, s: &wire::QuotaShare, tags: Option<&Tags>) -> Value {
        let mut v = json!({
            "quotaShareName": s.quota_share_name,
            "quotaShareArn": self.arns.share(queue, &s.quota_share_name),
            "jobQueueArn": self.arns.queue(queue),
            "capacityLimits": s.capacity_limits.clone().unwrap_or_default(),
            "resourceSharingConfiguration": s.resource_sharing_configuration.clone().unwrap_or_else(|| wire::ResourceSharingConfiguration { strategy: "RESERVE".into(), borrow_limit: None }),
            "preemptionConfiguration": s.preemption_configuration.clone().unwrap_or_else(|| wire::SharePreemptionConfiguration { in_share_preemption: "DISABLED".into() }),
            "state": s.state.clone().unwrap_or_else(|| "ENABLED".into()),
            "status": "VALID",
        });
        if let Some(t) = tags {
            v["tags"] = json!(t);
        }
        v
    }

    async fn share_tags(&self, queue: &str, share: &str) -> Result<Tags, AwsError> {
        let r: Option<TagsRecord> = self
            .store
            .config
            .get(&store::share_key(queue, share))
            .await
            .map_err(store_failed)?;
        Ok(r.map(|r| r.tags).unwrap_or_default())
    }

    async fn put_share(&self, caller: &Caller, s: ShareIn, create: bool) -> Answer {
        let (queue, name) = if create {
            let queue = self
                .arns
                .queue_name("jobQueue", s.job_queue.as_deref().unwrap_or_default())
                .map_err(|e| self.bad(e))?;
            let name = s.quota_share_name.clone().unwrap_or_default();
            qm_wire::subjects::token(&name)
                .map_err(|e| self.bad(format!("quotaShareName: {e}")))?;
            (queue, name)
        } else {
            self.arns
                .share_of(
                    "quotaShareArn",
                    s.quota_share_arn.as_deref().unwrap_or_default(),
                )
                .map_err(|e| self.bad(e))?
        };
        state_ok("state", &s.state)?;
        if let Some(t) = &s.tags {
            check_tags(t)?;
        }
        let share = wire::QuotaShare {
            job_queue: queue.clone(),
            quota_share_name: name.clone(),
            state: s.state.clone(),
            capacity_limits: s.capacity_limits.clone(),
            resource_sharing_configuration: s.resource_sharing_configuration.clone(),
            preemption_configuration: s.preemption_configuration.clone(),
            protections: None,
            checkpoint_s3_prefixes: None,
            image_prefixes: None,
            input_s3_prefixes: None,
            run_as_non_root: None,
        };
        let op = if create {
            Operation::CreateQuotaShare
        } else {
            Operation::UpdateQuotaShare
        };
        let _: wire::QuotaShare = self.call(caller, op, &share).await?;
        if create {
            let record = TagsRecord {
                tags: s.tags.unwrap_or_default(),
            };
            self.store
                .config
                .put(&store::share_key(&queue, &name), &record)
                .await
                .map_err(store_failed)?;
        }
        Ok(json!({
            "quotaShareName": name,
            "quotaShareArn": self.arns.share(&queue, &name),
        }))
    }

    async fn describe_share(&self, caller: &Caller, s: ShareIn) -> Answer {
        let (queue, name) = self
            .arns
            .share_of(
                "quotaShareArn",
                s.quota_share_arn.as_deref().unwrap_or_default(),
            )
            .map_err(|e| self.bad(e))?;
        let share: wire::QuotaShare = self
            .call(
                caller,
                Operation::DescribeQuotaShare,
                &wire::ShareRef {
                    job_queue: queue.clone(),
                    quota_share_name: name.clone(),
                },
            )
            .await?;
        let tags = self.share_tags(&queue, &name).await?;
        Ok(self.share_view(&queue, &share, Some(&tags)))
    }

    async fn list_shares(&self, caller: &Caller, q: QueueIn) -> Answer {
        let queue = self
            .arns
            .queue_name("jobQueue", q.job_queue.as_deref().unwrap_or_default())
            .map_err(|e| self.bad(e))?;
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Shares {
            quota_shares: Vec<wire::QuotaShare>,
        }
        let all: Shares = self
            .call(
                caller,
                Operation::ListQuotaShares,
                &wire::QueueRef {
                    job_queue: queue.clone(),
                },
            )
            .await?;
        let (shares, next) = page(
            &all.quota_shares,
            page_size(q.max_results)?,
            q.next_token.as_deref(),
        )?;
        let mut v = json!({
            "quotaShares": shares.iter().map(|s| self.share_view(&queue, s, None)).collect::<Vec<_>>(),
        });
        if let Some(n) = next {
            v["nextToken"] = json!(n);
        }
        Ok(v)
    }

    async fn snapshot(&self, caller: &Caller, q: QueueIn) -> Answer {
        let queue = self
            .arns
            .queue_name("jobQueue", q.job_queue.as_deref().unwrap_or_default())
            .map_err(|e| self.bad(e))?;
        let s: JobQueueSnapshot = self
            .call(
                caller,
                Operation::GetJobQueueSnapshot,
                &wire::QueueRef { job_queue: queue },
            )
            .await?;
        let now = qm_service::now_ms();
        let position = |j: &ServiceJob| {
            json!({
                "jobArn": self.arns.job(&j.job_id),
                "earliestTimeAtPosition": j.runnable_since.unwrap_or(j.created_at),
            })
        };
        let mut fronts: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for j in &s.front_of_quota_shares {
            fronts
                .entry(j.quota_share_name.clone())
                .or_default()
                .push(position(j));
        }
        let mut total: BTreeMap<String, u32> = BTreeMap::new();
        let mut per_share: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for u in &s.shares {
            *total.entry(u.instance_type.clone()).or_default() += u.used;
            per_share
                .entry(u.quota_share_name.clone())
                .or_default()
                .push(json!({"capacityUnit": u.instance_type, "quantity": f64::from(u.used)}));
        }
        Ok(json!({
            "frontOfQueue": {
                "jobs": s.front_of_queue.iter().map(position).collect::<Vec<_>>(),
                "lastUpdatedAt": now,
            },
            "frontOfQuotaShares": {
                "quotaShares": fronts,
                "lastUpdatedAt": now,
            },
            "queueUtilization": {
                "totalCapacityUsage": total.iter().map(|(t, n)| json!({"capacityUnit": t, "quantity": f64::from(*n)})).collect::<Vec<_>>(),
                "quotaShareUtilization": {
                    "topCapacityUtilization": per_share.iter().map(|(s, u)| json!({"quotaShareName": s, "capacityUsage": u})).collect::<Vec<_>>(),
                },
                "lastUpdatedAt": now,
            },
        }))
    }

    // ----- scheduling policies ---------------------------------------------

    fn policy_view(&self, name: &str, p: &PolicyRecord) -> Value {
        json!({
            "name": name,
            "arn": self.arns.of(&Resource::SchedulingPolicy(name.into())),
            "quotaSharePolicy": p.quota_share_policy,
            "tags": p.tags,
        })
    }

    async fn put_policy(&self, caller: &Caller, p: PolicyIn, create: bool) -> Answer {
        is_admin(caller)?;
        if p.fairshare_policy.is_some() {
            return Err(self.bad(
                "fairsharePolicy: fair-share scheduling is not supported; give quotaSharePolicy"
                    .into(),
            ));
        }
        let policy = p
            .quota_share_policy
            .clone()
            .unwrap_or_else(|| json!({"idleResourceAssignmentStrategy": "FIFO"}));
        if policy.get("idleResourceAssignmentStrategy") != Some(&json!("FIFO")) {
            return Err(self.bad(
                "quotaSharePolicy.idleResourceAssignmentStrategy: only FIFO is supported".into(),
            ));
        }
        let name = if create {
            p.name.clone().unwrap_or_default()
        } else {
            p.arn.clone().unwrap_or_default()
        };
        let field = if create { "name" } else { "arn" };
        let name = self
            .arns
            .named(field, &name, true)
            .map_err(|e| self.bad(e))?;
        let key = format!("{}{name}", store::POLICY_PREFIX);
        if create {
            let tags = p.tags.clone().unwrap_or_default();
            check_tags(&tags)?;
            let record = PolicyRecord {
                quota_share_policy: policy,
                tags,
            };
            if !self
                .store
                .config
                .create(&key, &record)
                .await
                .map_err(store_failed)?
            {
                return Err(self.bad(format!("scheduling policy {name:?} already exists")));
            }
            return Ok(json!({
                "name": name,
                "arn": self.arns.of(&Resource::SchedulingPolicy(name.clone())),
            }));
        }
        let mut record: PolicyRecord = self
            .store
            .config
            .get(&key)
            .await
            .map_err(store_failed)?
            .ok_or_else(|| self.bad(format!("arn: no scheduling policy {name:?}")))?;
        record.quota_share_policy = policy;
        // On the record as stored (a concurrent tag change is kept).
        self.store
            .config
            .update(&key, |stored: Option<PolicyRecord>| {
                let mut stored = stored.unwrap_or_else(|| record.clone());
                stored
                    .quota_share_policy
                    .clone_from(&record.quota_share_policy);
                Ok::<_, AwsError>(stored)
            })
            .await?;
        Ok(json!({}))
    }

    async fn describe_policies(&self, a: ArnsIn) -> Answer {
        if a.arns.is_empty() {
            return Err(self.bad("arns: name at least one scheduling policy".into()));
        }
        let mut out = Vec::new();
        for arn in &a.arns {
            let name = self
                .arns
                .named("arns", arn, true)
                .map_err(|e| self.bad(e))?;
            let key = format!("{}{name}", store::POLICY_PREFIX);
            if let Some(p) = self
                .store
                .config
                .get::<PolicyRecord>(&key)
                .await
                .map_err(store_failed)?
            {
                out.push(self.policy_view(&name, &p));
            }
        }
        Ok(json!({ "schedulingPolicies": out }))
    }

    // ----- service environments --------------------------------------------

    /// Capacity limits as the job queue takes them: per instance type.
    fn queue_limits(
        &self,
        env: &str,
        limits: &[Value],
    ) -> Result<Vec<wire::CapacityLimit>, AwsError> {
        limits
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let unit = l["capacityUnit"].as_str().unwrap_or_default();
                let max = l["maxCapacity"].as_i64().unwrap_or(-1);
                if unit.is_empty() || unit == "NUM_INSTANCES" {
                    return Err(self.bad(format!(
                        "service environment {env:?}: capacityLimits[{i}].capacityUnit must be an instance type (ml.p5.48xlarge, ...): quota shares are per instance type"
                    )));
                }
                if max < 0 {
                    return Err(self.bad(format!(
                        "service environment {env:?}: capacityLimits[{i}].maxCapacity must be 0 or more"
                    )));
                }
                Ok(wire::CapacityLimit {
                    capacity_unit: unit.into(),
                    max_capacity: max,
                })
            })
            .collect()
    }

    fn environment_view(&self, name: &str, e: &EnvironmentRecord) -> Value {
        json!({
            "serviceEnvironmentName": name,
            "serviceEnvironmentArn": self.arns.of(&Resource::ServiceEnvironment(name.into())),
            "serviceEnvironmentType": JOB_TYPE,
            "state": e.state,
            "status": "VALID",
            "capacityLimits": e.capacity_limits,
            "tags": e.tags,
        })
    }

    async fn put_environment(&self, caller: &Caller, e: EnvIn, create: bool) -> Answer {
        is_admin(caller)?;
        state_ok("state", &e.state)?;
        let (field, given) = if create {
            ("serviceEnvironmentName", e.service_environment_name.clone())
        } else {
            ("serviceEnvironment", e.service_environment.clone())
        };
        let name = self
            .arns
            .named(field, given.as_deref().unwrap_or_default(), false)
            .map_err(|e| self.bad(e))?;
        let key = format!("{}{name}", store::ENVIRONMENT_PREFIX);
        if let Some(limits) = &e.capacity_limits {
            self.queue_limits(&name, limits)?;
        }
        let arn = self.arns.of(&Resource::ServiceEnvironment(name.clone()));
        if create {
            if e.service_environment_type.as_deref() != Some(JOB_TYPE) {
                return Err(self.bad(format!(
                    "serviceEnvironmentType: {:?} is not supported (only {JOB_TYPE})",
                    e.service_environment_type.unwrap_or_default()
                )));
            }
            let tags = e.tags.clone().unwrap_or_default();
            check_tags(&tags)?;
            let record = EnvironmentRecord {
                state: e.state.clone().unwrap_or_else(|| "ENABLED".into()),
                capacity_limits: e
                    .capacity_limits
                    .clone()
                    .ok_or_else(|| self.bad("capacityLimits: is required".into()))?,
                tags,
            };
            if !self
                .store
                .config
                .create(&key, &record)
                .await
                .map_err(store_failed)?
            {
                return Err(self.bad(format!("service environment {name:?} already exists")));
            }
        } else {
            let mut record: EnvironmentRecord = self
                .store
                .config
                .get(&key)
                .await
                .map_err(store_failed)?
                .ok_or_else(|| {
                    self.bad(format!(
                        "serviceEnvironment: no service environment {name:?}"
                    ))
                })?;
            if let Some(s) = e.state {
                record.state = s;
            }
            if let Some(limits) = e.capacity_limits {
                record.capacity_limits = limits;
                // The queues drawing on it take its new limits.
                for (queue, q) in self.queue_records().await? {
                    if q.service_environment.as_deref() == Some(name.as_str()) {
                        let doc: QueueDocument = self
                            .call(
                                caller,
                                Operation::DescribeJobQueue,
                                &wire::QueueRef {
                                    job_queue: queue.clone(),
                                },
                            )
                            .await?;
                        let mut jq = doc.job_queue;
                        jq.capacity_limits = self.queue_limits(&name, &record.capacity_limits)?;
                        let _: Value = self.call(caller, Operation::UpdateJobQueue, &jq).await?;
                    }
                }
            }
            // The fields it changes, on the record as stored (a concurrent
            // tag change is kept).
            self.store
                .config
                .update(&key, |stored: Option<EnvironmentRecord>| {
                    let mut stored = stored.unwrap_or_else(|| record.clone());
                    stored.state.clone_from(&record.state);
                    stored.capacity_limits.clone_from(&record.capacity_limits);
                    Ok::<_, AwsError>(stored)
                })
                .await?;
        }
        Ok(json!({
            "serviceEnvironmentName": name,
            "serviceEnvironmentArn": arn,
        }))
    }

    async fn describe_environments(&self, d: DescribeEnvsIn) -> Answer {
        let names = if d.service_environments.is_empty() {
            self.store
                .config
                .names(store::ENVIRONMENT_PREFIX)
                .await
                .map_err(store_failed)?
        } else {
            d.service_environments
                .iter()
                .map(|n| self.arns.named("serviceEnvironments", n, false))
                .collect::<Result<_, _>>()
                .map_err(|e| self.bad(e))?
        };
        let (names, next) = page(&names, page_size(d.max_results)?, d.next_token.as_deref())?;
        let mut out = Vec::new();
        for name in names {
            let key = format!("{}{name}", store::ENVIRONMENT_PREFIX);
            if let Some(e) = self
                .store
                .config
                .get::<EnvironmentRecord>(&key)
                .await
                .map_err(store_failed)?
            {
                out.push(self.environment_view(&name, &e));
            }
        }
        let mut v = json!({ "serviceEnvironments": out });
        if let Some(n) = next {
            v["nextToken"] = json!(n);
        }
        Ok(v)
    }

    // ----- job queues -------------------------------------------------------

    async fn put_queue(&self, caller: &Caller, q: JobQueueIn, create: bool) -> Answer {
        let name = if create {
            let n = q.job_queue_name.clone().unwrap_or_default();
            qm_wire::subjects::token(&n).map_err(|e| self.bad(format!("jobQueueName: {e}")))?;
            n
        } else {
            self.arns
                .queue_name("jobQueue", q.job_queue.as_deref().unwrap_or_default())
                .map_err(|e| self.bad(e))?
        };
        state_ok("state", &q.state)?;
        if !q.compute_environment_order.is_empty() {
            return Err(self.bad(
                "computeEnvironmentOrder: compute environments are not supported; give serviceEnvironmentOrder".into(),
            ));
        }
        if !q.job_state_time_limit_actions.is_empty() {
            return Err(self.bad("jobStateTimeLimitActions: is not supported".into()));
        }
        if q.job_queue_type.as_deref().is_some_and(|t| t != JOB_TYPE) {
            return Err(self.bad(format!(
                "jobQueueType: {:?} is not supported (only {JOB_TYPE})",
                q.job_queue_type.clone().unwrap_or_default()
            )));
        }
        if let Some(p) = q.priority {
            range("priority", p, 0, 1000)?;
        } else if create {
            return Err(self.bad("priority: is required".into()));
        }
        if let Some(arn) = &q.scheduling_policy_arn {
            let policy = self
                .arns
                .named("schedulingPolicyArn", arn, true)
                .map_err(|e| self.bad(e))?;
            let key = format!("{}{policy}", store::POLICY_PREFIX);
            if self
                .store
                .config
                .get::<PolicyRecord>(&key)
                .await
                .map_err(store_failed)?
                .is_none()
            {
                return Err(self.bad(format!(
                    "schedulingPolicyArn: no scheduling policy {policy:?}"
                )));
            }
        }
        let environment = match &q.service_environment_order {
            None => None,
            Some(order) if order.len() > 1 => {
                return Err(self.bad(
                    "serviceEnvironmentOrder: a job queue draws on one service environment here"
                        .into(),
                ))
            }
            Some(order) => match order.first() {
                None => Some(None),
                Some(o) => {
                    let _ = o.order;
                    let env = self
                        .arns
                        .named(
                            "serviceEnvironmentOrder[0].serviceEnvironment",
                            &o.service_environment,
                            false,
                        )
                        .map_err(|e| self.bad(e))?;
                    let key = format!("{}{env}", store::ENVIRONMENT_PREFIX);
                    let record: EnvironmentRecord = self
                        .store
                        .config
                        .get(&key)
                        .await
                        .map_err(store_failed)?
                        .ok_or_else(|| {
                            self.bad(format!(
                                "serviceEnvironmentOrder[0].serviceEnvironment: no service environment {env:?}"
                            ))
                        })?;
                    Some(Some((env, record)))
                }
            },
        };
        if let Some(t) = &q.tags {
            check_tags(t)?;
        }
        let key = store::queue_key(&name);
        // What admission holds (state, capacity limits) is sent only when
        // this request changes it: resending what was read would undo a
        // concurrent change of the other.
        let to_admission = create || q.state.is_some() || environment.is_some();
        let mut jq = if create {
            wire::JobQueue {
                job_queue_name: name.clone(),
                ..Default::default()
            }
        } else {
            let doc: QueueDocument = self
                .call(
                    caller,
                    Operation::DescribeJobQueue,
                    &wire::QueueRef {
                        job_queue: name.clone(),
                    },
                )
                .await?;
            doc.job_queue
        };
        if let Some(s) = &q.state {
            jq.state = Some(s.clone());
        }
        if let Some(env) = &environment {
            jq.capacity_limits = match env {
                Some((n, e)) => self.queue_limits(n, &e.capacity_limits)?,
                None => Vec::new(),
            };
        }
        let op = if create {
            Operation::CreateJobQueue
        } else {
            Operation::UpdateJobQueue
        };
        if to_admission {
            let _: Value = self.call(caller, op, &jq).await?;
        }
        // Only the fields this request gives change, on the record as
        // stored (under its revision: a concurrent update is never lost).
        self.store
            .config
            .update(&key, |record: Option<QueueRecord>| {
                let mut record = record.unwrap_or_default();
                if let Some(env) = &environment {
                    record.service_environment = env.as_ref().map(|(n, _)| n.clone());
                }
                if let Some(p) = q.priority {
                    record.priority = p;
                }
                if q.scheduling_policy_arn.is_some() {
                    record.scheduling_policy_arn = q.scheduling_policy_arn.clone();
                }
                if create {
                    record.tags = q.tags.clone().unwrap_or_default();
                }
                Ok::<_, AwsError>(record)
            })
            .await?;
        Ok(json!({
            "jobQueueName": name,
            "jobQueueArn": self.arns.queue(&name),
        }))
    }

    async fn describe_queues(&self, caller: &Caller, d: DescribeQueuesIn) -> Answer {
        let names: Vec<String> = if d.job_queues.is_empty() {
            #[derive(Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Names {
                job_queues: Vec<String>,
            }
            let all: Names = self
                .call(caller, Operation::ListJobQueues, &json!({}))
                .await?;
            all.job_queues
        } else {
            d.job_queues
                .iter()
                .map(|q| self.arns.queue_name("jobQueues", q))
                .collect::<Result<_, _>>()
                .map_err(|e| self.bad(e))?
        };
        let (names, next) = page(&names, page_size(d.max_results)?, d.next_token.as_deref())?;
        let mut out = Vec::new();
        for name in names {
            let doc: QueueDocument = match self
                .api(caller)
                .call(
                    Operation::DescribeJobQueue,
                    &wire::QueueRef {
                        job_queue: name.clone(),
                    },
                )
                .await
            {
                Ok(d) => d,
                // AWS leaves out the queues that do not exist.
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return Err(api_failed(e)),
            };
            let record: QueueRecord = self
                .store
                .config
                .get(&store::queue_key(&name))
                .await
                .map_err(store_failed)?
                .unwrap_or_default();
            let mut v = json!({
                "jobQueueName": name,
                "jobQueueArn": self.arns.queue(&name),
                "state": doc.job_queue.state.clone().unwrap_or_else(|| "ENABLED".into()),
                "status": "VALID",
                "priority": record.priority,
                "computeEnvironmentOrder": [],
                "jobQueueType": JOB_TYPE,
                "tags": record.tags,
                "jobStateTimeLimitActions": [],
            });
            if let Some(p) = &record.scheduling_policy_arn {
                v["schedulingPolicyArn"] = json!(p);
            }
            if let Some(e) = &record.service_environment {
                v["serviceEnvironmentOrder"] = json!([{
                    "order": 1,
                    "serviceEnvironment": self.arns.of(&Resource::ServiceEnvironment(e.clone())),
                }]);
            }
            out.push(v);
        }
        let mut v = json!({ "jobQueues": out });
        if let Some(n) = next {
            v["nextToken"] = json!(n);
        }
        Ok(v)
    }

    // ----- tags -------------------------------------------------------------

    /// Tag, untag or list a resource's tags: reading them needs the right
    /// to read the resource, changing them the right to change it.
    async fn tags(&self, op: Op, c: Call<'_>) -> Answer {
        let arn = c.arn.unwrap_or_default();
        let resource = self
            .arns
            .parse("resourceArn", arn)
            .map_err(|e| self.bad(e))?;
        let write = op != Op::ListTagsForResource;
        let denied = |e: qm_tenancy::Denied| AwsError {
            status: 403,
            code: "AccessDeniedException",
            message: e.0,
        };
        let (bucket, key) = match &resource {
            Resource::JobQueue(q) => {
                let action = if write {
                    Action::ChangeConfig { queue: q }
                } else {
                    Action::ReadQueue { queue: q }
                };
                authorize(c.caller, action).map_err(denied)?;
                let _: QueueDocument = self
                    .call(
                        c.caller,
                        Operation::DescribeJobQueue,
                        &wire::QueueRef {
                            job_queue: q.clone(),
                        },
                    )
                    .await?;
                (&self.store.config, store::queue_key(q))
            }
            Resource::QuotaShare { queue, share } => {
                let action = if write {
                    Action::ChangeConfig { queue }
                } else {
                    Action::ReadQueue { queue }
                };
                authorize(c.caller, action).map_err(denied)?;
                let _: wire::QuotaShare = self
                    .call(
                        c.caller,
                        Operation::DescribeQuotaShare,
                        &wire::ShareRef {
                            job_queue: queue.clone(),
                            quota_share_name: share.clone(),
                        },
                    )
                    .await?;
                (&self.store.config, store::share_key(queue, share))
            }
            Resource::ServiceJob(id) => {
                // Reading the job checks the caller may read it.
                let j = self.job(c.caller, id).await?;
                if write {
                    authorize(
                        c.caller,
                        Action::ChangeJob {
                            queue: &j.job_queue,
                            share: &j.quota_share_name,
                        },
                    )
                    .map_err(denied)?;
                }
                (&self.store.jobs, store::job_key(id))
            }
            Resource::SchedulingPolicy(n) | Resource::ServiceEnvironment(n) => {
                if write {
                    is_admin(c.caller)?;
                }
                let prefix = if matches!(resource, Resource::SchedulingPolicy(_)) {
                    store::POLICY_PREFIX
                } else {
                    store::ENVIRONMENT_PREFIX
                };
                (&self.store.config, format!("{prefix}{n}"))
            }
        };
        let mut record: Value = match bucket.get(&key).await.map_err(store_failed)? {
            Some(v) => v,
            None if matches!(
                resource,
                Resource::SchedulingPolicy(_) | Resource::ServiceEnvironment(_)
            ) =>
            {
                return Err(self.bad(format!("resourceArn: no such resource {arn:?}")))
            }
            None => json!({}),
        };
        // A job submitted on NATS has no record: its submitted tags.
        if record.get("tags").is_none() {
            if let Resource::ServiceJob(id) = &resource {
                let j = self.job(c.caller, id).await?;
                record = json!({"request": {}, "tags": j.tags});
            }
        }
        let tags_of = |record: &Value| -> Tags {
            serde_json::from_value(record["tags"].clone()).unwrap_or_default()
        };
        enum Change {
            Add(Tags),
            Remove(Vec<String>),
        }
        let change = match op {
            Op::ListTagsForResource => return Ok(json!({ "tags": tags_of(&record) })),
            Op::TagResource => {
                let t: TagIn = input(c.body)?;
                if t.tags.is_empty() {
                    return Err(self.bad("tags: give at least one tag".into()));
                }
                Change::Add(t.tags)
            }
            _ => {
                let keys = crate::http::query_values(c.query, "tagKeys");
                if keys.is_empty() {
                    return Err(self.bad("tagKeys: give at least one key".into()));
                }
                Change::Remove(keys)
            }
        };
        // Applied to the record as stored, under its revision: two
        // concurrent tag changes both land.
        let first = record;
        bucket
            .update(&key, |stored: Option<Value>| {
                let mut record = match stored {
                    Some(r) if r.get("tags").is_some() => r,
                    _ => first.clone(),
                };
                let mut tags = tags_of(&record);
                match &change {
                    Change::Add(t) => tags.extend(t.clone()),
                    Change::Remove(keys) => {
                        for k in keys {
                            tags.remove(k);
                        }
                    }
                }
                check_tags(&tags)?;
                record["tags"] = json!(tags);
                Ok::<_, AwsError>(record)
            })
            .await?;
        Ok(json!({}))
    }
}

fn encode_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod fuzz {
    //! Every operation's body, and the SageMaker request inside a submit,
    //! from random and mutated bytes: an AWS error or a value, never a
    //! panic (`fuzz/tests/decoders.rs` has the other decoders; `make fuzz`
    //! runs both long).
    use super::*;
    use proptest::prelude::*;

    fn every_body(bytes: &[u8]) {
        macro_rules! each {
            ($($t:ty),* $(,)?) => { $( let _ = input::<$t>(bytes); )* };
        }
        each!(
            SubmitIn,
            JobIdIn,
            UpdateJobIn,
            TerminateManyIn,
            TerminateIn,
            ListJobsIn,
            ShareIn,
            QueueIn,
            PolicyIn,
            ArnsIn,
            JobQueueIn,
            DescribeQueuesIn,
            EnvIn,
            DescribeEnvsIn,
            TagIn,
        );
        let text = String::from_utf8_lossy(bytes);
        let _ = crate::payload::parse(&text, &["host/image:1".to_string()]);
        let _ = crate::http::query_values(&text, "tagKeys");
        let _ = crate::http::route(&hyper::Method::POST, &text);
    }

    const SUBMIT: &str = r#"{"jobName":"j","jobQueue":"training","serviceJobType":"SAGEMAKER_TRAINING","quotaShareName":"QS1","schedulingPriority":5,"tags":{"a":"b"},"serviceRequestPayload":"{\"AlgorithmSpecification\":{\"TrainingImage\":\"r/t:1\",\"ContainerEntrypoint\":[\"python\",\"t.py\"]},\"ResourceConfig\":{\"InstanceType\":\"ml.g5.xlarge\",\"InstanceCount\":2},\"HyperParameters\":{\"lr\":\"0.1\"},\"InputDataConfig\":[{\"ChannelName\":\"train\",\"DataSource\":{\"S3DataSource\":{\"S3Uri\":\"s3://b/x\",\"S3DataType\":\"S3Prefix\"}}}],\"CheckpointConfig\":{\"S3Uri\":\"s3://b/c\"}}"}"#;

    proptest! {
        #[test]
        fn request_bodies_from_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            every_body(&bytes);
        }

        #[test]
        fn request_bodies_from_a_mutated_submit(edits in qm_fuzz::edits()) {
            every_body(&qm_fuzz::mutate(SUBMIT.as_bytes(), &edits));
            let payload: Value = serde_json::from_str(SUBMIT).expect("valid");
            let inner = payload["serviceRequestPayload"].as_str().unwrap_or_default();
            let mutated = qm_fuzz::mutate(inner.as_bytes(), &edits);
            let _ = crate::payload::parse(&String::from_utf8_lossy(&mutated), &[]);
        }
    }

    #[test]
    fn the_valid_submit_decodes_and_nesting_is_an_error() {
        assert!(input::<SubmitIn>(SUBMIT.as_bytes()).is_ok());
        every_body(qm_fuzz::nested("[", "]", 100_000).as_bytes());
        every_body(qm_fuzz::nested("{\"a\":", "}", 100_000).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_tags_follow_aws_limits() {
        let items: Vec<u32> = (0..5).collect();
        assert_eq!(
            page(&items, 2, None).expect("first"),
            (vec![0, 1], Some("2".into()))
        );
        assert_eq!(page(&items, 2, Some("4")).expect("last"), (vec![4], None));
        assert!(page(&items, 2, Some("x")).is_err());
        assert_eq!(page_size(None).expect("default"), 100);
        assert!(page_size(Some(0)).is_err());
        assert!(page_size(Some(101)).is_err());
        let mut tags: Tags = (0..50).map(|i| (format!("k{i}"), "v".into())).collect();
        assert!(check_tags(&tags).is_ok());
        tags.insert("one-too-many".into(), String::new());
        assert!(check_tags(&tags)
            .expect_err("51")
            .message
            .contains("at most 50"));
        let reserved: Tags = [("aws:x".to_string(), String::new())].into();
        assert!(check_tags(&reserved).is_err());
        assert_eq!(
            decode_hex(&encode_hex(b"{\"s\":3}")),
            Some(b"{\"s\":3}".to_vec())
        );
        assert_eq!(decode_hex("zz"), None);
    }

    #[test]
    fn api_errors_become_aws_errors() {
        let api = |code| {
            api_failed(CallError::Api(wire::ApiError {
                code,
                message: "m".into(),
                problems: Vec::new(),
            }))
        };
        assert_eq!(api(ErrorCode::Invalid).code, "ClientException");
        assert_eq!(api(ErrorCode::NotFound).status, 400);
        assert_eq!(api(ErrorCode::AccessDenied).status, 403);
        assert_eq!(api(ErrorCode::Transient).code, "ServerException");
        assert_eq!(api_failed(CallError::Transport("x".into())).status, 500);
    }
}
