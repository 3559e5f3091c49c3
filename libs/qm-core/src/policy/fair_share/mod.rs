//! FAIR_SHARE (`idleResourceAssignmentStrategy`): lendable capacity goes to
//! the borrowing share with the least borrowed capacity, now and recently,
//! per unit of `fairShareWeight` (ADR 0016, `docs/fair-share.md`).
//!
//! | part | where |
//! |---|---|
//! | configuration | here: [`IdleAssignment`], the weight and half-life bounds |
//! | validation | `crate::validate` (the queue's fields) |
//! | state | the decayed recent borrowing in the usage ledger (`cluster/budget.rs` accrues it) |
//! | hooks | `hooks.rs`: each share's claim, which borrower goes first |
//! | phase | the pass's rebalance (`pass/rebalance.rs`) |

pub mod hooks;

/// How lendable capacity goes to borrowers (`idleResourceAssignmentStrategy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum IdleAssignment {
    /// To whichever waiting job became RUNNABLE first (AWS's behaviour).
    #[default]
    Fifo,
    /// To the borrowing share with the least borrowed capacity, now and
    /// recently, per unit of `fairShareWeight` (`policy::fair_share`).
    FairShare,
}

/// Default `fairShareHalfLifeHours`: recent borrowing counts, halving daily.
pub const DEFAULT_FAIR_SHARE_HALF_LIFE_HOURS: u64 = 24;
/// Highest `fairShareWeight` (as HyperPod's fair-share weight).
pub const MAX_FAIR_SHARE_WEIGHT: u32 = 100;
