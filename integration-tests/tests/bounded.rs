//! Bounded state end to end: finished jobs move to the archive and age out
//! of it with a clear error; the scheduler snapshots its state, truncates
//! the log behind its snapshots, and a new leader starts from the newest
//! snapshot that reads (falling back past a damaged one, and refusing to
//! lead when none covers the truncated log).

use std::time::{Duration, Instant};

use futures::StreamExt;
use qm_integration_tests::stack::{running, Stack};
use qm_wire::messages::{
    ErrorCode, JobRef, ListServiceJobs, ListServiceJobsResponse, ServiceJob, SubmitServiceJob,
};
use qm_wire::subjects::{self, Operation};
use tokio::io::AsyncReadExt;

const QUEUE: &str = "jobQueue: {jobQueueName: ops}
quotaShares:
  - quotaShareName: team
    capacityLimits: [{capacityUnit: cpu.small, maxCapacity: 4}]
    resourceSharingConfiguration: {strategy: RESERVE}
";

fn quick(name: &str) -> SubmitServiceJob {
    SubmitServiceJob {
        job_name: name.into(),
        job_queue: "ops".into(),
        quota_share_name: Some("team".into()),
        instance_type: "cpu.small".into(),
        command: vec!["sh".into(), "-c".into(), "echo done".into()],
        ..Default::default()
    }
}

async fn describe_as(
    client: &qm_service::client::Client,
    job_id: &str,
) -> Result<ServiceJob, qm_service::client::CallError> {
    client
        .call(
            Operation::DescribeServiceJob,
            &JobRef {
                job_id: job_id.into(),
            },
        )
        .await
}

async fn list(
    stack: &Stack,
    status: &str,
    max: u32,
    token: Option<String>,
) -> ListServiceJobsResponse {
    stack
        .client
        .call(
            Operation::ListServiceJobs,
            &ListServiceJobs {
                job_queue: "ops".into(),
                job_status: Some(status.into()),
                max_results: Some(max),
                next_token: token,
                ..Default::default()
            },
        )
        .await
        .expect("list")
}

