//! What every plan must satisfy: capacity, borrowing and lending limits,
//! minimal and complete reclaim, budgets.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::Cluster;
use crate::config::{QueueingStrategy, Strategy};
use crate::ids::{JobId, ShareIdx, TypeIdx};
use crate::index::{borrowed_jobs, RunKey};
use crate::job::{JobStatus, PreemptionKind};
use crate::plan::Plan;
use crate::reason::WaitReason;

use super::state::check_indexes;
use super::{violation, Violation};

/// Projected accounting of a type: jobs being stopped count as gone.
/// Returns `B - L` and per-share usage.
fn projected(c: &Cluster, t: TypeIdx) -> (i64, Vec<(ShareIdx, u32)>) {
    let fleet = c.effective_fleet(t);
    let mut sum_e = 0u64;
    let mut borrowed = 0i64;
    let mut idle_lent = 0i64;
    let mut usage = Vec::new();
    for s in c.share_indices() {
        let st = c.st(s, t);
        let u = st.running_usage;
        sum_e += u64::from(st.entitlement);
        borrowed += i64::from(u.saturating_sub(st.entitlement));
        if c.share_config(s).strategy.lends() {
            idle_lent += i64::from(st.entitlement.saturating_sub(u));
        }
        usage.push((s, u));
    }
    let unassigned = (i64::from(fleet) - sum_e as i64).max(0);
    (borrowed - (unassigned + idle_lent), usage)
}

/// Checks `plan`, made by a pass over `before` at `plan.now`, against the
/// contract. Applies it to a copy of `before`; changes nothing.
pub fn check_plan(before: &Cluster, plan: &Plan) -> Result<(), Violation> {
    let mut after = before.clone();
    after.apply(plan);
    check_indexes(&after)?;
    check_drill_stops(before, plan)?;
    check_budgets(before, plan, &after)?;
    let admitted: BTreeSet<JobId> = plan
        .starts
        .iter()
        .map(|s| s.job)
        .chain(plan.waiting_for_release.iter().copied())
        .collect();

    for t in 0..after.type_count() {
        check_type_limits(before, &after, TypeIdx(t as u16))?;
    }
    check_preemptions(before, plan, &admitted)?;
    check_placement(before, plan)?;
    check_minimal_preemption(before, plan)?;
    check_starts(before, plan)?;
    check_reclaim_complete(&after, plan, &admitted)
}

/// A drill stops only its own subject, running, once, when it is due.
fn check_drill_stops(before: &Cluster, plan: &Plan) -> Result<(), Violation> {
    let now = plan.now;
    for id in &plan.drill_stops {
        let job = &before.jobs[id];
        let due = job
            .spec
            .drill
            .filter(|role| !role.reference)
            .and_then(|role| before.drill(role.drill))
            .and_then(|d| d.stop_at.filter(|_| d.stopped_at.is_none()))
            .is_some_and(|at| at <= now);
        if !due || !job.status.holds_instances() || job.stopping.is_some() {
            return violation(
                "drills stop their subject once, when due",
                format!(
                    "{id} stopped by a drill: {:?}, {}",
                    job.spec.drill, job.status
                ),
            );
        }
    }
    Ok(())
}

