//! Protections: a share's anti-thrashing and resume-safety settings
//! (`docs/protections.md`).
//!
//! | part | where |
//! |---|---|
//! | configuration | here: [`Protections`] |
//! | validation | `crate::validate` (the share's fields) |
//! | state | when a type was last reclaimed from a share (`ShareType::reclaimed_at`) |
//! | hooks | `hooks.rs`: the re-borrow cool-down (a gate on borrowing), the minimum run before preemption (victims) |

pub mod hooks;

/// Anti-thrashing and resume-safety settings of a share. All are off by default;
/// `docs/protections.md` explains each trade-off.
#[derive(Clone, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct Protections {
    /// A running job of this share cannot be preempted (by reclaim or in-share)
    /// before it has run this long. Trades owner wait time for less lost work.
    pub min_runtime_before_preemption_secs: u64,
    /// After capacity of a type is reclaimed from this share, it does not borrow
    /// that type again for this long. Trades borrowing for fewer repeated
    /// preemptions.
    pub reborrow_cooldown_secs: u64,
    /// A job that does not checkpoint never runs on borrowed capacity, where a
    /// preemption would throw all its work away.
    pub borrow_requires_checkpoint: bool,
}
