//! Service environments (`qm_core::environment`): several queues on one
//! fleet, served by priority, each keeping its own shares' rules, none
//! preempting another's jobs.

mod common;

use std::collections::BTreeSet;

use common::*;
use qm_core::environment::{serve_order, share_out};
use qm_core::{JobStatus, PreemptionKind, Strategy};

/// The environment's queues see what the others hold (before a turn).
fn share_env(queues: &mut [(&str, &mut World)]) -> Vec<String> {
    let now = queues[0].1.now;
    let mut clusters: Vec<(&str, &mut qm_core::Cluster)> =
        queues.iter_mut().map(|(n, w)| (*n, &mut w.c)).collect();
    share_out(&mut clusters, now).expect("shared out")
}

fn slots(w: &World, name: &str) -> BTreeSet<u32> {
    w.placed(name).into_iter().flat_map(|(_, s)| s).collect()
}

#[test]
fn queues_are_served_by_priority_then_name() {
    assert_eq!(
        serve_order(&[("b", 1), ("a", 1), ("c", 500), ("d", 0)]),
        ["c", "a", "b", "d"]
    );
}

#[test]
fn the_higher_priority_queue_takes_free_capacity_first_and_the_next_what_it_leaves() {
    let nodes = [("n1", 2)];
    let mut hi = World::with_nodes(&nodes, vec![share("A", Strategy::Reserve, 2)]);
    let mut lo = World::with_nodes(&nodes, vec![share("B", Strategy::Reserve, 2)]);
    hi.submit("h1", "A", 1, 0);
    lo.submit("l1", "B", 1, 0);
    lo.submit("l2", "B", 1, 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = hi.step();
    assert_eq!(hi.started(&plan), names(&["h1"]));
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = lo.step();
    assert_eq!(lo.started(&plan), names(&["l1"]), "one instance was left");
    assert_eq!(lo.status("l2"), JobStatus::Runnable);
    assert!(slots(&hi, "h1").is_disjoint(&slots(&lo, "l1")));
    // Shared out again, each sees only what it may use.
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let t = hi.c.type_idx(T).expect("type");
    assert_eq!(hi.c.node(hi.node("n1")).offered(t), 1);
    assert_eq!(lo.c.node(lo.node("n1")).offered(t), 1);
}

#[test]
fn a_queue_never_preempts_another_queues_job_and_gets_the_next_free_instance_first() {
    let nodes = [("n1", 2)];
    let mut hi = World::with_nodes(&nodes, vec![share("A", Strategy::Reserve, 2)]);
    let mut lo = World::with_nodes(&nodes, vec![share("B", Strategy::Reserve, 2)]);
    lo.submit("l1", "B", 1, 0);
    lo.submit("l2", "B", 1, 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    hi.step();
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = lo.step();
    assert_eq!(
        lo.started(&plan),
        names(&["l1", "l2"]),
        "hi had nothing to run"
    );

    // hi's job, within its share's entitlement, waits: no queue stops
    // another's job, whatever their priorities.
    hi.at(10).submit("h1", "A", 1, 9);
    lo.at(10).submit("l3", "B", 1, 9);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = hi.step();
    assert!(
        plan.starts.is_empty() && plan.preemptions.is_empty(),
        "{plan:?}"
    );
    assert_eq!(hi.status("h1"), JobStatus::Runnable);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    assert!(lo.step().starts.is_empty());

    // An instance frees: the higher-priority queue, served first, takes it.
    lo.at(20).exit("l1", 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = hi.step();
    assert_eq!(hi.started(&plan), names(&["h1"]));
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    assert!(lo.step().starts.is_empty(), "l3 waits for the next one");
    assert_eq!(lo.status("l2"), JobStatus::Running);
}

#[test]
fn within_a_queue_lending_and_reclaim_work_over_what_the_queue_may_use() {
    let nodes = [("n1", 3)];
    let mut hi = World::with_nodes(
        &nodes,
        vec![share("A", Strategy::Lend, 1), lab("B", 1, 200)],
    );
    let mut lo = World::with_nodes(&nodes, vec![share("C", Strategy::Reserve, 3)]);
    lo.submit("l1", "C", 1, 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    hi.step();
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = lo.step();
    assert_eq!(lo.started(&plan), names(&["l1"]));

    // Two instances are hi's to use: B runs on its own and borrows A's.
    hi.at(10).submit("b1", "B", 1, 0);
    hi.submit("b2", "B", 1, 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = hi.step();
    assert_eq!(hi.started(&plan), names(&["b1", "b2"]));
    // A wants its own back: reclaimed inside hi, lo's job untouched.
    hi.at(20).submit("a1", "A", 1, 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = hi.step();
    assert_eq!(plan.preemptions.len(), 1, "{plan:?}");
    assert_eq!(plan.preemptions[0].kind, PreemptionKind::CrossShare);
    assert_eq!(lo.status("l1"), JobStatus::Running);
}

#[test]
fn a_queue_alone_in_its_environment_withholds_nothing() {
    let mut w = World::with_nodes(&[("n1", 2)], vec![share("A", Strategy::Reserve, 2)]);
    w.submit("a1", "A", 1, 0);
    w.step();
    assert!(share_env(&mut [("solo", &mut w)]).is_empty());
    let t = w.c.type_idx(T).expect("type");
    assert_eq!(w.c.node(w.node("n1")).offered(t), 2);
}

#[test]
fn a_slot_a_queue_holds_is_never_withheld_from_it() {
    let mut w = World::with_nodes(&[("n1", 2)], vec![share("A", Strategy::Reserve, 2)]);
    w.submit("a1", "A", 1, 0);
    w.step();
    let mine = slots(&w, "a1");
    let now = w.now;
    let err = w.c.withhold("n1", T, &mine, now).expect_err("held here");
    assert!(err.contains("held by a job of this queue"), "{err}");
    // Nothing changed: the other slot is still free.
    let t = w.c.type_idx(T).expect("type");
    assert_eq!(w.c.node(w.node("n1")).free_count(t), 1);
}
