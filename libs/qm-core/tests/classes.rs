//! Workload classes, rule by rule, and with reclaim, in-share preemption,
//! limits and checkpoint-then-preempt (`class.rs`). Every pass is checked
//! against the core's invariants by `World::step`.

mod common;

use common::*;
use qm_core::PreemptionKind::{CrossShare, InShare};
use qm_core::{
    BorrowBar, JobError, JobStatus, QueueConfig, QuotaShare, Strategy, WaitReason, WorkloadClass,
};

/// A team's share with three classes: exploratory (0..=99), release
/// (100..=199, preemptible in-share only by urgent) and urgent
/// (200..=299); in-share preemption on.
fn team(entitlement: i64) -> QuotaShare {
    let mut s = lab("A", entitlement, -1);
    s.in_share_preemption = true;
    let mut release = WorkloadClass::new("release", 100, 199);
    release.preemptible_by = Some(vec!["urgent".into()]);
    s.classes = vec![
        WorkloadClass::new("exploratory", 0, 99),
        release,
        WorkloadClass::new("urgent", 200, 299),
    ];
    s
}

fn submit_class(w: &mut World, name: &str, share: &str, count: u32, class: &str, prio: u32) {
    let mut spec = w.spec(name, share, count, prio);
    spec.class = Some(class.into());
    w.submit_spec(spec);
}

fn class_of(w: &World, name: &str) -> Option<String> {
    w.c.job(w.id(name)).expect("job").spec.class.clone()
}

#[test]
fn a_job_gets_its_shares_default_class_and_must_stay_in_its_band() {
    let mut w = World::new(2, vec![team(2)]);
    w.submit("plain", "A", 1, 5);
    assert_eq!(class_of(&w, "plain").as_deref(), Some("exploratory"));
    let mut spec = w.spec("high", "A", 1, 150);
    spec.class = Some("exploratory".into());
    let err = w.c.submit(spec, w.now).expect_err("outside the band");
    assert!(
        err.to_string().contains(
            "schedulingPriority: must lie in class \"exploratory\"'s band 0..=99, got 150"
        ),
        "{err}"
    );
    let mut spec = w.spec("who", "A", 1, 0);
    spec.class = Some("research".into());
    let err = w.c.submit(spec, w.now).expect_err("unknown class");
    assert!(
        err.to_string().contains(
            "quota share \"A\" has no class \"research\" (it declares exploratory, release, urgent)"
        ),
        "{err}"
    );
    // An update may not leave the band either, and changes nothing.
    let id = w.id("plain");
    let err = w.c.update_priority(id, 100).expect_err("outside the band");
    assert!(matches!(err, JobError::Invalid(_)), "{err}");
    assert_eq!(w.c.job(id).expect("job").spec.priority, 5);
    w.c.update_priority(id, 99).expect("inside the band");
}

#[test]
fn urgent_outranks_exploratory_without_anyone_raising_numbers() {
    let mut w = World::new(1, vec![team(1)]);
    submit_class(&mut w, "explore", "A", 1, "exploratory", 99);
    w.step();
    w.at(1);
    submit_class(&mut w, "incident", "A", 1, "urgent", 200);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("explore".into(), InShare, "incident".into())]
    );
}

#[test]
fn preemptible_by_keeps_release_work_from_all_but_urgent() {
    let mut w = World::new(1, vec![team(1)]);
    submit_class(&mut w, "rc", "A", 1, "release", 100);
    w.step();
    // Another release job of higher priority may not preempt it: only
    // urgent may.
    w.at(1);
    submit_class(&mut w, "rc2", "A", 1, "release", 150);
    let plan = w.step();
    assert!(plan.preemptions.is_empty(), "{:?}", w.preempted(&plan));
    assert_eq!(w.status("rc2"), JobStatus::Runnable);
    w.at(2);
    submit_class(&mut w, "page", "A", 1, "urgent", 250);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("rc".into(), InShare, "page".into())]
    );
}

