//! Borrowing budgets in a pass (`crate::policy::budgets`): safe admission
//! of jobs that borrow, and the stops of `CHECKPOINT_AND_STOP` when a
//! budget is spent.
//!
//! Hooks: [`Budgets::gate`] (may a job borrow within what is left),
//! [`Budgets::promise`] and [`Budgets::give_back`] (what an admission
//! takes, and returns when taken back), [`Budgets::spent`] (the shares
//! whose borrowed jobs stop, in the pass's phase of stops due),
//! [`Budgets::wakes`] and [`Budgets::wakes_after`] (a pass when a budget
//! runs out).
//!
//! Guarantees afterwards: the jobs a pass admits to borrow never together
//! expect more than the budget has left (each one's need is taken from
//! what is left as it is admitted); a pass runs at the moment a budget
//! runs out.

use std::collections::BTreeMap;

use crate::cluster::Cluster;
use crate::ids::{JobId, ShareIdx, TypeIdx};
use crate::index::{borrowed_jobs, newly_borrowed, RunKey};
use crate::job::Job;
use crate::plan::Plan;
use crate::policy::budgets::{BudgetStatus, BudgetUse, OnBudgetExhausted, MAX_EXPECTED_RUN_SECS};
use crate::policy::view::Projection;
use crate::reason::WaitReason;
use crate::time::Time;

/// A share's budget as one pass sees it.
#[derive(Clone, Copy, Debug)]
struct BudgetGate {
    status: BudgetStatus,
    /// The budget less what the window holds, less what running borrowed
    /// jobs are expected to use, less what this pass promised.
    left_ms: i64,
}

/// The budgets of one pass.
#[derive(Debug, Default)]
pub struct Budgets {
    /// Per share slot; empty when no share has a budget.
    gates: Vec<Option<BudgetGate>>,
    /// What each job admitted in this pass took from its share's budget.
    promised: BTreeMap<JobId, i64>,
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

impl Budgets {
    /// The gates of the shares that have a budget (none if none has one).
    pub fn new(c: &Cluster, now: Time) -> Budgets {
        if c.shares.iter().all(|s| s.config.borrow_budget.is_none()) {
            return Budgets::default();
        }
        let gates = (0..c.shares.len())
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
            .collect();
        Budgets {
            gates,
            promised: BTreeMap::new(),
        }
    }

    /// Whether no share has a budget (a budget couples types over time: a
    /// pass may then skip no type).
    pub fn is_empty(&self) -> bool {
        self.gates.is_empty()
    }

    /// The moments a budget runs out at the current rate.
    pub fn wakes(&self) -> impl Iterator<Item = Time> + '_ {
        self.gates
            .iter()
            .flatten()
            .filter_map(|g| g.status.exhausts_at)
    }

    /// `CHECKPOINT_AND_STOP` shares whose budget is spent: their jobs on
    /// borrowed capacity stop.
    pub fn spent(&self) -> impl Iterator<Item = ShareIdx> + '_ {
        self.gates.iter().enumerate().filter_map(|(i, gate)| {
            let gate = gate.as_ref()?;
            (gate.status.exhausted()
                && gate.status.on_exhausted == OnBudgetExhausted::CheckpointAndStop)
                .then_some(ShareIdx(i as u16))
        })
    }

    /// What `job` takes from its share's budget if admitted with its share
    /// holding `used` of `entitlement` (None: part of it would fall on a
    /// job that declares no expected run). The instances the share holds
    /// beyond its entitlement are its borrowed jobs' (the contract's
    /// classification, the excess given from the last): admitting `job`
    /// may make it borrowed, or push lower-priority jobs beyond the
    /// entitlement instead. Each job's newly borrowed instances cost what
    /// is left of its expected run.
    fn need(p: &impl Projection, job: &Job, used: u32, entitlement: u32) -> Option<i64> {
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        if used + count <= entitlement {
            return Some(0);
        }
        let now = p.now();
        let mut keys = p.running(s, t);
        let before = borrowed_counts(&keys, entitlement);
        keys.push(RunKey {
            priority: std::cmp::Reverse(job.spec.priority),
            started: now,
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
            let secs = p.job(key.job).spec.expected_runtime_secs()?;
            let end = key.started.plus_secs(secs.min(MAX_EXPECTED_RUN_SECS));
            let ms = end.millis_since(now).saturating_mul(u64::from(more));
            need = need.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
        }
        Some(need)
    }

    /// Whether `job` may borrow within its share's budget (safe
    /// admission); if not, why, and when enough is back (a pass then).
    pub fn gate(
        &self,
        p: &impl Projection,
        job: &Job,
        used: u32,
        entitlement: u32,
    ) -> Result<(), (WaitReason, Option<Time>)> {
        let s = job.spec.share;
        let Some(gate) = self.gates.get(s.index()).copied().flatten() else {
            return Ok(());
        };
        let now = p.now();
        let need = Budgets::need(p, job, used, entitlement);
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
                let empty = BudgetUse::default();
                p.cluster()
                    .budget_use
                    .get(&s)
                    .unwrap_or(&empty)
                    .refills_to(st.budget.window, now, st.used_ms, level)
                    .filter(|at| *at > now)
            }
        };
        let reason = WaitReason::BorrowBudget {
            left_min: minutes(gate.left_ms, false),
            need_min: need.map_or(u32::MAX, |n| minutes(n, true)),
            refills_at_min: refills.map_or(u32::MAX, |t| {
                u32::try_from(t.0.div_ceil(60_000)).unwrap_or(u32::MAX - 1)
            }),
        };
        Err((reason, refills))
    }

    /// What an admitted job takes from its share's budget for the rest of
    /// the pass (`used` before it was admitted); give it to [`Self::take`].
    pub fn promise(&self, p: &impl Projection, job: &Job, used: u32, entitlement: u32) -> i64 {
        let Some(Some(gate)) = self.gates.get(job.spec.share.index()) else {
            return 0;
        };
        let borrowed = newly_borrowed(used, job.spec.count, entitlement);
        let floor = unbounded_floor_ms(gate.status.budget.budget_ms(), borrowed);
        match Budgets::need(p, job, used, entitlement) {
            Some(n) => n,
            None if borrowed > 0 => floor,
            None => 0,
        }
    }

    /// Takes `need` (from [`Self::promise`]) from the budget of `job`'s share.
    pub fn take(&mut self, job: &Job, need: i64) {
        if let Some(Some(gate)) = self.gates.get_mut(job.spec.share.index()) {
            gate.left_ms = gate.left_ms.saturating_sub(need);
        }
        if need != 0 {
            self.promised.insert(job.id, need);
        }
    }

    /// An admitted job taken back in the same pass gives its need back.
    pub fn give_back(&mut self, job: &Job) {
        let Some(need) = self.promised.remove(&job.id) else {
            return;
        };
        if let Some(Some(gate)) = self.gates.get_mut(job.spec.share.index()) {
            gate.left_ms = gate.left_ms.saturating_add(need);
        }
    }

    /// A pass when a budget runs out at the rate this plan's starts bring
    /// (the pass before them saw a lower one).
    pub fn wakes_after(&self, c: &Cluster, now: Time, plan: &mut Plan) {
        if self.gates.is_empty() || plan.starts.is_empty() {
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
            let Some(Some(gate)) = self.gates.get(s.index()) else {
                continue;
            };
            if extra == 0 {
                continue;
            }
            let st = gate.status;
            if let Some(at) = super::exhausts_at(st.budget, st.used_ms, st.borrowing + extra, now) {
                plan.wake_at = Some(plan.wake_at.map_or(at, |w| w.min(at)));
            }
        }
    }
}
