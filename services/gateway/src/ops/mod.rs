//! Each AWS Batch operation, translated onto the NATS API (made as the
//! signer, so admission and the scheduler authorize it) and its answer
//! translated back into the service model's shape.

use qm_service::client::{CallError, Client};
use qm_wire::messages::{
    self as wire, Caller, ErrorCode, JobPreemptionConfiguration, RetryStrategy, TimeoutConfig,
};
use qm_wire::subjects::Operation;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::arn::Resource;
use crate::http::{AwsError, Op};
use crate::store::{self, Tags};
use crate::Gateway;

mod environments;
mod jobs;
mod policies;
mod queues;
mod shares;
mod tags;

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

/// Quartermaster's own share fields, which AWS's model lacks: the gateway
/// refuses them by name (they are set over the NATS API or `qm apply`).
const OWN_SHARE_FIELDS: [&str; 4] = [
    "shareGroup",
    "borrowBudget",
    "onBudgetExhausted",
    "fairShareWeight",
];
/// Likewise for a job queue.
const OWN_QUEUE_FIELDS: [&str; 4] = [
    "shareGroups",
    "idleResourceAssignmentStrategy",
    "fairShareHalfLifeHours",
    "fairShareRebalanceSeconds",
];

/// Refuses a request naming any of `fields` at its top level, by name.
fn refuse_own_fields(body: &[u8], fields: &[&str]) -> Result<(), AwsError> {
    let Ok(Value::Object(map)) = serde_json::from_slice::<Value>(body) else {
        return Ok(()); // not an object: `input` says what is wrong
    };
    match fields.iter().find(|f| map.contains_key(**f)) {
        Some(f) => Err(AwsError::client(format!(
            "{f}: not part of the AWS Batch API; share groups, borrowing budgets and FAIR_SHARE are Quartermaster's own, set over its NATS API or with qm apply"
        ))),
        None => Ok(()),
    }
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
struct DeleteQueueIn {
    #[serde(default)]
    job_queue: Option<String>,
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
                refuse_own_fields(c.body, &OWN_SHARE_FIELDS)?;
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
                refuse_own_fields(c.body, &OWN_QUEUE_FIELDS)?;
                self.put_queue(c.caller, input(c.body)?, op == Op::CreateJobQueue)
                    .await
            }
            Op::DescribeJobQueues => self.describe_queues(c.caller, input(c.body)?).await,
            Op::DeleteJobQueue => self.delete_queue(c.caller, input(c.body)?).await,
            Op::CreateServiceEnvironment | Op::UpdateServiceEnvironment => {
                self.put_environment(c.caller, input(c.body)?, op == Op::CreateServiceEnvironment)
                    .await
            }
            Op::DescribeServiceEnvironments => self.describe_environments(input(c.body)?).await,
            Op::TagResource | Op::UntagResource | Op::ListTagsForResource => self.tags(op, c).await,
        }
    }
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
    fn quartermasters_own_fields_are_refused_by_name() {
        let e = refuse_own_fields(
            br#"{"jobQueue":"q","quotaShareName":"s","shareGroup":"dept"}"#,
            &OWN_SHARE_FIELDS,
        )
        .expect_err("a group");
        assert_eq!(e.code, "ClientException");
        assert!(
            e.message
                .contains("shareGroup: not part of the AWS Batch API"),
            "{}",
            e.message
        );
        let e = refuse_own_fields(
            br#"{"jobQueueName":"q","shareGroups":[]}"#,
            &OWN_QUEUE_FIELDS,
        )
        .expect_err("groups");
        assert!(e.message.starts_with("shareGroups:"), "{}", e.message);
        assert!(refuse_own_fields(
            br#"{"jobQueue":"q","quotaShareName":"s"}"#,
            &OWN_SHARE_FIELDS
        )
        .is_ok());
        assert!(refuse_own_fields(b"not json", &OWN_SHARE_FIELDS).is_ok());
    }

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
            hex::decode(hex::encode(b"{\"s\":3}")).ok(),
            Some(b"{\"s\":3}".to_vec())
        );
        assert!(hex::decode("zz").is_err());
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
