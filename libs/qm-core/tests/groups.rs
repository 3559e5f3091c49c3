//! Share groups (`groups.rs`), case by case: lending within the group
//! first, the group's borrow limit, reclaim from outside the group first,
//! and validation.

mod common;

use common::*;
use qm_core::config::ShareGroup;
use qm_core::{QueueConfig, QuotaShare, Strategy, WaitReason};

fn member(mut s: QuotaShare, group: &str) -> QuotaShare {
    s.group = Some(group.into());
    s
}

fn group(name: &str, borrow_limit: i64) -> ShareGroup {
    ShareGroup {
        name: name.into(),
        borrow_limit,
    }
}

/// A (in `dept`) and C (outside) borrow; L (in `dept`) lends 2; a fleet of 2.
fn dept(grouped: bool) -> World {
    let (a, l) = (lab("A", 0, -1), share("L", Strategy::Lend, 2));
    let shares = if grouped {
        vec![member(a, "dept"), lab("C", 0, -1), member(l, "dept")]
    } else {
        vec![a, lab("C", 0, -1), l]
    };
    let mut q = QueueConfig::new("q", shares);
    if grouped {
        q.groups = vec![group("dept", -1)];
    }
    World::with_queue(2, q)
}

#[test]
fn a_group_lends_to_its_own_shares_first() {
    for (grouped, expected) in [(false, "c"), (true, "a")] {
        let mut w = dept(grouped);
        w.at(0);
        w.submit("c", "C", 2, 0);
        w.at(1);
        w.submit("a", "A", 2, 0);
        let plan = w.step();
        assert_eq!(w.started(&plan), vec![expected], "grouped: {grouped}");
    }
}

#[test]
fn reclaim_takes_from_outside_the_group_first() {
    // Without groups the newest borrowed job goes (A's); with them, C's,
    // outside the lender's group.
    for (grouped, victim) in [(false, "a"), (true, "c")] {
        let mut w = dept(grouped);
        w.submit("c", "C", 1, 0);
        w.at(1);
        w.submit("a", "A", 1, 0);
        let plan = w.step();
        assert_eq!(plan.starts.len(), 2);
        w.at(10);
        w.submit("owner", "L", 1, 0);
        let plan = w.step();
        let preempted: Vec<String> = w.preempted(&plan).into_iter().map(|p| p.0).collect();
        assert_eq!(preempted, vec![victim.to_string()], "grouped: {grouped}");
    }
}

#[test]
fn the_group_borrow_limit_bounds_its_shares_together() {
    // A and B own 1 each in `lab`, which may borrow 1 together (50% of
    // 2); L lends 4.
    let shares = vec![
        member(lab("A", 1, -1), "lab"),
        member(lab("B", 1, -1), "lab"),
        share("L", Strategy::Lend, 4),
    ];
    let mut q = QueueConfig::new("q", shares);
    q.groups = vec![group("lab", 50)];
    let mut w = World::with_queue(6, q);
    w.submit("a", "A", 2, 0);
    w.submit("b", "B", 2, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["a"]);
    assert_eq!(
        w.wait("b"),
        Some(WaitReason::GroupBorrowLimitReached {
            borrowed: 1,
            limit: 1
        })
    );
    let text = w.reason("b").render(&|j| j.to_string());
    assert!(text.starts_with("GROUP_BORROW_LIMIT_REACHED"), "{text}");
    // Within its own entitlement B is not held back by the group.
    w.submit("b1", "B", 1, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["b1"]);
}

#[test]
fn groups_are_validated_by_field() {
    let shares = vec![
        member(lab("A", 1, -1), "nowhere"),
        member(lab("B", 1, -1), "dup"),
    ];
    let mut q = QueueConfig::new("q", shares);
    q.groups = vec![group("dup", 20_000), group("dup", 0), group("empty", 0)];
    let err = qm_core::validate_queue(&q).expect_err("problems");
    let fields: Vec<&str> = err.0.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "shareGroups[0].borrowLimit",
            "shareGroups[1].shareGroupName",
            "shareGroups[2].shareGroupName",
            "quotaShares[0].shareGroup",
        ],
        "{err}"
    );
    assert!(err.to_string().contains("has no share"), "{err}");
}

#[test]
fn a_dry_run_shows_what_a_group_would_change() {
    let shares = vec![lab("A", 1, -1), share("L", Strategy::Lend, 3)];
    let q = QueueConfig::new("q", shares);
    let mut w = World::with_queue(4, q.clone());
    w.submit("big", "A", 3, 0);
    let id = w.id("big");
    // As it is, the next pass starts it; in a group held to its
    // entitlement, it would wait, saying why.
    let as_is = w.c.dry_run_queue(q.clone(), w.now).expect("valid");
    assert!(as_is.next_pass.starts.iter().any(|s| s.job == id));
    let mut grouped = q.clone();
    grouped.shares[0].group = Some("lab".into());
    grouped.groups = vec![group("lab", 0)];
    let dry = w.c.dry_run_queue(grouped.clone(), w.now).expect("valid");
    assert!(dry.next_pass.starts.is_empty(), "{:?}", dry.next_pass);
    assert!(dry.next_pass.reasons.contains(&(
        id,
        WaitReason::GroupBorrowLimitReached {
            borrowed: 0,
            limit: 0
        }
    )));
    // A group the queue does not define: refused, by field.
    grouped.groups.clear();
    let err = w.c.dry_run_queue(grouped, w.now).expect_err("undefined");
    assert_eq!(err.0[0].field, "quotaShares[0].shareGroup");
    // The dry run changed nothing.
    assert_eq!(w.c.queue_config(), q);
}
