//! Borrowing budgets in a pass (`crate::budget`): safe admission of jobs
//! that borrow, and the stops of `CHECKPOINT_AND_STOP` when a budget is
//! spent.
//!
//! Decides: whether a job may start on borrowed capacity within what its
//! share's budget has left, and which running jobs stop because it is
//! spent.
//!
//! Guarantees afterwards: the jobs this pass admits to borrow never
//! together expect more than the budget has left (each one's need is
//! taken from what is left as it is admitted); a pass runs at the moment a
//! budget runs out (`wake_at`).

use super::*;
use crate::budget::{BudgetStatus, OnBudgetExhausted};

/// A share's budget as one pass sees it.
#[derive(Clone, Copy, Debug)]
pub(super) struct BudgetGate {
    status: BudgetStatus,
    /// The budget less what the window holds, less what running borrowed
    /// jobs are expected to use, less what this pass promised.
    left_ms: i64,
}

/// The gates of the shares that have a budget (empty if none has one).
pub(super) fn budget_gates(c: &Cluster, now: Time) -> Vec<Option<BudgetGate>> {
    if c.shares.iter().all(|s| s.config.borrow_budget.is_none()) {
        return Vec::new();
    }
    (0..c.shares.len())
        .map(|i| {
            let s = ShareIdx(u16::try_from(i).expect("share slots fit in u16"));
            c.budget_status(s, now).map(|status| BudgetGate {
                status,
                left_ms: status.budget.budget_ms() as i64
                    - status.used_ms as i64
                    - status.committed_ms as i64,
            })
        })
        .collect()
}

/// Instances of each key beyond `entitlement`: the borrowed jobs', the
/// excess given from the last (the first may be partly within it).
fn borrowed_counts(keys: &[RunKey], entitlement: u32) -> BTreeMap<RunKey, u32> {
    let total: u32 = keys.iter().map(|k| k.count).sum();
    let mut excess = total.saturating_sub(entitlement);
    let mut out = BTreeMap::new();
    for key in borrowed_jobs(keys, entitlement).iter().rev() {
        let n = key.count.min(excess);
        excess -= n;
        if n > 0 {
            out.insert(*key, n);
        }
    }
    out
}

fn seconds(ms: i64) -> u32 {
    u32::try_from(ms.max(0) / 1000).unwrap_or(u32::MAX - 1)
}

