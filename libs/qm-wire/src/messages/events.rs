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

/// Stored on `qm.v1.events.frames` (stream `QM_EVENTS`): job and preemption
/// events of the scheduler leader, consecutive and in the order they were
/// produced, many to a message. Each was also published live, unstored, on
/// its own subject. The message's `Qm-Position` header is its last event's
/// position: every event up to it is stored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventFrame {
    pub events: Vec<FramedEvent>,
}

/// One event of an [`EventFrame`]: the subject it was published on, its
/// position (`a.b.i`, as its `Qm-Position` header said) and its payload (a
/// [`JobStateChange`] or a [`PreemptionEvent`], by the subject).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FramedEvent {
    pub subject: String,
    pub position: String,
    pub event: serde_json::Value,
}

impl EventFrame {
    /// Encodes a frame of events already encoded (subject, position,
    /// payload), without decoding any payload again. A payload that is not
    /// JSON is stored as null.
    pub fn encode<'a>(events: impl IntoIterator<Item = (&'a str, &'a str, &'a [u8])>) -> Vec<u8> {
        let mut out = b"{\"events\":[".to_vec();
        for (n, (subject, position, payload)) in events.into_iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"subject\":");
            out.extend(serde_json::to_vec(subject).unwrap_or_default());
            out.extend_from_slice(b",\"position\":");
            out.extend(serde_json::to_vec(position).unwrap_or_default());
            out.extend_from_slice(b",\"event\":");
            if serde_json::from_slice::<serde::de::IgnoredAny>(payload).is_ok() {
                out.extend_from_slice(payload);
            } else {
                out.extend_from_slice(b"null");
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        out
    }
}
