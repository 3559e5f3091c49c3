//! Forward compatibility: a message from a newer v1 (a field added
//! anywhere, at any depth) decodes in this version with the same meaning,
//! so a service can be upgraded while older ones keep running (see
//! docs/adr/0009-wire-compatibility.md).

mod common;
use common::fixture;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use qm_wire::messages::*;
use qm_wire::system::*;

/// Adds unknown fields to every object in `v` (a field with a scalar, one
/// with an object, one with a list), except the single key of an
/// externally tagged enum (`{"ok": ...}` / `{"error": ...}`), which a newer
/// writer cannot add siblings to either.
fn from_the_future(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                // Maps of the user's own keys are data, not fields.
                if !MAPS.contains(&key.as_str()) {
                    from_the_future(child);
                }
            }
            let wrapper = map.len() == 1 && map.values().all(Value::is_object);
            if !wrapper {
                map.insert("addedInV1_9".into(), json!("x"));
                map.insert("addedObject".into(), json!({"nested": {"deeper": [1, 2]}}));
                map.insert("addedList".into(), json!([{"a": 1}, "b", null]));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(from_the_future),
        _ => {}
    }
}

/// Keys whose values are maps of user data (names chosen by the user), or
/// a payload kept as it was published (an event frame's `event`: its own
/// type's fixture checks its unknown fields).
const MAPS: [&str; 3] = ["environment", "tags", "event"];

/// `text` and the same with fields from the future decode to equal values.
fn decodes_with_unknown_fields<T>(name: &str, text: &str)
where
    T: DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let today: T = serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut v: Value = serde_json::from_str(text).expect("JSON");
    from_the_future(&mut v);
    let future = serde_json::to_string(&v).expect("JSON");
    let decoded: T = serde_json::from_str(&future)
        .unwrap_or_else(|e| panic!("{name} with unknown fields: {e}\n{future}"));
    assert_eq!(decoded, today, "{name}: unknown fields changed the meaning");
}

#[test]
fn every_v1_fixture_decodes_with_fields_from_a_newer_version() {
    macro_rules! check {
        ($($file:literal => $ty:ty),* $(,)?) => {
            $( decodes_with_unknown_fields::<$ty>($file, &fixture($file)); )*
        };
    }
    check! {
        "caller.json" => Caller,
        "error_reply.json" => Reply<Value>,
        "error_reply_access_denied.json" => Reply<Value>,
        "event_frame.json" => EventFrame,
        "exec_command_start.json" => ExecCommand,
        "exec_command_start_rank.json" => ExecCommand,
        "exec_command_start_container.json" => ExecCommand,
        "heartbeat.json" => Heartbeat,
        "job_state_change.json" => JobStateChange,
        "list_audit_events_response.json" => ListAuditEventsResponse,
        "log_entry_pass.json" => LogEntry,
        "log_entry_queue_deleted.json" => LogEntry,
        "log_entry_reports.json" => LogEntry,
        "log_entry_submit.json" => LogEntry,
        "log_entry_submit_v1_no_principal.json" => LogEntry,
        "log_entry_terminate.json" => LogEntry,
        "preemption_event.json" => PreemptionEvent,
        "queue_document.json" => QueueDocument,
        "quota_share.json" => QuotaShare,
        "service_job.json" => ServiceJob,
        "submit_service_job.json" => SubmitServiceJob,
    }
}

fn round_trip<T>(name: &str, value: T)
where
    T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let text = serde_json::to_string(&value).expect("encodes");
    decodes_with_unknown_fields::<T>(name, &text);
}

#[test]
fn every_message_type_decodes_with_fields_from_a_newer_version() {
    macro_rules! defaults {
        ($($ty:ty),* $(,)?) => {
            $( round_trip(stringify!($ty), <$ty>::default()); )*
        };
    }
    defaults!(
        QuotaShare,
        JobQueue,
        ShareRef,
        QueueRef,
        SubmitServiceJob,
        SubmitServiceJobResponse,
        JobRef,
        UpdateServiceJob,
        TerminateServiceJob,
        ListServiceJobs,
        AttemptDetail,
        PreemptionSummary,
        ServiceJob,
        ListServiceJobsResponse,
        ShareUsage,
        JobQueueSnapshot,
        ExecutorInstances,
        RegisterExecutor,
        JobStateChange,
        PreemptionEvent,
        Caller,
        ListAuditEvents,
        AuditEvent,
        ListAuditEventsResponse,
        GetServiceJobLogs,
        QueueDocument,
        CheckpointCommit,
        Placement,
        PassRecord,
        Heartbeat,
        HeartbeatAck,
        LogsRequest,
        LogsResponse,
        CheckpointRequest,
        CheckpointReply,
        ResourceSharingConfiguration,
        SharePreemptionConfiguration,
        Protections,
        JobPreemptionConfiguration,
        EvaluateOnExit,
        RetryStrategy,
        TimeoutConfig,
        CheckpointConfig,
    );
    // The types without defaults, built as their producers build them.
    round_trip(
        "Report",
        serde_json::from_value::<Report>(json!({
            "executorId": "node-1", "jobId": "j-1", "attempt": 2, "phase": "ENDED",
            "exitCode": 0, "restored": {"jobQueue": "q", "jobId": "j-1", "attempt": 1, "seq": 3, "createdAt": 5},
            "cause": "FENCED"
        }))
        .expect("a report decodes"),
    );
    round_trip(
        "SchedRequest",
        serde_json::from_value::<SchedRequest>(json!({
            "operation": "UpdateServiceJob",
            "body": {"jobId": "j-1", "schedulingPriority": 4},
            "caller": {"principal": "alice", "role": "TEAM"}
        }))
        .expect("a scheduler request decodes"),
    );
    round_trip(
        "ExecCommand::Stop",
        serde_json::from_value::<ExecCommand>(json!({
            "kind": "stop", "epoch": 7, "jobId": "j-1", "attempt": 1,
            "graceSeconds": 30, "reason": "preempted"
        }))
        .expect("a stop decodes"),
    );
    round_trip(
        "LeaderLease",
        LeaderLease {
            holder: "scheduler-1".into(),
            expires_at: 1,
            epoch: Some(7),
        },
    );
    round_trip(
        "ApiError",
        ApiError {
            code: ErrorCode::Conflict,
            message: "m".into(),
            problems: vec![Problem {
                field: "f".into(),
                message: "p".into(),
            }],
        },
    );
    round_trip(
        "PreemptionRecord",
        PreemptionRecord {
            job_id: "j".into(),
            kind: "IN_SHARE".into(),
            for_job_id: "k".into(),
        },
    );
    round_trip(
        "CapacityLimit",
        serde_json::from_value::<CapacityLimit>(
            json!({"capacityUnit": "ml.g5.xlarge", "maxCapacity": 2}),
        )
        .expect("decodes"),
    );
}
