//! Share groups in a pass (`crate::groups`): the group's borrow limit,
//! lending within the group first, and reclaim from outside it first.
//!
//! Decides: whether a borrowing job keeps its group within the group's
//! maximum, which borrowers go first, and which shares' borrowed jobs a
//! reclaim takes first.

use super::*;

impl Pass<'_> {
    fn group(&self, s: ShareIdx) -> Option<usize> {
        self.group_of.get(s.index()).copied().flatten()
    }

    /// Whether shares `a` and `b` are in the same group.
    pub(super) fn same_group(&self, a: ShareIdx, b: ShareIdx) -> bool {
        self.group(a).is_some() && self.group(a) == self.group(b)
    }

    /// What group `g`'s shares borrow of `t` together in the projection,
    /// and their entitlement together.
    fn group_borrowed(&self, g: usize, t: TypeIdx) -> (u32, u32) {
        let view = &self.views[t.index()];
        (0..self.c.shares.len())
            .filter(|&i| self.group_of[i] == Some(g) && !self.c.shares[i].deleted)
            .fold((0, 0), |(b, e), i| {
                let (u, ent) = (view.used[i], view.entitlement[i]);
                (b + u.saturating_sub(ent), e + ent)
            })
    }

    /// A borrowing job keeps its group within the group's borrow limit.
    pub(super) fn group_limit(
        &self,
        s: ShareIdx,
        t: TypeIdx,
        count: u32,
    ) -> Result<(), WaitReason> {
        let Some(g) = self.group(s) else {
            return Ok(());
        };
        let (borrowed, entitlement) = self.group_borrowed(g, t);
        let view = &self.views[t.index()];
        let (used, own) = (view.used[s.index()], view.entitlement[s.index()]);
        let more = newly_borrowed(used, count, own);
        let limit = self.c.groups[g].borrow_cap(entitlement);
        if borrowed + more > limit {
            return Err(WaitReason::GroupBorrowLimitReached { borrowed, limit });
        }
        Ok(())
    }

    /// Whether share `s`'s group has idle entitlement of `t`, lent by its
    /// lending shares, that the group's own borrowers do not use yet.
    pub(super) fn lends_in_group(&self, s: ShareIdx, t: TypeIdx) -> bool {
        let Some(g) = self.group(s) else {
            return false;
        };
        let view = &self.views[t.index()];
        let (mut idle, mut borrowed) = (0u32, 0u32);
        for i in 0..self.c.shares.len() {
            if self.group_of[i] != Some(g) || self.c.shares[i].deleted {
                continue;
            }
            let (u, e) = (view.used[i], view.entitlement[i]);
            if self.lends[i] {
                idle += e.saturating_sub(u);
            }
            borrowed += u.saturating_sub(e);
        }
        idle > borrowed
    }
}
