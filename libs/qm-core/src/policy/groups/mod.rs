//! Share groups (departments): shares that lend to each other first, with a
//! borrow limit for the group as a whole (ADR 0017, `docs/share-groups.md`).
//!
//! | part | where |
//! |---|---|
//! | configuration | here: [`ShareGroup`] |
//! | validation | `validate.rs`: names, members, limits |
//! | state | none beyond the configuration |
//! | hooks | `hooks.rs`: the group's borrow limit (a gate on borrowing), lending within the group first (borrower order), reclaim from outside it first (victim order) |
//!
//! A group's shares lend to each other first, then outside the group, and
//! reclaim follows the same order back; the group as a whole may hold at
//! most its shares' entitlement plus its own `borrowLimit`. The rules (ADR 0017), all in the pass:
//! - **Group limit.** A job borrows only if its group's shares then hold
//!   no more of the type than the group's maximum (as a share's own
//!   `borrowLimit`, over the group's summed entitlement).
//! - **Lend within the group first.** While borrowing, a share whose group
//!   has idle entitlement of the type that its own borrowers do not use
//!   yet goes before shares that would borrow from outside their group.
//! - **Reclaim from outside first.** An owner's reclaim takes borrowed jobs
//!   of shares outside its group before those of its own group's shares.

pub mod hooks;
pub(crate) mod validate;

/// A share group (a department): shares that lend to each other first,
/// with a borrow limit for the group as a whole (this module).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ShareGroup {
    pub name: String,
    /// Percent of the group's entitlement (its shares' together, per
    /// type) its shares may borrow together, from inside the group or
    /// outside it; -1: unlimited.
    pub borrow_limit: i64,
}

impl ShareGroup {
    /// Most instances of a type the group's shares may borrow together
    /// (what they hold beyond their own entitlements), with `entitlement`
    /// the sum of theirs.
    pub fn borrow_cap(&self, entitlement: u32) -> u32 {
        if self.borrow_limit < 0 {
            return u32::MAX;
        }
        let cap = u64::from(entitlement) * self.borrow_limit as u64 / 100;
        u32::try_from(cap).unwrap_or(u32::MAX)
    }
}

/// Most share groups a queue holds.
pub const MAX_GROUPS_PER_QUEUE: usize = 20;
