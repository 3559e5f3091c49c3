//! FAIR_SHARE in a pass (`crate::policy::fair_share`): each borrowing
//! share's claim on idle capacity.
//!
//! Hooks: [`FairShare::claim`] (a key for the borrowers' order, and for
//! the pass's rebalance phase), [`FairShare::first`] (which of two
//! borrowers goes first).

use std::cmp::Ordering;

use crate::cluster::Cluster;
use crate::config::IdleAssignment;
use crate::ids::{ShareIdx, TypeIdx};
use crate::policy::view::Projection;
use crate::time::Time;

/// The claims of one pass.
#[derive(Debug, Default)]
pub struct FairShare {
    /// Per share slot: its recent borrowing (instances on average over a
    /// half-life); empty under FIFO.
    recent: Vec<f64>,
}

impl FairShare {
    pub fn new(c: &Cluster, now: Time) -> FairShare {
        if c.idle_assignment != IdleAssignment::FairShare {
            return FairShare::default();
        }
        let recent = (0..c.shares.len())
            .map(|i| c.fair_recent(ShareIdx(i as u16), now))
            .collect();
        FairShare { recent }
    }

    /// Whether the queue assigns idle capacity by FAIR_SHARE.
    pub fn on(&self) -> bool {
        !self.recent.is_empty()
    }

    /// A share's claim on idle capacity (lower first): what it borrows of
    /// `t` now in the pass's projection plus its recent borrowing, per unit
    /// of `fairShareWeight`.
    pub fn claim(&self, p: &impl Projection, s: ShareIdx, t: TypeIdx) -> f64 {
        let borrowed = p.used(s, t).saturating_sub(p.entitlement(s, t));
        let weight = p.cluster().shares[s.index()]
            .config
            .fair_share_weight
            .max(1);
        (f64::from(borrowed) + self.recent[s.index()]) / f64::from(weight)
    }

    /// Which of two borrowing shares goes first (`Equal`: FAIR_SHARE has no
    /// say, or they tie).
    pub fn first(&self, p: &impl Projection, a: ShareIdx, b: ShareIdx, t: TypeIdx) -> Ordering {
        if !self.on() || a == b {
            return Ordering::Equal;
        }
        self.claim(p, a, t).total_cmp(&self.claim(p, b, t))
    }
}
