//! Identity and audit: who is calling, the audit log, and an attempt's
//! output.

use serde::{Deserialize, Serialize};

/// Who asked, as admission established it: the principal the NATS server
/// authenticated (from the request's subject), with its role and shares
/// from the tenancy file. `WhoAmI` returns it; admission sends it along with
/// every request it relays to the scheduler, which checks it again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Caller {
    pub principal: String,
    /// ADMIN | READER | TEAM | SERVICE
    #[schemars(extend("enum" = ["ADMIN", "READER", "TEAM", "SERVICE"]))]
    pub role: String,
    /// The caller's team (role TEAM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// The shares the caller's team owns: `queue/share` or `queue/*`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shares: Vec<String>,
}

/// `ListAuditEvents`: every accepted write, filtered. A team sees the
/// writes to its own shares (and configuration changes of its queues).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListAuditEvents {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// Milliseconds since the Unix epoch, inclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// Milliseconds since the Unix epoch, exclusive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// One accepted write.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEvent {
    /// Milliseconds since the Unix epoch.
    pub at: u64,
    pub principal: String,
    /// The API operation (`SubmitServiceJob`, `UpdateServiceJob`, ...).
    pub operation: String,
    pub job_queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// What changed, in a few words.
    pub detail: String,
    /// Where the write is in the log (stream sequence).
    pub sequence: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListAuditEventsResponse {
    pub audit_events: Vec<AuditEvent>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_token: Option<String>,
}

/// `GetServiceJobLogs`: an attempt's output (default: the latest attempt).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetServiceJobLogs {
    pub job_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_bytes: Option<u64>,
}
