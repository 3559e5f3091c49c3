//! The runtime rule (`qm_core::runtime`): a job runs only on nodes offering
//! its runtime; one no live node can run waits saying so; in a type where
//! only some nodes offer it, it takes only their free instances and never
//! preempts; jobs that may run anywhere leave the rarer runtime's nodes free.

mod common;

use common::*;
use qm_core::PreemptionKind::CrossShare;
use qm_core::{Runtime, Runtimes, Strategy, WaitReason};

fn process() -> Runtimes {
    Runtimes::only(Runtime::Process)
}

fn container() -> Runtimes {
    Runtimes::only(Runtime::Container)
}

fn both() -> Runtimes {
    Runtimes::all()
}

fn submit_container(w: &mut World, name: &str, share: &str, count: u32, priority: u32) {
    let mut spec = w.spec(name, share, count, priority);
    spec.runtime = Runtime::Container;
    w.submit_spec(spec);
}

#[test]
fn a_job_no_executor_can_run_waits_saying_so_and_starts_when_one_registers() {
    let mut w = World::with_runtime_nodes(&[("n1", 2, process())], vec![lab("A", 2, -1)]);
    submit_container(&mut w, "img", "A", 1, 0);
    w.submit("cmd", "A", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.started(&plan),
        names(&["cmd"]),
        "the process job is not held up"
    );
    assert_eq!(
        w.wait("img"),
        Some(WaitReason::NoExecutorOffersRuntime {
            runtime: Runtime::Container,
            offered: 0
        })
    );
    let text = w.reason("img").render(&|_| String::new());
    assert!(
        text.starts_with("NO_EXECUTOR_FOR_RUNTIME") && text.contains("container runtime"),
        "{text}"
    );
    w.c.register_node("n2", "1", &[(T, 1)], container(), w.now);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["img"]));
    assert_eq!(w.placed("img"), vec![("n2".to_string(), vec![0])]);
}

#[test]
fn a_job_larger_than_what_its_runtime_offers_waits_with_the_count() {
    let mut w = World::with_runtime_nodes(
        &[("n1", 2, process()), ("n2", 1, both())],
        vec![lab("A", 3, -1)],
    );
    submit_container(&mut w, "big", "A", 2, 0);
    w.step();
    assert_eq!(
        w.wait("big"),
        Some(WaitReason::NoExecutorOffersRuntime {
            runtime: Runtime::Container,
            offered: 1
        })
    );
}

#[test]
fn where_every_node_offers_it_a_container_job_reclaims_like_any_other() {
    let mut w = World::with_runtime_nodes(
        &[("n1", 1, both()), ("n2", 1, both())],
        vec![lab("B", 1, -1), share("L", Strategy::Lend, 1)],
    );
    w.submit("b1", "B", 1, 0);
    w.submit("b2", "B", 1, 0);
    w.step();
    w.at(5);
    submit_container(&mut w, "l1", "L", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("b2".into(), CrossShare, "l1".into())]
    );
    w.exit("b2", 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["l1"]));
}

#[test]
fn jobs_that_may_run_anywhere_leave_the_rarer_runtime_free() {
    let mut w = World::with_runtime_nodes(
        &[("gpu-a", 1, both()), ("gpu-b", 1, process())],
        vec![lab("A", 2, -1)],
    );
    // Best fit alone would pick gpu-a (ties by name); the process job
    // prefers the node with no runtime it does not need.
    w.submit("cmd", "A", 1, 0);
    w.step();
    assert_eq!(w.placed("cmd"), vec![("gpu-b".to_string(), vec![0])]);
    submit_container(&mut w, "img", "A", 1, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["img"]));
    assert_eq!(w.placed("img"), vec![("gpu-a".to_string(), vec![0])]);
}

/// A mixed type: `c1` runs images and host commands, `p1` host commands
/// only. L lends its one instance; B runs two jobs, one of them on it.
fn b_borrows_l_s_instance() -> World {
    let mut w = World::with_runtime_nodes(
        &[("c1", 1, both()), ("p1", 1, process())],
        vec![lab("B", 1, -1), share("L", Strategy::Lend, 1)],
    );
    w.submit("b1", "B", 1, 0);
    w.submit("b2", "B", 1, 0);
    w.step();
    w
}

#[test]
fn in_a_mixed_type_a_container_job_waits_for_room_on_its_nodes_and_preempts_nobody_for_it() {
    let mut w = b_borrows_l_s_instance();
    let on_c1: Vec<String> = ["b1", "b2"]
        .into_iter()
        .filter(|j| w.placed(j)[0].0 == "c1")
        .map(str::to_string)
        .collect();
    assert_eq!(on_c1.len(), 1);
    w.at(5);
    submit_container(&mut w, "img", "L", 1, 0);
    let plan = w.step();
    assert!(
        plan.preemptions.is_empty(),
        "preempting could free p1, which the job cannot use: {:?}",
        w.preempted(&plan)
    );
    assert_eq!(
        w.wait("img"),
        Some(WaitReason::RuntimeInstancesBusy {
            runtime: Runtime::Container,
            free: 0
        })
    );
    // Once the container node is free, the container job starts there.
    let job_on_c1 = on_c1[0].clone();
    w.exit(&job_on_c1, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["img"]));
    assert_eq!(w.placed("img"), vec![("c1".to_string(), vec![0])]);
}

#[test]
fn a_job_behind_one_waiting_for_its_runtime_still_reclaims() {
    let mut w = b_borrows_l_s_instance();
    w.at(5);
    submit_container(&mut w, "img", "L", 1, 0);
    w.submit("cmd", "L", 1, 0);
    let plan = w.step();
    assert_eq!(plan.preemptions.len(), 1, "{:?}", w.preempted(&plan));
    assert_eq!(self_name(&w, &plan), "cmd");
    assert!(matches!(
        w.wait("img"),
        Some(WaitReason::RuntimeInstancesBusy { .. })
    ));
}

fn self_name(w: &World, plan: &qm_core::Plan) -> String {
    w.name(plan.preemptions[0].for_job)
}

#[test]
fn two_container_jobs_are_never_promised_the_same_free_instance() {
    let mut w = World::with_runtime_nodes(
        &[("c1", 1, both()), ("p1", 2, process())],
        vec![lab("A", 3, -1)],
    );
    submit_container(&mut w, "i1", "A", 1, 0);
    submit_container(&mut w, "i2", "A", 1, 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["i1"]));
    assert_eq!(
        w.wait("i2"),
        Some(WaitReason::RuntimeInstancesBusy {
            runtime: Runtime::Container,
            free: 0
        })
    );
}

#[test]
fn in_a_mixed_type_a_job_with_room_on_its_nodes_still_reclaims_its_shares_lent_capacity() {
    // The container-only node holds B's borrowed job; L's host job has room
    // on the node that runs both, but the quota says B borrowed L's share:
    // B's job is reclaimed for it, and it starts on its own node once the
    // victim stops.
    let mut w = World::with_runtime_nodes(
        &[("both", 1, both()), ("images", 1, container())],
        vec![
            lab("B", 0, -1),
            share("L", Strategy::Lend, 1),
            share("R", Strategy::Reserve, 1),
        ],
    );
    submit_container(&mut w, "b", "B", 1, 0);
    w.step();
    assert_eq!(w.placed("b"), vec![("images".to_string(), vec![0])]);
    w.at(5).submit("l", "L", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("b".into(), CrossShare, "l".into())]
    );
    w.exit("b", 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["l"]));
    assert_eq!(w.placed("l"), vec![("both".to_string(), vec![0])]);
}
