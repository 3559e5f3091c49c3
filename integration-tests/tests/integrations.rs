//! Integrations over NATS, end to end (issue 36, ADR 0022): a team's
//! principal follows the stored events of its own shares with the Rust
//! client (`qm_client`) and `qm events`, resumes from a cursor with
//! nothing missed and nothing twice, and cannot read another team's
//! events by any way an attacker would try.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use qm_client::types::{ErrorCode, EventKind, ListEvents, StoredEvent, SubmitServiceJobResponse};
use qm_client::{CallError, Client};
use qm_integration_tests::refused_by_server;
use qm_integration_tests::stack::{bin, running, running_on, start_nats_for, Auth, Stack};

const QUEUE_YAML: &str = include_str!("../../examples/queues/three-shares.yaml");

async fn connect(stack: &Stack, principal: &str) -> Client {
    qm_client::Connect::new(&stack.nats_url)
        .nkey_file(stack.auth.key(principal))
        .name(format!("integration-{principal}"))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{principal} connects: {e}"))
}

fn trainer(stack: &Stack, name: &str, steps: &str) -> qm_client::types::SubmitServiceJob {
    stack.trainer_job(
        name,
        "training",
        "QS1",
        0,
        &[
            "--steps",
            steps,
            "--checkpoint-every",
            "50",
            "--step-delay-ms",
            "20",
        ],
    )
}

/// Follows `request` until `done` holds for what was read (at most 60 s).
async fn follow(
    client: &Client,
    request: ListEvents,
    done: impl Fn(&[StoredEvent]) -> bool,
) -> Vec<StoredEvent> {
    let mut events = client.events(request);
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done(&seen) {
        let next = tokio::time::timeout_at(deadline, events.next())
            .await
            .unwrap_or_else(|_| panic!("events stopped coming; read so far: {seen:#?}"));
        seen.push(next.expect("the follower goes on").expect("an event"));
    }
    seen
}

fn finished(events: &[StoredEvent], job: &str) -> bool {
    events.iter().any(|e| {
        e.job_id == job
            && e.job()
                .is_some_and(|c| c.to == "SUCCEEDED" || c.to == "FAILED")
    })
}