/// Capacity and limits of type `t` after the plan: the fleet, lending,
/// share group borrowing and share maximums.
fn check_type_limits(before: &Cluster, after: &Cluster, t: TypeIdx) -> Result<(), Violation> {
    let acc = after.accounting(t);
    // Physically, sum(U) <= F always (jobs being stopped still count).
    if acc.in_use > acc.fleet {
        return violation(
            "sum(U) <= F",
            format!(
                "type {}: {} in use of {}",
                after.type_name(t),
                acc.in_use,
                acc.fleet
            ),
        );
    }
    // B <= L once the preemptions of this pass complete; where a limit
    // reduction or a smaller fleet already broke it, the pass must not make
    // it worse.
    let (debt_before, usage_before) = projected(before, t);
    let (debt_after, usage_after) = projected(after, t);
    if debt_after > debt_before.max(0) {
        return violation(
            "B <= L",
            format!(
                "type {}: borrowing exceeds lendable by {debt_after} (was {debt_before})",
                after.type_name(t)
            ),
        );
    }
    // No share holds more than its maximum, unless it already did
    // (limit reduction) and did not grow.
    // No share group borrows more than its limit, unless it already
    // did and did not grow (`policy::groups`).
    for g in &after.groups {
        let member =
            |s: &ShareIdx| after.share_config(*s).group.as_deref() == Some(g.name.as_str());
        let borrowed = |usage: &[(ShareIdx, u32)]| -> u32 {
            usage
                .iter()
                .filter(|(s, _)| member(s))
                .map(|(s, u)| u.saturating_sub(after.st(*s, t).entitlement))
                .sum()
        };
        let (g_before, g_after) = (borrowed(&usage_before), borrowed(&usage_after));
        let entitlement: u32 = usage_after
            .iter()
            .filter(|(s, _)| member(s))
            .map(|(s, _)| after.st(*s, t).entitlement)
            .sum();
        let cap = g.borrow_cap(entitlement);
        if g_after > cap && g_after > g_before {
            return violation(
                "share group borrow limit",
                format!(
                    "group {} borrows {g_after} of type {} (limit {cap})",
                    g.name,
                    after.type_name(t)
                ),
            );
        }
    }
    for ((s, u_before), (_, u_after)) in usage_before.iter().zip(usage_after.iter()) {
        let share = after.share_config(*s);
        let max = share.max_holding(after.st(*s, t).entitlement);
        if *u_after > max && u_after > u_before {
            return violation(
                "share maximum",
                format!(
                    "share {} holds {u_after} of type {} (max {max})",
                    share.name,
                    after.type_name(t)
                ),
            );
        }
    }
    Ok(())
}

/// Every preemption lets some RUNNABLE job start, and takes the right victims.
fn check_preemptions(
    before: &Cluster,
    plan: &Plan,
    admitted: &BTreeSet<JobId>,
) -> Result<(), Violation> {
    let now = plan.now;
    for p in &plan.preemptions {
        if !admitted.contains(&p.for_job) {
            return violation(
                "preemption lets a job start",
                format!(
                    "{} preempted for {}, which was not admitted",
                    p.job, p.for_job
                ),
            );
        }
        let victim = &before.jobs[&p.job];
        let beneficiary = &before.jobs[&p.for_job];
        if !victim.status.holds_instances() || victim.stopping.is_some() {
            return violation(
                "victims are running",
                format!("{} was {} / stopping", p.job, victim.status),
            );
        }
        let same_share = victim.spec.share == beneficiary.spec.share;
        match p.kind {
            PreemptionKind::InShare => {
                if !same_share || victim.spec.priority >= beneficiary.spec.priority {
                    return violation(
                        "in-share preemption",
                        format!(
                            "{} (priority {}) preempted for {} (priority {})",
                            p.job, victim.spec.priority, p.for_job, beneficiary.spec.priority
                        ),
                    );
                }
                if !before.share_config(victim.spec.share).class_may_preempt(
                    beneficiary.spec.class.as_deref(),
                    victim.spec.class.as_deref(),
                ) {
                    return violation(
                        "preemptibleBy",
                        format!(
                            "{} (class {:?}) preempted for {} (class {:?}), a class it does not let preempt it",
                            p.job, victim.spec.class, p.for_job, beneficiary.spec.class
                        ),
                    );
                }
            }
            PreemptionKind::CrossShare | PreemptionKind::LimitReduced => {
                if same_share {
                    return violation(
                        "reclaim takes other shares' jobs",
                        format!("{} reclaimed for its own share", p.job),
                    );
                }
            }
            PreemptionKind::Rebalance => {
                let interval = before.fair_share_rebalance_secs;
                let ran = victim.current_attempt().map(|a| a.scheduled_at);
                let long_enough = match (interval, ran) {
                    (Some(secs), Some(at)) => at.plus_secs(secs) <= now,
                    _ => false,
                };
                if same_share
                    || before.idle_assignment != crate::config::IdleAssignment::FairShare
                    || !long_enough
                {
                    return violation(
                        "rebalancing takes another borrower's job that ran the interval",
                        format!(
                            "{} rebalanced for {} (interval {interval:?}, ran since {ran:?})",
                            p.job, p.for_job
                        ),
                    );
                }
            }
            PreemptionKind::BudgetExhausted => {
                return violation(
                    "a budget stop is for no job (Plan::budget_stops)",
                    format!("{} preempted for {} by its budget", p.job, p.for_job),
                );
            }
        }
        let share = before.share_config(victim.spec.share);
        let min_runtime = share
            .rules(victim.spec.class.as_deref())
            .min_runtime_before_preemption_secs;
        if let Some(started) = victim.started_at() {
            if min_runtime > 0 && started.plus_secs(min_runtime) > now {
                return violation(
                    "minRuntimeBeforePreemptionSeconds",
                    format!("{} preempted before its minimum runtime", p.job),
                );
            }
        }
    }
    Ok(())
}

