//! The sweeps: which waiting job each step tries next, shares interleaved
//! by the RUNNABLE-since time of their next job (FIFO across shares), each
//! share in (priority desc, RUNNABLE-since asc, job id) order; claims
//! first; and the reason every examined job that did not start waits.
//!
//! Decides: the order jobs are tried in within-quota admission, borrowing
//! and in-share preemption (BEST_EFFORT_FIFO: a job that does not fit does
//! not block smaller ones; STRICT_FIFO: a share's head blocks the share).
//!
//! Guarantees afterwards: every job a sweep examined and did not start has
//! a reason; jobs that failed for a count are not tried again at a larger
//! count in the same sweep (constraints are monotone in the count).

use super::*;
use crate::policy::runtimes;

impl Pass<'_> {
    /// Jobs for which earlier passes started preemptions come first: the
    /// capacity being released was promised to them, and letting the FIFO
    /// order of the next pass hand it to another job would make those
    /// preemptions pointless (and could preempt again for the same job).
    pub(super) fn honour_claims(&mut self) {
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
                    job.borrow_bar,
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
    pub(super) fn explain_new_arrivals(&mut self) {
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
    pub(super) fn reason_for(&mut self, id: JobId, try_reclaim: bool) -> WaitReason {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        if let Some(limit) = self.c.never_fits(s, t, count, job.borrow_bar) {
            return WaitReason::Misconfiguration(limit);
        }
        if self.c.queueing == QueueingStrategy::StrictFifo {
            if let Some((head, _, _)) = self.share_head(s).filter(|(head, _, _)| head.job != id) {
                return WaitReason::StrictFifoBehind(head.job);
            }
        }
        if let Err(reason) = self.runtime_gate(id) {
            return reason;
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

    /// The next job of share `s` in line (all types), not yet admitted. A
    /// head a reclaim took back stays the head (STRICT_FIFO: it blocks its
    /// share, see `next_candidate`).
    pub(super) fn share_head(&self, s: ShareIdx) -> Option<(QueueKey, TypeIdx, u32)> {
        let skip = |id: JobId| !self.admitted.is_empty() && self.admitted.contains(&id);
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
    pub(super) fn sweep(&mut self, t: TypeIdx, step: Step) {
        let mut place = SweepPlace::new(self.c.shares.len());
        self.sweep_from(t, step, &mut place);
    }

    /// Walks the waiting jobs of type `t` for one step from `place` (where
    /// an earlier sweep of the same step, ended by a preemption, stopped).
    pub(super) fn sweep_from(&mut self, t: TypeIdx, step: Step, place: &mut SweepPlace) {
        let n = self.c.shares.len();
        // Per share: last key examined, and the count from which jobs are known
        // not to fit in this sweep (constraints are monotone in the count).
        let SweepPlace { cursor, fails_from } = place;
        let mut done: Vec<bool> = (0..n)
            .map(|i| !self.share_takes_part(ShareIdx(i as u16), t, step))
            .collect();
        // Each share's next candidate, recomputed only when it may have
        // changed: after the share's own job was tried (a preemption ends
        // the sweep).
        let mut heads: Vec<Head> = vec![Head::Unknown; n];
        // The count from which no job of any share fits in this sweep.
        let mut type_fails_from = u32::MAX;
        loop {
            let mut pick: Option<(QueueKey, u32, ShareIdx)> = None;
            for i in 0..n {
                if done[i] {
                    continue;
                }
                let s = ShareIdx(i as u16);
                if heads[i] == Head::Unknown {
                    let bound = fails_from[i].min(type_fails_from);
                    heads[i] = match self.next_candidate(s, t, step, cursor[i], bound) {
                        Some((key, count)) => Head::Next(key, count),
                        None => Head::Exhausted,
                    };
                }
                match heads[i] {
                    Head::Next(key, count) => {
                        if pick.is_none_or(|(b, _, bs)| self.goes_first(t, step, (key, s), (b, bs)))
                        {
                            pick = Some((key, count, s));
                        }
                    }
                    Head::Exhausted => done[i] = true,
                    Head::Unknown => unreachable!("computed above"),
                }
            }
            let Some((key, count, s)) = pick else { break };
            cursor[s.index()] = Some(key);
            heads[s.index()] = Head::Unknown;
            let preemptions_before = self.preemptions.len();
            match self.try_step(key.job, step) {
                Ok(()) => {}
                Err(reason) => {
                    self.reasons.entry(key.job).or_insert(reason);
                    if self.c.queueing == QueueingStrategy::StrictFifo {
                        done[s.index()] = true;
                    } else if !is_per_job_reason(&reason)
                        && !runtimes::hooks::is_runtime_reason(&reason)
                    {
                        fails_from[s.index()] = fails_from[s.index()].min(count);
                        // Borrowing `count` more instances raises `B - L` by
                        // `count` and `sum(U)` by `count` whichever
                        // LEND_AND_BORROW share borrows: these failures hold
                        // for every share of the type in this sweep.
                        let type_wide = matches!(
                            reason,
                            WaitReason::FleetFull { .. }
                                | WaitReason::EnvironmentCapacityHeld { .. }
                                | WaitReason::NoLendableCapacity { .. }
                        );
                        if step == Step::Borrow && type_wide && count < type_fails_from {
                            type_fails_from = count;
                            heads.fill(Head::Unknown);
                        }
                    }
                }
            }
            if self.preemptions.len() != preemptions_before {
                // The victims may free more than this job needs: that room
                // goes to within-quota admission first (`Pass::sweep_type`).
                break;
            }
        }
    }

    /// Whether share `s`'s next job `a` goes before share `bs`'s `b`: the
    /// one RUNNABLE first (FIFO across shares); when borrowing under
    /// FAIR_SHARE, the share with the least borrowed per unit of weight
    /// first (`crate::policy::fair_share`).
    fn goes_first(
        &self,
        t: TypeIdx,
        step: Step,
        (a, s): (QueueKey, ShareIdx),
        (b, bs): (QueueKey, ShareIdx),
    ) -> bool {
        let groups = &self.hooks.groups;
        if step == Step::Borrow && groups.any() && s != bs {
            // Lending within the group goes first.
            match (
                groups.lends_within(self, s, t),
                groups.lends_within(self, bs, t),
            ) {
                (true, false) => return true,
                (false, true) => return false,
                _ => {}
            }
        }
        if step == Step::Borrow {
            match self.hooks.fair_share.first(self, s, bs, t) {
                std::cmp::Ordering::Less => return true,
                std::cmp::Ordering::Greater => return false,
                std::cmp::Ordering::Equal => {}
            }
        }
        (a.runnable_since, a.job) < (b.runnable_since, b.job)
    }

    pub(super) fn share_takes_part(&self, s: ShareIdx, t: TypeIdx, step: Step) -> bool {
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
    pub(super) fn next_candidate(
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
            // A head a reclaim took back waits as any such job does (to
            // borrow, until the next pass; within its quota, once more),
            // and the jobs behind it wait with it.
            let barred = if step == Step::WithinQuota {
                &self.barred_again
            } else {
                &self.barred
            };
            if barred.contains(&key.job) {
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
        // A job a reclaim took back waits for the next pass to borrow again
        // (`Pass::barred`), but may still start within its quota: under the
        // prefix rule a job can be borrowed only because a larger, more
        // urgent job of its share was admitted before it, and that job may
        // have been taken back since. Once only (`Pass::barred_again`).
        let barred = if step == Step::WithinQuota {
            &self.barred_again
        } else {
            &self.barred
        };
        let admitted = &self.admitted;
        let skip = |id: JobId| {
            (!admitted.is_empty() && admitted.contains(&id))
                || (!barred.is_empty() && barred.contains(&id))
        };
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

    pub(super) fn lowest_running_priority(&self, s: ShareIdx, t: TypeIdx) -> Option<u32> {
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
    pub(super) fn try_step(&mut self, id: JobId, step: Step) -> Result<(), WaitReason> {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        if let Some(limit) = self.c.never_fits(s, t, count, job.borrow_bar) {
            return Err(WaitReason::Misconfiguration(limit));
        }
        // Where its runtime is offered by only some nodes, a job is tried
        // only while they have room for it now (`policy::runtimes`).
        self.runtime_gate(id)?;
        match step {
            Step::WithinQuota | Step::Borrow => {
                let victims = self.fit(id, step == Step::WithinQuota)?;
                self.admit(id, &victims, &[]);
                Ok(())
            }
            Step::InShare => self.try_in_share(id),
        }
    }
}

/// Where a sweep has got to: per share, the last job examined and the count
/// from which jobs are known not to fit (constraints are monotone in the
/// count).
pub(super) struct SweepPlace {
    cursor: Vec<Option<QueueKey>>,
    fails_from: Vec<u32>,
}

impl SweepPlace {
    pub(super) fn new(shares: usize) -> SweepPlace {
        SweepPlace {
            cursor: vec![None; shares],
            fails_from: vec![u32::MAX; shares],
        }
    }
}

/// A share's next candidate in a sweep, cached until something that may
/// change it happens.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Head {
    /// Not computed since the last change.
    Unknown,
    /// The share has no further job that may fit in this sweep.
    Exhausted,
    /// The next job to try and the instances it asks for.
    Next(QueueKey, u32),
}

/// A reason that holds for this job, not for every job of its size: a
/// failure for it says nothing of the larger jobs behind it (its borrow
/// bar, or its share's borrowing budget against its expected run).
fn is_per_job_reason(reason: &WaitReason) -> bool {
    matches!(
        reason,
        WaitReason::BorrowRequiresCheckpoint
            | WaitReason::ClassMayNotBorrow
            | WaitReason::ResumeNotVerified
            | WaitReason::BorrowBudget { .. }
    )
}
