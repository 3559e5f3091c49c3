//! Golden fixtures: v1 messages as integrators send and receive them today
//! must keep decoding, with the same meaning, in every later v1.

mod common;
use common::fixture;

use qm_wire::messages::{
    ErrorCode, JobStateChange, QuotaShare, Reply, SubmitServiceJob, SubmitServiceJobResponse,
};

#[test]
fn submit_service_job_v1_decodes() {
    let m: SubmitServiceJob =
        serde_json::from_str(&fixture("submit_service_job.json")).expect("decodes");
    assert_eq!(m.job_queue, "training");
    assert_eq!(m.instance_count, Some(1));
    assert_eq!(
        m.preemption_configuration
            .and_then(|p| p.preemption_retries_before_termination),
        Some(2)
    );
    assert_eq!(m.command, vec!["qm-trainer", "--steps", "2000"]);
    assert_eq!(m.client_token.as_deref(), Some("7f1c2a"));
    assert_eq!(
        m.retry_strategy.expect("set").evaluate_on_exit[0].action,
        "RETRY"
    );
}

#[test]
fn job_state_change_v1_decodes_and_round_trips() {
    let m: JobStateChange =
        serde_json::from_str(&fixture("job_state_change.json")).expect("decodes");
    assert_eq!(
        (m.from.as_str(), m.to.as_str(), m.attempt),
        ("RUNNING", "RUNNABLE", Some(1))
    );
    let again: JobStateChange =
        serde_json::from_str(&serde_json::to_string(&m).expect("encodes")).expect("decodes");
    assert_eq!(again, m);
}