/// Placement of the starts, and the types of the victims freed for them.
fn check_placement(before: &Cluster, plan: &Plan) -> Result<(), Violation> {
    // Placement: starts use free slots of live nodes offering their type,
    // no slot twice, one rank per node, their count in all.
    let mut taken: BTreeSet<(usize, TypeIdx, u32)> = BTreeSet::new();
    for s in &plan.starts {
        let job = &before.jobs[&s.job];
        let t = job.spec.instance_type;
        let nodes: BTreeSet<_> = s.placement.iter().map(|r| r.node).collect();
        let count: usize = s.placement.iter().map(|r| r.slots.len()).sum();
        if nodes.len() != s.placement.len() || count != job.spec.count as usize {
            return violation(
                "a start is one rank per node, its count in all",
                format!("{}: {:?} for {}", s.job, s.placement, job.spec.count),
            );
        }
        for r in &s.placement {
            let node = &before.nodes[r.node.index()];
            for i in &r.slots {
                let free = node.live
                    && node.slots.get(&t).and_then(|x| x.get(*i as usize)) == Some(&None)
                    && !node.withheld(t).contains(i);
                if !free || !taken.insert((r.node.index(), t, *i)) {
                    return violation(
                        "no instance is used twice",
                        format!(
                            "{} placed on slot {i} of {}, which is not free",
                            s.job, node.name
                        ),
                    );
                }
            }
        }
    }
    // A reclaim's victims free instances its beneficiary can use: of its
    // type (and any slot of a type serves any job of it: jobs may spread).
    for p in &plan.preemptions {
        let (v, b) = (&before.jobs[&p.job], &before.jobs[&p.for_job]);
        if v.spec.instance_type != b.spec.instance_type {
            return violation(
                "victims free usable instances",
                format!("{} preempted for {} of another type", p.job, p.for_job),
            );
        }
    }
    Ok(())
}

/// Minimal preemption: no beneficiary gets a victim it did not need.
fn check_minimal_preemption(before: &Cluster, plan: &Plan) -> Result<(), Violation> {
    // Minimal preemption: every victim of a beneficiary is needed, so all of
    // them but the largest free fewer instances than it asks for (the
    // beneficiary never gets more preempted for it than its count plus the
    // overshoot of one victim), plus what its share holds beyond its
    // current maximum after a limit reduction (that excess must go first).
    let mut per_beneficiary: BTreeMap<JobId, (u64, u32)> = BTreeMap::new();
    for p in &plan.preemptions {
        let count = before.jobs[&p.job].spec.count;
        let entry = per_beneficiary.entry(p.for_job).or_default();
        entry.0 += u64::from(count);
        entry.1 = entry.1.max(count);
    }
    for (beneficiary, (total, largest)) in per_beneficiary {
        let job = &before.jobs[&beneficiary];
        let (s, t) = (job.spec.share, job.spec.instance_type);
        let st = before.st(s, t);
        let config = before.share_config(s);
        let may_hold = match config.strategy {
            Strategy::LendAndBorrow => config.max_holding(st.entitlement),
            _ => st.entitlement,
        };
        let excess = st.running_usage.saturating_sub(may_hold);
        // Where a limit reduction or a smaller fleet left a lending debt
        // (`B > L`), no start may make it worse: the victims may also have to
        // pay it down before the job fits.
        // (Projected: jobs already stopping count as gone, as in the pass.)
        let debt = u32::try_from(projected(before, t).0.max(0)).unwrap_or(u32::MAX);
        // A job that may not borrow (a borrow bar) starts only while the
        // share's barred jobs stay within the entitlement: barred jobs
        // beyond it (left there by a class that stopped borrowing) must go
        // too.
        let barred_excess = if job.borrow_bar.is_some() {
            let barred: u32 = st
                .running
                .iter()
                .filter(|k| !k.may_borrow)
                .map(|k| k.count)
                .sum();
            barred.saturating_sub(st.entitlement)
        } else {
            0
        };
        // A share with a borrowing budget may have to bring its job within
        // its entitlement (too little budget left to borrow): its borrowed
        // excess may have to go too.
        let budget_excess = if config.borrow_budget.is_some() {
            st.running_usage.saturating_sub(st.entitlement)
        } else {
            0
        };
        let asks = job.spec.count + excess + debt + barred_excess + budget_excess;
        if total - u64::from(largest) >= u64::from(asks) {
            return violation(
                "minimal preemption",
                format!(
                    "{total} instances preempted for {beneficiary}, which asks for {asks} \
                     (largest victim {largest}): a victim was not needed"
                ),
            );
        }
    }
    Ok(())
}

