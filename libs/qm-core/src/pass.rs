//! One scheduling pass: `schedule(&Cluster, now) -> Plan`.
//!
//! The pass never mutates the cluster. It works on a projection: jobs being
//! stopped count as gone, jobs it admits count as running. Per instance type
//! and in rounds until nothing more starts:
//!
//! 1. within-quota admission, with reclaim (cross-share preemption of borrowed
//!    jobs) when the start would break `B <= L` or the fleet;
//! 2. borrowing by LEND_AND_BORROW shares (never preempts);
//! 3. in-share preemption of strictly lower-priority jobs of the same share.
//!
//! Each step walks the shares' waiting jobs interleaved by the RUNNABLE-since
//! time of each share's next job (FIFO across shares), each share in (priority
//! desc, RUNNABLE-since asc, job id) order. See `README.md` beside this crate
//! for the contract, and `invariants.rs` for what every plan must satisfy.
//!
//! Admitted jobs whose instances are still held by jobs being stopped cannot
//! start yet: they stay RUNNABLE with `WAITING_FOR_RECLAIM` and are admitted
//! again, first in line, by the pass that follows the stops.

use std::collections::{BTreeMap, HashSet};

use crate::cluster::Cluster;
use crate::config::{QueueingStrategy, Strategy};
use crate::ids::{JobId, ShareIdx, TypeIdx};
use crate::index::{borrowed_jobs, QueueKey, RunKey};
use crate::job::{Job, PreemptionKind};
use crate::nodes::{place, NodeId, Rank};
use crate::reason::WaitReason;
use crate::time::Time;

/// Largest cluster (in jobs) on which debug builds check every `step`.
const DEBUG_CHECK_MAX_JOBS: usize = 2_000;

/// Most never-explained waiting jobs a pass gives a reason to.
const EXPLAIN_PER_PASS: usize = 64;

/// A job to start now, and where.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Start {
    pub job: JobId,
    pub share: ShareIdx,
    pub instance_type: TypeIdx,
    pub count: u32,
    /// Its instances if it is on borrowed capacity (it does not fit within
    /// its share's entitlement in (priority desc, start asc) order), else 0.
    pub borrowed: u32,
    /// Its nodes and slots, one rank per node (see `nodes.rs` for the
    /// placement policy).
    pub placement: Vec<Rank>,
}

/// A running job to stop so that `for_job` can start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Preemption {
    pub job: JobId,
    pub kind: PreemptionKind,
    pub for_job: JobId,
}

/// What one pass decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub now: Time,
    /// Jobs to start, in decision order.
    pub starts: Vec<Start>,
    pub preemptions: Vec<Preemption>,
    /// Jobs whose `attemptDurationSeconds` ran out: stop them (TIMED_OUT).
    pub timeouts: Vec<JobId>,
    /// Why each job the pass examined and did not start is waiting.
    pub reasons: Vec<(JobId, WaitReason)>,
    /// Admitted in the projection but waiting for preempted jobs to stop.
    pub waiting_for_release: Vec<JobId>,
    /// The next time a pass would decide differently with no other event
    /// (a protection or cool-down expiring, a timeout), if any.
    pub wake_at: Option<Time>,
    /// Types for which this pass decided nothing: until something about them
    /// changes, or `wake_at`, later passes skip them.
    pub settled: Vec<TypeIdx>,
}

