//! Fitting one job: within its share's entitlement (with reclaim when its
//! own idle capacity is lent out) or on borrowed capacity (LEND_AND_BORROW
//! shares only, within the borrow limit, the re-borrow cool-down and the
//! job's borrow bar; borrowing never preempts).
//!
//! Decides: whether a job fits now, and with which cross-share victims.
//!
//! Guarantees afterwards: the projection is as it was (victims are only
//! chosen; `admit` applies them), and the victims are the fewest needed:
//! every one whose release turns out not to be needed is dropped.

use super::*;
use crate::policy::{classes, protections};

impl Pass<'_> {
    /// Whether `id` fits now, or with which cross-share victims (only when
    /// `reclaim` and the job is within its share's quota).
    pub(super) fn fit(&mut self, id: JobId, reclaim: bool) -> Result<Vec<Victim>, WaitReason> {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        let view = &self.views[t.index()];
        if view.fleet == 0 && view.withheld == 0 {
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
            self.hooks.groups.limit(self, s, t, count)?;
            if let Err(reason) = borrow_gates(self.c, job, self.now, || self.projected_barred(s, t))
            {
                if let WaitReason::ReborrowCooldownUntil(until) = reason {
                    self.wake(until);
                }
                return Err(reason);
            }
            if let Err((reason, refills)) = self.hooks.budgets.gate(self, job, used, entitlement) {
                if let Some(at) = refills {
                    self.wake(at);
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

    /// Drops the victims whose release turns out not to be needed, newest
    /// choice first: each is restored and stays restored if `still_fits`.
    /// Expects the victims removed from the projection; returns the needed
    /// ones (in choice order) with every victim restored.
    pub(super) fn drop_unneeded(
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
}

/// The per-share gates on borrowing (beyond the limits): the share's
/// strategy, then each policy's gate in turn: the re-borrow cool-down
/// (`crate::policy::protections`) and the job's borrow bar
/// (`crate::policy::classes`: `borrowRequiresCheckpoint`, its workload
/// class's `mayBorrow` and resume proof; `barred_used` as
/// [`classes::hooks::bar`] takes it).
pub(super) fn borrow_gates(
    c: &Cluster,
    job: &Job,
    now: Time,
    barred_used: impl FnOnce() -> u32,
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
    protections::hooks::cooldown(c, s, t, now)?;
    classes::hooks::bar(c, job, barred_used)
}

impl Pass<'_> {
    /// The runtime rule's gate (`crate::policy::runtimes`) for `id`.
    pub(super) fn runtime_gate(&mut self, id: JobId) -> Result<bool, WaitReason> {
        let job = self.job(id);
        let fleet = self.views[job.spec.instance_type.index()].fleet;
        self.hooks.runtimes.gate(self.c, fleet, job)
    }
}
