//! Reclaim (cross-share preemption, always on): an owner gets lent capacity
//! back from the shares borrowing it.
//!
//! Decides: the victims, in the contract's order: the share borrowing most
//! relative to its entitlement first (measured again after each victim;
//! shares that tie go on to the next key), then lowest priority, then least
//! work at risk, then most recently started, then fewest instances, then
//! most recently submitted; only borrowed jobs, never one within its
//! class's minimum runtime, never one whose admission in this pass preempted others.
//!
//! Guarantees afterwards: the projection is as it was; the victims returned
//! are exactly those needed for the job to fit.

use super::*;
use crate::policy::protections;

impl Pass<'_> {
    /// Until when a running job may not be preempted
    /// (`crate::policy::protections`); a job admitted in this pass never is
    /// protected: taking it back loses nothing.
    pub(super) fn protected_until(&self, s: ShareIdx, key: &RunKey) -> Option<Time> {
        if self.admitted.contains(&key.job) {
            return None;
        }
        protections::hooks::protected_until(self.c, s, key, self.now)
    }

    /// Victim order (reclaim among the shares that tie, and in-share):
    /// lowest priority, least work at risk, most recently started; victims
    /// equal on all of those go fewest instances first, then most recently
    /// submitted (`semantics.md` section 4), then highest job id.
    pub(super) fn victim_order(&self, key: &RunKey) -> VictimOrder {
        let job = self.job(key.job);
        (
            key.priority.0,
            job.work_at_risk(self.now),
            std::cmp::Reverse(key.started),
            key.count,
            std::cmp::Reverse(job.submitted_at),
            std::cmp::Reverse(key.job),
        )
    }

    /// Reclaim: preempts borrowed jobs of other shares until `id` fits, then
    /// drops every victim whose release turns out not to be needed. Leaves the
    /// projection as it found it.
    pub(super) fn reclaim_for(
        &mut self,
        id: JobId,
        first_reason: WaitReason,
    ) -> Result<Vec<Victim>, WaitReason> {
        let job = self.job(id);
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        let mut victims: Vec<Victim> = Vec::new();
        let mut protected: Option<Time> = None;
        // Which jobs are borrowed is decided once, on the state the job
        // found: taking one borrowed job never makes another one within
        // quota for this reclaim (a prefix could otherwise shift).
        // Shares outside the requester's group first, then its group's
        // (`policy::groups`): they lent within the group first.
        let (mut pools, mut in_group): (Vec<Pool>, Vec<Pool>) = self
            .borrowed_pools(s, t)
            .into_iter()
            .partition(|(other, _)| !self.hooks.groups.same(s, *other));
        let fits = loop {
            let next = match self.next_reclaim_victim(&mut pools, t, &mut protected) {
                Some(v) => Some(v),
                None => self.next_reclaim_victim(&mut in_group, t, &mut protected),
            };
            match next {
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

    /// The other shares that borrow type `t` in the projection, each with a
    /// slot for its borrowed jobs, worked out when first needed (most
    /// reclaims look at one share or two).
    fn borrowed_pools(&self, requester: ShareIdx, t: TypeIdx) -> Vec<Pool> {
        let view = &self.views[t.index()];
        (0..self.c.shares.len())
            .filter(|&i| i != requester.index() && !self.c.shares[i].deleted)
            .filter(|&i| view.used[i] > view.entitlement[i])
            .map(|i| (ShareIdx(i as u16), None))
            .collect()
    }

    /// Share `share`'s borrowed jobs of type `t`, as the projection stands.
    fn borrowed_now(&self, share: ShareIdx, t: TypeIdx) -> Vec<RunKey> {
        let running = self.projected_running(share, t);
        let entitlement = self.views[t.index()].entitlement[share.index()];
        borrowed_jobs(&running, entitlement)
    }

    /// The next reclaim victim among `pools` (each share's borrowed jobs):
    /// from the shares borrowing most relative to their entitlement
    /// (measured in the projection, so again after each victim; a share
    /// with entitlement 0 that borrows borrows the most), their borrowed job
    /// first in [`Pass::victim_order`]. Shares that tie on that ratio are
    /// one group: the next key decides between their jobs, never the order
    /// the shares are listed in. A group with no eligible job (all
    /// protected or committed) gives way to the next.
    pub(super) fn next_reclaim_victim(
        &self,
        pools: &mut [Pool],
        t: TypeIdx,
        protected: &mut Option<Time>,
    ) -> Option<Victim> {
        let view = &self.views[t.index()];
        let mut sources: Vec<(usize, u32, u32)> = pools
            .iter()
            .enumerate()
            .filter_map(|(p, (share, _))| {
                let i = share.index();
                let borrowed = view.used[i].saturating_sub(view.entitlement[i]);
                (borrowed > 0).then_some((p, borrowed, view.entitlement[i]))
            })
            .collect();
        // borrowed/entitlement descending (entitlement 0 = infinitely much);
        // the share's place only makes the sort total, groups ignore it.
        let ratio = |a: &(usize, u32, u32), b: &(usize, u32, u32)| {
            let lhs = u64::from(b.1) * u64::from(a.2);
            let rhs = u64::from(a.1) * u64::from(b.2);
            lhs.cmp(&rhs)
        };
        sources.sort_by(|a, b| ratio(a, b).then(a.0.cmp(&b.0)));
        for group in sources.chunk_by(|a, b| ratio(a, b).is_eq()) {
            let mut best: Option<(VictimOrder, Victim)> = None;
            for &(p, _, entitlement) in group {
                let share = pools[p].0;
                if pools[p].1.is_none() {
                    pools[p].1 = Some(self.borrowed_now(share, t));
                }
                let candidates = pools[p].1.as_deref().unwrap_or_default();
                let eligible = candidates
                    .iter()
                    .filter(|k| !self.removed.contains(&k.job))
                    .filter(|k| self.committed.is_empty() || !self.committed.contains(&k.job))
                    .filter(|k| match self.protected_until(share, k) {
                        Some(until) => {
                            *protected = Some(protected.map_or(until, |p| p.min(until)));
                            false
                        }
                        None => true,
                    });
                let Some((order, key)) = eligible.map(|k| (self.victim_order(k), *k)).min() else {
                    continue;
                };
                if best.as_ref().is_some_and(|(b, _)| *b <= order) {
                    continue;
                }
                let slot = &self.c.shares[share.index()].config;
                let over_max = view.used[share.index()] > slot.max_holding(entitlement);
                let kind = if over_max {
                    PreemptionKind::LimitReduced
                } else {
                    PreemptionKind::CrossShare
                };
                best = Some((order, Victim { key, share, kind }));
            }
            if let Some((_, victim)) = best {
                return Some(victim);
            }
        }
        None
    }
}

/// A share that borrows, and its borrowed jobs once worked out (decided
/// once per reclaim: taking one never makes another within quota).
type Pool = (ShareIdx, Option<Vec<RunKey>>);

/// A victim's rank: the smallest goes first (see [`Pass::victim_order`]).
pub(super) type VictimOrder = (
    u32,
    u64,
    std::cmp::Reverse<Time>,
    u32,
    std::cmp::Reverse<Time>,
    std::cmp::Reverse<JobId>,
);