#[test]
fn a_class_that_never_borrows_waits_for_its_own_capacity() {
    let mut s = team(1);
    s.classes[0].may_borrow = false;
    let mut w = World::new(3, vec![s, share("L", Strategy::Lend, 2)]);
    submit_class(&mut w, "e1", "A", 1, "exploratory", 0);
    submit_class(&mut w, "e2", "A", 1, "exploratory", 0);
    submit_class(&mut w, "r1", "A", 1, "release", 100);
    let plan = w.step();
    // r1 (release) borrows; exploratory fills the share's own instance.
    assert_eq!(w.started(&plan), names(&["r1", "e1"]));
    assert_eq!(w.wait("e2"), Some(WaitReason::ClassMayNotBorrow));
    assert!(!w.c.is_on_borrowed_capacity(w.id("e1")));
    assert!(
        w.c.is_on_borrowed_capacity(w.id("r1")),
        "the job that may borrow is the borrowed one"
    );
    // Wider than the share's own capacity: it could never run.
    let mut spec = w.spec("wide", "A", 2, 0);
    spec.class = Some("exploratory".into());
    let err = w.c.submit(spec, w.now).expect_err("never fits");
    assert!(
        err.to_string().contains("workload class never borrows"),
        "{err}"
    );
}

#[test]
fn reclaim_takes_the_borrowing_class_and_spares_the_one_that_may_not_borrow() {
    let mut s = team(1);
    s.classes[0].may_borrow = false;
    let mut w = World::new(2, vec![s, share("L", Strategy::Lend, 1)]);
    // release has the higher priority, yet it is the one on borrowed
    // capacity: exploratory may not be.
    submit_class(&mut w, "r", "A", 1, "release", 100);
    submit_class(&mut w, "e", "A", 1, "exploratory", 0);
    let plan = w.step();
    assert_eq!(plan.starts.len(), 2);
    w.at(5).submit("owner", "L", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("r".into(), CrossShare, "owner".into())]
    );
}

#[test]
fn a_class_minimum_runtime_protects_only_its_jobs() {
    let mut s = team(0);
    s.classes[0].min_runtime_before_preemption_secs = Some(60);
    let mut w = World::new(2, vec![s, share("L", Strategy::Lend, 2)]);
    submit_class(&mut w, "e", "A", 1, "exploratory", 0);
    submit_class(&mut w, "r", "A", 1, "release", 100);
    w.step();
    w.at(10).submit("l1", "L", 1, 0);
    w.submit("l2", "L", 1, 0);
    let plan = w.step();
    // Only the release job can be reclaimed before a minute has passed.
    assert_eq!(
        w.preempted(&plan),
        vec![("r".into(), CrossShare, "l1".into())]
    );
    let stop = w.id("r");
    w.c.attempt_ended(stop, 1, None, w.now).expect("stopped");
    w.step();
    assert!(matches!(
        w.wait("l2"),
        Some(WaitReason::VictimsProtectedUntil(_))
    ));
    w.at(60);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("e".into(), CrossShare, "l2".into())]
    );
}

#[test]
fn a_class_can_ask_its_jobs_to_checkpoint_before_they_are_stopped() {
    let mut s = team(0);
    s.classes[1].checkpoint_before_preempt_secs = Some(30);
    let mut w = World::new(2, vec![s, share("L", Strategy::Lend, 2)]);
    submit_class(&mut w, "e", "A", 1, "exploratory", 0);
    submit_class(&mut w, "r", "A", 1, "release", 100);
    w.step();
    w.at(10).submit("l1", "L", 1, 0);
    w.submit("l2", "L", 1, 0);
    w.step();
    let r = w.c.job(w.id("r")).expect("r");
    let e = w.c.job(w.id("e")).expect("e");
    assert!(r.checkpoint_first.is_some(), "release checkpoints first");
    assert!(e.checkpoint_first.is_none(), "exploratory stops at once");
}