/// Waits until `what` holds, polling; panics after `secs` with the logs.
async fn until<F, Fut>(stack: &Stack, secs: u64, what: &str, check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "{what}: not within {secs} s\n{}",
            stack.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// List pages through the archive too (two pages of two, then one), and
/// a bad token is named, not treated as the start.
async fn assert_archive_listed(stack: &Stack, ids: &[String]) {
    let first = list(stack, "SUCCEEDED", 2, None).await;
    assert_eq!(first.job_summary_list.len(), 2, "{first:#?}");
    let token = first.next_token.clone().expect("a second page");
    let second = list(stack, "SUCCEEDED", 2, Some(token)).await;
    let mut listed: Vec<String> = first
        .job_summary_list
        .iter()
        .chain(&second.job_summary_list)
        .map(|j| j.job_id.clone())
        .collect();
    listed.sort();
    let mut expected = ids.to_vec();
    expected.sort();
    assert_eq!(listed, expected, "second page: {second:#?}");
    assert!(second.next_token.is_none());
    assert!(list(stack, "RUNNABLE", 10, None)
        .await
        .job_summary_list
        .is_empty());
    // A bad token is named, not treated as the start.
    let bad = stack
        .client
        .call::<_, ListServiceJobsResponse>(
            Operation::ListServiceJobs,
            &ListServiceJobs {
                job_queue: "ops".into(),
                next_token: Some("archive:x".into()),
                ..Default::default()
            },
        )
        .await
        .expect_err("a made-up token");
    assert_eq!(bad.code(), Some(ErrorCode::Invalid), "{bad}");
}

#[tokio::test(flavor = "multi_thread")]
async fn finished_jobs_move_to_the_archive_and_age_out_of_it_with_a_clear_error() {
    let (nats, s3, mut stack) = running("archive", QUEUE).await;
    // Restart both with short retentions: a finished job leaves memory
    // after 1 s, and its archived record lives 12 s.
    stack.signal("scheduler-1", "TERM");
    stack.signal("admission", "TERM");
    stack.admission_env = vec![("QM_ADMISSION_ARCHIVE_RETENTION_SECONDS".into(), "12".into())];
    stack.scheduler_env = vec![("QM_SCHEDULER_FINISHED_RETENTION_SECONDS".into(), "1".into())];
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.executor("node-1", "ops", "cpu.small", 4);
    let _ = (&nats, &s3);

    let mut ids = Vec::new();
    for i in 0..3 {
        ids.push(stack.submit(&quick(&format!("quick-{i}"))).await);
    }
    for id in &ids {
        let j = stack.wait_final(id, 60).await;
        assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    }
    // Archived: the scheduler says so, and the archive stream holds one
    // record per job.
    let scheduler = stack.auth.client(&stack.nats_url, "scheduler").await;
    let js = async_nats::jetstream::new(scheduler.nats.clone());
    let archive = js
        .get_stream(subjects::ARCHIVE_STREAM)
        .await
        .expect("archive stream");
    until(&stack, 30, "three jobs archived", || {
        let archive = archive.clone();
        async move {
            let mut archive = archive;
            archive.info().await.map(|i| i.state.messages).unwrap_or(0) == 3
        }
    })
    .await;
    until(&stack, 10, "the archive decision applied", || async {
        stack
            .log_of("scheduler-1")
            .contains("finished jobs archived")
    })
    .await;

    // Describe still answers, from the archive, with the attempts.
    let j = stack
        .describe(&ids[0])
        .await
        .expect("archived job described");
    assert_eq!(j.status, "SUCCEEDED");
    assert_eq!(j.attempts.len(), 1, "{j:#?}");
    assert_eq!(j.attempts[0].outcome.as_deref(), Some("SUCCEEDED"));
    assert_eq!(j.attempts[0].exit_code, Some(0));
    assert_eq!(j.attempts[0].executor_id.as_deref(), Some("node-1"));
    assert_archive_listed(&stack, &ids).await;

    // Another team cannot read the archived job, nor list it.
    let bob = stack.auth.client(&stack.nats_url, "bob").await;
    let denied = describe_as(&bob, &ids[0])
        .await
        .expect_err("bob is not in ops");
    assert_eq!(denied.code(), Some(ErrorCode::AccessDenied), "{denied}");
    // Nor may anyone but the scheduler write a record into the archive.
    let alice = stack.auth.client(&stack.nats_url, "alice").await;
    let forged = ServiceJob {
        job_id: "forged".into(),
        job_queue: "ops".into(),
        quota_share_name: "team".into(),
        status: "SUCCEEDED".into(),
        ..Default::default()
    };
    let theirs = async_nats::jetstream::new(alice.nats.clone());
    let stored = tokio::time::timeout(
        Duration::from_secs(5),
        theirs.publish(
            "qm.v1.archive.ops.team.forged",
            serde_json::to_vec(&forged).expect("json").into(),
        ),
    )
    .await;
    let stored = match stored {
        Ok(Ok(ack)) => ack.await.is_ok(),
        _ => false,
    };
    assert!(!stored, "alice stored a record in the archive");
    let not_there = describe_as(&alice, "forged")
        .await
        .expect_err("no such job");
    assert_eq!(not_there.code(), Some(ErrorCode::NotFound), "{not_there}");
    // Nor read the archive around the API (bob would see another team's
    // job), nor make it forget at once: only admission sets its retention.
    let bobs = async_nats::jetstream::new(bob.nats.clone());
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        bobs.get_stream(subjects::ARCHIVE_STREAM)
            .await?
            .get_last_raw_message_by_subject(&subjects::archived(&ids[0]).expect("subject"))
            .await
            .map_err(async_nats::Error::from)
    })
    .await;
    assert!(
        !matches!(read, Ok(Ok(_))),
        "bob read an archived record directly"
    );
    let mut config = archive.clone().info().await.expect("info").config.clone();
    let kept = config.max_age;
    config.max_age = Duration::from_secs(1);
    for who in [&alice, &scheduler] {
        let theirs = async_nats::jetstream::new(who.nats.clone());
        let changed =
            tokio::time::timeout(Duration::from_secs(5), theirs.update_stream(config.clone()))
                .await;
        assert!(
            !matches!(changed, Ok(Ok(_))),
            "the archive's retention changed"
        );
    }
    assert_eq!(
        archive.clone().info().await.expect("info").config.max_age,
        kept
    );

    // After the archive's retention the job is gone, and the error says
    // how long archived jobs are kept.
    until(&stack, 60, "the archived records aged out", || {
        let archive = archive.clone();
        async move {
            let mut archive = archive;
            archive.info().await.map(|i| i.state.messages).unwrap_or(1) == 0
        }
    })
    .await;
    let gone = describe_as(&stack.client, &ids[0])
        .await
        .expect_err("aged out");
    assert_eq!(gone.code(), Some(ErrorCode::NotFound), "{gone}");
    assert!(
        gone.to_string()
            .contains("not found (archived jobs are kept 12 seconds)"),
        "{gone}"
    );
    stack.stop_all();
}

