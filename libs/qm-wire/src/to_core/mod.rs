//! Wire (AWS-shaped JSON) -> core types, with every problem named by its
//! camelCase field: the one conversion of a quota share, a queue and a job
//! submission to the scheduling core. Admission, the scheduler and the
//! simulator all convert through it, so a request admission accepted is one
//! the scheduler can apply, and a scenario means what the API means.

//!
//! Shares and queues here; job submissions in `jobs.rs`; runtime names in
//! `runtimes.rs`.

mod fields;
mod jobs;
mod runtimes;

use fields::{one_of, problem};

pub use jobs::{artifact, job_spec};
pub use runtimes::{known_runtimes, runtimes};

use crate::messages as wire;
use crate::system::QueueDocument;
use qm_core::{
    BorrowBudget, BudgetWindow, CapacityLimit, ConfigProblem, OnBudgetExhausted, Protections,
    QueueConfig, QueueingStrategy, QuotaShare, State, Strategy, WorkloadClass,
};

fn state(field: &str, value: Option<&str>, problems: &mut Vec<ConfigProblem>) -> State {
    value
        .and_then(|v| {
            one_of(
                field,
                v,
                &[("ENABLED", State::Enabled), ("DISABLED", State::Disabled)],
                problems,
            )
        })
        .unwrap_or_default()
}

fn limits(list: &[wire::CapacityLimit]) -> Vec<CapacityLimit> {
    list.iter()
        .map(|l| CapacityLimit {
            capacity_unit: l.capacity_unit.clone(),
            max_capacity: l.max_capacity,
        })
        .collect()
}

/// A share as the wire states it (absent fields take the API's defaults).
pub fn share(s: &wire::QuotaShare, field: &str, problems: &mut Vec<ConfigProblem>) -> QuotaShare {
    let mut share = QuotaShare::new(s.quota_share_name.clone(), &[]);
    if s.capacity_limits.is_none() {
        problems.push(problem(format!("{field}.capacityLimits"), "is required"));
    }
    share_fields(&mut share, s, field, problems);
    share
}

/// The fields `s` states, read onto `share` (those it leaves out keep the
/// API's defaults). Updates are merged on the wire, once, before this
/// (`crate::updates`).
fn share_fields(
    share: &mut QuotaShare,
    s: &wire::QuotaShare,
    field: &str,
    problems: &mut Vec<ConfigProblem>,
) {
    if let Some(l) = &s.capacity_limits {
        share.capacity_limits = limits(l);
    }
    if let Some(v) = s.state.as_deref() {
        share.state = state(&format!("{field}.state"), Some(v), problems);
    }
    if let Some(rs) = &s.resource_sharing_configuration {
        let allowed = [
            ("RESERVE", Strategy::Reserve),
            ("LEND", Strategy::Lend),
            ("LEND_AND_BORROW", Strategy::LendAndBorrow),
        ];
        if let Some(v) = one_of(
            &format!("{field}.resourceSharingConfiguration.strategy"),
            &rs.strategy,
            &allowed,
            problems,
        ) {
            share.strategy = v;
        }
        share.borrow_limit = rs.borrow_limit.unwrap_or(-1);
    }
    if let Some(p) = &s.preemption_configuration {
        let allowed = [("ENABLED", true), ("DISABLED", false)];
        if let Some(v) = one_of(
            &format!("{field}.preemptionConfiguration.inSharePreemption"),
            &p.in_share_preemption,
            &allowed,
            problems,
        ) {
            share.in_share_preemption = v;
        }
    }
    if let Some(p) = &s.protections {
        let defaults = share.protections.clone(); // a new share's
        share.protections = Protections {
            min_runtime_before_preemption_secs: p
                .min_runtime_before_preemption_seconds
                .unwrap_or(defaults.min_runtime_before_preemption_secs),
            reborrow_cooldown_secs: p
                .reborrow_cooldown_seconds
                .unwrap_or(defaults.reborrow_cooldown_secs),
            borrow_requires_checkpoint: p
                .borrow_requires_checkpoint
                .unwrap_or(defaults.borrow_requires_checkpoint),
        };
    }
    if let Some(classes) = &s.workload_classes {
        share.classes = classes.iter().map(workload_class).collect();
    }
    if let Some(d) = &s.default_workload_class {
        share.default_class = Some(d.clone());
    }
    if let Some(budget) = &s.borrow_budget {
        share.borrow_budget = budget
            .as_ref()
            .and_then(|b| borrow_budget(b, &format!("{field}.borrowBudget"), problems));
    }
    if let Some(w) = s.fair_share_weight {
        share.fair_share_weight = w;
    }
    if let Some(g) = &s.share_group {
        share.group.clone_from(g);
    }
    if let Some(v) = s.on_budget_exhausted.as_deref() {
        let allowed = [
            ("FINISH", OnBudgetExhausted::Finish),
            ("CHECKPOINT_AND_STOP", OnBudgetExhausted::CheckpointAndStop),
        ];
        if let Some(v) = one_of(&format!("{field}.onBudgetExhausted"), v, &allowed, problems) {
            share.on_budget_exhausted = v;
        }
    }
}