/// Starts are RUNNABLE jobs, and only those allowed to borrow borrow.
fn check_starts(before: &Cluster, plan: &Plan) -> Result<(), Violation> {
    for s in &plan.starts {
        let job = &before.jobs[&s.job];
        if job.status != JobStatus::Runnable {
            return violation(
                "starts are RUNNABLE jobs",
                format!("{} was {}", s.job, job.status),
            );
        }
        let share = before.share_config(job.spec.share);
        if s.borrowed > 0 {
            if share.strategy != Strategy::LendAndBorrow {
                return violation(
                    "only LEND_AND_BORROW borrows",
                    format!("{} borrows in a {} share", s.job, share.strategy.as_str()),
                );
            }
            if let Some(bar) = job.borrow_bar {
                return violation(
                    "jobs that may not borrow do not borrow",
                    format!("{} borrows, but may not ({bar:?})", s.job),
                );
            }
        }
    }
    Ok(())
}

/// A share with RUNNABLE within-quota work gets its lent capacity back in the
/// same pass: after the plan, no such job would fit if every preemptible
/// borrowed job of the other shares were stopped.
fn check_reclaim_complete(
    after: &Cluster,
    plan: &Plan,
    admitted: &BTreeSet<JobId>,
) -> Result<(), Violation> {
    let now = plan.now;
    for t in 0..after.type_count() {
        let t = TypeIdx(t as u16);
        let fleet = after.effective_fleet(t);
        if fleet == 0 {
            continue;
        }
        let shares: Vec<ShareIdx> = after.share_indices().collect();
        // Usage once every eligible borrowed job of each share is gone.
        let mut floor_usage: Vec<(ShareIdx, u32)> = Vec::new();
        let mut promised_usage: Vec<u32> = Vec::new();
        for &s in &shares {
            let st = after.st(s, t);
            let running: Vec<RunKey> = st.running.iter().copied().collect();
            let share = after.share_config(s);
            let removable: u32 = borrowed_jobs(&running, st.entitlement)
                .iter()
                .filter(|k| !admitted.contains(&k.job))
                .filter(|k| {
                    let min_runtime = share
                        .rules(after.jobs[&k.job].spec.class.as_deref())
                        .min_runtime_before_preemption_secs;
                    min_runtime == 0 || k.started.plus_secs(min_runtime) <= now
                })
                .map(|k| k.count)
                .sum();
            // Jobs admitted but waiting for stops hold their promised room.
            let promised: u32 = plan
                .waiting_for_release
                .iter()
                .map(|id| &after.jobs[id])
                .filter(|j| j.spec.share == s && j.spec.instance_type == t)
                .map(|j| j.spec.count)
                .sum();
            floor_usage.push((s, st.running_usage - removable + promised));
            promised_usage.push(promised);
        }
        for (i, &s) in shares.iter().enumerate() {
            let st = after.st(s, t);
            let own_usage = st.running_usage + promised_usage[i];
            // A job waiting for executors of its runtime is owed nothing by
            // reclaim (`policy::runtimes`); the next in line is.
            let waits_for_runtime = |id: &JobId| {
                matches!(
                    after.jobs[id].status_reason.wait(),
                    Some(
                        WaitReason::NoExecutorOffersRuntime { .. }
                            | WaitReason::RuntimeInstancesBusy { .. }
                    )
                )
            };
            let Some((key, count)) = st.runnable.next_candidate(
                None,
                1..=st.entitlement.saturating_sub(own_usage),
                false,
                &|id| admitted.contains(&id) || waits_for_runtime(&id),
            ) else {
                continue;
            };
            if after.queueing == QueueingStrategy::StrictFifo {
                // Only the share's head is owed a start.
                let head = after.shares[s.index()]
                    .types
                    .iter()
                    .filter_map(|st| {
                        st.runnable
                            .next_candidate(None, 0..=u32::MAX, false, &|_| false)
                    })
                    .min();
                if head.map(|(k, _)| k.job) != Some(key.job) {
                    continue;
                }
            }
            if after
                .never_fits(s, t, count, after.jobs[&key.job].borrow_bar)
                .is_some()
            {
                continue;
            }
            if plan.waiting_for_release.contains(&key.job) {
                continue; // admitted: its room is being freed
            }
            // Would it fit with every eligible borrowed job of the others gone?
            let mut sum_u = 0u64;
            let mut sum_e = 0u64;
            let mut borrowed = 0i64;
            let mut idle_lent = 0i64;
            for &(o, floor) in &floor_usage {
                let e = after.st(o, t).entitlement;
                let u = if o == s { own_usage + count } else { floor };
                sum_u += u64::from(u);
                sum_e += u64::from(e);
                borrowed += i64::from(u.saturating_sub(e));
                if after.share_config(o).strategy.lends() {
                    idle_lent += i64::from(e.saturating_sub(u));
                }
            }
            let lendable = (i64::from(fleet) - sum_e as i64).max(0) + idle_lent;
            if sum_u <= u64::from(fleet) && borrowed <= lendable {
                return violation(
                    "lent capacity is reclaimed in the same pass",
                    format!(
                        "{} of share {} waits within quota ({}) although reclaim would let it run",
                        key.job,
                        after.share_config(s).name,
                        after.jobs[&key.job]
                            .status_reason
                            .render(&|j| j.to_string())
                    ),
                );
            }
        }
    }
    Ok(())
}

