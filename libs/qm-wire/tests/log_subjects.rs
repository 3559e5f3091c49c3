//! Each log subject carries one kind of entry, for the identity it names
//! (issue 28): what a principal may publish is what the subject allows, so
//! an entry that claims another identity, or another kind, is refused.

use qm_wire::subjects;
use qm_wire::system::{CheckpointCommit, LogEntry, Report, ReportPhase};

fn report(executor: &str) -> LogEntry {
    LogEntry::Report(Report {
        exit_code: Some(0),
        ..Report::new(executor, "j-1", 1, ReportPhase::Ended)
    })
}

fn commit(node: Option<&str>) -> LogEntry {
    LogEntry::Checkpoint(CheckpointCommit {
        job_queue: "training".into(),
        job_id: "j-1".into(),
        attempt: 1,
        seq: 3,
        step: Some(30),
        created_at: 1,
        node: node.map(Into::into),
    })
}

#[test]
fn an_executor_reports_only_as_itself_and_only_reports() {
    let own = subjects::log_executor("node-1").expect("subject");
    assert!(report("node-1").bind_to_subject(&own).is_ok());
    let forged = report("node-2").bind_to_subject(&own).expect_err("refused");
    assert!(forged.contains("another executor's report"), "{forged}");
    // Another kind of entry on its own subject: refused.
    let decision = LogEntry::Archive {
        job_ids: vec!["j-1".into()],
        at: 1,
    };
    assert!(decision.clone().bind_to_subject(&own).is_err());
    assert!(decision
        .clone()
        .bind_to_subject(subjects::LOG_SCHED)
        .is_ok());
    assert!(report("node-1")
        .bind_to_subject(subjects::LOG_SCHED)
        .is_err());
    assert!(commit(None).bind_to_subject(&own).is_err());
    // Only the leader deletes a queue: not admission, not an executor.
    let deleted = LogEntry::QueueDeleted {
        job_queue: "training".into(),
        revision: 7,
        at: 1,
        principal: None,
    };
    assert!(deleted.clone().bind_to_subject(&own).is_err());
    let config = subjects::log_config("training").expect("subject");
    assert!(deleted.clone().bind_to_subject(&config).is_err());
    assert!(deleted.clone().bind_to_subject(subjects::LOG_SCHED).is_ok());
}

#[test]
fn a_commit_names_the_node_of_its_subject_whatever_its_body_says() {
    let subject = subjects::log_checkpoint("node-2").expect("subject");
    let mut entry = commit(Some("node-1"));
    entry
        .bind_to_subject(&subject)
        .expect("a commit on a checkpoint subject");
    let LogEntry::Checkpoint(c) = entry else {
        unreachable!()
    };
    assert_eq!(c.node.as_deref(), Some("node-2"));
}

#[test]
fn subjects_outside_the_log_families_or_with_extra_tokens_are_refused() {
    for subject in [
        "qm.v1.log",
        "qm.v1.log.exec",
        "qm.v1.log.exec.node-1.more",
        "qm.v1.log.other.node-1",
        "elsewhere.exec.node-1",
    ] {
        assert!(
            report("node-1").bind_to_subject(subject).is_err(),
            "{subject}"
        );
    }
}

#[test]
fn a_drill_is_stored_only_on_its_queues_submit_subject() {
    let drill = LogEntry::Drill {
        drill_id: "d-1".into(),
        resumed_job_id: "j-a".into(),
        uninterrupted_job_id: "j-b".into(),
        job: qm_wire::messages::SubmitServiceJob {
            job_queue: "training".into(),
            ..Default::default()
        },
        seed: 1,
        principal: None,
    };
    let own = subjects::log_submit("training").expect("subject");
    assert!(drill.clone().bind_to_subject(&own).is_ok());
    let other = subjects::log_submit("other").expect("subject");
    let e = drill.clone().bind_to_subject(&other).expect_err("refused");
    assert!(e.contains("a drill for another queue"), "{e}");
    // Nor as a decision, nor as an executor's report.
    assert!(drill.clone().bind_to_subject(subjects::LOG_SCHED).is_err());
    let exec = subjects::log_executor("node-1").expect("subject");
    assert!(drill.clone().bind_to_subject(&exec).is_err());
}

#[test]
fn a_batch_of_reports_is_refused_if_any_report_is_another_executors() {
    let own = subjects::log_executor("node-1").expect("subject");
    let of = |executors: &[&str]| LogEntry::Reports {
        reports: executors
            .iter()
            .map(|e| Report::new(e, "j-1", 1, ReportPhase::Running))
            .collect(),
    };
    assert!(of(&["node-1", "node-1"]).bind_to_subject(&own).is_ok());
    let forged = of(&["node-1", "node-2"])
        .bind_to_subject(&own)
        .expect_err("one report is another executor's");
    assert!(forged.contains("another executor's report"), "{forged}");
    assert!(of(&[]).bind_to_subject(&own).is_err(), "an empty batch");
    assert!(of(&["node-1"])
        .bind_to_subject(subjects::LOG_SCHED)
        .is_err());
}