#[test]
fn requires_checkpoint_refuses_a_job_without_one() {
    let mut s = team(1);
    s.classes[1].requires_checkpoint = true;
    let mut w = World::new(1, vec![s]);
    let mut spec = w.spec("r", "A", 1, 100);
    spec.class = Some("release".into());
    spec.checkpoints = false;
    let err = w.c.submit(spec, w.now).expect_err("needs a checkpoint");
    assert!(
        err.to_string().contains(
            "checkpointConfig: is required: class \"release\" runs only jobs that checkpoint"
        ),
        "{err}"
    );
}

fn proof_world() -> World {
    let mut s = team(1);
    s.classes[1].requires_checkpoint = true;
    s.classes[1].borrow_requires_resume_proof = true;
    World::new(3, vec![s, share("L", Strategy::Lend, 2)])
}

fn submit_release(w: &mut World, name: &str, artifact: &str) {
    let mut spec = w.spec(name, "A", 1, 100);
    spec.class = Some("release".into());
    spec.artifact = Some(artifact.into());
    w.submit_spec(spec);
}

#[test]
fn a_class_that_needs_a_resume_proof_borrows_once_a_drill_passed_for_that_image() {
    let mut w = proof_world();
    submit_release(&mut w, "r1", "image:trainer@sha256:aa");
    submit_release(&mut w, "r2", "image:trainer@sha256:aa");
    let plan = w.step();
    assert_eq!(
        w.started(&plan),
        names(&["r1"]),
        "r1 runs on the share's own capacity"
    );
    assert_eq!(w.wait("r2"), Some(WaitReason::ResumeNotVerified));
    assert_eq!(
        w.c.job(w.id("r2")).expect("r2").borrow_bar,
        Some(BorrowBar::ResumeNotVerified)
    );
    // A drill passes for that image: the waiting job may borrow now.
    w.at(1);
    assert!(w
        .c
        .record_resume_drill("A", "release", "image:trainer@sha256:aa", true));
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["r2"]));
    assert!(w.c.is_on_borrowed_capacity(w.id("r2")));
    // A changed image has no proof: its job may run on the share's own
    // instance (it is classified within quota first, so the proven jobs
    // are the borrowed ones), but never borrow.
    submit_release(&mut w, "r3", "image:trainer@sha256:bb");
    submit_release(&mut w, "r4", "image:trainer@sha256:bb");
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["r3"]));
    assert!(!w.c.is_on_borrowed_capacity(w.id("r3")));
    assert!(w.c.is_on_borrowed_capacity(w.id("r1")));
    assert_eq!(w.wait("r4"), Some(WaitReason::ResumeNotVerified));
    // A later failed drill withdraws the proof; running jobs keep running.
    w.at(2);
    assert!(w
        .c
        .record_resume_drill("A", "release", "image:trainer@sha256:aa", false));
    assert!(!w
        .c
        .record_resume_drill("A", "release", "image:trainer@sha256:aa", false));
    assert_eq!(
        w.c.job(w.id("r2")).expect("r2").borrow_bar,
        Some(BorrowBar::ResumeNotVerified)
    );
    w.step();
    assert_eq!(w.status("r2"), JobStatus::Running);
    // The proof is per class: the same image in another class proves nothing.
    assert!(!w.c.resume_proven("A", "urgent", "image:trainer@sha256:aa"));
}

#[test]
fn old_configurations_keep_their_meaning_the_share_protections_are_the_default_class() {
    // No classes: the implicit class, with the share's protections.
    let mut s = lab("A", 0, -1);
    s.protections.min_runtime_before_preemption_secs = 60;
    let mut w = World::new(1, vec![s, share("L", Strategy::Lend, 1)]);
    w.submit("a", "A", 1, 7);
    assert_eq!(class_of(&w, "a"), None);
    w.step();
    w.at(10).submit("l", "L", 1, 0);
    w.step();
    assert!(matches!(
        w.wait("l"),
        Some(WaitReason::VictimsProtectedUntil(_))
    ));
    // Naming the implicit class is allowed; naming any other is not.
    let mut spec = w.spec("d", "A", 1, 0);
    spec.class = Some("default".into());
    w.submit_spec(spec);
    let mut spec = w.spec("x", "A", 1, 0);
    spec.class = Some("urgent".into());
    let err = w.c.submit(spec, w.now).expect_err("no classes");
    assert!(
        err.to_string().contains("declares no workload classes"),
        "{err}"
    );
}

