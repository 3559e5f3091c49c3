//! Borrowing budgets in the state (`crate::policy::budgets`): accrued with the usage
//! ledger, read by the pass and by reports.
//!
//! Guarantees: a share's budget counts exactly what the usage ledger counts
//! as borrowed for it (every type together) from the moment the budget is
//! set, accrued at the same instants, so replicas and snapshots agree.

use super::*;
use crate::policy::budgets::{exhausts_at, BudgetStatus, BudgetUse, BudgetWindow};

impl Cluster {
    /// Adds share `s`'s borrowing of `t` over `[since, now)` to its budget
    /// (from `touch_usage`, before anything about them changes).
    pub(crate) fn accrue_budget(&mut self, s: ShareIdx, t: TypeIdx, since: Time, now: Time) {
        let slot = &self.shares[s.index()];
        let Some(budget) = slot.config.borrow_budget.filter(|_| !slot.deleted) else {
            return;
        };
        let st = &slot.types[t.index()];
        let borrowed = (st.running_usage + st.stopping_usage).saturating_sub(st.entitlement);
        if borrowed == 0 {
            return;
        }
        self.budget_use
            .entry(s)
            .or_default()
            .accrue(budget.window, since, now, borrowed);
    }

    /// Under FAIR_SHARE: adds share `s`'s borrowing of `t` over
    /// `[since, now)` to its recent, decayed usage.
    pub(crate) fn accrue_fair(&mut self, s: ShareIdx, t: TypeIdx, since: Time, now: Time) {
        if self.idle_assignment != crate::config::IdleAssignment::FairShare {
            return;
        }
        let slot = &self.shares[s.index()];
        if slot.deleted {
            return;
        }
        let st = &slot.types[t.index()];
        let borrowed = (st.running_usage + st.stopping_usage).saturating_sub(st.entitlement);
        if borrowed == 0 {
            return;
        }
        let hours = self.fair_share_half_life_hours;
        self.fair_use.entry(s).or_default().accrue(
            BudgetWindow::HalfLife { hours },
            since,
            now,
            borrowed,
        );
    }

    /// Under FAIR_SHARE: share `s`'s recent borrowing at `now`, as the
    /// instances it borrowed on average over a half-life (decayed usage
    /// over the half-life), every type together.
    pub fn fair_recent(&self, s: ShareIdx, now: Time) -> f64 {
        let hours = self.fair_share_half_life_hours;
        let empty = BudgetUse::default();
        let u = self.fair_use.get(&s).unwrap_or(&empty);
        let pending: Vec<(Time, u32)> = (0..self.types.len())
            .filter_map(|t| {
                let t = TypeIdx(t as u16);
                let b = self.borrowed_now(s, t);
                (b > 0).then(|| self.usage.since.get(&(s, t)).map(|since| (*since, b)))?
            })
            .collect();
        u.used_ms(BudgetWindow::HalfLife { hours }, now, &pending) as f64
            / (hours * crate::policy::budgets::HOUR_MS) as f64
    }

    /// After a configuration change: budgets of shares that no longer have
    /// one are dropped, and a window's kind that changed starts afresh.
    pub(crate) fn reconcile_budgets(&mut self) {
        let shares = &self.shares;
        self.budget_use.retain(|s, u| {
            let Some(budget) = shares
                .get(s.index())
                .filter(|slot| !slot.deleted)
                .and_then(|slot| slot.config.borrow_budget)
            else {
                return false;
            };
            match budget.window {
                BudgetWindow::Rolling { .. } => {
                    u.decayed_bits = 0;
                }
                BudgetWindow::HalfLife { .. } => u.hours.clear(),
            }
            true
        });
    }

    /// Share `s`'s budget at `now` (None: it has none).
    pub fn budget_status(&self, s: ShareIdx, now: Time) -> Option<BudgetStatus> {
        let slot = self.shares.get(s.index()).filter(|slot| !slot.deleted)?;
        let budget = slot.config.borrow_budget?;
        let mut pending = Vec::new();
        let mut borrowing = 0u32;
        for t in 0..self.types.len() {
            let t = TypeIdx(t as u16);
            let b = self.borrowed_now(s, t);
            if b == 0 {
                continue;
            }
            borrowing += b;
            if let Some(since) = self.usage.since.get(&(s, t)) {
                pending.push((*since, b));
            }
        }
        let empty = BudgetUse::default();
        let used = self.budget_use.get(&s).unwrap_or(&empty);
        let used_ms = used.used_ms(budget.window, now, &pending);
        let exhausts_at = exhausts_at(budget, used_ms, borrowing, now);
        // A half-life refills continuously: no moment to name.
        let refills_at = if used_ms == 0 || !matches!(budget.window, BudgetWindow::Rolling { .. }) {
            None
        } else {
            used.refills_to(budget.window, now, used_ms, used_ms as i64 - 1)
                .filter(|at| *at > now)
        };
        Some(BudgetStatus {
            budget,
            on_exhausted: slot.config.on_budget_exhausted,
            used_ms,
            committed_ms: self.budget_committed_ms(s, now),
            borrowing,
            exhausts_at,
            refills_at,
        })
    }

    /// What share `s`'s running borrowed jobs are still expected to use
    /// at `now`: each one's instances times what is left of its expected
    /// run (nothing for a job without one).
    pub(crate) fn budget_committed_ms(&self, s: ShareIdx, now: Time) -> u64 {
        let mut committed = 0u64;
        for t in 0..self.types.len() {
            let st = self.st(s, TypeIdx(t as u16));
            if st.running_usage <= st.entitlement {
                continue;
            }
            let running: Vec<RunKey> = st.running.iter().copied().collect();
            // The instances beyond the entitlement, given to the borrowed
            // jobs from the last (the first may be partly within it).
            let mut excess = st.running_usage - st.entitlement;
            for key in borrowed_jobs(&running, st.entitlement).iter().rev() {
                let n = key.count.min(excess);
                excess -= n;
                committed = committed.saturating_add(self.remaining_ms(*key, n, now));
            }
        }
        committed
    }

    /// `instances` of a running job times what is left of its expected run.
    pub(crate) fn remaining_ms(&self, key: RunKey, instances: u32, now: Time) -> u64 {
        let Some(secs) = self
            .jobs
            .get(&key.job)
            .and_then(|j| j.spec.expected_runtime_secs())
        else {
            return 0;
        };
        let end = key
            .started
            .plus_secs(secs.min(crate::policy::budgets::MAX_EXPECTED_RUN_SECS));
        end.millis_since(now).saturating_mul(u64::from(instances))
    }
}
