//! What a queue looks like and what would happen to it: snapshots, lost
//! work, a job's outlook, a configuration change's outlook, reclaim
//! exposure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::jobs::ServiceJob;
use super::records::BudgetBurnDown;

/// One share's use of one type in a snapshot.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareUsage {
    pub quota_share_name: String,
    pub instance_type: String,
    pub entitlement: u32,
    pub used: u32,
    pub borrowed: u32,
    pub lent: u32,
    pub idle: u32,
}

/// `GetJobQueueSnapshot`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobQueueSnapshot {
    pub job_queue: String,
    /// The first waiting jobs in line, with why they wait.
    pub front_of_queue: Vec<ServiceJob>,
    pub shares: Vec<ShareUsage>,
    /// The first RUNNABLE job of each share the caller may read (in
    /// dispatch order), even when it is too far back for `frontOfQueue`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub front_of_quota_shares: Vec<ServiceJob>,
    /// The lost-work ledger's totals, per share that has lost work or
    /// been the beneficiary of others' (since the queue's state began;
    /// they outlive the jobs they came from).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lost_work: Vec<ShareLostWork>,
    /// The borrowing budgets of the shares the caller may read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetBurnDown>,
}

/// Attempts that threw work away, and how much (instance-milliseconds:
/// each attempt's lost time times its instances).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LostWorkTotal {
    pub attempts: u64,
    pub recomputed_instance_ms: u64,
}

/// One share's lost-work totals.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareLostWork {
    pub quota_share_name: String,
    /// This share's attempts, by cause: PREEMPTED_CROSS_SHARE,
    /// PREEMPTED_IN_SHARE, PREEMPTED_LIMIT_REDUCED, HOST_LOST (causes with
    /// nothing lost are left out).
    #[serde(default)]
    pub by_cause: BTreeMap<String, LostWorkTotal>,
    /// Other jobs' attempts, preempted for this share's jobs.
    #[serde(default)]
    pub lost_for_this_share: LostWorkTotal,
    /// Checkpoint bytes this share's attempts restored.
    #[serde(default)]
    pub restored_bytes: u64,
}

/// A job another would stop (`DryRunServiceJob`, `ExplainServiceJob`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OutlookVictim {
    pub job_id: String,
    /// Only when the caller may read the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    pub quota_share_name: String,
    /// CROSS_SHARE | IN_SHARE | LIMIT_REDUCED
    pub kind: String,
    /// Its work since its last committed checkpoint (or since it began
    /// running), per instance: what it would compute again.
    pub work_at_risk_seconds: f64,
}

/// `DryRunServiceJob` (a submit that changes nothing) and
/// `ExplainServiceJob` (a waiting job): what the next scheduling pass
/// would do for the job, from the scheduling core's own pass on a copy of
/// the live state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobOutlook {
    /// STARTS | PREEMPTS | WAITS | NOT_WAITING
    #[schemars(extend("enum" = ["STARTS", "PREEMPTS", "WAITS", "NOT_WAITING"]))]
    pub outcome: String,
    /// `ExplainServiceJob`: the job explained.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// NOT_WAITING: its status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// STARTS: instances on its share's own capacity, and borrowed.
    #[serde(default)]
    pub own_instances: u32,
    #[serde(default)]
    pub borrowed_instances: u32,
    /// STARTS with borrowing: the shares with idle capacity of its type
    /// that they lend.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lending_shares: Vec<String>,
    /// PREEMPTS: the jobs that would be stopped for it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub victims: Vec<OutlookVictim>,
    /// WAITS: why, as `DescribeServiceJob` would say it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_reason: Option<String>,
    /// WAITS: the jobs of its share and type ahead of it in line (first 5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ahead: Vec<String>,
    /// WAITS: how many jobs of its share and type are ahead of it in line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_in_line: Option<u32>,
    /// WAITS: when it is expected to start (ms since the Unix epoch), the
    /// scheduling passes replayed forward with every running job ending
    /// when it is expected to (its estimatedRuntimeSeconds, else its
    /// attempt timeout). Absent when that cannot be foreseen
    /// (`estimateNote` says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimated_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub estimate_note: Option<String>,
    /// WAITS: what would let it start, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unblock: Option<String>,
}

/// One job a configuration change would affect (`DryRunUpdateQuotaShare`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AffectedJob {
    pub job_id: String,
    /// Only when the caller may read the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    pub quota_share_name: String,
    /// What changes for it, in a few words.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

/// `DryRunUpdateQuotaShare` (a share update checked as an update is, and
/// not stored): what applying it now would do, from the core's own dry run
/// on a copy of the live state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueChangeOutlook {
    pub job_queue: String,
    /// Running jobs that would be on borrowed capacity, preemptible by a
    /// lender's reclaim, and are not now.
    pub become_preemptible: Vec<AffectedJob>,
    /// Running jobs preemptible now that would no longer be.
    pub become_protected: Vec<AffectedJob>,
    /// Waiting jobs that could never run under the change (why).
    pub become_unfittable: Vec<AffectedJob>,
    /// Jobs moved to another workload class or priority.
    pub reclassified: Vec<AffectedJob>,
    /// Jobs the change would stop or fail (a deleted share's).
    pub terminated: Vec<AffectedJob>,
    /// The pass after the change: jobs it would start, and jobs it would
    /// preempt (limit reduced or reclaimed).
    pub next_pass_starts: Vec<AffectedJob>,
    pub next_pass_preemptions: Vec<OutlookVictim>,
}

/// `GetReclaimExposure`: which of a share's jobs on borrowed capacity each
/// lending share would preempt if it submitted now (reading the share).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetReclaimExposure {
    pub job_queue: String,
    pub quota_share_name: String,
}

/// One lender's reclaim of one instance type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LenderExposure {
    pub lending_share: String,
    pub instance_type: String,
    /// Instances of the type it lends now.
    pub lent: u32,
    /// The share's jobs a submit of the lender's would stop, with the work
    /// each would compute again.
    #[serde(default)]
    pub victims: Vec<OutlookVictim>,
    /// Its submit would wait instead: why (the borrowed jobs are protected).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waits: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReclaimExposure {
    pub job_queue: String,
    pub quota_share_name: String,
    pub exposures: Vec<LenderExposure>,
}
