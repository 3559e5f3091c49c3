//! Resume drills (`drill.rs`): the subject is stopped after its first
//! committed checkpoint and resumes; the outcome, decided on the results
//! both runs declare, becomes the class's resume proof for the artifact.

mod common;

use common::*;
use qm_core::{
    AttemptOutcome, CheckpointMark, DrillState, JobId, JobStatus, QuotaShare, Strategy, Time,
    WaitReason, WorkloadClass, DRILL_MAX_DELAY_MS,
};

const IMAGE: &str = "image:trainer@sha256:aa";

fn team(entitlement: i64) -> QuotaShare {
    let mut s = lab("A", entitlement, -1);
    let mut release = WorkloadClass::new("release", 100, 199);
    release.requires_checkpoint = true;
    release.borrow_requires_resume_proof = true;
    release.result_tolerance_ppm = 1_000;
    s.classes = vec![WorkloadClass::new("exploratory", 0, 99), release];
    s
}

fn start(w: &mut World, seed: u64) -> u64 {
    let mut spec = w.spec("rc", "A", 1, 100);
    spec.class = Some("release".into());
    spec.artifact = Some(IMAGE.into());
    w.c.start_drill(spec, seed, w.now).expect("a valid drill")
}

fn attempt(w: &World, id: JobId) -> u32 {
    w.c.job(id).expect("job").attempts.len() as u32
}

fn finish(w: &mut World, id: JobId, result: &str) {
    let a = attempt(w, id);
    w.c.attempt_result(id, a, result.into()).expect("current");
    w.c.attempt_ended(id, a, Some(0), w.now).expect("current");
}

/// Runs a drill to the resumed subject running again; returns (drill,
/// subject, reference).
fn run_to_resume(w: &mut World, seed: u64) -> (u64, JobId, JobId) {
    let d = start(w, seed);
    let (subject, reference) = {
        let drill = w.c.drill(d).expect("drill");
        (drill.subject, drill.reference)
    };
    let plan = w.step();
    assert_eq!(
        plan.starts.len(),
        2,
        "both runs start on the share's own capacity"
    );
    w.at(10);
    w.c.checkpoint_committed(
        subject,
        1,
        CheckpointMark {
            at: w.now,
            step: 40,
        },
    )
    .expect("running");
    let stop_at =
        w.c.drill(d)
            .expect("drill")
            .stop_at
            .expect("set by the commit");
    assert_eq!(
        stop_at,
        Time::from_secs(10).plus_millis(qm_core::drill::delay_for(seed))
    );
    // Before the stop time nothing happens; at it the subject is stopped.
    w.now = Time(stop_at.as_millis() - 1);
    assert!(w.step().drill_stops.is_empty());
    w.now = stop_at;
    let plan = w.step();
    assert_eq!(plan.drill_stops, vec![subject]);
    assert!(
        plan.preemptions.is_empty(),
        "a drill's stop is not a preemption"
    );
    let outcome =
        w.c.attempt_ended(subject, 1, None, w.now)
            .expect("stopping");
    assert_eq!(outcome, AttemptOutcome::PreemptedDrill);
    let job = w.c.job(subject).expect("subject");
    assert_eq!(
        (job.status, job.preempted_attempts),
        (JobStatus::Runnable, 0),
        "no budget spent"
    );
    let plan = w.step();
    assert_eq!(
        plan.starts.iter().map(|s| s.job).collect::<Vec<_>>(),
        vec![subject]
    );
    (d, subject, reference)
}

#[test]
fn a_drill_that_resumes_to_the_same_result_proves_the_class_for_the_image() {
    let mut w = World::new(3, vec![team(2), share("L", Strategy::Lend, 1)]);
    assert!(!w.c.resume_proven("A", "release", IMAGE));
    let (d, subject, reference) = run_to_resume(&mut w, 42);
    w.at(100);
    finish(&mut w, reference, "loss 0.5000\n");
    assert_eq!(w.c.drill(d).expect("drill").state, DrillState::Running);
    finish(&mut w, subject, "loss 0.5003\n");
    let drill = w.c.drill(d).expect("drill");
    assert_eq!(drill.state, DrillState::Passed, "{drill:?}");
    assert_eq!(
        drill.restored_step, None,
        "the test's executor restored nothing"
    );
    assert!(drill.recomputed_ms.is_some());
    assert!(w.c.resume_proven("A", "release", IMAGE));
    // The ledger of lost work does not count a drill's stop.
    let a = w.c.share_idx("A").expect("A");
    assert!(w.c.lost_work(a).is_empty(), "{:?}", w.c.lost_work(a));
}

