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
//! The pass is a fixed pipeline of phases; each calls the policies' hooks
//! (`crate::policy`, built once per pass in `Hooks`) at its place:
//!
//! | phase | file | hooks it calls |
//! |---|---|---|
//! | 1. stops due: checkpoint windows, timeouts, drills, spent budgets | `stops.rs` | `drills::hooks::due`, `Budgets::wakes`, `Budgets::spent` |
//! | 2. claims of earlier preemptions | `sweep.rs` | |
//! | 3. per type, in rounds: within quota, with reclaim | `sweep.rs`, `fit.rs`, `reclaim.rs` | `RuntimeRule::gate`; victims: `protections::hooks::protected_until`, `Groups::same` |
//! | 4. borrowing | `sweep.rs`, `fit.rs` | order: `Groups::lends_within`, `FairShare::first`; gates: `Groups::limit`, `protections::hooks::cooldown`, `classes::hooks::bar`, `Budgets::gate` |
//! | 5. rebalance (FAIR_SHARE) | `rebalance.rs` | `FairShare::claim`, `protected_until` |
//! | 6. in-share preemption | `in_share.rs` | `protected_until`, `RuntimeRule::gate` |
//! | on every admission | `finish.rs` (`admit`) | `RuntimeRule::promise`, `Budgets::promise`, `Budgets::take`, `Budgets::give_back` |
//! | 7. finish: starts, placement, settled types | `finish.rs` | the borrowing gates again, `Budgets::wakes_after` |
//!
//! `mod.rs` holds the pass's state and the rounds; `view.rs` the projection
//! (and `Projection`, what hooks may read of it) and the fleet and lending
//! checks.

use std::collections::{BTreeMap, HashSet};

mod finish;
mod fit;
mod in_share;
mod rebalance;
mod reclaim;
mod stops;
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
use crate::policy::hooks::Hooks;
use crate::policy::view::Projection;
use crate::reason::WaitReason;
use crate::time::Time;

/// Most never-explained waiting jobs a pass gives a reason to.
const EXPLAIN_PER_PASS: usize = 64;

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
    /// The policies' hooks (`crate::policy`).
    hooks: Hooks,
    reasons: BTreeMap<JobId, WaitReason>,
    wake_at: Option<Time>,
    /// Per type: whether this pass looks at it (see `Cluster::settled`).
    active: Vec<bool>,
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
        // STRICT_FIFO couples types (a share's head spans them), and so do
        // some policies (`Hooks::couple_types`): no skipping.
        let hooks = Hooks::new(c, now);
        let may_skip =
            skip_settled && c.queueing == QueueingStrategy::BestEffortFifo && !hooks.couple_types();
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
            hooks,
            reasons: BTreeMap::new(),
            wake_at,
            active,
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
        self.stops_due();
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
