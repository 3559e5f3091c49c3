//! Queue and quota-share configuration (its validation is
//! [`crate::validate`]).
//!
//! A change is validated whole: [`crate::validate::validate_queue`] returns every problem it
//! finds, each naming the field (in the API's camelCase path form) and what is
//! wrong, so a user fixes a configuration in one round trip.

use std::fmt;

use crate::policy::classes::{ClassRules, WorkloadClass, IMPLICIT_CLASS};
pub use crate::policy::fair_share::{
    IdleAssignment, DEFAULT_FAIR_SHARE_HALF_LIFE_HOURS, MAX_FAIR_SHARE_WEIGHT,
};
pub use crate::policy::groups::{ShareGroup, MAX_GROUPS_PER_QUEUE};
pub use crate::policy::protections::Protections;

/// Most quota shares one job queue may hold (as AWS Batch).
pub const MAX_SHARES_PER_QUEUE: usize = 20;
/// Most capacity limits one quota share may hold (as AWS Batch).
pub const MAX_LIMITS_PER_SHARE: usize = 5;
/// Longest quota-share or queue name.
pub const MAX_NAME_LEN: usize = 128;
/// Highest `borrowLimit` percentage.
pub const MAX_BORROW_LIMIT: i64 = 10_000;
/// Highest `schedulingPriority`.
pub const MAX_PRIORITY: u32 = 9_999;

/// ENABLED or DISABLED, for queues and shares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum State {
    #[default]
    Enabled,
    Disabled,
}

/// What a share does with its idle entitlement, and whether it borrows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Strategy {
    /// Idle entitlement is never lent; the share never borrows.
    #[default]
    Reserve,
    /// Idle entitlement may be lent; the share never borrows.
    Lend,
    /// Lends, and borrows idle capacity up to `borrowLimit`.
    LendAndBorrow,
}

impl Strategy {
    pub fn lends(self) -> bool {
        matches!(self, Strategy::Lend | Strategy::LendAndBorrow)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Reserve => "RESERVE",
            Strategy::Lend => "LEND",
            Strategy::LendAndBorrow => "LEND_AND_BORROW",
        }
    }
}

/// Order in which a share's waiting jobs may start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum QueueingStrategy {
    /// A job that does not fit does not block smaller ones behind it.
    #[default]
    BestEffortFifo,
    /// The head of a share blocks the share.
    StrictFifo,
}

/// `{capacityUnit, maxCapacity}`: instances of one type.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CapacityLimit {
    /// The instance type, e.g. `ml.g5.xlarge`.
    pub capacity_unit: String,
    /// Signed so that validation can name a negative value instead of a parser
    /// failing on it; valid configurations have it >= 0.
    pub max_capacity: i64,
}

/// A quota share, as `CreateQuotaShare` takes it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QuotaShare {
    pub name: String,
    pub capacity_limits: Vec<CapacityLimit>,
    pub strategy: Strategy,
    /// Percent of the share's own `maxCapacity`, per type; -1 = unlimited.
    /// Only LEND_AND_BORROW may set anything but -1.
    pub borrow_limit: i64,
    pub in_share_preemption: bool,
    pub state: State,
    pub protections: Protections,
    /// Workload classes (`policy::classes`); empty: the implicit `default` class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub classes: Vec<crate::policy::classes::WorkloadClass>,
    /// The class of jobs that name none; None: the first class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_class: Option<String>,
    /// How much the share may borrow over time (`policy::budgets`); None: no limit
    /// beyond `borrowLimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_budget: Option<crate::policy::budgets::BorrowBudget>,
    /// What running borrowed jobs do when the budget is spent.
    #[serde(default, skip_serializing_if = "is_default")]
    pub on_budget_exhausted: crate::policy::budgets::OnBudgetExhausted,
    /// Its weight under FAIR_SHARE (1-100, default 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub fair_share_weight: u32,
    /// The share group it belongs to, if any (`shareGroups` of its queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

