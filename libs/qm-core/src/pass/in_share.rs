//! In-share preemption (shares with it ENABLED): a waiting job takes the
//! place of strictly lower-priority jobs of its own share, whether that
//! place is owned or borrowed, among those whose workload class lets the
//! job's class preempt them (`preemptibleBy`).
//!
//! Decides: the victims (lowest priority, least work at risk, most recently
//! started first), the fewest that let the job start as any job of its
//! share could (within the entitlement, with reclaim, or on lendable
//! capacity within the borrow limit).
//!
//! Guarantees afterwards: a victim is never preempted when the job would
//! still not fit; no victim can take its place back ahead of the job (the
//! job's claim is honoured first by every later pass, see ADR 0006).

use super::*;

impl Pass<'_> {
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
    /// Where a limit reduction or a smaller fleet left a lending debt
    /// (`B > L`), the job starts only when it makes the debt no worse than
    /// it is once its victims are gone: the victims may pay the debt down.
    /// (Measuring against the debt before the victims were removed would
    /// let this pass stop fewer, but the next pass, with the victims gone,
    /// could not honour the claim and would stop more.)
    ///
    /// A victim cannot take its place back ahead of the job: the job holds a
    /// claim until it starts (`Pass::honour_claims`), so the pass after the
    /// stops admits it first. That, not a restriction to the entitlement,
    /// is what prevents a preempt-restart livelock (ADR 0006).
    pub(super) fn try_in_share(&mut self, id: JobId) -> Result<(), WaitReason> {
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
        // Every instance lower-priority jobs of the share hold (protected
        // ones included: leaving them out only makes the job fit less).
        let mut releasable: u32 = self.added.get(&(s, t)).map_or(0, |keys| {
            keys.iter()
                .filter(|k| k.priority.0 < job.spec.priority && !self.removed.contains(&k.job))
                .map(|k| k.count)
                .sum()
        });
        for key in self.c.st(s, t).running.iter().rev() {
            if key.priority.0 >= job.spec.priority {
                break;
            }
            if !self.removed.contains(&key.job) {
                releasable += key.count;
            }
        }
        let without = used.saturating_sub(releasable);
        if without + count > may_hold {
            return Err(WaitReason::InSharePreemptionNotPossible);
        }
        if without + count > entitlement {
            // It would borrow even then: borrowing never preempts other
            // shares, so the fleet and the lendable pool must allow it with
            // every lower-priority job gone, or no victim is worth stopping.
            self.views[t.index()].used[s.index()] = without;
            let fits = self.check(s, t, count);
            self.views[t.index()].used[s.index()] = used;
            if fits.is_err() {
                return Err(WaitReason::InSharePreemptionNotPossible);
            }
        }
        let class = job.spec.class.as_deref();
        let mut candidates: Vec<RunKey> = self
            .projected_running(s, t)
            .into_iter()
            .filter(|k| k.priority.0 < job.spec.priority)
            .filter(|k| share.class_may_preempt(class, self.job(k.job).spec.class.as_deref()))
            .filter(|k| self.committed.is_empty() || !self.committed.contains(&k.job))
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
}
