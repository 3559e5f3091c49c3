//! FAIR_SHARE (`idleResourceAssignmentStrategy`), case by case: idle
//! capacity goes to borrowers by weight and recent borrowing, not to
//! whichever job waited longest; FIFO stays the default.

mod common;

use common::*;
use qm_core::config::IdleAssignment;
use qm_core::{QueueConfig, QuotaShare, Strategy, Time};

/// A lender with 4 idle instances, and borrowers with no capacity of their
/// own and these weights.
fn world(assignment: IdleAssignment, weights: &[(&str, u32)]) -> World {
    let mut shares: Vec<QuotaShare> = weights
        .iter()
        .map(|(name, w)| {
            let mut s = lab(name, 0, -1);
            s.fair_share_weight = *w;
            s
        })
        .collect();
    shares.push(share("L", Strategy::Lend, 4));
    let mut q = QueueConfig::new("q", shares);
    q.idle_assignment = assignment;
    World::with_queue(4, q)
}

fn started_by(w: &World, plan: &qm_core::Plan, prefix: &str) -> usize {
    w.started(plan)
        .iter()
        .filter(|n| n.starts_with(prefix))
        .count()
}

/// From `base` seconds, A submits 4 jobs, then B 4 (A's have waited
/// longer).
fn contend(w: &mut World, base: u64) -> qm_core::Plan {
    for i in 0..4 {
        w.at(base + i);
        w.submit(&format!("a{i}"), "A", 1, 0);
    }
    for i in 0..4 {
        w.at(base + 10 + i);
        w.submit(&format!("b{i}"), "B", 1, 0);
    }
    w.step()
}

#[test]
fn fifo_gives_idle_capacity_to_whoever_waited_longest() {
    let mut w = world(IdleAssignment::Fifo, &[("A", 1), ("B", 1)]);
    let plan = contend(&mut w, 0);
    assert_eq!(
        (started_by(&w, &plan, "a"), started_by(&w, &plan, "b")),
        (4, 0)
    );
}

#[test]
fn fair_share_splits_idle_capacity_equally_between_equal_weights() {
    let mut w = world(IdleAssignment::FairShare, &[("A", 1), ("B", 1)]);
    let plan = contend(&mut w, 0);
    assert_eq!(
        (started_by(&w, &plan, "a"), started_by(&w, &plan, "b")),
        (2, 2)
    );
    // Within a share, its own order holds: A's two oldest.
    assert!(w.started(&plan).contains(&"a0".to_string()));
    assert!(w.started(&plan).contains(&"a1".to_string()));
}

#[test]
fn fair_share_splits_by_weight() {
    let mut w = world(IdleAssignment::FairShare, &[("A", 1), ("B", 3)]);
    let plan = contend(&mut w, 0);
    assert_eq!(
        (started_by(&w, &plan, "a"), started_by(&w, &plan, "b")),
        (1, 3)
    );
}

#[test]
fn recent_borrowing_counts_against_a_share() {
    // A borrowed all 4 for a day; at the next contention B goes first.
    let mut w = world(IdleAssignment::FairShare, &[("A", 1), ("B", 1)]);
    for i in 0..4 {
        w.submit(&format!("early{i}"), "A", 1, 0);
    }
    w.step();
    w.at(24 * 3600);
    for i in 0..4 {
        w.exit(&format!("early{i}"), 0);
    }
    let a = w.c.share_idx("A").expect("A");
    let recent = w.c.fair_recent(a, w.now);
    // 4 instances for one half-life: 4 x (1 - 1/2) / ln 2.
    let expected = 4.0 * 0.5 / std::f64::consts::LN_2;
    assert!((recent - expected).abs() < 1e-3, "{recent} vs {expected}");
    // Eleven half-lives later it is (nearly) forgotten.
    assert!(w.c.fair_recent(a, Time::from_secs(24 * 3600 * 12)) < 0.01);
    // A's claim: 0 borrowed now + 2.9 recent; B's: 0. B takes three (its
    // claim grows by one with each), then A's 2.9 is below B's 3.
    let plan = contend(&mut w, 24 * 3600);
    assert_eq!(
        (started_by(&w, &plan, "a"), started_by(&w, &plan, "b")),
        (1, 3)
    );
}

#[test]
fn weights_and_the_half_life_are_validated_by_field() {
    let mut a = lab("A", 1, -1);
    a.fair_share_weight = 0;
    let mut b = lab("B", 1, -1);
    b.fair_share_weight = 101;
    let mut q = QueueConfig::new("q", vec![a, b]);
    q.fair_share_half_life_hours = 0;
    let err = qm_core::validate_queue(&q).expect_err("three problems");
    let fields: Vec<&str> = err.0.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "fairShareHalfLifeHours",
            "quotaShares[0].fairShareWeight",
            "quotaShares[1].fairShareWeight"
        ],
        "{err}"
    );
}
