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
                left_ms: i64::try_from(status.budget.budget_ms())
                    .unwrap_or(i64::MAX)
                    .saturating_sub(i64::try_from(status.used_ms).unwrap_or(i64::MAX))
                    .saturating_sub(i64::try_from(status.committed_ms).unwrap_or(i64::MAX)),
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

/// Whole instance-minutes of `ms`, rounded down (or up).
fn minutes(ms: i64, up: bool) -> u32 {
    let ms = ms.max(0).unsigned_abs();
    let m = if up { ms.div_ceil(60_000) } else { ms / 60_000 };
    u32::try_from(m).unwrap_or(u32::MAX - 1)
}

/// What a job that declares no expected run must find left to borrow
/// under CHECKPOINT_AND_STOP, per instance it borrows: ten minutes, or a
/// quarter of a smaller budget. Without it such a job would start on the
/// first millisecond of refill and be stopped at once, again and again.
fn unbounded_floor_ms(budget_ms: u64, instances: u32) -> i64 {
    let per = (10 * 60_000).min(budget_ms / 4).max(1);
    i64::try_from(per.saturating_mul(u64::from(instances))).unwrap_or(i64::MAX)
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
                let mut stopped: Vec<RunKey> = Vec::new();
                for key in borrowed_jobs(&self.projected_running(s, t), entitlement) {
                    let job = self.job(key.job);
                    if job.stopping.is_some() || !job.status.holds_instances() {
                        continue;
                    }
                    self.views[t.index()].used[i] -= key.count;
                    stopped.push(key);
                }
                // Only what brings the share within its entitlement: a job
                // that fits once the others are gone keeps running (the
                // higher-priority ones first).
                stopped.retain(|key| {
                    let used = &mut self.views[t.index()].used[i];
                    if *used + key.count <= entitlement {
                        *used += key.count;
                        false
                    } else {
                        true
                    }
                });
                for key in stopped {
                    self.budget_stops.push(key.job);
                    self.removed.insert(key.job);
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
            let end = key
                .started
                .plus_secs(secs.min(crate::budget::MAX_EXPECTED_RUN_SECS));
            let ms = end.millis_since(self.now).saturating_mul(u64::from(more));
            need = need.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
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
        let borrowed = newly_borrowed(used, job.spec.count, entitlement);
        let floor = unbounded_floor_ms(gate.status.budget.budget_ms(), borrowed);
        let fits = match need {
            _ if gate.status.exhausted() => false,
            Some(n) => n <= gate.left_ms,
            None => {
                gate.status.on_exhausted == OnBudgetExhausted::CheckpointAndStop
                    && gate.left_ms >= floor
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
                let want = need.unwrap_or(floor).max(1);
                let level = (st.used_ms as i64)
                    .saturating_add(gate.left_ms)
                    .saturating_sub(want);
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
            left_min: minutes(gate.left_ms, false),
            need_min: need.map_or(u32::MAX, |n| minutes(n, true)),
            refills_at_min: refills.map_or(u32::MAX, |t| {
                u32::try_from(t.0.div_ceil(60_000)).unwrap_or(u32::MAX - 1)
            }),
        })
    }

    /// Takes an admitted job's need from its share's budget for the rest
    /// of the pass (`used` before it was admitted).
    pub(super) fn promise_budget(&mut self, job: &Job, used: u32, entitlement: u32) {
        let s = job.spec.share.index();
        let Some(Some(gate)) = self.budgets.get(s) else {
            return;
        };
        let borrowed = newly_borrowed(used, job.spec.count, entitlement);
        let floor = unbounded_floor_ms(gate.status.budget.budget_ms(), borrowed);
        let need = match self.budget_need(job, used, entitlement) {
            Some(n) => n,
            None if borrowed > 0 => floor,
            None => 0,
        };
        if let Some(Some(gate)) = self.budgets.get_mut(s) {
            gate.left_ms = gate.left_ms.saturating_sub(need);
        }
        if need != 0 {
            self.budget_promised.insert(job.id, need);
        }
    }

    /// An admitted job taken back in the same pass gives its need back.
    pub(super) fn unpromise_budget(&mut self, id: JobId) {
        let Some(need) = self.budget_promised.remove(&id) else {
            return;
        };
        let s = self.job(id).spec.share.index();
        if let Some(Some(gate)) = self.budgets.get_mut(s) {
            gate.left_ms = gate.left_ms.saturating_add(need);
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
