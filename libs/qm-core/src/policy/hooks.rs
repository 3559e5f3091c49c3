//! The registry: the hooks of every policy that keeps per-pass state,
//! built once at the start of a pass. The pass owns one [`Hooks`] and calls
//! each policy at its phase (`pass/mod.rs` lists the phases); stateless
//! hooks (`protections`, `classes`, `drills`) are plain functions the
//! phases call directly.

use crate::cluster::Cluster;
use crate::time::Time;

use super::budgets::hooks::Budgets;
use super::fair_share::hooks::FairShare;
use super::groups::hooks::Groups;
use super::runtimes::hooks::RuntimeRule;

/// The per-pass state of the policies' hooks.
#[derive(Debug)]
pub struct Hooks {
    pub budgets: Budgets,
    pub fair_share: FairShare,
    pub groups: Groups,
    pub runtimes: RuntimeRule,
}

impl Hooks {
    pub fn new(c: &Cluster, now: Time) -> Hooks {
        Hooks {
            budgets: Budgets::new(c, now),
            fair_share: FairShare::new(c, now),
            groups: Groups::new(c),
            runtimes: RuntimeRule::default(),
        }
    }

    /// Whether a policy couples the types or time, so that a pass may skip
    /// no type as settled: a borrowing budget runs out and refills with no
    /// event of a type's own, and FAIR_SHARE's claims change as time decays
    /// recent borrowing.
    pub fn couple_types(&self) -> bool {
        !self.budgets.is_empty() || self.fair_share.on()
    }
}