impl Pass<'_> {
    /// The budget's moments: a pass when one runs out.
    pub(super) fn budget_wakes(&mut self) {
        let wakes: Vec<Time> = self
            .budgets
            .iter()
            .flatten()
            .filter_map(|g| g.status.exhausts_at)
            .collect();
        for at in wakes {
            self.wake(at);
        }
    }

    /// `CHECKPOINT_AND_STOP` shares whose budget is spent: their jobs on
    /// borrowed capacity stop (released in the projection, like timeouts).
    pub(super) fn stop_over_budget(&mut self) {
        for i in 0..self.budgets.len() {
            let Some(gate) = self.budgets[i] else {
                continue;
            };
            if !gate.status.exhausted()
                || gate.status.on_exhausted != OnBudgetExhausted::CheckpointAndStop
            {
                continue;
            }
            let s = ShareIdx(i as u16);
            for t in 0..self.c.types.len() {
                let t = TypeIdx(t as u16);
                let view = &self.views[t.index()];
                let entitlement = view.entitlement[i];
                if view.used[i] <= entitlement {
                    continue;
                }
                for key in borrowed_jobs(&self.projected_running(s, t), entitlement) {
                    let job = self.job(key.job);
                    if job.stopping.is_some() || !job.status.holds_instances() {
                        continue;
                    }
                    self.budget_stops.push(key.job);
                    self.removed.insert(key.job);
                    self.views[t.index()].used[i] -= key.count;
                }
            }
        }
    }

    /// What `job` takes from its share's budget if admitted with its share
    /// holding `used` of `entitlement` (None: part of it would fall on a job
    /// that declares no expected run). The instances the share holds beyond
    /// its entitlement are its borrowed jobs' (the contract's
    /// classification, the excess given from the last): admitting `job`
    /// may make it borrowed, or push lower-priority jobs beyond the
    /// entitlement instead. Each job's newly borrowed instances cost what is
    /// left of its expected run.
    fn budget_need(&self, job: &Job, used: u32, entitlement: u32) -> Option<i64> {
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        if used + count <= entitlement {
            return Some(0);
        }
        let mut keys = self.projected_running(s, t);
        let before = borrowed_counts(&keys, entitlement);
        keys.push(RunKey {
            priority: std::cmp::Reverse(job.spec.priority),
            started: self.now,
            job: job.id,
            count,
            may_borrow: job.borrow_bar.is_none(),
        });
        keys.sort_unstable();
        let mut need = 0i64;
        for (key, n) in borrowed_counts(&keys, entitlement) {
            let more = n - before.get(&key).copied().unwrap_or(0);
            if more == 0 {
                continue;
            }
            let secs = self.job(key.job).spec.expected_runtime_secs()?;
            let end = key.started.plus_secs(secs);
            need += (end.millis_since(self.now).saturating_mul(u64::from(more))) as i64;
        }
        Some(need)
    }

    /// Whether `job` may borrow within its share's budget (safe admission).
    pub(super) fn budget_gate(
        &mut self,
        job: &Job,
        used: u32,
        entitlement: u32,
    ) -> Result<(), WaitReason> {
        let s = job.spec.share;
        let Some(gate) = self.budgets.get(s.index()).copied().flatten() else {
            return Ok(());
        };
        let need = self.budget_need(job, used, entitlement);
        let fits = match need {
            _ if gate.status.exhausted() => false,
            Some(n) => n <= gate.left_ms,
            None => {
                gate.status.on_exhausted == OnBudgetExhausted::CheckpointAndStop && gate.left_ms > 0
            }
        };
        if fits {
            return Ok(());
        }
        // When enough is back if nothing more is borrowed: the window (or
        // the decay) must fall by what this job lacks. A job that declares
        // no expected run, under FINISH, never borrows.
        let st = gate.status;
        let refills = match need {
            None if st.on_exhausted == OnBudgetExhausted::Finish => None,
            need => {
                let level = st.used_ms as i64 + gate.left_ms - need.unwrap_or(1).max(1);
                let empty = crate::budget::BudgetUse::default();
                self.c
                    .budget_use
                    .get(&s)
                    .unwrap_or(&empty)
                    .refills_to(st.budget.window, self.now, st.used_ms, level)
                    .filter(|at| *at > self.now)
            }
        };
        if let Some(at) = refills {
            self.wake(at);
        }
        Err(WaitReason::BorrowBudget {
            left_s: seconds(gate.left_ms),
            need_s: need.map_or(u32::MAX, seconds),
            refills_at_s: refills.map_or(u32::MAX, |t| {
                u32::try_from(t.0.div_ceil(1000)).unwrap_or(u32::MAX - 1)
            }),
        })
    }

    /// Takes an admitted job's need from its share's budget for the rest
    /// of the pass (`used` before it was admitted).
    pub(super) fn promise_budget(&mut self, job: &Job, used: u32, entitlement: u32) {
        let s = job.spec.share.index();
        if self.budgets.get(s).is_none_or(Option::is_none) {
            return;
        }
        let need = self.budget_need(job, used, entitlement).unwrap_or(0);
        if let Some(Some(gate)) = self.budgets.get_mut(s) {
            gate.left_ms -= need;
        }
    }
}

/// A pass when a budget runs out at the rate this plan's starts bring
/// (the pass before them saw a lower one).
pub(super) fn budget_wakes_after(
    c: &Cluster,
    budgets: &[Option<BudgetGate>],
    now: Time,
    plan: &mut Plan,
) {
    {
        if budgets.is_empty() || plan.starts.is_empty() {
            return;
        }
        let mut started: BTreeMap<(ShareIdx, TypeIdx), u32> = BTreeMap::new();
        for st in &plan.starts {
            *started.entry((st.share, st.instance_type)).or_default() += st.count;
        }
        let mut more: BTreeMap<ShareIdx, u32> = BTreeMap::new();
        for ((s, t), n) in started {
            let st = c.st(s, t);
            let held = st.running_usage + st.stopping_usage;
            let before = held.saturating_sub(st.entitlement);
            let after = (held + n).saturating_sub(st.entitlement);
            *more.entry(s).or_default() += after - before;
        }
        for (s, extra) in more {
            let Some(Some(gate)) = budgets.get(s.index()) else {
                continue;
            };
            if extra == 0 {
                continue;
            }
            let st = gate.status;
            if let Some(at) = crate::cluster::budget::exhausts_at(
                st.budget,
                st.used_ms,
                st.borrowing + extra,
                now,
            ) {
                plan.wake_at = Some(plan.wake_at.map_or(at, |w| w.min(at)));
            }
        }
    }
}