/// A budget as the wire states it; its ranges are the core's to check.
fn borrow_budget(
    b: &wire::BorrowBudget,
    field: &str,
    problems: &mut Vec<ConfigProblem>,
) -> Option<BorrowBudget> {
    let window = match (b.window_hours, b.half_life_hours) {
        (Some(hours), None) => BudgetWindow::Rolling { hours },
        (None, Some(hours)) => BudgetWindow::HalfLife { hours },
        _ => {
            problems.push(problem(
                field.to_string(),
                "give exactly one of windowHours (a rolling window) and halfLifeHours (decayed usage)",
            ));
            return None;
        }
    };
    let seconds = b.instance_hours * 3600.0;
    if !(seconds.is_finite() && seconds >= 0.5) {
        problems.push(problem(
            format!("{field}.instanceHours"),
            format!(
                "must be at least one instance-second (1/3600), got {}",
                b.instance_hours
            ),
        ));
        return None;
    }
    Some(BorrowBudget {
        instance_seconds: seconds.round().min(u64::MAX as f64) as u64,
        window,
    })
}

/// A workload class as the wire states it (absent fields: the defaults).
/// The core validates it with its share (`qm_core::class`).
fn workload_class(c: &wire::WorkloadClass) -> WorkloadClass {
    let mut class = WorkloadClass::new(c.name.clone(), c.priority_band.min, c.priority_band.max);
    class.may_borrow = c.may_borrow.unwrap_or(true);
    class.borrow_requires_resume_proof = c.borrow_requires_resume_proof.unwrap_or(false);
    class.preemptible_by = c.preemptible_by.clone();
    class.min_runtime_before_preemption_secs = c.min_runtime_before_preemption_seconds;
    class.checkpoint_before_preempt_secs = c.checkpoint_before_preempt_seconds;
    class.requires_checkpoint = c.requires_checkpoint.unwrap_or(false);
    class.result_tolerance_ppm = c.result_tolerance_ppm.unwrap_or(0);
    class
}

/// A whole queue document -> the core's configuration, validated whole.
pub fn queue(doc: &QueueDocument) -> Result<QueueConfig, Vec<ConfigProblem>> {
    let mut problems = Vec::new();
    for (i, s) in doc.quota_shares.iter().enumerate() {
        if s.job_queue != doc.job_queue.job_queue_name && !s.job_queue.is_empty() {
            problems.push(problem(
                format!("quotaShares[{i}].jobQueue"),
                format!(
                    "is {:?} but the document is for job queue {:?}",
                    s.job_queue, doc.job_queue.job_queue_name
                ),
            ));
        }
    }
    let shares = doc
        .quota_shares
        .iter()
        .enumerate()
        .map(|(i, s)| share(s, &format!("quotaShares[{i}]"), &mut problems))
        .collect();
    let q = &doc.job_queue;
    let mut config = QueueConfig::new(q.job_queue_name.clone(), shares);
    config.state = state("jobQueue.state", q.state.as_deref(), &mut problems);
    config.capacity_limits = limits(&q.capacity_limits);
    if let Some(secs) = q.checkpoint_before_preempt_seconds {
        if secs > qm_core::MAX_CHECKPOINT_BEFORE_PREEMPT_SECS {
            problems.push(problem(
                "jobQueue.checkpointBeforePreemptSeconds",
                format!(
                    "must be at most {} (a preempting job waits this long)",
                    qm_core::MAX_CHECKPOINT_BEFORE_PREEMPT_SECS
                ),
            ));
        }
        config.checkpoint_before_preempt_secs = secs;
    }
    if let Some(s) = q.idle_resource_assignment_strategy.as_deref() {
        let allowed = [
            ("FIFO", qm_core::config::IdleAssignment::Fifo),
            ("FAIR_SHARE", qm_core::config::IdleAssignment::FairShare),
        ];
        if let Some(v) = one_of(
            "jobQueue.idleResourceAssignmentStrategy",
            s,
            &allowed,
            &mut problems,
        ) {
            config.idle_assignment = v;
        }
    }
    if let Some(h) = q.fair_share_half_life_hours {
        config.fair_share_half_life_hours = h;
    }
    config.fair_share_rebalance_secs = q.fair_share_rebalance_seconds;
    config
        .service_environment
        .clone_from(&q.service_environment);
    config.priority = q.priority.unwrap_or(0);
    config.groups = q
        .share_groups
        .iter()
        .map(|g| qm_core::config::ShareGroup {
            name: g.share_group_name.clone(),
            borrow_limit: g.borrow_limit.unwrap_or(-1),
        })
        .collect();
    if let Some(s) = q.queueing_strategy.as_deref() {
        let allowed = [
            ("BEST_EFFORT_FIFO", QueueingStrategy::BestEffortFifo),
            ("STRICT_FIFO", QueueingStrategy::StrictFifo),
        ];
        if let Some(v) = one_of("jobQueue.queueingStrategy", s, &allowed, &mut problems) {
            config.queueing_strategy = v;
        }
    }
    if let Err(e) = qm_core::validate_queue(&config) {
        problems.extend(e.0);
    }
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests;
