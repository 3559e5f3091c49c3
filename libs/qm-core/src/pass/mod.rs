//! One scheduling pass: `schedule(&Cluster, now) -> Plan`.
//!
//! The pass never mutates the cluster. It works on a projection: jobs being
//! stopped count as gone, jobs it admits count as running. Per instance type
//! and in rounds until nothing more starts:
//!
//! 1. within-quota admission, with reclaim (cross-share preemption of borrowed
//!    jobs) when the start would break `B <= L` or the fleet;
//! 2. borrowing by LEND_AND_BORROW shares (never preempts);
//! 3. in-share preemption: a job takes the place of strictly lower-priority
//!    jobs of its own share, owned or borrowed, with the fewest victims.
//!
//! A sweep that preempts stops there and step 1 starts again from the
//! front: room a preemption frees beyond its beneficiary's need goes to
//! within-quota work before borrowing, whatever the order of submissions.
//!
//! Each step walks the shares' waiting jobs interleaved by the RUNNABLE-since
//! time of each share's next job (FIFO across shares), each share in (priority
//! desc, RUNNABLE-since asc, job id) order. See `README.md` beside this crate
//! for the contract, and `invariants/` for what every plan must satisfy.
//!
//! Admitted jobs whose instances are still held by jobs being stopped cannot
//! start yet: they stay RUNNABLE with `WAITING_FOR_RECLAIM` and are admitted
//! again, first in line, by the pass that follows the stops.
//!
//! | file | phase |
//! |---|---|
//! | `mod.rs` | the plan, the pass's state, timeouts, the rounds |
//! | `view.rs` | the projection and the fleet/lending checks |
//! | `sweep.rs` | claims first, then each step's order; waiting reasons |
//! | `fit.rs` | fitting one job (within quota, or borrowing) |
//! | `reclaim.rs` | cross-share victims |
//! | `in_share.rs` | in-share victims |
//! | `runtime.rs` | the runtime rule: only where the job's runtime is offered |
//! | `finish.rs` | admissions to starts, placement, settled types |

use std::collections::{BTreeMap, HashSet};

mod budget;
mod fair;
mod finish;
mod fit;
mod groups;
mod in_share;
mod reclaim;
mod runtime;
mod sweep;
mod view;

use fit::borrow_gates;
use view::TypeView;

use crate::cluster::Cluster;
use crate::config::{QueueingStrategy, Strategy};
use crate::ids::{JobId, ShareIdx, TypeIdx};
use crate::index::{borrowed_jobs, QueueKey, RunKey};
use crate::job::{Job, PreemptionKind};
use crate::nodes::{place, FreeCursor, NodeId, Rank, Ranks};
pub use crate::plan::{Plan, Preemption, Start};
use crate::reason::WaitReason;
use crate::time::Time;

/// Most never-explained waiting jobs a pass gives a reason to.
const EXPLAIN_PER_PASS: usize = 64;

/// Instances a job of `count` makes its share borrow when the share holds
/// `used` of `entitlement`: what goes beyond the entitlement that was not
/// beyond it already.
pub(crate) fn newly_borrowed(used: u32, count: u32, entitlement: u32) -> u32 {
    (used + count).saturating_sub(used.max(entitlement))
}

/// Runs one pass. Pure: the same cluster and `now` give the same plan.
pub fn schedule(cluster: &Cluster, now: Time) -> Plan {
    let mut pass = Pass::new(cluster, now, true);
    pass.run();
    pass.finish()
}

/// A pass that looks at every type, even those settled since the last pass.
/// It decides exactly what [`schedule`] decides (a property test checks it);
/// it exists as the reference for that check and for debugging.
pub fn schedule_exhaustive(cluster: &Cluster, now: Time) -> Plan {
    let mut pass = Pass::new(cluster, now, false);
    pass.run();
    pass.finish()
}

/// Which step a sweep is making.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    WithinQuota,
    Borrow,
    InShare,
}

/// A victim chosen while trying to fit a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Victim {
    key: RunKey,
    share: ShareIdx,
    kind: PreemptionKind,
}

