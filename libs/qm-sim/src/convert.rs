//! Scenario types -> core types, with every problem named.

use qm_core::{
    CapacityLimit, ConfigProblem, ExitRule, Protections, QueueConfig, QueueingStrategy, QuotaShare,
    RetryAction, State, Strategy,
};

use crate::scenario::{CapacityLimitSpec, ExitRuleSpec, QueueSpec, ShareSpec};

fn enum_value<T: Copy>(
    field: &str,
    value: &str,
    allowed: &[(&str, T)],
    problems: &mut Vec<ConfigProblem>,
) -> Option<T> {
    match allowed.iter().find(|(name, _)| *name == value) {
        Some((_, v)) => Some(*v),
        None => {
            let names: Vec<&str> = allowed.iter().map(|(n, _)| *n).collect();
            problems.push(ConfigProblem {
                field: field.into(),
                message: format!("{value:?} is not one of {}", names.join(", ")),
            });
            None
        }
    }
}

pub(crate) fn state(
    field: &str,
    value: Option<&str>,
    problems: &mut Vec<ConfigProblem>,
) -> Option<State> {
    value.map(|v| {
        enum_value(
            field,
            v,
            &[("ENABLED", State::Enabled), ("DISABLED", State::Disabled)],
            problems,
        )
    })?
}

fn limits(specs: &[CapacityLimitSpec]) -> Vec<CapacityLimit> {
    specs
        .iter()
        .map(|l| CapacityLimit {
            capacity_unit: l.capacity_unit.clone(),
            max_capacity: l.max_capacity,
        })
        .collect()
}

/// Applies the fields `spec` sets onto `share` (a new share starts from defaults).
pub(crate) fn merge_share(
    share: &mut QuotaShare,
    spec: &ShareSpec,
    field: &str,
    problems: &mut Vec<ConfigProblem>,
) {
    if let Some(s) = state(&format!("{field}.state"), spec.state.as_deref(), problems) {
        share.state = s;
    }
    if let Some(l) = &spec.capacity_limits {
        share.capacity_limits = limits(l);
    }
    if let Some(rs) = &spec.resource_sharing_configuration {
        if let Some(strategy) = rs.strategy.as_deref() {
            let allowed = [
                ("RESERVE", Strategy::Reserve),
                ("LEND", Strategy::Lend),
                ("LEND_AND_BORROW", Strategy::LendAndBorrow),
            ];
            if let Some(s) = enum_value(
                &format!("{field}.resourceSharingConfiguration.strategy"),
                strategy,
                &allowed,
                problems,
            ) {
                share.strategy = s;
                if s != Strategy::LendAndBorrow && rs.borrow_limit.is_none() {
                    share.borrow_limit = -1;
                }
            }
        }
        if let Some(b) = rs.borrow_limit {
            share.borrow_limit = b;
        }
    }
    if let Some(p) = spec
        .preemption_configuration
        .as_ref()
        .and_then(|p| p.in_share_preemption.as_deref())
    {
        let allowed = [("ENABLED", true), ("DISABLED", false)];
        if let Some(v) = enum_value(
            &format!("{field}.preemptionConfiguration.inSharePreemption"),
            p,
            &allowed,
            problems,
        ) {
            share.in_share_preemption = v;
        }
    }
    if let Some(p) = &spec.protections {
        let current = share.protections.clone();
        share.protections = Protections {
            min_runtime_before_preemption_secs: p
                .min_runtime_before_preemption_seconds
                .unwrap_or(current.min_runtime_before_preemption_secs),
            reborrow_cooldown_secs: p
                .reborrow_cooldown_seconds
                .unwrap_or(current.reborrow_cooldown_secs),
            borrow_requires_checkpoint: p
                .borrow_requires_checkpoint
                .unwrap_or(current.borrow_requires_checkpoint),
        };
    }
}

pub(crate) fn new_share(
    spec: &ShareSpec,
    field: &str,
    problems: &mut Vec<ConfigProblem>,
) -> QuotaShare {
    let mut share = QuotaShare::new(spec.quota_share_name.clone(), &[]);
    if spec.capacity_limits.is_none() {
        problems.push(ConfigProblem {
            field: format!("{field}.capacityLimits"),
            message: "is required when creating a quota share".into(),
        });
    }
    merge_share(&mut share, spec, field, problems);
    share
}

pub(crate) fn queue(spec: &QueueSpec, problems: &mut Vec<ConfigProblem>) -> QueueConfig {
    let shares = spec
        .quota_shares
        .iter()
        .enumerate()
        .map(|(i, s)| new_share(s, &format!("quotaShares[{i}]"), problems))
        .collect();
    let mut queue = QueueConfig::new(spec.job_queue_name.clone(), shares);
    queue.capacity_limits = limits(&spec.capacity_limits);
    if let Some(s) = state("state", spec.state.as_deref(), problems) {
        queue.state = s;
    }
    if let Some(q) = spec.queueing_strategy.as_deref() {
        let allowed = [
            ("BEST_EFFORT_FIFO", QueueingStrategy::BestEffortFifo),
            ("STRICT_FIFO", QueueingStrategy::StrictFifo),
        ];
        if let Some(v) = enum_value("queueingStrategy", q, &allowed, problems) {
            queue.queueing_strategy = v;
        }
    }
    queue
}

pub(crate) fn exit_rules(
    specs: &[ExitRuleSpec],
    field: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Vec<ExitRule> {
    specs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let allowed = [("RETRY", RetryAction::Retry), ("EXIT", RetryAction::Exit)];
            let action = enum_value(
                &format!("{field}[{i}].action"),
                &r.action.to_ascii_uppercase(),
                &allowed,
                problems,
            )?;
            Some(ExitRule {
                on_exit_code: r.on_exit_code.clone(),
                on_status_reason: r.on_status_reason.clone(),
                action,
            })
        })
        .collect()
}
