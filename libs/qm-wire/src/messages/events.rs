//! Events: job state changes, preemptions and committed checkpoints.

use serde::{Deserialize, Serialize};

/// Published on `qm.v1.events.job.<queue>.<share>.<jobId>.<STATUS>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStateChange {
    pub job_id: String,
    pub job_name: String,
    pub job_queue: String,
    pub quota_share_name: String,
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub status_reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Milliseconds since the Unix epoch.
    pub at: u64,
}

/// Published on `qm.v1.events.preemption.<queue>.<share>.<jobId>.<phase>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionEvent {
    pub job_id: String,
    pub attempt: u32,
    /// CROSS_SHARE | IN_SHARE | LIMIT_REDUCED
    pub kind: String,
    pub for_job_id: String,
    /// started | completed
    pub phase: String,
    pub at: u64,
}

/// Published on `qm.v1.events.checkpoint.<queue>.<jobId>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointCommitted {
    pub job_id: String,
    pub attempt: u32,
    pub seq: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    pub at: u64,
}