fn one() -> u32 {
    1
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

pub(crate) fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

impl QuotaShare {
    /// A share with defaults: RESERVE, no in-share preemption, ENABLED.
    pub fn new(name: impl Into<String>, limits: &[(&str, i64)]) -> QuotaShare {
        QuotaShare {
            name: name.into(),
            capacity_limits: limits
                .iter()
                .map(|(unit, max)| CapacityLimit {
                    capacity_unit: (*unit).to_string(),
                    max_capacity: *max,
                })
                .collect(),
            strategy: Strategy::Reserve,
            borrow_limit: -1,
            in_share_preemption: false,
            state: State::Enabled,
            protections: Protections::default(),
            classes: Vec::new(),
            default_class: None,
            borrow_budget: None,
            on_budget_exhausted: Default::default(),
            fair_share_weight: 1,
            group: None,
        }
    }

    /// The share's entitlement of `instance_type` (0 if it names none).
    pub fn entitlement(&self, instance_type: &str) -> u32 {
        self.capacity_limits
            .iter()
            .find(|l| l.capacity_unit == instance_type)
            .map_or(0, |l| clamp_u32(l.max_capacity))
    }

    /// Most instances of a type with entitlement `entitlement` this share may
    /// hold: `E` for RESERVE and LEND, `E * (1 + borrowLimit/100)` rounded down
    /// for LEND_AND_BORROW, `u32::MAX` when borrowing is unlimited.
    pub fn max_holding(&self, entitlement: u32) -> u32 {
        match self.strategy {
            Strategy::Reserve | Strategy::Lend => entitlement,
            Strategy::LendAndBorrow if self.borrow_limit < 0 => u32::MAX,
            Strategy::LendAndBorrow => {
                let max = u64::from(entitlement) * (100 + self.borrow_limit as u64) / 100;
                u32::try_from(max).unwrap_or(u32::MAX)
            }
        }
    }
}

/// A job queue and its quota shares.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueueConfig {
    pub name: String,
    pub state: State,
    pub queueing_strategy: QueueingStrategy,
    /// Optional per-type caps for the whole queue; without one, the fleet bounds it.
    pub capacity_limits: Vec<CapacityLimit>,
    pub shares: Vec<QuotaShare>,
    /// `checkpointBeforePreemptSeconds` of jobs that give none (0: off).
    #[serde(default)]
    pub checkpoint_before_preempt_secs: u64,
    /// How lendable capacity goes to borrowers.
    #[serde(default, skip_serializing_if = "is_default")]
    pub idle_assignment: IdleAssignment,
    /// Under FAIR_SHARE: how fast past borrowing is forgotten.
    #[serde(default = "half_life", skip_serializing_if = "is_half_life")]
    pub fair_share_half_life_hours: u64,
    /// Under FAIR_SHARE: rebalancing preemption between borrowers, each
    /// job at most once per this many seconds of its run (None: off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fair_share_rebalance_secs: Option<u64>,
    /// Share groups (`policy::groups`); shares name theirs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<ShareGroup>,
    /// The service environment whose capacity the queue uses
    /// ([`crate::policy::environments`]); None: an environment of the queue's own
    /// name (the executors started for this queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_environment: Option<String>,
    /// The queue's priority in its environment (0-1000, higher served first).
    #[serde(default, skip_serializing_if = "is_default")]
    pub priority: u32,
}

/// Highest queue `priority` (as AWS Batch).
pub const MAX_QUEUE_PRIORITY: u32 = 1000;

/// Longest `fairShareRebalanceSeconds` (a week).
pub const MAX_REBALANCE_SECS: u64 = 7 * 24 * 3600;

pub(crate) fn half_life() -> u64 {
    DEFAULT_FAIR_SHARE_HALF_LIFE_HOURS
}

pub(crate) fn is_half_life(v: &u64) -> bool {
    *v == DEFAULT_FAIR_SHARE_HALF_LIFE_HOURS
}