impl Plan {
    pub fn is_empty(&self) -> bool {
        self.starts.is_empty() && self.preemptions.is_empty() && self.timeouts.is_empty()
    }
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

/// Projected usage of one type.
#[derive(Clone, Debug)]
struct TypeView {
    fleet: u32,
    /// `U_s` per share slot, projected.
    used: Vec<u32>,
    entitlement: Vec<u32>,
    sum_entitlement: u64,
}

impl TypeView {
    /// `(sum U, B, L)` with `extra` instances added to share `s`.
    fn totals_with(&self, lends: &[bool], s: usize, extra: u32) -> (u64, i64, i64) {
        let mut sum_u = 0u64;
        let mut borrowed = 0i64;
        let mut idle_lent = 0i64;
        for (i, ((&used, &e), &lends)) in self
            .used
            .iter()
            .zip(&self.entitlement)
            .zip(lends)
            .enumerate()
        {
            let u = used + if i == s { extra } else { 0 };
            sum_u += u64::from(u);
            borrowed += i64::from(u.saturating_sub(e));
            if lends {
                idle_lent += i64::from(e.saturating_sub(u));
            }
        }
        let unassigned = (i64::from(self.fleet) - self.sum_entitlement as i64).max(0);
        (sum_u, borrowed, unassigned + idle_lent)
    }
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
    /// this pass: they wait for the next pass. Without this, a job that
    /// borrows by displacing lower-priority jobs of its own share and one of
    /// another share doing the same could take each other's place back and
    /// forth forever within one pass; every such take-back bars one job, so
    /// a pass always ends.
    barred: HashSet<JobId>,
    /// Admitted jobs per (share, type), as run keys (for borrowed classification).
    added: BTreeMap<(ShareIdx, TypeIdx), Vec<RunKey>>,
    /// Admission order.
    admitted_order: Vec<(JobId, u32)>,
    /// Admissions made (including ones later taken back): rounds repeat
    /// while it grows.
    admissions: u64,
    preemptions: Vec<Preemption>,
    timeouts: Vec<JobId>,
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
                    sum_entitlement: entitlement.iter().map(|&e| u64::from(e)).sum(),
                    used,
                    entitlement,
                }
            })
            .collect();
        // STRICT_FIFO couples types (a share's head spans them): no skipping.
        let may_skip = skip_settled && c.queueing == QueueingStrategy::BestEffortFifo;
        let mut wake_at = None;
        let active = c
            .settled
            .iter()
            .map(|settled| match settled {
                Some(wake) if may_skip && wake.is_none_or(|w| now < w) => {
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
            added: BTreeMap::new(),
            admitted_order: Vec::new(),
            admissions: 0,
            preemptions: Vec::new(),
            timeouts: Vec::new(),
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
        self.honour_claims();
        // Every round admits a job or ends the loop, and a job is taken
        // back at most twice per pass (by in-share preemption for a higher
        // priority, then barred by a reclaim): the bound only guards that.
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
                let t = TypeIdx(t as u16);
                for step in [Step::WithinQuota, Step::Borrow, Step::InShare] {
                    self.sweep(t, step);
                }
            }
            if self.admissions == before {
                break;
            }
        }
        self.explain_new_arrivals();
    }

    /// Jobs for which earlier passes started preemptions come first: the
    /// capacity being released was promised to them, and letting the FIFO
    /// order of the next pass hand it to another job would make those
    /// preemptions pointless (and could preempt again for the same job).
    fn honour_claims(&mut self) {
        let claimants: Vec<JobId> = self
            .c
            .claims
            .iter()
            .copied()
            .filter(|id| {
                let job = self.job(*id);
                job.status == crate::job::JobStatus::Runnable
                    && self.active[job.spec.instance_type.index()]
            })
            .collect();
        for id in claimants {
            let job = self.job(id);
            if self
                .c
                .never_fits(
                    job.spec.share,
                    job.spec.instance_type,
                    job.spec.count,
                    job.spec.checkpoints,
                )
                .is_some()
            {
                continue;
            }
            // Reclaim applies only if it is within quota; `fit` decides.
            if let Ok(victims) = self.fit(id, true) {
                self.admit(id, &victims, &[]);
            }
        }
    }

    /// Gives a reason to jobs that no pass has explained yet (new or requeued
    /// jobs the sweeps skipped), a bounded number per pass so a burst of
    /// submissions cannot make one pass slow. Other waiting jobs keep the
    /// reason of the last pass that examined them; `Cluster::explain`
    /// recomputes any job's reason on demand.
    fn explain_new_arrivals(&mut self) {
        let pending: Vec<JobId> = self
            .c
            .unexplained
            .iter()
            .filter(|id| !self.admitted.contains(id) && !self.reasons.contains_key(id))
            .take(EXPLAIN_PER_PASS)
            .copied()
            .collect();
        for id in pending {
            let reason = self.reason_for(id, false);
            self.reasons.insert(id, reason);
        }
    }

    /// Why a waiting job cannot start in the projection as it stands.
    /// With `try_reclaim`, a job that reclaim could start is told so
    /// (`QUEUED`); without, the cheaper check names the constraint it fails.
    fn reason_for(&mut self, id: JobId, try_reclaim: bool) -> WaitReason {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        if let Some(limit) = self.c.never_fits(s, t, count, job.spec.checkpoints) {
            return WaitReason::Misconfiguration(limit);
        }
        if self.c.queueing == QueueingStrategy::StrictFifo {
            if let Some((head, _, _)) = self.share_head(s).filter(|(head, _, _)| head.job != id) {
                return WaitReason::StrictFifoBehind(head.job);
            }
        }
        match self.fit(id, try_reclaim) {
            Err(reason) => reason,
            Ok(_)
                if job.spec.priority > 0 && self.c.shares[s.index()].config.in_share_preemption =>
            {
                WaitReason::InSharePreemptionNotPossible
            }
            Ok(_) => WaitReason::Queued,
        }
    }

    /// The next job of share `s` in line (all types), not yet admitted.
    fn share_head(&self, s: ShareIdx) -> Option<(QueueKey, TypeIdx, u32)> {
        let skip = |id: JobId| self.admitted.contains(&id) || self.barred.contains(&id);
        let slot = &self.c.shares[s.index()];
        let mut best: Option<(QueueKey, TypeIdx, u32)> = None;
        for (t, st) in slot.types.iter().enumerate() {
            if let Some((key, count)) = st.runnable.next_candidate(None, 0..=u32::MAX, false, &skip)
            {
                if best.is_none_or(|(b, _, _)| key < b) {
                    best = Some((key, TypeIdx(t as u16), count));
                }
            }
        }
        best
    }

    /// Walks the waiting jobs of type `t` for one step, shares interleaved.
    fn sweep(&mut self, t: TypeIdx, step: Step) {
        let n = self.c.shares.len();
        // Per share: last key examined, and the count from which jobs are known
        // not to fit in this sweep (constraints are monotone in the count).
        let mut cursor: Vec<Option<QueueKey>> = vec![None; n];
        let mut fails_from: Vec<u32> = vec![u32::MAX; n];
        let mut done: Vec<bool> = (0..n)
            .map(|i| !self.share_takes_part(ShareIdx(i as u16), t, step))
            .collect();
        // Each share's next candidate, recomputed only when it may have
        // changed: after the share's own job was tried, or after any
        // preemption (victims change other shares' room).
        let mut heads: Vec<Option<Option<(QueueKey, u32)>>> = vec![None; n];
        // The count from which no job of any share fits in this sweep.
        let mut type_fails_from = u32::MAX;
        loop {
            let mut pick: Option<(QueueKey, u32, ShareIdx)> = None;
            for i in 0..n {
                if done[i] {
                    continue;
                }
                let s = ShareIdx(i as u16);
                let head = match heads[i] {
                    Some(head) => head,
                    None => {
                        let bound = fails_from[i].min(type_fails_from);
                        let head = self.next_candidate(s, t, step, cursor[i], bound);
                        heads[i] = Some(head);
                        head
                    }
                };
                match head {
                    Some((key, count)) => {
                        if pick.is_none_or(|(b, _, _)| {
                            (key.runnable_since, key.job) < (b.runnable_since, b.job)
                        }) {
                            pick = Some((key, count, s));
                        }
                    }
                    None => done[i] = true,
                }
            }
            let Some((key, count, s)) = pick else { break };
            cursor[s.index()] = Some(key);
            heads[s.index()] = None;
            let preemptions_before = self.preemptions.len();
            match self.try_step(key.job, step) {
                Ok(()) => {}
                Err(reason) => {
                    self.reasons.entry(key.job).or_insert(reason);
                    if self.c.queueing == QueueingStrategy::StrictFifo {
                        done[s.index()] = true;
                    } else if !matches!(reason, WaitReason::BorrowRequiresCheckpoint) {
                        fails_from[s.index()] = fails_from[s.index()].min(count);
                        // Borrowing `count` more instances raises `B - L` by
                        // `count` and `sum(U)` by `count` whichever
                        // LEND_AND_BORROW share borrows: these failures hold
                        // for every share of the type in this sweep.
                        let type_wide = matches!(
                            reason,
                            WaitReason::FleetFull { .. } | WaitReason::NoLendableCapacity { .. }
                        );
                        if step == Step::Borrow && type_wide && count < type_fails_from {
                            type_fails_from = count;
                            heads.iter_mut().for_each(|h| *h = None);
                        }
                    }
                }
            }
            if self.preemptions.len() != preemptions_before {
                heads.iter_mut().for_each(|h| *h = None);
                type_fails_from = u32::MAX;
            }
        }
    }

    fn share_takes_part(&self, s: ShareIdx, t: TypeIdx, step: Step) -> bool {
        let slot = &self.c.shares[s.index()];
        if slot.deleted || slot.types[t.index()].runnable.is_empty() {
            return false;
        }
        match step {
            Step::WithinQuota => true,
            Step::Borrow => slot.config.strategy == Strategy::LendAndBorrow,
            Step::InShare => slot.config.in_share_preemption,
        }
    }

    /// The next job of share `s` and type `t` this step should examine.
    fn next_candidate(
        &mut self,
        s: ShareIdx,
        t: TypeIdx,
        step: Step,
        after: Option<QueueKey>,
        fails_from: u32,
    ) -> Option<(QueueKey, u32)> {
        let view = &self.views[t.index()];
        let (used, entitlement) = (view.used[s.index()], view.entitlement[s.index()]);
        let room = entitlement.saturating_sub(used);
        let below_fail = fails_from.saturating_sub(1);
        if self.c.queueing == QueueingStrategy::StrictFifo {
            // Only the head of the share (across types) may start.
            let (key, head_type, count) = self.share_head(s)?;
            if after == Some(key) || head_type != t || count > below_fail {
                return None;
            }
            let in_step = match step {
                Step::WithinQuota => count <= room,
                Step::Borrow => count > room,
                Step::InShare => true,
            };
            if !in_step {
                // The head belongs to another step: jobs behind it wait.
                return None;
            }
            return Some((key, count));
        }
        let (admitted, barred) = (&self.admitted, &self.barred);
        let skip = |id: JobId| admitted.contains(&id) || barred.contains(&id);
        let queue = &self.c.st(s, t).runnable;
        match step {
            Step::WithinQuota => {
                queue.next_candidate(after, 1..=room.min(below_fail), false, &skip)
            }
            // Jobs that need more than the share's idle entitlement.
            Step::Borrow => {
                queue.next_candidate(after, room.saturating_add(1)..=below_fail, false, &skip)
            }
            Step::InShare => {
                // Only a job that outranks someone running can preempt, and jobs
                // behind one that does not outrank have no higher priority.
                let (key, count) = queue.next_candidate(after, 1..=below_fail, false, &skip)?;
                let lowest_running = self.lowest_running_priority(s, t)?;
                (key.priority.0 > lowest_running).then_some((key, count))
            }
        }
    }

    fn lowest_running_priority(&self, s: ShareIdx, t: TypeIdx) -> Option<u32> {
        let st = self.c.st(s, t);
        let existing = st
            .running
            .iter()
            .rev()
            .find(|k| !self.removed.contains(&k.job))
            .map(|k| k.priority.0);
        let added = self.added.get(&(s, t)).and_then(|keys| {
            keys.iter()
                .filter(|k| !self.removed.contains(&k.job))
                .map(|k| k.priority.0)
                .min()
        });
        match (existing, added) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Tries to start `id` in the given step, preempting if the step allows.
    fn try_step(&mut self, id: JobId, step: Step) -> Result<(), WaitReason> {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        if let Some(limit) = self.c.never_fits(s, t, count, job.spec.checkpoints) {
            return Err(WaitReason::Misconfiguration(limit));
        }
        match step {
            Step::WithinQuota | Step::Borrow => {
                let victims = self.fit(id, step == Step::WithinQuota)?;
                self.admit(id, &victims, &[]);
                Ok(())
            }
            Step::InShare => self.try_in_share(id),
        }
    }

    /// Whether `id` fits now, or with which cross-share victims (only when
    /// `reclaim` and the job is within its share's quota).
    fn fit(&mut self, id: JobId, reclaim: bool) -> Result<Vec<Victim>, WaitReason> {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        let view = &self.views[t.index()];
        if view.fleet == 0 {
            return Err(WaitReason::FleetLacksType);
        }
        let (used, entitlement) = (view.used[s.index()], view.entitlement[s.index()]);
        let share = &self.c.shares[s.index()].config;
        if used + count > entitlement {
            // Needs borrowing (possibly spanning owned and borrowed instances).
            if share.strategy != Strategy::LendAndBorrow {
                return Err(WaitReason::OwnCapacityInUse { used, entitlement });
            }
            let max_holding = share.max_holding(entitlement);
            if used + count > max_holding {
                return Err(WaitReason::BorrowLimitReached { used, max_holding });
            }
            let noncheckpointing = self.projected_noncheckpointing(s, t);
            if let Err(reason) = borrow_gates(self.c, job, self.now, noncheckpointing) {
                if let WaitReason::ReborrowCooldownUntil(until) = reason {
                    self.wake(until);
                }
                return Err(reason);
            }
            // A borrowing job never preempts other shares.
            return self.check(s, t, count).map(|()| Vec::new());
        }
        match self.check(s, t, count) {
            Ok(()) => Ok(Vec::new()),
            Err(reason) if reclaim => self.reclaim_for(id, reason),
            Err(reason) => Err(reason),
        }
    }

    /// Fleet and lending constraints for `count` more instances in share `s`:
    /// `sum(U) <= F`, and `B <= L` (or, where a limit reduction or a smaller
    /// fleet already broke it, no worse than before).
    fn check(&self, s: ShareIdx, t: TypeIdx, count: u32) -> Result<(), WaitReason> {
        let view = &self.views[t.index()];
        let (sum_u, borrowed, lendable) = view.totals_with(&self.lends, s.index(), count);
        let (_, borrowed_now, lendable_now) = view.totals_with(&self.lends, s.index(), 0);
        let debt_now = (borrowed_now - lendable_now).max(0);
        if borrowed - lendable > debt_now {
            return Err(WaitReason::NoLendableCapacity {
                lendable: u32::try_from(lendable_now.max(0)).unwrap_or(u32::MAX),
                borrowed: u32::try_from(borrowed_now.max(0)).unwrap_or(u32::MAX),
            });
        }
        if sum_u > u64::from(view.fleet) {
            return Err(WaitReason::FleetFull {
                in_use: u32::try_from(sum_u - u64::from(count)).unwrap_or(u32::MAX),
                fleet: view.fleet,
            });
        }
        Ok(())
    }

    /// Instances that jobs without checkpoints hold in `(s, t)`, projected.
    fn projected_noncheckpointing(&self, s: ShareIdx, t: TypeIdx) -> u32 {
        if !self.c.shares[s.index()]
            .config
            .protections
            .borrow_requires_checkpoint
        {
            return 0; // only that gate asks
        }
        self.projected_running(s, t)
            .iter()
            .filter(|k| !k.checkpoints)
            .map(|k| k.count)
            .sum()
    }

    /// Drops the victims whose release turns out not to be needed, newest
    /// choice first: each is restored and stays restored if `still_fits`.
    /// Expects the victims removed from the projection; returns the needed
    /// ones (in choice order) with every victim restored.
    fn drop_unneeded(
        &mut self,
        victims: Vec<Victim>,
        t: TypeIdx,
        mut still_fits: impl FnMut(&mut Self) -> bool,
    ) -> Vec<Victim> {
        let mut needed = Vec::with_capacity(victims.len());
        for v in victims.into_iter().rev() {
            self.restore_to_projection(&v, t);
            if still_fits(self) {
                continue;
            }
            self.remove_from_projection(&v, t);
            needed.push(v);
        }
        needed.reverse();
        for v in &needed {
            self.restore_to_projection(v, t);
        }
        needed
    }

    /// Running jobs of `(s, t)` in the projection, in classification order.
    fn projected_running(&self, s: ShareIdx, t: TypeIdx) -> Vec<RunKey> {
        let mut keys: Vec<RunKey> = self
            .c
            .st(s, t)
            .running
            .iter()
            .filter(|k| !self.removed.contains(&k.job))
            .copied()
            .collect();
        if let Some(added) = self.added.get(&(s, t)) {
            keys.extend(
                added
                    .iter()
                    .filter(|k| !self.removed.contains(&k.job))
                    .copied(),
            );
            keys.sort_unstable();
        }
        keys
    }

    /// Whether a running job is protected by its share's minimum runtime.
    fn protected_until(&self, s: ShareIdx, key: &RunKey) -> Option<Time> {
        if self.admitted.contains(&key.job) {
            return None; // not started yet: taking it back loses nothing
        }
        let min_runtime = self.c.shares[s.index()]
            .config
            .protections
            .min_runtime_before_preemption_secs;
        if min_runtime == 0 {
            return None;
        }
        let until = key.started.plus_secs(min_runtime);
        (until > self.now).then_some(until)
    }

    /// Victim order within a share: lowest priority, least work at risk, most
    /// recently started, highest job id.
    fn victim_order(
        &self,
        key: &RunKey,
    ) -> (u32, u64, std::cmp::Reverse<Time>, std::cmp::Reverse<JobId>) {
        (
            key.priority.0,
            self.job(key.job).work_at_risk(self.now),
            std::cmp::Reverse(key.started),
            std::cmp::Reverse(key.job),
        )
    }

    fn remove_from_projection(&mut self, victim: &Victim, t: TypeIdx) {
        self.removed.insert(victim.key.job);
        self.views[t.index()].used[victim.share.index()] -= victim.key.count;
    }

    fn restore_to_projection(&mut self, victim: &Victim, t: TypeIdx) {
        self.removed.remove(&victim.key.job);
        self.views[t.index()].used[victim.share.index()] += victim.key.count;
    }

    /// Reclaim: preempts borrowed jobs of other shares until `id` fits, then
    /// drops every victim whose release turns out not to be needed. Leaves the
    /// projection as it found it.
    fn reclaim_for(
        &mut self,
        id: JobId,
        first_reason: WaitReason,
    ) -> Result<Vec<Victim>, WaitReason> {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        let mut victims: Vec<Victim> = Vec::new();
        let mut protected: Option<Time> = None;
        let fits = loop {
            match self.next_reclaim_victim(s, t, &mut protected) {
                Some(victim) => {
                    self.remove_from_projection(&victim, t);
                    victims.push(victim);
                    if self.check(s, t, count).is_ok() {
                        break true;
                    }
                }
                None => break false,
            }
        };
        if !fits {
            for v in victims.iter().rev() {
                self.restore_to_projection(v, t);
            }
            if let Some(until) = protected {
                self.wake(until);
                return Err(WaitReason::VictimsProtectedUntil(until));
            }
            return Err(first_reason);
        }
        Ok(self.drop_unneeded(victims, t, |pass| pass.check(s, t, count).is_ok()))
    }

    /// The next reclaim victim for share `requester`: from the share borrowing
    /// most relative to its entitlement, its borrowed job that is lowest
    /// priority, then least work at risk, then most recently started.
    fn next_reclaim_victim(
        &self,
        requester: ShareIdx,
        t: TypeIdx,
        protected: &mut Option<Time>,
    ) -> Option<Victim> {
        let view = &self.views[t.index()];
        let mut sources: Vec<(ShareIdx, u32, u32)> = (0..self.c.shares.len())
            .filter(|&i| i != requester.index() && !self.c.shares[i].deleted)
            .filter_map(|i| {
                let borrowed = view.used[i].saturating_sub(view.entitlement[i]);
                (borrowed > 0).then_some((ShareIdx(i as u16), borrowed, view.entitlement[i]))
            })
            .collect();
        // borrowed/entitlement descending (entitlement 0 = infinitely much), then share order.
        sources.sort_by(|a, b| {
            let lhs = u64::from(b.1) * u64::from(a.2);
            let rhs = u64::from(a.1) * u64::from(b.2);
            lhs.cmp(&rhs).then(a.0.cmp(&b.0))
        });
        for (share, _, entitlement) in sources {
            let running = self.projected_running(share, t);
            let ckpt_first = self.c.shares[share.index()]
                .config
                .protections
                .borrow_requires_checkpoint;
            let candidates = borrowed_jobs(&running, entitlement, ckpt_first);
            let eligible = candidates
                .into_iter()
                .filter(|k| !self.committed.contains(&k.job))
                .filter(|k| match self.protected_until(share, k) {
                    Some(until) => {
                        *protected = Some(protected.map_or(until, |p| p.min(until)));
                        false
                    }
                    None => true,
                });
            if let Some(key) = eligible.min_by_key(|k| self.victim_order(k)) {
                let slot = &self.c.shares[share.index()].config;
                let over_max = view.used[share.index()] > slot.max_holding(entitlement);
                let kind = if over_max {
                    PreemptionKind::LimitReduced
                } else {
                    PreemptionKind::CrossShare
                };
                return Some(Victim { key, share, kind });
            }
        }
        None
    }

    /// In-share preemption: stops strictly lower-priority jobs of the job's
    /// own share (lowest priority, least work at risk, most recently started
    /// first), one at a time, until the job fits as any job of its share
    /// would: within the entitlement (then with reclaim, if its own idle
    /// capacity is lent out) or on borrowed capacity (within the borrow
    /// limit and the lendable pool). It takes the victims' place whether that
    /// place was owned or borrowed. Then every victim whose release is not
    /// needed keeps running: the victims are the fewest, in victim order,
    /// that let it start.
    ///
    /// A victim cannot take its place back ahead of the job: the job holds a
    /// claim until it starts (`Pass::honour_claims`), so the pass after the
    /// stops admits it first. That, not a restriction to the entitlement,
    /// is what prevents a preempt-restart livelock (ADR 0003).
    fn try_in_share(&mut self, id: JobId) -> Result<(), WaitReason> {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        // Fast rejection: even stopping every lower-priority job of the share
        // would not bring the job within what the share may hold.
        let view = &self.views[t.index()];
        let (used, entitlement) = (view.used[s.index()], view.entitlement[s.index()]);
        let share = &self.c.shares[s.index()].config;
        let may_hold = match share.strategy {
            Strategy::LendAndBorrow => share.max_holding(entitlement),
            _ => entitlement,
        };
        if count > may_hold {
            return Err(WaitReason::InSharePreemptionNotPossible);
        }
        let needed = (used + count).saturating_sub(may_hold);
        let mut releasable: u32 = self.added.get(&(s, t)).map_or(0, |keys| {
            keys.iter()
                .filter(|k| k.priority.0 < job.spec.priority && !self.removed.contains(&k.job))
                .map(|k| k.count)
                .sum()
        });
        for key in self.c.st(s, t).running.iter().rev() {
            if releasable >= needed || key.priority.0 >= job.spec.priority {
                break;
            }
            if !self.removed.contains(&key.job) {
                releasable += key.count;
            }
        }
        if releasable < needed {
            return Err(WaitReason::InSharePreemptionNotPossible);
        }
        let mut candidates: Vec<RunKey> = self
            .projected_running(s, t)
            .into_iter()
            .filter(|k| k.priority.0 < job.spec.priority && !self.committed.contains(&k.job))
            .collect();
        let mut protected: Option<Time> = None;
        candidates.retain(|k| match self.protected_until(s, k) {
            Some(until) => {
                protected = Some(protected.map_or(until, |p| p.min(until)));
                false
            }
            None => true,
        });
        candidates.sort_by_key(|k| self.victim_order(k));
        let mut own: Vec<Victim> = Vec::new();
        let mut cross: Option<Vec<Victim>> = None;
        for key in candidates {
            let victim = Victim {
                key,
                share: s,
                kind: PreemptionKind::InShare,
            };
            self.remove_from_projection(&victim, t);
            own.push(victim);
            if let Ok(found) = self.fit(id, true) {
                cross = Some(found);
                break;
            }
        }
        let Some(mut cross) = cross else {
            for v in own.iter().rev() {
                self.restore_to_projection(v, t);
            }
            if let Some(until) = protected {
                self.wake(until);
                return Err(WaitReason::VictimsProtectedUntil(until));
            }
            return Err(WaitReason::InSharePreemptionNotPossible);
        };
        // Keep running each own victim whose release is not needed.
        let needed = self.drop_unneeded(own, t, |pass| match pass.fit(id, true) {
            Ok(found) => {
                cross = found;
                true
            }
            Err(_) => false,
        });
        self.admit(id, &cross, &needed);
        Ok(())
    }

    /// Records the admission of `id` with its victims.
    fn admit(&mut self, id: JobId, cross: &[Victim], own: &[Victim]) {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        for v in own.iter().chain(cross.iter()) {
            self.remove_from_projection(v, t);
            if self.admitted.remove(&v.key.job) {
                // Admitted earlier in this pass and not started: it simply
                // does not start (no preemption), and waits in line again
                // (for the next pass, if a reclaim took its place back).
                if v.kind != PreemptionKind::InShare {
                    self.barred.insert(v.key.job);
                }
                self.removed.remove(&v.key.job);
                self.admitted_order.retain(|(j, _)| *j != v.key.job);
                if let Some(keys) = self.added.get_mut(&(v.share, t)) {
                    keys.retain(|k| k.job != v.key.job);
                }
                continue;
            }
            self.preemptions.push(Preemption {
                job: v.key.job,
                kind: v.kind,
                for_job: id,
            });
            self.committed.insert(id);
        }
        self.admissions += 1;
        self.views[t.index()].used[s.index()] += count;
        self.admitted.insert(id);
        self.admitted_order.push((id, count));
        self.added.entry((s, t)).or_default().push(RunKey {
            priority: std::cmp::Reverse(job.spec.priority),
            started: self.now,
            job: id,
            count,
            checkpoints: job.spec.checkpoints,
        });
    }

    /// Whether an admitted job is on borrowed capacity by the contract's
    /// classification (first fit in (priority desc, start asc) order).
    fn classify_borrowed(&self, id: JobId) -> bool {
        let job = self.job(id);
        let (s, t) = (job.spec.share, job.spec.instance_type);
        let entitlement = self.views[t.index()].entitlement[s.index()];
        let ckpt_first = self.c.shares[s.index()]
            .config
            .protections
            .borrow_requires_checkpoint;
        borrowed_jobs(&self.projected_running(s, t), entitlement, ckpt_first)
            .iter()
            .any(|k| k.job == id)
    }

    fn finish(self) -> Plan {
        let borrowed_at_start: HashSet<JobId> = self
            .admitted_order
            .iter()
            .map(|(id, _)| *id)
            .filter(|id| self.classify_borrowed(*id))
            .collect();
        let mut plan = Plan {
            now: self.now,
            timeouts: self.timeouts,
            preemptions: self.preemptions,
            wake_at: self.wake_at,
            ..Plan::default()
        };
        // A job admitted in the projection starts only once it fits the actual
        // state, where jobs being stopped still hold their instances: the
        // capacity it was promised is not used by anyone else meanwhile (a
        // RESERVE share's idle instance stays idle even for a few seconds).
        let mut actual: Vec<TypeView> = self.views.clone();
        for (t, view) in actual.iter_mut().enumerate() {
            for (i, slot) in self.c.shares.iter().enumerate() {
                let st = &slot.types[t];
                view.used[i] = st.running_usage + st.stopping_usage;
            }
        }
        let mut started_noncheckpointing: BTreeMap<(ShareIdx, TypeIdx), u32> = BTreeMap::new();
        // Free slots per node, per type a start needs (taken as starts are placed).
        let mut free: BTreeMap<TypeIdx, BTreeMap<NodeId, Vec<u32>>> = BTreeMap::new();
        for (id, count) in self.admitted_order {
            let job = &self.c.jobs[&id];
            let (s, t) = (job.spec.share, job.spec.instance_type);
            let view = &mut actual[t.index()];
            let max_holding = self.c.shares[s.index()]
                .config
                .max_holding(view.entitlement[s.index()]);
            let within_max = view.used[s.index()] + count <= max_holding;
            // While jobs of its own share are still stopping, a job admitted
            // within quota may for a moment exceed the entitlement: that moment
            // is borrowing, and must pass the borrowing gates too.
            let borrows_now = view.used[s.index()] + count > view.entitlement[s.index()];
            let noncheckpointing = if self.c.shares[s.index()]
                .config
                .protections
                .borrow_requires_checkpoint
            {
                let st = self.c.st(s, t);
                let running: u32 = st
                    .running
                    .iter()
                    .filter(|k| !k.checkpoints)
                    .map(|k| k.count)
                    .sum();
                running
                    + st.stopping_noncheckpointing
                    + started_noncheckpointing.get(&(s, t)).copied().unwrap_or(0)
            } else {
                0
            };
            let gates_ok =
                !borrows_now || borrow_gates(self.c, job, self.now, noncheckpointing).is_ok();
            if !within_max || !gates_ok || !fits_actual(view, &self.lends, s.index(), count) {
                plan.waiting_for_release.push(id);
                plan.reasons.push((id, WaitReason::WaitingForRelease));
                continue;
            }
            let node_free = free.entry(t).or_insert_with(|| self.c.free_slots(t));
            let names = |n: NodeId| self.c.nodes[n.index()].name.as_str();
            let Some(placement) = place(node_free, &names, count) else {
                // Cannot happen while every holder holds slots on live nodes
                // (the fleet is their sum); waiting is the safe answer.
                debug_assert!(false, "{id} fits the fleet but not its nodes");
                plan.waiting_for_release.push(id);
                plan.reasons.push((id, WaitReason::WaitingForRelease));
                continue;
            };
            if !job.spec.checkpoints {
                *started_noncheckpointing.entry((s, t)).or_default() += count;
            }
            let borrowed = if borrowed_at_start.contains(&id) {
                count
            } else {
                0
            };
            view.used[s.index()] += count;
            if let Some(secs) = job.spec.attempt_timeout_secs {
                let deadline = self.now.plus_secs(secs);
                plan.wake_at = Some(plan.wake_at.map_or(deadline, |w| w.min(deadline)));
            }
            plan.starts.push(Start {
                job: id,
                share: s,
                instance_type: t,
                count,
                borrowed,
                placement,
            });
        }
        // Types this pass looked at and decided nothing for.
        let mut decided = vec![false; self.c.types.len()];
        let type_of = |id: &JobId| self.c.jobs[id].spec.instance_type.index();
        for id in plan
            .starts
            .iter()
            .map(|s| &s.job)
            .chain(plan.preemptions.iter().map(|p| &p.job))
            .chain(plan.timeouts.iter())
            .chain(plan.waiting_for_release.iter())
        {
            decided[type_of(id)] = true;
        }
        plan.settled = (0..self.c.types.len())
            .filter(|&t| self.active[t] && !decided[t])
            .map(|t| TypeIdx(t as u16))
            .collect();
        plan.reasons.extend(
            self.reasons
                .into_iter()
                .filter(|(id, _)| !self.admitted.contains(id)),
        );
        plan.reasons.sort_by_key(|(id, _)| *id);
        plan
    }
}