#[test]
fn a_configuration_change_keeps_every_job_within_a_class() {
    let mut w = World::new(2, vec![team(2)]);
    submit_class(&mut w, "r", "A", 1, "release", 150);
    submit_class(&mut w, "u", "A", 1, "urgent", 250);
    w.step();
    // Narrowing a band moves the priority to its nearest end; a dry run
    // says so first.
    let mut cfg: QueueConfig = w.c.queue_config();
    cfg.shares[0].classes[1].priority_max = 120;
    let dry = w.c.dry_run_queue(cfg.clone(), w.now).expect("valid");
    assert_eq!(
        dry.reclassified,
        vec![(w.id("r"), Some("release".into()), 120)]
    );
    w.c.update_queue(cfg, w.now).expect("valid");
    assert_eq!(w.c.job(w.id("r")).expect("r").spec.priority, 120);
    // Removing a class moves its jobs to the default class, at a priority
    // in its band.
    let mut cfg = w.c.queue_config();
    cfg.shares[0].classes.remove(2);
    cfg.shares[0].classes[1].preemptible_by = None; // it named urgent
    w.c.update_queue(cfg, w.now).expect("valid");
    let u = w.c.job(w.id("u")).expect("u");
    assert_eq!(u.spec.class.as_deref(), Some("exploratory"));
    assert_eq!(u.spec.priority, 99);
    qm_core::invariants::check_indexes(&w.c).expect("indexes agree");
    w.step();
}

#[test]
fn turning_borrowing_off_for_a_class_refiles_its_running_jobs() {
    let mut w = World::new(2, vec![team(1), share("L", Strategy::Lend, 1)]);
    submit_class(&mut w, "r", "A", 1, "release", 100);
    submit_class(&mut w, "e", "A", 1, "exploratory", 0);
    w.step();
    assert!(
        w.c.is_on_borrowed_capacity(w.id("e")),
        "lowest priority borrows"
    );
    let mut cfg = w.c.queue_config();
    cfg.shares[0].classes[0].may_borrow = false;
    w.c.update_queue(cfg, w.now).expect("valid");
    // Now the exploratory job is classified within quota first.
    assert!(!w.c.is_on_borrowed_capacity(w.id("e")));
    assert!(w.c.is_on_borrowed_capacity(w.id("r")));
    qm_core::invariants::check_indexes(&w.c).expect("indexes agree");
}

#[test]
fn refiling_everything_from_the_jobs_gives_the_same_indexes_and_decisions() {
    // What a scheduler does with a state read from a snapshot.
    let mut s = team(1);
    s.classes[0].may_borrow = false;
    let mut w = World::new(3, vec![s, share("L", Strategy::Lend, 2)]);
    submit_class(&mut w, "e1", "A", 1, "exploratory", 0);
    submit_class(&mut w, "e2", "A", 1, "exploratory", 0);
    submit_class(&mut w, "r1", "A", 1, "release", 100);
    submit_class(&mut w, "r2", "A", 2, "release", 100);
    w.step();
    w.at(3).submit("l", "L", 1, 0);
    w.step();
    let mut refiled = w.c.clone();
    refiled.refile_all();
    qm_core::invariants::check_indexes(&refiled).expect("indexes agree");
    assert_eq!(refiled.schedule(w.now), w.c.schedule(w.now));
    assert_eq!(
        refiled.jobs().cloned().collect::<Vec<_>>(),
        w.c.jobs().cloned().collect::<Vec<_>>()
    );
}