impl QueueConfig {
    pub fn new(name: impl Into<String>, shares: Vec<QuotaShare>) -> QueueConfig {
        QueueConfig {
            name: name.into(),
            state: State::Enabled,
            queueing_strategy: QueueingStrategy::BestEffortFifo,
            capacity_limits: Vec::new(),
            shares,
            checkpoint_before_preempt_secs: 0,
            idle_assignment: IdleAssignment::Fifo,
            fair_share_half_life_hours: DEFAULT_FAIR_SHARE_HALF_LIFE_HOURS,
            fair_share_rebalance_secs: None,
            groups: Vec::new(),
            service_environment: None,
            priority: 0,
        }
    }

    pub fn share(&self, name: &str) -> Option<&QuotaShare> {
        self.shares.iter().find(|s| s.name == name)
    }

    /// The queue's own cap on a type, if it sets one.
    pub fn queue_limit(&self, instance_type: &str) -> Option<u32> {
        self.capacity_limits
            .iter()
            .find(|l| l.capacity_unit == instance_type)
            .map(|l| clamp_u32(l.max_capacity))
    }
}

pub(crate) fn clamp_u32(value: i64) -> u32 {
    u32::try_from(value.max(0)).unwrap_or(u32::MAX)
}

/// One thing wrong with a configuration: where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    /// camelCase path of the field, e.g. `quotaShares[1].capacityLimits[0].maxCapacity`.
    pub field: String,
    pub message: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Every problem found in a configuration change.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration ({} problem{}): {}", .0.len(), if .0.len() == 1 { "" } else { "s" }, render(.0))]
pub struct ConfigError(pub Vec<ConfigProblem>);

fn render(problems: &[ConfigProblem]) -> String {
    problems
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Whether `name` is 1-128 letters, digits, `-` or `_`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

impl QuotaShare {
    /// The class a job naming `name` belongs to: the named one, or the
    /// default class when it names none. None when the share declares no
    /// class (the implicit one) or names an unknown one.
    pub fn class(&self, name: Option<&str>) -> Option<&WorkloadClass> {
        if self.classes.is_empty() {
            return None;
        }
        let wanted = name.or(self.default_class.as_deref());
        match wanted {
            Some(n) => self.classes.iter().find(|c| c.name == n),
            None => self.classes.first(),
        }
    }

    /// The name of the class a job naming `name` belongs to.
    pub fn class_name<'a>(&'a self, name: Option<&'a str>) -> &'a str {
        match self.class(name) {
            Some(c) => &c.name,
            None if self.classes.is_empty() => IMPLICIT_CLASS,
            None => name.unwrap_or(IMPLICIT_CLASS),
        }
    }

    /// The rules for a job of class `name` (None: the default class).
    pub fn rules(&self, name: Option<&str>) -> ClassRules {
        let p = &self.protections;
        match self.class(name) {
            Some(c) => ClassRules {
                priority_min: c.priority_min,
                priority_max: c.priority_max,
                may_borrow: c.may_borrow,
                borrow_requires_resume_proof: c.borrow_requires_resume_proof,
                min_runtime_before_preemption_secs: c
                    .min_runtime_before_preemption_secs
                    .unwrap_or(p.min_runtime_before_preemption_secs),
                checkpoint_before_preempt_secs: c.checkpoint_before_preempt_secs,
                requires_checkpoint: c.requires_checkpoint,
            },
            None => ClassRules {
                priority_min: 0,
                priority_max: MAX_PRIORITY,
                may_borrow: true,
                borrow_requires_resume_proof: false,
                min_runtime_before_preemption_secs: p.min_runtime_before_preemption_secs,
                checkpoint_before_preempt_secs: None,
                requires_checkpoint: false,
            },
        }
    }

    /// Whether a job of class `preemptor` may preempt one of class `victim`
    /// inside this share (priorities aside).
    pub fn class_may_preempt(&self, preemptor: Option<&str>, victim: Option<&str>) -> bool {
        match self.class(victim).and_then(|c| c.preemptible_by.as_ref()) {
            None => true,
            Some(allowed) => {
                let by = self.class_name(preemptor);
                allowed.iter().any(|a| a == by)
            }
        }
    }
}