/// The snapshots stored, oldest first, with their bytes.
async fn snapshots(
    store: &async_nats::jetstream::object_store::ObjectStore,
) -> Vec<(String, Vec<u8>)> {
    let mut names = Vec::new();
    let mut list = store.list().await.expect("list snapshots");
    while let Some(info) = list.next().await {
        names.push(info.expect("object info").name);
    }
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let mut bytes = Vec::new();
        let mut object = store.get(&name).await.expect("snapshot object");
        object
            .read_to_end(&mut bytes)
            .await
            .expect("snapshot bytes");
        out.push((name, bytes));
    }
    out
}

/// The same snapshot with one byte of its body changed (the header, and
/// so the checksum it records, unchanged; damaging it twice damages it).
fn damaged(bytes: &[u8]) -> Vec<u8> {
    let body = bytes
        .iter()
        .position(|&b| b == b'\n')
        .expect("a header line")
        + 1;
    let mut out = bytes.to_vec();
    let at = body + (out.len() - body) / 2;
    out[at] = out[at].wrapping_add(1);
    out
}

/// Wave `wave` of four quick jobs, each SUCCEEDED; their ids.
async fn wave_of_jobs(stack: &Stack, wave: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(stack.submit(&quick(&format!("w{wave}-{i}"))).await);
    }
    for id in &ids {
        assert_eq!(stack.wait_final(id, 60).await.status, "SUCCEEDED");
    }
    ids
}

