//! Service environments (`qm_core::environment`): several queues on one
//! fleet, served by priority, each keeping its own shares' rules, none
//! preempting another's jobs.

mod common;

use std::collections::BTreeSet;

use common::*;
use qm_core::environment::{serve_order, share_out};
use qm_core::{JobStatus, NeverFits, PreemptionKind, Strategy, WaitReason};

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

#[test]
fn a_job_waiting_on_another_queues_instances_says_so_and_is_not_misconfigured() {
    let nodes = [("n1", 2)];
    let mut hi = World::with_nodes(&nodes, vec![lab("A", 2, -1)]);
    let mut lo = World::with_nodes(&nodes, vec![share("B", Strategy::Reserve, 2)]);
    lo.submit("l1", "B", 1, 0);
    lo.submit("l2", "B", 1, 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    hi.step();
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    lo.step();
    // Both instances are lo's. A job of hi asking for both fits the
    // environment (it is not a misconfiguration), and waits for lo's jobs.
    hi.at(10).submit("h2", "A", 2, 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    hi.step();
    assert_eq!(
        hi.wait("h2"),
        Some(WaitReason::EnvironmentCapacityHeld {
            held: 2,
            in_use: 0,
            fleet: 0
        })
    );
    let text = hi.reason("h2").render(&|j| j.to_string());
    assert!(
        text.starts_with("WAITING_FOR_ENVIRONMENT_CAPACITY: other queues"),
        "{text}"
    );
    // More than the whole environment is still a misconfiguration.
    hi.submit("h3", "A", 3, 0);
    hi.step();
    assert_eq!(
        hi.wait("h3"),
        Some(WaitReason::Misconfiguration(NeverFits::FleetMaximum {
            count: 3,
            fleet: 2
        }))
    );
    // lo's jobs end: hi, served first, takes both.
    lo.at(20).exit("l1", 0);
    lo.exit("l2", 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = hi.step();
    assert_eq!(hi.started(&plan), names(&["h2"]));
}

#[test]
fn a_queues_capacity_limit_caps_what_it_takes_of_the_environment() {
    let nodes = [("n1", 4)];
    let mut q = qm_core::QueueConfig::new("q", vec![share("A", Strategy::Reserve, 4)]);
    q.capacity_limits = vec![qm_core::CapacityLimit {
        capacity_unit: T.into(),
        max_capacity: 1,
    }];
    let mut hi = World::with_nodes(&nodes, vec![share("A", Strategy::Reserve, 4)]);
    hi.c.update_queue(q, hi.now).expect("limit set");
    let mut lo = World::with_nodes(&nodes, vec![share("B", Strategy::Reserve, 4)]);
    hi.submit("h1", "A", 1, 0);
    hi.submit("h2", "A", 1, 0);
    for i in 1..=4 {
        lo.submit(&format!("l{i}"), "B", 1, 0);
    }
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = hi.step();
    assert_eq!(hi.started(&plan), names(&["h1"]), "its limit is 1");
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = lo.step();
    assert_eq!(
        lo.started(&plan),
        names(&["l1", "l2", "l3"]),
        "the rest is the next queue's"
    );
}

#[test]
fn a_queue_names_its_environment_or_is_its_own_and_its_priority_is_bounded() {
    let mut q = qm_core::QueueConfig::new("research", vec![share("A", Strategy::Reserve, 1)]);
    let alone = qm_core::Cluster::new(q.clone(), &[]).expect("valid");
    assert_eq!(alone.environment(), "research");
    q.service_environment = Some("gpu-fleet".into());
    q.priority = 1000;
    let attached = qm_core::Cluster::new(q.clone(), &[]).expect("valid");
    assert_eq!(
        (attached.environment(), attached.priority()),
        ("gpu-fleet", 1000)
    );
    q.priority = 1001;
    q.service_environment = Some("bad name!".into());
    let err = qm_core::validate_queue(&q)
        .expect_err("invalid")
        .to_string();
    assert!(
        err.contains("priority: must be 0..=1000, got 1001"),
        "{err}"
    );
    assert!(err.contains("serviceEnvironment"), "{err}");
}

#[test]
fn the_same_registration_again_changes_nothing_where_another_queue_holds_slots() {
    let nodes = [("n1", 2)];
    let mut hi = World::with_nodes(&nodes, vec![share("A", Strategy::Reserve, 2)]);
    let mut lo = World::with_nodes(&nodes, vec![share("B", Strategy::Reserve, 2)]);
    hi.submit("h1", "A", 1, 0);
    lo.submit("l1", "B", 1, 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    hi.step();
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    lo.step();
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    // The executor registers again, unchanged (a retried registration that
    // the log stored twice).
    let (incarnation, runtimes) = {
        let n = hi.c.node(hi.node("n1"));
        (n.incarnation.clone(), n.runtimes)
    };
    let now = hi.now;
    for w in [&mut hi, &mut lo] {
        let lost =
            w.c.register_node("n1", &incarnation, &[(T, 2)], runtimes, now);
        assert!(lost.is_empty(), "{lost:?}");
    }
    assert_eq!(hi.status("h1"), JobStatus::Running);
    assert_eq!(lo.status("l1"), JobStatus::Running);
}

#[test]
fn a_queues_environment_cannot_change() {
    let mut w = World::new(2, vec![share("A", Strategy::Reserve, 2)]);
    let mut q = w.c.queue_config();
    q.service_environment = Some("gpu-fleet".into());
    let now = w.now;
    let err =
        w.c.update_queue(q.clone(), now)
            .expect_err("refused")
            .to_string();
    assert!(
        err.contains("serviceEnvironment: is gpu-fleet; a queue's service environment is set when it is made and cannot change"),
        "{err}"
    );
    // Its priority may change.
    let mut p = w.c.queue_config();
    p.priority = 7;
    w.c.update_queue(p, now).expect("priority changed");
    assert_eq!(w.c.priority(), 7);
}

#[test]
fn what_a_queue_reclaimed_for_its_own_job_is_not_taken_by_a_higher_priority_queue() {
    let nodes = [("n1", 2)];
    let mut hi = World::with_nodes(&nodes, vec![share("H", Strategy::Reserve, 2)]);
    let mut lo = World::with_nodes(
        &nodes,
        vec![share("A", Strategy::Lend, 1), lab("B", 1, 100)],
    );
    lo.submit("b1", "B", 1, 0);
    lo.submit("b2", "B", 1, 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    hi.step();
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = lo.step();
    assert_eq!(lo.started(&plan), names(&["b1", "b2"]), "b2 borrows A's");
    // hi's job waits; then A wants its instance back: b2 is reclaimed.
    hi.at(10).submit("h1", "H", 1, 0);
    lo.at(10).submit("a1", "A", 1, 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    assert!(hi.step().starts.is_empty());
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = lo.step();
    assert_eq!(
        lo.preempted(&plan),
        vec![(
            "b2".to_string(),
            PreemptionKind::CrossShare,
            "a1".to_string()
        )]
    );
    // b2 stops. hi is served first, but the instance was reclaimed for a1.
    lo.at(20).exit("b2", 0);
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = hi.step();
    assert!(plan.starts.is_empty(), "{plan:?}");
    assert!(matches!(
        hi.wait("h1"),
        Some(WaitReason::EnvironmentCapacityHeld { held: 2, .. })
    ));
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let plan = lo.step();
    assert_eq!(lo.started(&plan), names(&["a1"]));
    assert!(plan.preemptions.is_empty(), "reclaimed once");
    // a1 started: nothing is kept for it any more.
    share_env(&mut [("hi", &mut hi), ("lo", &mut lo)]);
    let t = hi.c.type_idx(T).expect("type");
    assert_eq!(hi.c.withheld_of(t), 2);
}