struct Pass<'a> {
    c: &'a Cluster,
    now: Time,
    /// Indexed by TypeIdx.
    views: Vec<TypeView>,
    /// Per share slot: lends, borrows (LEND_AND_BORROW), max holding per type.
    lends: Vec<bool>,
    /// Jobs removed from the projection (preempted or timed out in this pass).
    removed: HashSet<JobId>,
    /// Jobs admitted in this pass.
    admitted: HashSet<JobId>,
    /// Admitted jobs for which this pass preempted others: they are never
    /// taken back (their victims are stopping for them).
    committed: HashSet<JobId>,
    /// Jobs admitted on borrowed capacity and taken back by a reclaim in
    /// this pass: they wait for the next pass to borrow (they may start
    /// within their quota once more, see `barred_again`). Without this, a
    /// job that borrows by displacing lower-priority jobs of its own share
    /// and one of another share doing the same could take each other's place
    /// back and forth forever within one pass; every such take-back bars one
    /// job, so a pass always ends.
    barred: HashSet<JobId>,
    /// Barred jobs taken back a second time (after starting again within
    /// their quota in the same pass): they wait for the next pass in every
    /// step, so each job comes back at most once and a pass still ends.
    barred_again: HashSet<JobId>,
    /// Admitted jobs per (share, type), as run keys (for borrowed classification).
    added: BTreeMap<(ShareIdx, TypeIdx), Vec<RunKey>>,
    /// Admission order.
    admitted_order: Vec<(JobId, u32)>,
    /// Admissions made (including ones later taken back): rounds repeat
    /// while it grows.
    admissions: u64,
    preemptions: Vec<Preemption>,
    timeouts: Vec<JobId>,
    checkpoint_deadlines: Vec<JobId>,
    drill_stops: Vec<JobId>,
    budget_stops: Vec<JobId>,
    /// Per share slot: its borrowing budget (`budget.rs`); empty when no
    /// share has one.
    budgets: Vec<Option<budget::BudgetGate>>,
    /// What each job admitted in this pass took from its share's budget.
    budget_promised: BTreeMap<JobId, i64>,
    /// Under FAIR_SHARE, per share slot: its recent borrowing (instances on
    /// average over a half-life); empty under FIFO.
    fair_recent: Vec<f64>,
    /// Per share slot: the index of its share group (`groups.rs`); empty
    /// when the queue has none.
    group_of: Vec<Option<usize>>,
    reasons: BTreeMap<JobId, WaitReason>,
    wake_at: Option<Time>,
    /// Per type: whether this pass looks at it (see `Cluster::settled`).
    active: Vec<bool>,
    /// What live nodes offer per (type, runtime), computed once a pass.
    runtime_offers: BTreeMap<(TypeIdx, crate::Runtime), runtime::RuntimeOffer>,
    /// Free instances promised to restricted admitted jobs, per (type,
    /// runtime) (`runtime.rs`).
    runtime_promised: BTreeMap<(TypeIdx, crate::Runtime), u32>,
}

impl<'a> Pass<'a> {
    fn new(c: &'a Cluster, now: Time, skip_settled: bool) -> Pass<'a> {
        let shares = c.shares.len();
        let lends = c
            .shares
            .iter()
            .map(|s| !s.deleted && s.config.strategy.lends())
            .collect();
        let views = (0..c.types.len())
            .map(|t| {
                let t = TypeIdx(t as u16);
                let mut used = vec![0; shares];
                let mut entitlement = vec![0; shares];
                for (i, slot) in c.shares.iter().enumerate() {
                    if slot.deleted {
                        continue;
                    }
                    let st = &slot.types[t.index()];
                    used[i] = st.running_usage;
                    entitlement[i] = st.entitlement;
                }
                TypeView {
                    fleet: c.effective_fleet(t),
                    withheld: c.withheld_of(t),
                    sum_entitlement: entitlement.iter().map(|&e| u64::from(e)).sum(),
                    used,
                    entitlement,
                }
            })
            .collect();
        // STRICT_FIFO couples types (a share's head spans them), and a
        // borrowing budget couples them over time (it runs out and refills
        // with no event of a type's own): no skipping.
        let budgets = budget::budget_gates(c, now);
        // FAIR_SHARE likewise: claims change as time decays recent
        // borrowing, and a borrowed job becomes movable as it runs.
        let may_skip = skip_settled
            && c.queueing == QueueingStrategy::BestEffortFifo
            && budgets.is_empty()
            && c.idle_assignment == crate::config::IdleAssignment::Fifo;
        let mut wake_at = None;
        let active = c
            .settled
            .iter()
            .map(|settled| match settled {
                crate::cluster::Settled::Until(wake)
                    if may_skip && wake.is_none_or(|w| now < w) =>
                {
                    if let Some(w) = wake {
                        wake_at = Some(wake_at.map_or(*w, |x: Time| x.min(*w)));
                    }
                    false
                }
                _ => true,
            })
            .collect();
        Pass {
            c,
            now,
            views,
            lends,
            removed: HashSet::new(),
            admitted: HashSet::new(),
            committed: HashSet::new(),
            barred: HashSet::new(),
            barred_again: HashSet::new(),
            added: BTreeMap::new(),
            admitted_order: Vec::new(),
            admissions: 0,
            preemptions: Vec::new(),
            timeouts: Vec::new(),
            checkpoint_deadlines: Vec::new(),
            drill_stops: Vec::new(),
            budget_stops: Vec::new(),
            budgets,
            budget_promised: BTreeMap::new(),
            fair_recent: if c.idle_assignment == crate::config::IdleAssignment::FairShare {
                (0..shares)
                    .map(|i| c.fair_recent(ShareIdx(i as u16), now))
                    .collect()
            } else {
                Vec::new()
            },
            group_of: if c.groups.is_empty() {
                Vec::new()
            } else {
                c.shares
                    .iter()
                    .map(|slot| {
                        let name = slot.config.group.as_deref()?;
                        c.groups.iter().position(|g| g.name == name)
                    })
                    .collect()
            },
            reasons: BTreeMap::new(),
            wake_at,
            active,
            runtime_offers: BTreeMap::new(),
            runtime_promised: BTreeMap::new(),
        }
    }

    fn wake(&mut self, at: Time) {
        if at > self.now {
            self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
        }
    }

    fn job(&self, id: JobId) -> &'a Job {
        &self.c.jobs[&id]
    }

