//! The projection a pass works on, per instance type: usage per share with
//! jobs being stopped counted as gone and admitted jobs as running.
//!
//! Decides: whether `count` more instances for a share fit the fleet and the
//! lendable pool (`sum(U) <= F`, `B <= L`, or no worse than an existing
//! debt after a limit reduction or a smaller fleet).
//!
//! Guarantees: the checks only read the projection; a victim is moved out of
//! it and back only through `remove_from_projection` and
//! `restore_to_projection`, so every trial leaves it as it found it.

use super::*;

/// Projected usage of one type.
#[derive(Clone, Debug)]
pub(super) struct TypeView {
    pub(super) fleet: u32,
    /// Instances other queues of the environment hold (`policy::environments`).
    pub(super) withheld: u32,
    /// `U_s` per share slot, projected.
    pub(super) used: Vec<u32>,
    pub(super) entitlement: Vec<u32>,
    pub(super) sum_entitlement: u64,
}

impl TypeView {
    /// Whether `count` more instances for share `s` keep `sum(U) <= F` and
    /// `B <= L` (or leave the lending debt no worse than it is now), and if
    /// not, why.
    pub(super) fn check(&self, lends: &[bool], s: usize, count: u32) -> Result<(), WaitReason> {
        let (sum_u, borrowed, lendable) = self.totals_with(lends, s, count);
        let (_, borrowed_now, lendable_now) = self.totals_with(lends, s, 0);
        let debt_now = (borrowed_now - lendable_now).max(0);
        if borrowed - lendable > debt_now {
            return Err(WaitReason::NoLendableCapacity {
                lendable: u32::try_from(lendable_now.max(0)).unwrap_or(u32::MAX),
                borrowed: u32::try_from(borrowed_now.max(0)).unwrap_or(u32::MAX),
            });
        }
        if sum_u > u64::from(self.fleet) {
            let in_use = u32::try_from(sum_u - u64::from(count)).unwrap_or(u32::MAX);
            if self.withheld > 0 {
                return Err(WaitReason::EnvironmentCapacityHeld {
                    held: self.withheld,
                    in_use,
                    fleet: self.fleet,
                });
            }
            return Err(WaitReason::FleetFull {
                in_use,
                fleet: self.fleet,
            });
        }
        Ok(())
    }

    /// `(sum U, B, L)` with `extra` instances added to share `s`.
    pub(super) fn totals_with(&self, lends: &[bool], s: usize, extra: u32) -> (u64, i64, i64) {
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

impl Pass<'_> {
    /// Fleet and lending constraints for `count` more instances in share `s`:
    /// `sum(U) <= F`, and `B <= L` (or, where a limit reduction or a smaller
    /// fleet already broke it, no worse than before).
    pub(super) fn check(&self, s: ShareIdx, t: TypeIdx, count: u32) -> Result<(), WaitReason> {
        self.views[t.index()].check(&self.lends, s.index(), count)
    }

    /// The type's free room `F - sum(U)` and lending headroom `L - B` in the
    /// projection.
    pub(super) fn room(&self, t: TypeIdx) -> (i64, i64) {
        let view = &self.views[t.index()];
        let (sum_u, borrowed, lendable) = view.totals_with(&self.lends, 0, 0);
        (
            i64::from(view.fleet) - i64::try_from(sum_u).unwrap_or(i64::MAX),
            lendable - borrowed,
        )
    }

    /// Instances that jobs that may not borrow hold in `(s, t)`, projected.
    pub(super) fn projected_barred(&self, s: ShareIdx, t: TypeIdx) -> u32 {
        self.projected_running(s, t)
            .iter()
            .filter(|k| !k.may_borrow)
            .map(|k| k.count)
            .sum()
    }

    /// Running jobs of `(s, t)` in the projection, in classification order.
    pub(super) fn projected_running(&self, s: ShareIdx, t: TypeIdx) -> Vec<RunKey> {
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

    pub(super) fn remove_from_projection(&mut self, victim: &Victim, t: TypeIdx) {
        self.removed.insert(victim.key.job);
        self.views[t.index()].used[victim.share.index()] -= victim.key.count;
    }

    pub(super) fn restore_to_projection(&mut self, victim: &Victim, t: TypeIdx) {
        self.removed.remove(&victim.key.job);
        self.views[t.index()].used[victim.share.index()] += victim.key.count;
    }
}

impl Projection for Pass<'_> {
    fn cluster(&self) -> &Cluster {
        self.c
    }

    fn now(&self) -> Time {
        self.now
    }

    fn used(&self, s: ShareIdx, t: TypeIdx) -> u32 {
        self.views[t.index()].used[s.index()]
    }

    fn entitlement(&self, s: ShareIdx, t: TypeIdx) -> u32 {
        self.views[t.index()].entitlement[s.index()]
    }

    fn lends(&self, s: ShareIdx) -> bool {
        self.lends[s.index()]
    }

    fn running(&self, s: ShareIdx, t: TypeIdx) -> Vec<RunKey> {
        self.projected_running(s, t)
    }
}