#[test]
fn error_replies_carry_a_code_and_every_problem() {
    let r: Reply<SubmitServiceJobResponse> =
        serde_json::from_str(&fixture("error_reply.json")).expect("decodes");
    let Reply::Error(e) = r else {
        panic!("an error reply")
    };
    assert_eq!(e.code, ErrorCode::Invalid);
    assert_eq!(e.problems.len(), 2);
    let ok: Reply<SubmitServiceJobResponse> =
        serde_json::from_str(r#"{"ok": {"jobId": "job-1", "jobName": "a"}}"#).expect("decodes");
    assert!(matches!(ok, Reply::Ok(ref r) if r.job_id == "job-1"));
}

#[test]
fn quota_share_v1_decodes_and_unknown_fields_are_ignored() {
    let mut text = fixture("quota_share.json");
    text = text.replacen('{', r#"{"someFutureField": {"x": 1}, "#, 1);
    let m: QuotaShare = serde_json::from_str(&text).expect("decodes");
    assert_eq!(
        m.resource_sharing_configuration.expect("set").borrow_limit,
        Some(200)
    );
    assert_eq!(
        m.protections
            .expect("set")
            .min_runtime_before_preemption_seconds,
        Some(600)
    );
}

#[test]
fn queue_documents_jobs_events_commands_and_log_entries_v1_decode() {
    use qm_wire::messages::{PreemptionEvent, ServiceJob};
    use qm_wire::system::{ExecCommand, LogEntry, QueueDocument};

    let doc: QueueDocument =
        serde_json::from_str(&fixture("queue_document.json")).expect("decodes");
    assert_eq!(doc.job_queue.job_queue_name, "training");
    assert_eq!(
        doc.quota_shares[0].job_queue, "",
        "jobQueue may be left out in a document"
    );
    let job: ServiceJob = serde_json::from_str(&fixture("service_job.json")).expect("decodes");
    assert_eq!(job.attempts[1].restored_checkpoint_step, Some(120));
    assert_eq!(
        job.preemption_summary.expect("set").preempted_attempt_count,
        1
    );
    let e: PreemptionEvent =
        serde_json::from_str(&fixture("preemption_event.json")).expect("decodes");
    assert_eq!(
        (e.kind.as_str(), e.phase.as_str()),
        ("CROSS_SHARE", "started")
    );
    let c: ExecCommand =
        serde_json::from_str(&fixture("exec_command_start.json")).expect("decodes");
    assert!(matches!(
        c,
        ExecCommand::Start {
            epoch: 7,
            attempt: 2,
            rank: 0,
            ref hosts,
            checkpoint_config: None,
            ..
        } if hosts.is_empty()
    ));
    // A rank of a job spread over two executors, with its checkpoint place.
    let c: ExecCommand =
        serde_json::from_str(&fixture("exec_command_start_rank.json")).expect("decodes");
    let ExecCommand::Start {
        rank,
        hosts,
        checkpoint_config,
        ..
    } = c
    else {
        panic!("a start")
    };
    assert_eq!((rank, hosts.len()), (1, 2));
    let config = checkpoint_config.expect("checkpointConfig");
    assert_eq!(config.s3_uri.as_deref(), Some("s3://team-a-ckpt/llm/run-7"));
    assert_eq!(config.local_path.as_deref(), Some("ckpt"));
    // A rank of a container job: the image, no command (the image's
    // entrypoint with `train`).
    let c: ExecCommand =
        serde_json::from_str(&fixture("exec_command_start_container.json")).expect("decodes");
    let ExecCommand::Start {
        container_image,
        command,
        ..
    } = c
    else {
        panic!("a start")
    };
    assert_eq!(
        container_image.as_deref(),
        Some("registry.local/team-a/trainer:3")
    );
    assert!(command.is_empty());
    // An older start, with no image: a host command, as before.
    let c: ExecCommand =
        serde_json::from_str(&fixture("exec_command_start.json")).expect("decodes");
    assert!(matches!(
        c,
        ExecCommand::Start {
            container_image: None,
            ..
        }
    ));
    let l: LogEntry = serde_json::from_str(&fixture("log_entry_pass.json")).expect("decodes");
    let LogEntry::Pass(p) = l else {
        panic!("a pass entry")
    };
    assert_eq!(p.starts[0].placement[0].slots, vec![1]);
    assert_eq!(p.preemptions[0].kind, "CROSS_SHARE");
}

#[test]
fn tenancy_messages_v1_decode_and_old_log_entries_still_do() {
    use qm_wire::messages::{Caller, ListAuditEventsResponse};
    use qm_wire::system::LogEntry;
    // A submit stored before authentication existed has no principal.
    let old: LogEntry =
        serde_json::from_str(&fixture("log_entry_submit_v1_no_principal.json")).expect("decodes");
    assert!(matches!(
        old,
        LogEntry::Submit {
            principal: None,
            ..
        }
    ));
    let new: LogEntry = serde_json::from_str(&fixture("log_entry_submit.json")).expect("decodes");
    assert!(matches!(new, LogEntry::Submit { principal: Some(ref p), .. } if p == "alice"));
    let t: LogEntry = serde_json::from_str(&fixture("log_entry_terminate.json")).expect("decodes");
    let LogEntry::Terminate {
        principal,
        quota_share_name,
        ..
    } = t
    else {
        panic!("a terminate")
    };
    assert_eq!(principal.as_deref(), Some("alice"));
    assert_eq!(quota_share_name.as_deref(), Some("QS1"));
    let r: Reply<serde_json::Value> =
        serde_json::from_str(&fixture("error_reply_access_denied.json")).expect("decodes");
    let Reply::Error(e) = r else {
        panic!("an error")
    };
    assert_eq!(e.code, ErrorCode::AccessDenied);
    let a: ListAuditEventsResponse =
        serde_json::from_str(&fixture("list_audit_events_response.json")).expect("decodes");
    assert_eq!(a.audit_events[0].principal, "alice");
    assert_eq!(a.next_token.as_deref(), Some("43"));
    let c: Caller = serde_json::from_str(&fixture("caller.json")).expect("decodes");
    assert_eq!((c.role.as_str(), c.shares.len()), ("TEAM", 2));
}

#[test]
fn a_scheduler_request_is_its_operation_with_its_own_body() {
    use qm_wire::system::{SchedOperation, SchedRequest};
    // The shape admission relays (and older admissions sent): the operation
    // by name, its request as `body`, and the caller.
    let text = r#"{"operation": "TerminateServiceJob",
                   "body": {"jobId": "j-1", "reason": "done"},
                   "caller": {"principal": "alice", "role": "TEAM"}}"#;
    let r: SchedRequest = serde_json::from_str(text).expect("decodes");
    let SchedOperation::TerminateServiceJob(ref t) = r.operation else {
        panic!("{r:?}");
    };
    assert_eq!((t.job_id.as_str(), t.reason.as_str()), ("j-1", "done"));
    assert_eq!(r.caller.principal, "alice");
    assert!(r.operation.writes());
    let again: serde_json::Value = serde_json::to_value(&r).expect("encodes");
    let original: serde_json::Value = serde_json::from_str(text).expect("json");
    assert_eq!(again, original, "round trip keeps the wire shape");
    // An operation the scheduler does not answer, or a body of the wrong
    // shape, is refused when decoded (naming what is wrong).
    let bad = r#"{"operation": "SubmitServiceJob", "body": {}, "caller": {"principal": "a", "role": "TEAM"}}"#;
    let e = serde_json::from_str::<SchedRequest>(bad).expect_err("not a scheduler operation");
    assert!(e.to_string().contains("SubmitServiceJob"), "{e}");
    let bad = r#"{"operation": "UpdateServiceJob", "body": {"jobId": "j-1"}, "caller": {"principal": "a", "role": "TEAM"}}"#;
    let e = serde_json::from_str::<SchedRequest>(bad).expect_err("no priority");
    assert!(e.to_string().contains("schedulingPriority"), "{e}");
}

#[test]
fn heartbeats_carry_attempts_as_job_and_attempt_pairs() {
    use qm_wire::system::{AttemptKey, Heartbeat};
    let hb: Heartbeat = serde_json::from_str(&fixture("heartbeat.json")).expect("decodes");
    assert_eq!(
        hb.attempts,
        vec![AttemptKey::new("job-7", 2), AttemptKey::new("job-9", 1)]
    );
    let encoded = serde_json::to_value(&hb).expect("encodes");
    assert_eq!(
        encoded["attempts"],
        serde_json::json!([["job-7", 2], ["job-9", 1]])
    );
}

#[test]
fn an_archive_entry_names_the_jobs_that_leave_the_state() {
    let e: qm_wire::system::LogEntry =
        serde_json::from_str(&fixture("log_entry_archive.json")).expect("decodes");
    let qm_wire::system::LogEntry::Archive { job_ids, at } = &e else {
        panic!("an archive entry: {e:?}")
    };
    assert_eq!(job_ids.len(), 2);
    assert_eq!(
        (job_ids[0].as_str(), *at),
        ("j-5e1f0c3a9d2b47e8", 1_764_756_000_000)
    );
    let again: qm_wire::system::LogEntry =
        serde_json::from_str(&serde_json::to_string(&e).expect("encodes")).expect("decodes");
    assert_eq!(again, e);
}

#[test]
fn a_queue_deleted_entry_names_the_queue_and_the_revision_it_ends() {
    let e: qm_wire::system::LogEntry =
        serde_json::from_str(&fixture("log_entry_queue_deleted.json")).expect("decodes");
    let qm_wire::system::LogEntry::QueueDeleted {
        job_queue,
        revision,
        at,
        principal,
    } = &e
    else {
        panic!("a queue-deleted entry: {e:?}")
    };
    assert_eq!(
        (job_queue.as_str(), *revision, *at, principal.as_deref()),
        ("training", 42, 1_764_756_000_000, Some("platform"))
    );
    let again: qm_wire::system::LogEntry =
        serde_json::from_str(&serde_json::to_string(&e).expect("encodes")).expect("decodes");
    assert_eq!(again, e);
}

#[test]
fn a_batch_of_reports_is_each_report_in_order() {
    use qm_wire::system::{LogEntry, ReportPhase};
    let e: LogEntry = serde_json::from_str(&fixture("log_entry_reports.json")).expect("decodes");
    let LogEntry::Reports { reports } = &e else {
        panic!("a batch of reports: {e:?}")
    };
    let phases: Vec<(&str, u32, ReportPhase)> = reports
        .iter()
        .map(|r| (r.job_id.as_str(), r.attempt, r.phase))
        .collect();
    assert_eq!(
        phases,
        vec![
            ("j-5e1f0c3a9d2b47e8", 2, ReportPhase::Starting),
            ("j-5e1f0c3a9d2b47e8", 2, ReportPhase::Running),
            ("j-0a7c", 1, ReportPhase::Ended),
        ]
    );
    assert_eq!(reports[0].restored.as_ref().map(|c| c.seq), Some(4));
    assert_eq!(reports[0].restored_bytes, Some(1_048_576));
    assert_eq!(reports[2].exit_code, Some(0));
    let again: LogEntry =
        serde_json::from_str(&serde_json::to_string(&e).expect("encodes")).expect("decodes");
    assert_eq!(again, e);
}

#[test]
fn an_event_frame_holds_its_events_as_published() {
    use qm_wire::messages::{EventFrame, JobStateChange};
    let change = JobStateChange {
        job_id: "j-1".into(),
        job_name: "train \"big\"".into(),
        job_queue: "training".into(),
        quota_share_name: "QS1".into(),
        from: "STARTING".into(),
        to: "RUNNING".into(),
        attempt: Some(1),
        at: 1_764_756_000_000,
        ..Default::default()
    };
    let payload = serde_json::to_vec(&change).expect("encodes");
    let encoded = EventFrame::encode([
        (
            "qm.v1.events.job.training.QS1.j-1.RUNNING",
            "12.0.3",
            payload.as_slice(),
        ),
        (
            "qm.v1.events.job.training.QS1.j-2.RUNNING",
            "12.0.4",
            b"not json",
        ),
    ]);
    let frame: EventFrame = serde_json::from_slice(&encoded).expect("a frame decodes");
    assert_eq!(frame.events.len(), 2);
    assert_eq!(
        frame.events[0].subject,
        "qm.v1.events.job.training.QS1.j-1.RUNNING"
    );
    assert_eq!(frame.events[0].position, "12.0.3");
    let back: JobStateChange =
        serde_json::from_value(frame.events[0].event.clone()).expect("the event decodes");
    assert_eq!(back, change);
    // A payload that is not JSON cannot break the frame: it is stored as null.
    assert_eq!(frame.events[1].event, serde_json::Value::Null);
    let fixture: EventFrame =
        serde_json::from_str(&fixture("event_frame.json")).expect("the fixture decodes");
    assert_eq!(fixture.events[0].position, "40.41.0");
    assert_eq!(fixture.events[1].event["to"], "RUNNING");
}

#[test]
fn a_page_of_stored_events_v1_decodes_each_kind_and_round_trips() {
    use qm_wire::messages::{EventCursor, EventKind, EventPage};
    let page: EventPage =
        serde_json::from_str(&fixture("list_events_response.json")).expect("decodes");
    let kinds: Vec<EventKind> = page.events.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![EventKind::Job, EventKind::Preemption, EventKind::Checkpoint]
    );
    assert_eq!(page.events[0].job().map(|c| c.to), Some("RUNNABLE".into()));
    assert_eq!(
        page.events[1].preemption().map(|p| p.for_job_id),
        Some("j-77aa01".into())
    );
    assert_eq!(page.events[2].checkpoint().and_then(|c| c.step), Some(300));
    assert_eq!(
        EventCursor::parse(&page.after),
        Some(EventCursor {
            seq: 814,
            index: 0,
            position: Some((4410, 0, 3))
        })
    );
    assert!(page.caught_up);
    let again: serde_json::Value = serde_json::to_value(&page).expect("encodes");
    let original: serde_json::Value =
        serde_json::from_str(&fixture("list_events_response.json")).expect("json");
    assert_eq!(again, original);
}