/// The story both event tests tell, first half: alice runs one job on
/// her share's instance and one on capacity borrowed from bob's idle
/// share; both checkpoint. Returns (own, borrowed) once both run.
async fn alice_borrows(
    stack: &Stack,
    alice: &Client,
) -> (SubmitServiceJobResponse, SubmitServiceJobResponse) {
    let own = alice
        .submit(&trainer(stack, "own", "400"))
        .await
        .expect("alice submits");
    stack
        .wait_for(&own.job_id, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let borrowed = alice
        .submit(&trainer(stack, "borrowed", "600"))
        .await
        .expect("alice submits again");
    stack
        .wait_for(&borrowed.job_id, 60, "running borrowed", |j| {
            j.status == "RUNNING" && j.on_borrowed_capacity
        })
        .await;
    (own, borrowed)
}

/// Second half: once the borrowed job has a checkpoint, bob takes his
/// share back and the borrowed job is preempted (it waits, then resumes).
/// Returns bob's job.
async fn bob_reclaims(stack: &Stack, bob: &Client, borrowed: &str) -> SubmitServiceJobResponse {
    stack.wait_committed(borrowed, 50).await;
    let mut reclaim = trainer(stack, "reclaim", "100");
    reclaim.quota_share_name = Some("QS2".into());
    let theirs = bob.submit(&reclaim).await.expect("bob submits");
    let j = stack
        .wait_for(borrowed, 60, "preempted", |j| {
            j.attempts.first().is_some_and(|a| a.outcome.is_some())
        })
        .await;
    assert_eq!(
        j.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_CROSS_SHARE"),
        "{j:#?}"
    );
    theirs
}

fn key(e: &StoredEvent) -> (String, String, String) {
    (e.cursor.clone(), e.subject.clone(), e.event.to_string())
}

/// Only her share's events, each job's in order, the preemption's start
/// and end, and checkpoints; positions increase and no event comes twice.
fn assert_her_story(all: &[StoredEvent], own: &str, borrowed: &str, theirs: &str) {
    assert!(
        all.iter().all(|e| e.quota_share_name == "QS1"),
        "another share's event reached alice: {all:#?}"
    );
    assert!(!all.iter().any(|e| e.job_id == theirs));
    let transitions = |job: &str| -> Vec<(String, String)> {
        all.iter()
            .filter(|e| e.job_id == job)
            .filter_map(|e| e.job())
            .filter(|c| c.from != c.to)
            .map(|c| (c.from, c.to))
            .collect()
    };
    let path = transitions(borrowed);
    assert_eq!(
        path.first().map(|t| t.0.as_str()),
        Some("SUBMITTED"),
        "{path:?}"
    );
    assert_eq!(
        path.last().map(|t| t.1.as_str()),
        Some("SUCCEEDED"),
        "{path:?}"
    );
    assert!(path.windows(2).all(|w| w[0].1 == w[1].0), "a gap: {path:?}");
    assert_eq!(
        path.iter().filter(|t| t.1 == "RUNNING").count(),
        2,
        "two attempts: {path:?}"
    );
    let phases: Vec<String> = all
        .iter()
        .filter(|e| e.job_id == borrowed)
        .filter_map(|e| e.preemption())
        .map(|p| format!("{} {}", p.kind, p.phase))
        .collect();
    assert_eq!(
        phases,
        vec!["CROSS_SHARE started", "CROSS_SHARE completed"],
        "{all:#?}"
    );
    for id in [own, borrowed] {
        assert!(
            all.iter()
                .any(|e| e.job_id == id && e.kind == EventKind::Checkpoint),
            "no committed checkpoint of {id}"
        );
    }
    // Stored order keeps positions increasing; no event twice.
    let positions: Vec<(u64, u64, u64)> = all
        .iter()
        .filter_map(|e| e.position.as_deref())
        .filter_map(qm_client::types::parse_position)
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    let distinct: BTreeSet<String> = all.iter().map(|e| e.cursor.clone()).collect();
    assert_eq!(distinct.len(), all.len(), "a cursor repeats");
}

/// A follower started from any event's cursor reads exactly the rest: what
/// an integration that stored that cursor reads after a restart; after the
/// last cursor, nothing read before comes again.
async fn assert_cursors_resume(alice: &Client, all: &[StoredEvent]) {
    for k in [0, all.len() / 2, all.len() - 2] {
        let rest = follow(
            alice,
            ListEvents {
                after: Some(all[k].cursor.clone()),
                ..Default::default()
            },
            |seen| seen.len() == all.len() - k - 1,
        )
        .await;
        assert_eq!(
            rest.iter().map(key).collect::<Vec<_>>(),
            all[k + 1..].iter().map(key).collect::<Vec<_>>(),
            "resumed after event {k}"
        );
    }
    let tail = alice
        .list_events(&ListEvents {
            after: Some(all[all.len() - 1].cursor.clone()),
            job_queue: Some("training".into()),
            quota_share_name: Some("QS1".into()),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(tail.caught_up, "{tail:#?}");
    assert!(
        tail.events
            .iter()
            .all(|e| !all.iter().any(|a| a.cursor == e.cursor)),
        "after the last cursor, nothing read before comes again: {tail:#?}"
    );
}

/// From a time nothing was stored since: nothing, and a cursor that goes on
/// from now, never from the oldest event kept; a cursor past the newest
/// stored event: refused, not a silent stall.
async fn assert_times_and_past_cursors(alice: &Client, own: &SubmitServiceJobResponse) {
    let hour_ahead = own.submitted_at.expect("submittedAt") + 3_600_000;
    let nothing = alice
        .list_events(&ListEvents {
            since: Some(hour_ahead),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(
        nothing.events.is_empty() && nothing.caught_up,
        "{nothing:#?}"
    );
    let then = alice
        .list_events(&ListEvents {
            after: Some(nothing.after.clone()),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(then.events.is_empty(), "went back to the oldest: {then:#?}");
    // A cursor past the newest stored event: refused, not a silent stall.
    let e = alice
        .list_events(&ListEvents {
            after: Some("999999999-0".into()),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), Some(ErrorCode::Invalid), "{e}");
    assert!(
        e.to_string().contains("past the newest stored event"),
        "{e}"
    );
}

/// `qm events` prints the same events, and goes on from a cursor.
fn assert_qm_events_prints(stack: &Stack, all: &[StoredEvent]) {
    let out = Command::new(bin("qm"))
        .args(["--nats", &stack.nats_url, "--nkey"])
        .arg(stack.auth.key("alice"))
        .args(["events", "--queue", "training", "--after", &all[0].cursor])
        .output()
        .expect("qm events runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cursors: Vec<&str> = text
        .lines()
        .filter_map(|l| l.rsplit_once('[').map(|(_, c)| c.trim_end_matches(']')))
        .collect();
    let expected: Vec<&str> = all[1..].iter().map(|e| e.cursor.as_str()).collect();
    assert_eq!(&cursors[..expected.len()], expected.as_slice(), "{text}");
    assert!(text.contains("preemption CROSS_SHARE started"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_follows_its_own_events_from_a_cursor_and_reads_no_one_elses() {
    let (_nats, _s3, mut stack) = running("integrations", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let alice = connect(&stack, "alice").await;
    let bob = connect(&stack, "bob").await;

    // Alice borrows, bob takes his share back: the borrowed job is
    // preempted, waits, and resumes.
    let (own, borrowed) = alice_borrows(&stack, &alice).await;
    let theirs = bob_reclaims(&stack, &bob, &borrowed.job_id).await;
    for id in [&own.job_id, &borrowed.job_id, &theirs.job_id] {
        let j = stack.wait_final(id, 120).await;
        assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    }

    // Alice reads her events from the oldest kept: only her share's, each
    // job's in order, the preemption's start and end, and checkpoints.
    let all = follow(&alice, ListEvents::default(), |seen| {
        finished(seen, &own.job_id) && finished(seen, &borrowed.job_id)
    })
    .await;
    assert_her_story(&all, &own.job_id, &borrowed.job_id, &theirs.job_id);

    assert_cursors_resume(&alice, &all).await;
    assert_times_and_past_cursors(&alice, &own).await;
    // One job's events, from a time: what submit-and-watch reads.
    let one = follow(
        &alice,
        ListEvents {
            job_id: Some(own.job_id.clone()),
            since: own.submitted_at.map(|t| t.saturating_sub(5_000)),
            ..Default::default()
        },
        |seen| finished(seen, &own.job_id),
    )
    .await;
    assert!(one.iter().all(|e| e.job_id == own.job_id));
    assert_eq!(
        one.iter().find_map(|e| e.job()).map(|c| c.from),
        Some("SUBMITTED".to_string()),
        "from its first event on: {one:#?}"
    );

    assert_qm_events_prints(&stack, &all);

    // The attacker: bob, after alice's events.
    // 1. Naming her share, or her queue's share through a job id: refused,
    //    or nothing of hers.
    for request in [
        ListEvents {
            job_queue: Some("training".into()),
            quota_share_name: Some("QS1".into()),
            ..Default::default()
        },
        ListEvents {
            job_queue: Some("ops".into()),
            ..Default::default()
        },
    ] {
        let e = bob.list_events(&request).await.expect_err("refused");
        assert_eq!(e.code(), Some(ErrorCode::AccessDenied), "{e}");
        assert!(e.to_string().contains("bob"), "{e}");
    }
    let mine = follow(&bob, ListEvents::default(), |seen| {
        finished(seen, &theirs.job_id)
    })
    .await;
    assert!(
        mine.iter().all(|e| e.quota_share_name == "QS2"),
        "{mine:#?}"
    );
    let by_id = bob
        .list_events(&ListEvents {
            job_id: Some(own.job_id.clone()),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(
        by_id.events.is_empty() && by_id.caught_up,
        "read to the end, nothing of hers: {by_id:#?}"
    );
    // 2. A cursor of hers gets him nothing of hers either.
    let from_hers = follow(
        &bob,
        ListEvents {
            after: Some(all[0].cursor.clone()),
            ..Default::default()
        },
        |seen| finished(seen, &theirs.job_id),
    )
    .await;
    assert!(
        from_hers.iter().all(|e| e.quota_share_name == "QS2"),
        "{from_hers:#?}"
    );
    // 3. A forged cursor is refused, naming the field.
    let e = bob
        .list_events(&ListEvents {
            after: Some("../../QM_EVENTS".into()),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), Some(ErrorCode::Invalid), "{e}");
    assert!(e.to_string().contains("after"), "{e}");
    // 4. Around the API: her live subjects, and the stream itself.
    let t = Instant::now();
    let _sub = bob
        .nats
        .subscribe("qm.v1.events.job.training.QS1.>")
        .await
        .expect("sent");
    refused_by_server(t, "qm.v1.events.job.training.QS1.>").await;
    let t = Instant::now();
    let _frames = bob
        .nats
        .subscribe("qm.v1.events.frames")
        .await
        .expect("sent");
    refused_by_server(t, "qm.v1.events.frames").await;
    let js = async_nats::jetstream::new(bob.nats.clone());
    let read = tokio::time::timeout(Duration::from_secs(5), js.get_stream("QM_EVENTS")).await;
    assert!(
        !matches!(read, Ok(Ok(_))),
        "bob opened the events stream itself"
    );
    let t = Instant::now();
    let _ = bob
        .nats
        .request("$JS.API.CONSUMER.CREATE.QM_EVENTS", "{}".into())
        .await;
    refused_by_server(t, "$JS.API.CONSUMER.CREATE.QM_EVENTS").await;
    // Bob's own follower still works after all that.
    let e: Result<_, CallError> = bob.list_events(&ListEvents::default()).await;
    assert!(e.is_ok(), "{e:?}");
}

/// The development tenancy with the vision team's integrations as
/// principals of their own: its CI hook and its experiment tracker.
fn integrations_tenancy() -> String {
    let dev = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/tenancy.dev.yaml"),
    )
    .expect("the development tenancy");
    assert!(dev.contains("users: [alice]"));
    dev.replace(
        "users: [alice]",
        "users: [alice, vision-ci, vision-tracker]",
    )
}

async fn integrations_stack(
    name: &str,
) -> (
    qm_integration_tests::stack::Nats,
    qm_integration_tests::S3Server,
    Stack,
) {
    let auth = Auth::generated(name, &integrations_tenancy());
    let nats = start_nats_for(auth).await;
    running_on(nats, name, QUEUE_YAML).await
}

/// The Python client installed from this checkout (clients/python), and
/// its interpreter.
fn python() -> PathBuf {
    qm_integration_tests::gateway::pinned_clients("../clients/python").join("bin/python")
}

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/integrations")
        .join(name)
}

/// A Python example as `principal`, its output in `log`.
fn spawn_example(
    stack: &Stack,
    principal: &str,
    script: &str,
    args: &[String],
    log: &Path,
) -> Running {
    let out = std::fs::File::create(log).expect("log");
    Running(
        Command::new(python())
            .arg(example(script))
            .args(["--nats", &stack.nats_url, "--nkey"])
            .arg(stack.auth.key(principal))
            .args(args)
            .env("PYTHONUNBUFFERED", "1")
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{script} starts: {e}")),
    )
}

/// A process killed when dropped (a failed test leaves none behind).
struct Running(Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tracker following alice's team into `db`, as its own principal.
fn spawn_tracker(stack: &Stack, db: &Path, log: &Path) -> Running {
    let args = ["--db".to_string(), db.display().to_string()];
    spawn_example(stack, "vision-tracker", "tracker.py", &args, log)
}

/// What the tracker's database holds (`tracker.py --report`).
fn tracker_report(db: &Path) -> serde_json::Value {
    let out = Command::new(python())
        .arg(example("tracker.py"))
        .args(["--report", "--db"])
        .arg(db)
        .output()
        .expect("tracker --report runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("a JSON report")
}

fn reported_cursors(report: &serde_json::Value) -> Vec<String> {
    report["events"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| r[0].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

async fn wait_until(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tracker_records_every_attempt_preemption_and_checkpoint_once_across_its_restart() {
    let (_nats, _s3, mut stack) = integrations_stack("tracker").await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let alice = connect(&stack, "alice").await;
    let bob = connect(&stack, "bob").await;
    let db = stack.dir.join("runs.sqlite");
    let log = stack.dir.join("tracker.log");
    let mut tracker = spawn_tracker(&stack, &db, &log);

    // The same story as above. The tracker writes its first events, then
    // is killed (no chance to finish anything) while the story goes on
    // without it, and is started again.
    let (own, borrowed) = alice_borrows(&stack, &alice).await;
    wait_until("the tracker's first events", 30, || {
        reported_cursors(&tracker_report(&db)).len() >= 4
    })
    .await;
    tracker.kill().expect("killed");
    let _ = tracker.wait();
    let before_kill = reported_cursors(&tracker_report(&db));
    let theirs = bob_reclaims(&stack, &bob, &borrowed.job_id).await;
    let mut tracker = spawn_tracker(&stack, &db, &log.with_extension("2.log"));
    for id in [&own.job_id, &borrowed.job_id, &theirs.job_id] {
        assert_eq!(stack.wait_final(id, 120).await.status, "SUCCEEDED");
    }

    // The truth: every event of alice's team, as the API stores them.
    let truth = follow(&alice, ListEvents::default(), |seen| {
        finished(seen, &own.job_id) && finished(seen, &borrowed.job_id)
    })
    .await;
    let truth_cursors: Vec<String> = truth.iter().map(|e| e.cursor.clone()).collect();
    wait_until("the tracker to catch up", 60, || {
        reported_cursors(&tracker_report(&db)).len() >= truth_cursors.len()
    })
    .await;
    // Stopped the way an operator stops it: it finishes what it holds.
    stack_signal(&tracker, "TERM");
    let status = tracker.wait().expect("exits");
    assert!(
        status.success(),
        "{status:?}: {}",
        std::fs::read_to_string(log.with_extension("2.log")).unwrap_or_default()
    );
    let report = tracker_report(&db);
    let cursors = reported_cursors(&report);
    assert_eq!(
        &cursors[..truth_cursors.len()],
        truth_cursors.as_slice(),
        "every event once, in order, across the restart (had {} before the kill)",
        before_kill.len()
    );
    assert_eq!(
        cursors.len(),
        truth_cursors.len(),
        "nothing more, nothing twice"
    );
    assert!(
        !report["events"].to_string().contains(&theirs.job_id),
        "bob's job reached the tracker"
    );
    // Derived tables: two attempts of the borrowed job (the first ended by
    // the preemption), its preemption started and completed, checkpoints.
    let attempts: Vec<&serde_json::Value> = report["attempts"]
        .as_array()
        .expect("attempts")
        .iter()
        .filter(|a| a[0] == borrowed.job_id.as_str())
        .collect();
    assert_eq!(attempts.len(), 2, "{report:#}");
    assert_eq!(attempts[0][4], "RUNNABLE", "{report:#}");
    assert!(
        attempts[0][5]
            .as_str()
            .unwrap_or("")
            .contains("PREEMPTED_CROSS_SHARE"),
        "{report:#}"
    );
    assert_eq!(attempts[1][4], "SUCCEEDED", "{report:#}");
    let preemptions = report["preemptions"].as_array().expect("preemptions");
    assert_eq!(preemptions.len(), 1, "{report:#}");
    assert_eq!(preemptions[0][0], borrowed.job_id.as_str());
    assert_eq!(preemptions[0][2], "CROSS_SHARE");
    assert_eq!(preemptions[0][3], theirs.job_id.as_str());
    assert!(preemptions[0][5].is_number(), "completed: {report:#}");
    let checkpoints = report["checkpoints"].as_array().expect("checkpoints");
    for id in [&own.job_id, &borrowed.job_id] {
        assert!(
            checkpoints.iter().any(|c| c[0] == id.as_str()),
            "{report:#}"
        );
    }

    // The attacker: the tracker's principal pointed at bob's share is
    // refused, says so, and writes nothing.
    let other = stack.dir.join("other.sqlite");
    let out = Command::new(python())
        .arg(example("tracker.py"))
        .args(["--nats", &stack.nats_url, "--nkey"])
        .arg(stack.auth.key("vision-tracker"))
        .args(["--queue", "training", "--share", "QS2", "--db"])
        .arg(&other)
        .output()
        .expect("tracker runs");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("access denied") && err.contains("vision-tracker"),
        "{err}"
    );
    assert_eq!(
        reported_cursors(&tracker_report(&other)),
        Vec::<String>::new()
    );
    let spy = connect(&stack, "vision-tracker").await;
    let e = spy
        .list_events(&ListEvents {
            job_queue: Some("training".into()),
            quota_share_name: Some("QS2".into()),
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(e.code(), Some(ErrorCode::AccessDenied), "{e}");
    let t = Instant::now();
    let _sub = spy
        .nats
        .subscribe("qm.v1.events.preemption.training.QS2.>")
        .await
        .expect("sent");
    refused_by_server(t, "qm.v1.events.preemption.training.QS2.>").await;
}

fn stack_signal(child: &Child, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

/// A CI system's status API: records every status POSTed to it.
async fn status_receiver() -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<(String, serde_json::Value)>>>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let got = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = got.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = conn.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let text = String::from_utf8_lossy(&buf).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let length = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if body.len() >= length {
                            let path = head.split(' ').nth(1).unwrap_or("").to_string();
                            let json =
                                serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
                            seen.lock().expect("lock").push((path, json));
                            let _ = conn.write_all(b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await;
                            break;
                        }
                    }
                }
            });
        }
    });
    (url, got)
}

/// POSTs `body` to the hook, signed with `secret` when given; the status
/// code and the answer.
async fn post_hook(
    port: u16,
    body: &[u8],
    secret: Option<&[u8]>,
    extra: &str,
) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let signature = secret
        .map(|s| format!("X-Hub-Signature-256: sha256={}\r\n", hmac_sha256(s, body)))
        .unwrap_or_default();
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .expect("the hook listens");
    let head = format!(
        "POST /hooks/push HTTP/1.1\r\nHost: ci\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{signature}{extra}\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes()).await.expect("sent");
    conn.write_all(body).await.expect("sent");
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.expect("answer");
    let text = String::from_utf8_lossy(&answer).to_string();
    let code = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(serde_json::Value::Null);
    (code, json)
}

/// HMAC-SHA256 of `body` with `key`, in hex, as GitHub signs a webhook.
fn hmac_sha256(key: &[u8], body: &[u8]) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

fn push(commit: &str, branch: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "ref": format!("refs/heads/{branch}"),
        "after": commit,
        "repository": {"full_name": "vision/detector"},
    }))
    .expect("json")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ci_hook_submits_a_signed_push_once_and_reports_how_it_ended() {
    let (_nats, _s3, mut stack) = integrations_stack("ci-hook").await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 2);
    let (status_url, statuses) = status_receiver().await;
    let secret = b"webhook secret".as_slice();
    let secret_file = stack.dir.join("hook.secret");
    std::fs::write(&secret_file, secret).expect("secret");
    let port = qm_integration_tests::stack::free_port();
    let log = stack.dir.join("ci-hook.log");
    // The run: the example trainer, which fails when asked to.
    let args: Vec<String> = vec![
        "--secret-file".into(),
        secret_file.display().to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--queue".into(),
        "training".into(),
        "--share".into(),
        "QS1".into(),
        "--instance-type".into(),
        "ml.g5.xlarge".into(),
        "--status-url".into(),
        format!("{status_url}/statuses/{{commit}}"),
        "--".into(),
        "sh".into(),
        "-c".into(),
        format!(
            "{} --steps 20 --step-delay-ms 10 && test \"$CI_COMMIT\" != bad0bad0bad0",
            stack.trainer()
        ),
    ];
    let hook = spawn_example(&stack, "vision-ci", "ci_hook.py", &args, &log);
    wait_until("the hook to listen", 30, || {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("listening")
    })
    .await;

    // The attacker first: no signature, a wrong one, a huge body, another
    // method: refused, and nothing is submitted.
    let good = "c0ffee00c0ffee00c0ffee00c0ffee00c0ffee00";
    assert_eq!(post_hook(port, &push(good, "main"), None, "").await.0, 401);
    assert_eq!(
        post_hook(port, &push(good, "main"), Some(b"guessed"), "")
            .await
            .0,
        401
    );
    let mut tampered = push(good, "main");
    let signature_of_original = hmac_sha256(secret, &tampered);
    tampered.extend_from_slice(b" ");
    assert_eq!(
        post_hook(
            port,
            &tampered,
            None,
            &format!("X-Hub-Signature-256: sha256={signature_of_original}\r\n")
        )
        .await
        .0,
        401
    );
    let huge = vec![b' '; 70 * 1024];
    assert_eq!(post_hook(port, &huge, Some(secret), "").await.0, 413);
    let (code, answer) = post_hook(port, &push(good, "feature"), Some(secret), "").await;
    assert_eq!(
        (code, answer["ignored"].is_string()),
        (202, true),
        "{answer}"
    );
    let (code, answer) = post_hook(
        port,
        b"{\"ref\": \"refs/heads/main\", \"after\": \"; rm -rf /\"}",
        Some(secret),
        "",
    )
    .await;
    assert_eq!(code, 400, "{answer}");
    let jobs = stack
        .client
        .list_service_jobs(&qm_client::types::ListServiceJobs {
            job_queue: "training".into(),
            ..Default::default()
        })
        .await
        .expect("listed");
    assert!(
        jobs.job_summary_list.is_empty(),
        "something was submitted: {jobs:#?}"
    );

    // A signed push to main: one run, however often it is delivered.
    let (code, first) = post_hook(port, &push(good, "main"), Some(secret), "").await;
    assert_eq!(code, 202, "{first}");
    let (code, again) = post_hook(port, &push(good, "main"), Some(secret), "").await;
    assert_eq!(
        (code, &again["jobId"]),
        (202, &first["jobId"]),
        "a redelivery is the same run"
    );
    let bad = "bad0bad0bad0";
    let (code, failing) = post_hook(port, &push(bad, "main"), Some(secret), "").await;
    assert_eq!(code, 202, "{failing}");
    let good_job = first["jobId"].as_str().expect("a job id").to_string();
    let j = stack.wait_final(&good_job, 120).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    assert_eq!(j.tags.get("commit").map(String::as_str), Some(good));
    let j = stack
        .wait_final(failing["jobId"].as_str().expect("id"), 120)
        .await;
    assert_eq!(j.status, "FAILED", "{j:#?}");

    // Each final status reached the CI system, once per commit.
    wait_until("both statuses", 60, || {
        statuses.lock().expect("lock").len() >= 2
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let got = statuses.lock().expect("lock").clone();
    assert_eq!(got.len(), 2, "{got:#?}");
    let of = |commit: &str| {
        got.iter()
            .find(|(path, _)| path == &format!("/statuses/{commit}"))
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| panic!("no status for {commit}: {got:#?}"))
    };
    assert_eq!(of(good)["state"], "success");
    assert_eq!(of(good)["jobId"], good_job.as_str());
    assert_eq!(of(bad)["state"], "failure");
    drop(hook);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ten_line_python_example_submits_and_watches_a_job_to_its_end() {
    let (_nats, _s3, mut stack) = integrations_stack("ten-lines").await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    let out = Command::new(python())
        .arg(example("submit_and_watch.py"))
        .args([
            stack.trainer(),
            "--steps".into(),
            "100".into(),
            "--checkpoint-every".into(),
            "50".into(),
            "--step-delay-ms".into(),
            "10".into(),
        ])
        .env("QM_NATS_URL", &stack.nats_url)
        .env("QM_NKEY", stack.auth.key("alice"))
        .output()
        .expect("the example runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines.first().is_some_and(|l| l.contains("SUBMITTED ->")),
        "{text}"
    );
    assert!(
        lines
            .last()
            .is_some_and(|l| l.contains("RUNNING -> SUCCEEDED")),
        "{text}"
    );
}