/// A stack named `name` whose scheduler snapshots every 10 entries (at
/// most a second apart) and keeps no log for audits: the log is truncated
/// behind the older of its two snapshots. With an executor of 4 `cpu.small`.
async fn snapshotting(
    name: &str,
) -> (
    qm_integration_tests::stack::Nats,
    qm_integration_tests::S3Server,
    Stack,
) {
    let (nats, s3, mut stack) = running(name, QUEUE).await;
    stack.signal("scheduler-1", "TERM");
    stack.scheduler_env = vec![
        ("QM_SCHEDULER_SNAPSHOT_EVERY_ENTRIES".into(), "10".into()),
        ("QM_SCHEDULER_SNAPSHOT_INTERVAL_SECONDS".into(), "1".into()),
        ("QM_SCHEDULER_LOG_RETENTION_HOURS".into(), "0".into()),
    ];
    stack.scheduler("scheduler-1");
    stack.executor("node-1", "ops", "cpu.small", 4);
    (nats, s3, stack)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_leader_starts_from_the_newest_snapshot_that_reads() {
    let (_nats, _s3, mut stack) = snapshotting("snapshots").await;
    let scheduler = stack.auth.client(&stack.nats_url, "scheduler").await;
    let js = async_nats::jetstream::new(scheduler.nats.clone());
    let store = js
        .get_object_store(subjects::SNAPSHOT_BUCKET)
        .await
        .expect("the snapshot store");
    let log = js.get_stream(subjects::LOG_STREAM).await.expect("the log");
    let first_entry = || {
        let log = log.clone();
        async move {
            let mut log = log;
            log.info().await.expect("log info").state.first_sequence
        }
    };

    let mut done = Vec::new();
    let mut wave = 0;
    // Jobs run until two snapshots are kept and the log was truncated.
    while !(snapshots(&store).await.len() == 2 && first_entry().await > 1) {
        assert!(
            wave < 20,
            "no truncation after {wave} waves\n{}",
            stack.logs()
        );
        done.extend(wave_of_jobs(&stack, wave).await);
        wave += 1;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert!(
        stack.log_of("scheduler-1").contains("snapshot stored"),
        "{}",
        stack.log_of("scheduler-1")
    );
    let truncated_at = first_entry().await;

    // Neither a user nor an executor may touch the snapshots or the log.
    for who in ["alice", "node-1"] {
        let attacker = stack.auth.client(&stack.nats_url, who).await;
        let theirs = async_nats::jetstream::new(attacker.nats.clone());
        let opened = tokio::time::timeout(
            Duration::from_secs(5),
            theirs.get_object_store(subjects::SNAPSHOT_BUCKET),
        )
        .await;
        if let Ok(Ok(their_store)) = opened {
            let mut junk: &[u8] = b"junk";
            let put = tokio::time::timeout(
                Duration::from_secs(5),
                their_store.put(
                    "snapshot-99999999999999999999-99999999999999999999",
                    &mut junk,
                ),
            )
            .await;
            assert!(!matches!(put, Ok(Ok(_))), "{who} stored a snapshot");
        }
        let purge = tokio::time::timeout(Duration::from_secs(5), async {
            theirs
                .get_stream(subjects::LOG_STREAM)
                .await?
                .purge()
                .await
                .map_err(async_nats::Error::from)
        })
        .await;
        assert!(!matches!(purge, Ok(Ok(_))), "{who} purged the log");
    }
    assert_eq!(snapshots(&store).await.len(), 2);
    assert!(
        first_entry().await >= truncated_at,
        "the log was not purged by an attacker"
    );

    // Stop the leader; damage the newest snapshot (one byte of its body).
    stack.signal("scheduler-1", "TERM");
    let kept = snapshots(&store).await;
    let (older, newest) = (&kept[0], &kept[1]);
    let mut bad: &[u8] = &damaged(&newest.1);
    store
        .put(newest.0.as_str(), &mut bad)
        .await
        .expect("the damaged snapshot is stored");

    // A new leader says the newest is damaged, starts from the one before
    // it, and has every job: finished ones and a new one it places.
    stack.scheduler("scheduler-2");
    stack.wait_leader("scheduler-2").await;
    until(&stack, 60, "the new leader rebuilt its state", || async {
        stack.log_of("scheduler-2").contains("state rebuilt")
    })
    .await;
    let said = stack.log_of("scheduler-2");
    assert!(
        said.contains(&newest.0) && said.contains("snapshot damaged"),
        "{said}"
    );
    assert!(
        said.contains("snapshot loaded") && said.contains(&older.0),
        "{said}"
    );
    for id in &done {
        let j = stack.describe(id).await.expect("a job from before");
        assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
        assert_eq!(j.attempts.len(), 1, "{j:#?}");
    }
    let next = stack.submit(&quick("after-takeover")).await;
    assert_eq!(stack.wait_final(&next, 60).await.status, "SUCCEEDED");
    // Its own first snapshot stored, the damaged one is removed: it never
    // counts as one of the two kept.
    until(&stack, 30, "the unusable snapshot removed", || async {
        stack
            .log_of("scheduler-2")
            .contains("unusable snapshot removed")
    })
    .await;
    let names: Vec<String> = snapshots(&store).await.into_iter().map(|s| s.0).collect();
    assert!(!names.contains(&newest.0), "{names:?}");
    assert_eq!(names.len(), 2, "{names:?}");

    // With every snapshot damaged and the log truncated, a scheduler
    // refuses to lead with a partial state (and says why).
    stack.signal("scheduler-2", "TERM");
    for (name, bytes) in snapshots(&store).await {
        let mut bad: &[u8] = &damaged(&bytes);
        store.put(name.as_str(), &mut bad).await.expect("damaged");
    }
    stack.scheduler("scheduler-3");
    until(&stack, 60, "the scheduler refused to lead", || async {
        stack
            .log_of("scheduler-3")
            .contains("refusing to lead with a partial state")
    })
    .await;
    let refused = describe_as(&stack.client, &done[0]).await;
    assert!(
        refused.is_err(),
        "a scheduler answered from a partial state: {refused:?}"
    );
    stack.stop_all();
}

/// Start idempotency does not rest on the executor's bounded record of
/// ended attempts: a start sent again while its attempt runs is refused
/// because the attempt is live (never in the record, so never aged out of
/// it), and one sent again after it ended is refused by the record.
#[tokio::test(flavor = "multi_thread")]
async fn a_start_sent_again_never_runs_an_attempt_twice() {
    let (_nats, _s3, mut stack) = running("restart", QUEUE).await;
    stack.executor("node-1", "ops", "cpu.small", 1);
    // Watch node-1's commands (as node-1, the one principal that may).
    let node = stack.auth.client(&stack.nats_url, "node-1").await;
    let mut commands = node
        .nats
        .subscribe("qm.v1.exec.node-1.command")
        .await
        .expect("node-1 subscribes to its commands");
    let starts = stack.path().join("starts");
    let mut job = quick("once");
    job.command = vec![
        "sh".into(),
        "-c".into(),
        format!("echo started >> {}; sleep 4", starts.display()),
    ];
    let id = stack.submit(&job).await;
    let start = loop {
        let msg = tokio::time::timeout(Duration::from_secs(60), commands.next())
            .await
            .expect("a command for node-1")
            .expect("subscription open");
        let cmd: serde_json::Value = serde_json::from_slice(&msg.payload).expect("json");
        if cmd["kind"] == "start" && cmd["jobId"] == id.as_str() {
            break msg.payload;
        }
    };
    stack
        .wait_for(&id, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    // The scheduler (the only principal that may command executors)
    // sends the same start again, while the attempt runs and after it.
    let scheduler = stack.auth.client(&stack.nats_url, "scheduler").await;
    scheduler
        .nats
        .publish("qm.v1.exec.node-1.command", start.clone())
        .await
        .expect("resent");
    scheduler.nats.flush().await.expect("flushed");
    assert_eq!(stack.wait_final(&id, 60).await.status, "SUCCEEDED");
    scheduler
        .nats
        .publish("qm.v1.exec.node-1.command", start)
        .await
        .expect("resent after the end");
    scheduler.nats.flush().await.expect("flushed");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let ran = std::fs::read_to_string(&starts).expect("the attempt ran");
    assert_eq!(
        ran.lines().count(),
        1,
        "the attempt ran {} times",
        ran.lines().count()
    );
    assert_eq!(stack.attempt_dirs("node-1", &id), 1);
    let j = stack.describe(&id).await.expect("described");
    assert_eq!(
        (j.status.as_str(), j.attempts.len()),
        ("SUCCEEDED", 1),
        "{j:#?}"
    );
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn audit_records_outlive_the_log_truncated_behind_snapshots() {
    // Issue 28: `qm audit` read the log, and the log is truncated behind the
    // scheduler's snapshots: the audit trail went with it.
    let (_nats, _s3, mut stack) = snapshotting("audit-retention").await;
    let scheduler = stack.auth.client(&stack.nats_url, "scheduler").await;
    let js = async_nats::jetstream::new(scheduler.nats.clone());
    let log = js.get_stream(subjects::LOG_STREAM).await.expect("the log");
    let state = || {
        let log = log.clone();
        async move {
            let mut log = log;
            let s = &log.info().await.expect("log info").state;
            (s.first_sequence, s.last_sequence)
        }
    };
    let first = stack.submit(&quick("the-first")).await;
    let (_, stored_by) = state().await;
    assert_eq!(stack.wait_final(&first, 60).await.status, "SUCCEEDED");
    // More work until the log no longer holds the first submit.
    let mut wave = 0;
    while state().await.0 <= stored_by {
        assert!(
            wave < 20,
            "no truncation after {wave} waves\n{}",
            stack.logs()
        );
        wave_of_jobs(&stack, wave).await;
        wave += 1;
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    let audited = |stack: &Stack| {
        let client = stack.client.clone();
        async move {
            let mut all = Vec::new();
            let mut token = None;
            loop {
                let page: qm_wire::messages::ListAuditEventsResponse = client
                    .call(
                        Operation::ListAuditEvents,
                        &qm_wire::messages::ListAuditEvents {
                            next_token: token,
                            ..Default::default()
                        },
                    )
                    .await
                    .expect("audit listed");
                all.extend(page.audit_events);
                token = page.next_token;
                if token.is_none() {
                    return all;
                }
            }
        }
    };
    let events = audited(&stack).await;
    assert!(
        events
            .iter()
            .any(|e| e.operation == "SubmitServiceJob"
                && e.job_id.as_deref() == Some(first.as_str())),
        "the first submit's audit record is gone with the log it was truncated from: {events:#?}"
    );
    // A new leader, from a snapshot: still there, once and only once.
    stack.signal("scheduler-1", "TERM");
    stack.scheduler("scheduler-2");
    stack.wait_leader("scheduler-2").await;
    let events = audited(&stack).await;
    let firsts = events
        .iter()
        .filter(|e| {
            e.operation == "SubmitServiceJob" && e.job_id.as_deref() == Some(first.as_str())
        })
        .count();
    assert_eq!(firsts, 1, "{events:#?}");
    stack.stop_all();
}