#[test]
fn a_drill_whose_resumed_run_differs_fails_saying_what_differed_and_withdraws_the_proof() {
    let mut w = World::new(3, vec![team(2), share("L", Strategy::Lend, 1)]);
    w.c.record_resume_drill("A", "release", IMAGE, true);
    let (d, subject, reference) = run_to_resume(&mut w, 7);
    w.at(100);
    finish(&mut w, reference, "loss 0.50\n");
    finish(&mut w, subject, "loss 0.61\n");
    match &w.c.drill(d).expect("drill").state {
        DrillState::Failed(why) => assert!(
            why.contains("loss: 0.5 uninterrupted, 0.61 resumed"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(!w.c.resume_proven("A", "release", IMAGE));
}

#[test]
fn a_job_that_ends_before_the_stop_is_inconclusive_and_proves_nothing() {
    let mut w = World::new(3, vec![team(2)]);
    let d = start(&mut w, 3);
    let (subject, reference) = {
        let drill = w.c.drill(d).expect("drill");
        (drill.subject, drill.reference)
    };
    w.step();
    w.at(1);
    finish(&mut w, subject, "x");
    finish(&mut w, reference, "x");
    match &w.c.drill(d).expect("drill").state {
        DrillState::Failed(why) => assert!(
            why.starts_with("inconclusive") && why.contains("committed none"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(!w.c.resume_proven("A", "release", IMAGE));
}

#[test]
fn drills_run_on_the_shares_own_capacity_and_need_classes_and_checkpoints() {
    // One instance of its own: the second run waits though L lends one.
    let mut w = World::new(2, vec![team(1), share("L", Strategy::Lend, 1)]);
    let d = start(&mut w, 1);
    let plan = w.step();
    assert_eq!(plan.starts.len(), 1);
    let reference = w.c.drill(d).expect("drill").reference;
    assert!(matches!(
        w.c.job(reference).expect("job").status_reason.wait(),
        Some(WaitReason::OwnCapacityInUse { .. })
    ));
    // No checkpoint: refused; a share without classes: refused.
    let mut spec = w.spec("x", "A", 1, 100);
    spec.class = Some("release".into());
    spec.artifact = Some(IMAGE.into());
    spec.checkpoints = false;
    let e = w.c.start_drill(spec, 1, w.now).expect_err("no checkpoint");
    assert!(
        e.to_string()
            .contains("checkpointConfig: is required: a drill stops the job"),
        "{e}"
    );
    let spec = w.spec("y", "L", 1, 0);
    let e = w.c.start_drill(spec, 1, w.now).expect_err("no classes");
    assert!(e.to_string().contains("declares no classes"), "{e}");
}

#[test]
fn the_stop_point_is_drawn_from_the_seed_within_the_bound() {
    let delays: Vec<u64> = (0..5).map(qm_core::drill::delay_for).collect();
    assert!(delays.iter().all(|&d| d <= DRILL_MAX_DELAY_MS));
    assert_ne!(delays[0], delays[1]);
}

#[test]
fn only_the_newest_decided_drills_are_kept_and_proofs_outlive_them() {
    let mut w = World::new(2, vec![team(2)]);
    let n = qm_core::drill::KEPT_DECIDED_DRILLS + 3;
    let mut first = None;
    for i in 0..n {
        let d = start(&mut w, i as u64);
        first.get_or_insert(d);
        let (subject, reference) = {
            let drill = w.c.drill(d).expect("drill");
            (drill.subject, drill.reference)
        };
        w.step();
        // Inconclusive (ended before any stop): decided at once.
        finish(&mut w, subject, "x");
        finish(&mut w, reference, "x");
        w.c.forget(subject).expect("finished");
        w.c.forget(reference).expect("finished");
    }
    assert_eq!(w.c.drills().count(), qm_core::drill::KEPT_DECIDED_DRILLS);
    assert!(w.c.drill(first.expect("one")).is_none(), "the oldest went");
    // A proof recorded by a drill stays when its drill record goes.
    w.c.record_resume_drill("A", "release", IMAGE, true);
    assert!(w.c.resume_proven("A", "release", IMAGE));
}