    fn run(&mut self) {
        // Checkpoint-first windows that ran out: those stops go ahead (their
        // instances already count as released in the projection).
        for &(until, id) in &self.c.checkpoint_windows {
            if until > self.now {
                self.wake(until);
                break;
            }
            self.checkpoint_deadlines.push(id);
        }
        // Timeouts first: their instances count as released in the projection.
        for &(deadline, id) in &self.c.deadlines {
            if deadline > self.now {
                self.wake(deadline);
                break;
            }
            let job = self.job(id);
            self.timeouts.push(id);
            self.removed.insert(id);
            self.views[job.spec.instance_type.index()].used[job.spec.share.index()] -=
                job.spec.count;
        }
        // Resume drills' subjects due to stop: released like timeouts.
        for &(at, id) in &self.c.drill_stops {
            if at > self.now {
                self.wake(at);
                break;
            }
            let job = self.job(id);
            if self.removed.contains(&id) || job.stopping.is_some() || !job.status.holds_instances()
            {
                continue;
            }
            self.drill_stops.push(id);
            self.removed.insert(id);
            self.views[job.spec.instance_type.index()].used[job.spec.share.index()] -=
                job.spec.count;
        }
        self.budget_wakes();
        self.stop_over_budget();
        self.honour_claims();
        // Every round admits a job or ends the loop, and a job is taken
        // back at most three times per pass (by in-share preemption for a
        // higher priority, then by a reclaim twice, see `barred_again`): the
        // bound only guards that.
        let bound = 4 * (self.c.runnable_count() as u64 + 1);
        let mut rounds = 0u64;
        loop {
            rounds += 1;
            if rounds > bound {
                debug_assert!(false, "a pass did not settle after {rounds} rounds");
                break;
            }
            self.reasons.clear();
            let before = self.admissions;
            for t in 0..self.c.types.len() {
                if !self.active[t] {
                    continue;
                }
                self.sweep_type(TypeIdx(t as u16));
            }
            if self.admissions == before {
                break;
            }
        }
        self.explain_new_arrivals();
    }
}

impl Pass<'_> {
    /// The steps for one type, in the contract's order. A preemption may
    /// free more room than its beneficiary needs; that room is served by
    /// the same order as always, within-quota work before borrowing,
    /// whatever the order of submissions: after a sweep that preempted
    /// (which stops at its first preemption), within-quota admission runs again
    /// from the front before any later step.
    ///
    /// Within-quota admission and borrowing run again from the front;
    /// in-share preemption goes on from where it stopped unless the type's
    /// free room or lending headroom has grown since it began (the jobs
    /// before its place then get another try): jobs it already tried failed
    /// to make room even with every lower-priority job of their share gone,
    /// and what the other steps started since only used room.
    fn sweep_type(&mut self, t: TypeIdx) {
        // Every preemption admits a job, and a job is taken back at most
        // three times per pass (in-share, then by reclaim twice, see
        // `barred_again`): the bound only guards that.
        let bound = 4 * (self.c.runnable_count() as u64 + 1);
        let mut in_share = sweep::SweepPlace::new(self.c.shares.len());
        let mut room_when_placed: Option<(i64, i64)> = None;
        for _ in 0..bound {
            let before = self.preemptions.len();
            self.sweep(t, Step::WithinQuota);
            if self.preemptions.len() != before {
                continue;
            }
            self.sweep(t, Step::Borrow);
            if self.rebalance(t) {
                // Room changes hands: within-quota admission goes first
                // again.
                continue;
            }
            let room = self.room(t);
            if room_when_placed.is_some_and(|(free, headroom)| room.0 > free || room.1 > headroom) {
                in_share = sweep::SweepPlace::new(self.c.shares.len());
            }
            room_when_placed = Some(room);
            self.sweep_from(t, Step::InShare, &mut in_share);
            if self.preemptions.len() == before {
                return;
            }
        }
        debug_assert!(false, "the steps for {t:?} did not settle");
    }
}

/// Why a waiting job waits, computed now (`Cluster::explain`): the fit check
/// run for it alone.
pub(crate) fn explain(cluster: &Cluster, id: JobId, now: Time) -> WaitReason {
    let mut pass = Pass::new(cluster, now, false);
    pass.reason_for(id, true)
}