/// Borrowing budgets (`policy::budgets`): a budget stop hits only a running job
/// on borrowed capacity of a `CHECKPOINT_AND_STOP` share whose budget is
/// spent, and no job starts on borrowed capacity of a share whose budget
/// is spent.
fn check_budgets(before: &Cluster, plan: &Plan, after: &Cluster) -> Result<(), Violation> {
    use crate::policy::budgets::OnBudgetExhausted;
    let now = plan.now;
    for id in &plan.budget_stops {
        let job = &before.jobs[id];
        let status = before.budget_status(job.spec.share, now);
        let spent = status.is_some_and(|b| {
            b.exhausted() && b.on_exhausted == OnBudgetExhausted::CheckpointAndStop
        });
        let (s, t) = (job.spec.share, job.spec.instance_type);
        let st = before.st(s, t);
        let running: Vec<_> = st.running.iter().copied().collect();
        let borrowed = crate::index::borrowed_jobs(&running, st.entitlement)
            .iter()
            .any(|k| k.job == *id);
        if !spent || !borrowed || job.stopping.is_some() {
            return violation(
                "a budget stop hits a borrowed job of a share whose budget is spent",
                format!("{id} stopped for its budget: {status:?}, borrowed {borrowed}"),
            );
        }
    }
    // A spent CHECKPOINT_AND_STOP share keeps nothing running beyond its
    // entitlement once the plan's stops complete.
    for s in before.share_indices() {
        let spent = before.budget_status(s, now).is_some_and(|b| {
            b.exhausted() && b.on_exhausted == OnBudgetExhausted::CheckpointAndStop
        });
        if !spent {
            continue;
        }
        for t in 0..before.type_count() {
            let st = after.st(s, crate::ids::TypeIdx(t as u16));
            if st.running_usage > st.entitlement {
                return violation(
                    "a spent CHECKPOINT_AND_STOP share borrows nothing",
                    format!(
                        "share {s:?} runs {} of type {t} on an entitlement of {} after the plan",
                        st.running_usage, st.entitlement
                    ),
                );
            }
        }
    }
    // (That jobs admitted to borrow together fit in what is left is the
    // pass's own accounting, `policy::budgets::hooks`; the table tests check it.)
    for start in plan.starts.iter().filter(|s| s.borrowed > 0) {
        if let Some(status) = before.budget_status(start.share, now) {
            if status.exhausted() {
                return violation(
                    "nothing borrows once its share's budget is spent",
                    format!("{} started on borrowed capacity: {status:?}", start.job),
                );
            }
        }
    }
    Ok(())
}