/// The per-share gates on borrowing (beyond the limits): the re-borrow
/// cool-down and `borrowRequiresCheckpoint`.
///
/// `noncheckpointing_used` is what the share's jobs that do not checkpoint
/// hold: with `borrowRequiresCheckpoint` they are classified within quota
/// first, so a job that does not checkpoint may start as long as those jobs
/// together stay within the entitlement (the excess is then on checkpointing
/// jobs, which can resume).
fn borrow_gates(
    c: &Cluster,
    job: &Job,
    now: Time,
    noncheckpointing_used: u32,
) -> Result<(), WaitReason> {
    let (s, t) = (job.spec.share, job.spec.instance_type);
    let share = &c.shares[s.index()].config;
    if share.strategy != Strategy::LendAndBorrow {
        let st = c.st(s, t);
        return Err(WaitReason::OwnCapacityInUse {
            used: st.running_usage,
            entitlement: st.entitlement,
        });
    }
    if share.protections.reborrow_cooldown_secs > 0 {
        if let Some(at) = c.st(s, t).reclaimed_at {
            let until = at.plus_secs(share.protections.reborrow_cooldown_secs);
            if until > now {
                return Err(WaitReason::ReborrowCooldownUntil(until));
            }
        }
    }
    let entitlement = c.st(s, t).entitlement;
    if share.protections.borrow_requires_checkpoint
        && !job.spec.checkpoints
        && noncheckpointing_used + job.spec.count > entitlement
    {
        return Err(WaitReason::BorrowRequiresCheckpoint);
    }
    Ok(())
}

