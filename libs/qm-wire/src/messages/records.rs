//! Resume drills and the records kept of a queue: policy stability per
//! week, usage and lending, budget burn-down.

use serde::{Deserialize, Serialize};

use super::jobs::SubmitServiceJob;
use super::BorrowBudget;

/// `StartResumeDrill`: runs `job` twice on its share's own capacity, one
/// copy stopped after its first committed checkpoint and resumed, one
/// uninterrupted, and compares what they declare as their result
/// (`docs/workload-classes.md`). Its right is a submit's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartResumeDrill {
    pub job: SubmitServiceJob,
    /// Draws the point at which the resumed copy is stopped (default: one
    /// drawn by admission).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StartResumeDrillResponse {
    pub drill_id: String,
    /// The copy that is stopped and resumed.
    pub resumed_job_id: String,
    pub uninterrupted_job_id: String,
}

/// `ListResumeDrills`: a queue's drills, those of the shares the caller
/// may read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListResumeDrills {
    pub job_queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
}

/// One resume drill and its outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResumeDrill {
    pub drill_id: String,
    pub job_queue: String,
    pub quota_share_name: String,
    pub workload_class: String,
    /// What it proves: `image:<reference>` or `command:<sha256>`.
    pub artifact: String,
    /// RUNNING | PASSED | FAILED
    pub status: String,
    /// Why it failed: what differed, or why it could not be decided.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub status_reason: String,
    pub resumed_job_id: String,
    pub uninterrupted_job_id: String,
    pub started_at: u64,
    /// When the resumed copy was stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<u64>,
    /// Work the stop cost the resumed copy (ms per instance, since its
    /// last checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recomputed_ms: Option<u64>,
    /// The checkpoint step the resumed copy restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_step: Option<u64>,
    /// From the resumed attempt's placement to its process running, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_ms: Option<u64>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListResumeDrillsResponse {
    pub drills: Vec<ResumeDrill>,
}

/// `GetPolicyStabilityRecord`: per share and week, how often the
/// arrangement needed people (priority changes, terminations,
/// configuration changes) and how it treated work (preemptions, owners'
/// reclaim waits, drills, borrowing refused for a missing resume proof).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetPolicyStabilityRecord {
    pub job_queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// Weeks that end after this (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
}

/// A count by who caused it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ByPrincipal {
    pub principal: String,
    pub count: u32,
}

/// Preemptions of one kind and workload class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionCount {
    /// CROSS_SHARE | IN_SHARE | LIMIT_REDUCED
    pub kind: String,
    pub workload_class: String,
    pub count: u32,
}

/// Seconds, nearest-rank percentiles.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitPercentiles {
    pub count: u32,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// One share's week.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShareWeek {
    pub quota_share_name: String,
    /// Its Monday, `YYYY-MM-DD` (weeks start Monday 00:00 UTC).
    pub week: String,
    pub week_start: u64,
    pub priority_changes: Vec<ByPrincipal>,
    pub terminations: Vec<ByPrincipal>,
    pub configuration_changes: Vec<ByPrincipal>,
    /// Of this share's jobs.
    pub preemptions: Vec<PreemptionCount>,
    /// Jobs of this share preempted a third time this week.
    pub jobs_preempted_more_than_twice: u32,
    /// How long this share's jobs waited for lent capacity back: from the
    /// reclaim's first preemption to their start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_wait_seconds: Option<WaitPercentiles>,
    pub drills_passed: u32,
    pub drills_failed: u32,
    /// Jobs submitted in a class that borrows only with a resume proof,
    /// for an image or command without one.
    pub borrow_refusals_missing_proof: u32,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicyStabilityRecord {
    pub job_queue: String,
    /// Oldest week first, shares in name order within a week.
    pub weeks: Vec<ShareWeek>,
}

/// `GetUsage`: the usage ledger of a queue, per share, instance type,
/// workload class and day (or week), from the days asked for, of the shares
/// the caller may read.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetUsage {
    pub job_queue: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    /// The first day, `YYYY-MM-DD` (UTC); default: 6 days before `to`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// The last day, `YYYY-MM-DD` (UTC), included; default: today.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// `DAY` (default) or `WEEK` (weeks start Monday 00:00 UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
}

/// Recomputed work of one cause, in instance-seconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecomputedUsage {
    /// PREEMPTED_CROSS_SHARE | PREEMPTED_IN_SHARE | PREEMPTED_LIMIT_REDUCED | HOST_LOST
    pub cause: String,
    pub instance_seconds: f64,
}

/// One share's use of one instance type, in one workload class, over one
/// period. Instance-seconds, to the millisecond.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageRow {
    /// The period's first day, `YYYY-MM-DD`.
    pub period: String,
    pub quota_share_name: String,
    pub instance_type: String,
    pub workload_class: String,
    /// Held within the share's entitlement.
    pub own_instance_seconds: f64,
    /// Held beyond it (see `lending` for whose capacity it was).
    pub borrowed_instance_seconds: f64,
    /// Queued (RUNNABLE) instances, waiting.
    pub waiting_instance_seconds: f64,
    /// Work thrown away by preempted attempts and lost hosts, by cause.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recomputed: Vec<RecomputedUsage>,
    /// Held by resume drills' jobs (part of `ownInstanceSeconds`).
    #[serde(default)]
    pub drill_instance_seconds: f64,
    /// Resume drills started.
    #[serde(default)]
    pub drills: u64,
}

/// Capacity one share borrowed from another (or from the queue's
/// unassigned capacity) over one period: the lender lent it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LendingRow {
    pub period: String,
    pub instance_type: String,
    pub borrower: String,
    /// The lending share; absent: capacity no share is entitled to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lender: Option<String>,
    pub instance_seconds: f64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageReport {
    pub job_queue: String,
    pub from: String,
    pub to: String,
    /// DAY or WEEK.
    pub by: String,
    /// The report counts up to this moment (ms since the Unix epoch).
    pub as_of: u64,
    /// Period, share, type, class order.
    pub rows: Vec<UsageRow>,
    /// Borrowed capacity by period, type, borrower and lender: rows whose
    /// borrower or lender the caller may read.
    pub lending: Vec<LendingRow>,
    /// The borrowing budgets of the shares shown, as of `asOf`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub budgets: Vec<BudgetBurnDown>,
}

/// A share's borrowing budget now: what it allows, what the window (or the
/// decayed sum) holds, what running borrowed jobs are still expected to
/// use, and when it runs out or refills. Instance-hours.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetBurnDown {
    pub quota_share_name: String,
    pub budget: BorrowBudget,
    /// FINISH | CHECKPOINT_AND_STOP
    pub on_budget_exhausted: String,
    pub used_instance_hours: f64,
    pub committed_instance_hours: f64,
    /// The budget less what is used (at least 0).
    pub left_instance_hours: f64,
    /// Instances borrowed now, every type together.
    pub borrowing_instances: u32,
    /// When it is spent at the current rate (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exhausts_at: Option<u64>,
    /// When the count next falls: an hour leaves the window (rolling
    /// windows only; a half-life refills continuously).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refills_at: Option<u64>,
}
