//! The requests' shapes (each operation's input as the service model
//! names it) and the checks and conversions every operation shares.

use qm_service::client::CallError;
use qm_wire::messages::{
    self as wire, Caller, ErrorCode, JobPreemptionConfiguration, RetryStrategy, TimeoutConfig,
};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;

use crate::api::AwsError;
use crate::store::{self, Tags};

/// One authenticated request.
pub struct Call<'a> {
    pub caller: &'a Caller,
    pub body: &'a [u8],
    /// The `{resourceArn}` of the tag routes.
    pub arn: Option<&'a str>,
    pub query: &'a str,
}

pub(super) type Answer = Result<Value, AwsError>;

pub(super) const JOB_TYPE: &str = "SAGEMAKER_TRAINING";
/// AWS's page size, and its largest.
pub(super) const PAGE: usize = 100;

pub(super) fn input<T: DeserializeOwned>(body: &[u8]) -> Result<T, AwsError> {
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
pub(super) const OWN_SHARE_FIELDS: [&str; 4] = [
    "shareGroup",
    "borrowBudget",
    "onBudgetExhausted",
    "fairShareWeight",
];
/// Likewise for a job queue.
pub(super) const OWN_QUEUE_FIELDS: [&str; 4] = [
    "shareGroups",
    "idleResourceAssignmentStrategy",
    "fairShareHalfLifeHours",
    "fairShareRebalanceSeconds",
];

/// Refuses a request naming any of `fields` at its top level, by name.
pub(super) fn refuse_own_fields(body: &[u8], fields: &[&str]) -> Result<(), AwsError> {
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

pub(super) fn store_failed(e: store::StoreError) -> AwsError {
    AwsError::server(e.to_string())
}

impl From<store::StoreError> for AwsError {
    fn from(e: store::StoreError) -> AwsError {
        store_failed(e)
    }
}

/// A NATS API failure, as AWS answers it.
pub(super) fn api_failed(e: CallError) -> AwsError {
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

pub(super) fn is_not_found(e: &CallError) -> bool {
    e.code() == Some(ErrorCode::NotFound)
}

/// AWS's tag rules: at most 50, keys 1-128 characters, values at most 256,
/// no `aws:` prefix.
pub(super) fn check_tags(tags: &Tags) -> Result<(), AwsError> {
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

pub(super) fn range(field: &str, v: i64, lo: i64, hi: i64) -> Result<i64, AwsError> {
    if (lo..=hi).contains(&v) {
        Ok(v)
    } else {
        Err(AwsError::client(format!(
            "{field}: {v} is not {lo} to {hi}"
        )))
    }
}

pub(super) fn page_size(max: Option<i64>) -> Result<usize, AwsError> {
    match max {
        None => Ok(PAGE),
        Some(m) => Ok(range("maxResults", m, 1, PAGE as i64)? as usize),
    }
}

/// One page of `items` from an offset token.
pub(super) fn page<T: Clone>(
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

pub(super) fn is_admin(caller: &Caller) -> Result<(), AwsError> {
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

pub(super) fn status_ok(s: &str) -> Result<(), AwsError> {
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

pub(super) fn state_ok(field: &str, s: &Option<String>) -> Result<(), AwsError> {
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
pub(super) struct SubmitIn {
    pub(super) job_name: String,
    pub(super) job_queue: String,
    #[serde(default)]
    pub(super) retry_strategy: Option<RetryStrategy>,
    #[serde(default)]
    pub(super) scheduling_priority: Option<i64>,
    pub(super) service_request_payload: String,
    pub(super) service_job_type: String,
    #[serde(default)]
    pub(super) share_identifier: Option<String>,
    #[serde(default)]
    pub(super) quota_share_name: Option<String>,
    #[serde(default)]
    pub(super) preemption_configuration: Option<JobPreemptionConfiguration>,
    #[serde(default)]
    pub(super) timeout_config: Option<TimeoutConfig>,
    #[serde(default)]
    pub(super) tags: Option<Tags>,
    #[serde(default)]
    pub(super) client_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct JobIdIn {
    pub(super) job_id: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct UpdateJobIn {
    pub(super) job_id: String,
    pub(super) scheduling_priority: i64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TerminateManyIn {
    #[serde(default)]
    pub(super) jobs: Vec<String>,
    pub(super) reason: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TerminateIn {
    pub(super) job_id: String,
    pub(super) reason: String,
}

#[derive(Deserialize)]
pub(super) struct Filter {
    #[serde(default)]
    pub(super) name: String,
    #[serde(default)]
    pub(super) values: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ListJobsIn {
    #[serde(default)]
    pub(super) job_queue: Option<String>,
    #[serde(default)]
    pub(super) job_status: Option<String>,
    #[serde(default)]
    pub(super) max_results: Option<i64>,
    #[serde(default)]
    pub(super) next_token: Option<String>,
    #[serde(default)]
    pub(super) filters: Vec<Filter>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ShareIn {
    #[serde(default)]
    pub(super) quota_share_name: Option<String>,
    #[serde(default)]
    pub(super) quota_share_arn: Option<String>,
    #[serde(default)]
    pub(super) job_queue: Option<String>,
    #[serde(default)]
    pub(super) capacity_limits: Option<Vec<wire::CapacityLimit>>,
    #[serde(default)]
    pub(super) resource_sharing_configuration: Option<wire::ResourceSharingConfiguration>,
    #[serde(default)]
    pub(super) preemption_configuration: Option<wire::SharePreemptionConfiguration>,
    #[serde(default)]
    pub(super) state: Option<String>,
    #[serde(default)]
    pub(super) tags: Option<Tags>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct QueueIn {
    #[serde(default)]
    pub(super) job_queue: Option<String>,
    #[serde(default)]
    pub(super) max_results: Option<i64>,
    #[serde(default)]
    pub(super) next_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct PolicyIn {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) arn: Option<String>,
    #[serde(default)]
    pub(super) quota_share_policy: Option<Value>,
    #[serde(default)]
    pub(super) fairshare_policy: Option<Value>,
    #[serde(default)]
    pub(super) tags: Option<Tags>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ArnsIn {
    #[serde(default)]
    pub(super) arns: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct EnvOrder {
    #[serde(default)]
    pub(super) order: i64,
    pub(super) service_environment: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct JobQueueIn {
    #[serde(default)]
    pub(super) job_queue_name: Option<String>,
    #[serde(default)]
    pub(super) job_queue: Option<String>,
    #[serde(default)]
    pub(super) state: Option<String>,
    #[serde(default)]
    pub(super) scheduling_policy_arn: Option<String>,
    #[serde(default)]
    pub(super) priority: Option<i64>,
    #[serde(default)]
    pub(super) compute_environment_order: Vec<Value>,
    #[serde(default)]
    pub(super) service_environment_order: Option<Vec<EnvOrder>>,
    #[serde(default)]
    pub(super) job_queue_type: Option<String>,
    #[serde(default)]
    pub(super) tags: Option<Tags>,
    #[serde(default)]
    pub(super) job_state_time_limit_actions: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DeleteQueueIn {
    #[serde(default)]
    pub(super) job_queue: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DescribeQueuesIn {
    #[serde(default)]
    pub(super) job_queues: Vec<String>,
    #[serde(default)]
    pub(super) max_results: Option<i64>,
    #[serde(default)]
    pub(super) next_token: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct EnvIn {
    #[serde(default)]
    pub(super) service_environment_name: Option<String>,
    #[serde(default)]
    pub(super) service_environment: Option<String>,
    #[serde(default)]
    pub(super) service_environment_type: Option<String>,
    #[serde(default)]
    pub(super) state: Option<String>,
    #[serde(default)]
    pub(super) capacity_limits: Option<Vec<Value>>,
    #[serde(default)]
    pub(super) tags: Option<Tags>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct DescribeEnvsIn {
    #[serde(default)]
    pub(super) service_environments: Vec<String>,
    #[serde(default)]
    pub(super) max_results: Option<i64>,
    #[serde(default)]
    pub(super) next_token: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct TagIn {
    #[serde(default)]
    pub(super) tags: Tags,
}

/// `ListServiceJobs`' own pagination over the NATS API's, when the gateway
/// filters: the NATS page to read again and how many of it were served.
#[derive(serde::Serialize, Deserialize)]
pub(super) struct ListToken {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) t: Option<String>,
    #[serde(default)]
    pub(super) s: usize,
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
        let _ = crate::api::query_values(&text, "tagKeys");
        let _ = crate::api::route(&hyper::Method::POST, &text);
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