/// Whether `count` more instances for share `s` fit the actual state: the fleet
/// physically, and `B <= L` (or no worse than it already is).
fn fits_actual(view: &TypeView, lends: &[bool], s: usize, count: u32) -> bool {
    let (sum_u, borrowed, lendable) = view.totals_with(lends, s, count);
    let (_, borrowed_now, lendable_now) = view.totals_with(lends, s, 0);
    sum_u <= u64::from(view.fleet) && borrowed - lendable <= (borrowed_now - lendable_now).max(0)
}

impl Cluster {
    /// Runs a scheduling pass at `now` without changing anything.
    pub fn schedule(&self, now: Time) -> Plan {
        schedule(self, now)
    }

    /// Runs a pass and applies it; returns the plan. Debug builds check the
    /// contract's invariants on small clusters (the check copies the state).
    pub fn step(&mut self, now: Time) -> Plan {
        let plan = schedule(self, now);
        if cfg!(debug_assertions) && self.jobs.len() <= DEBUG_CHECK_MAX_JOBS {
            if let Err(violation) = crate::invariants::check_plan(self, &plan) {
                panic!("{violation}");
            }
        }
        self.apply(&plan);
        plan
    }

    /// Why a job waits, computed now. For a job the last pass examined this is
    /// its recorded reason; otherwise the fit check is run for it alone.
    pub fn explain(&self, id: JobId, now: Time) -> Option<WaitReason> {
        let job = self.jobs.get(&id)?;
        if job.status != crate::job::JobStatus::Runnable {
            return None;
        }
        if let Some(wait) = job
            .status_reason
            .wait()
            .filter(|w| *w != WaitReason::Queued)
        {
            return Some(wait);
        }
        let mut pass = Pass::new(self, now, false);
        Some(pass.reason_for(id, true))
    }
}
