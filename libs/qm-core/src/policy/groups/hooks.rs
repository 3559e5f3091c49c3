//! Share groups in a pass (`crate::policy::groups`): the group's borrow
//! limit, lending within the group first, and reclaim from outside it
//! first.
//!
//! Hooks: [`Groups::limit`] (a gate on borrowing: the group stays within
//! its maximum), [`Groups::lends_within`] (a borrower whose group has idle
//! entitlement goes first), [`Groups::same`] (reclaim takes from outside
//! the owner's group first).

use crate::cluster::Cluster;
use crate::ids::{ShareIdx, TypeIdx};
use crate::index::newly_borrowed;
use crate::policy::view::Projection;
use crate::reason::WaitReason;

/// The groups of one pass.
#[derive(Debug, Default)]
pub struct Groups {
    /// Per share slot: the index of its group; empty when the queue has
    /// none.
    group_of: Vec<Option<usize>>,
}

impl Groups {
    pub fn new(c: &Cluster) -> Groups {
        if c.groups.is_empty() {
            return Groups::default();
        }
        let group_of = c
            .shares
            .iter()
            .map(|slot| {
                let name = slot.config.group.as_deref()?;
                c.groups.iter().position(|g| g.name == name)
            })
            .collect();
        Groups { group_of }
    }

    /// Whether the queue has groups.
    pub fn any(&self) -> bool {
        !self.group_of.is_empty()
    }

    fn group(&self, s: ShareIdx) -> Option<usize> {
        self.group_of.get(s.index()).copied().flatten()
    }

    /// Whether shares `a` and `b` are in the same group.
    pub fn same(&self, a: ShareIdx, b: ShareIdx) -> bool {
        self.group(a).is_some() && self.group(a) == self.group(b)
    }

    /// Group `g`'s live shares.
    fn members<'a>(&'a self, c: &'a Cluster, g: usize) -> impl Iterator<Item = ShareIdx> + 'a {
        (0..c.shares.len())
            .filter(move |&i| self.group_of[i] == Some(g) && !c.shares[i].deleted)
            .map(|i| ShareIdx(i as u16))
    }

    /// A borrowing job keeps its group within the group's borrow limit.
    pub fn limit(
        &self,
        p: &impl Projection,
        s: ShareIdx,
        t: TypeIdx,
        count: u32,
    ) -> Result<(), WaitReason> {
        let Some(g) = self.group(s) else {
            return Ok(());
        };
        let c = p.cluster();
        let (borrowed, entitlement) = self.members(c, g).fold((0, 0), |(b, e), m| {
            let (u, ent) = (p.used(m, t), p.entitlement(m, t));
            (b + u.saturating_sub(ent), e + ent)
        });
        let more = newly_borrowed(p.used(s, t), count, p.entitlement(s, t));
        let limit = c.groups[g].borrow_cap(entitlement);
        if borrowed + more > limit {
            return Err(WaitReason::GroupBorrowLimitReached { borrowed, limit });
        }
        Ok(())
    }

    /// Whether share `s`'s group has idle entitlement of `t`, lent by its
    /// lending shares, that the group's own borrowers do not use yet.
    pub fn lends_within(&self, p: &impl Projection, s: ShareIdx, t: TypeIdx) -> bool {
        let Some(g) = self.group(s) else {
            return false;
        };
        let (mut idle, mut borrowed) = (0u32, 0u32);
        for m in self.members(p.cluster(), g) {
            let (u, e) = (p.used(m, t), p.entitlement(m, t));
            if p.lends(m) {
                idle += e.saturating_sub(u);
            }
            borrowed += u.saturating_sub(e);
        }
        idle > borrowed
    }
}
