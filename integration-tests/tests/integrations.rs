//! Integrations over NATS, end to end (issue 36, ADR 0022): a team's
//! principal follows the stored events of its own shares with the Rust
//! client (`qm_client`) and `qm events`, resumes from a cursor with
//! nothing missed and nothing twice, and cannot read another team's
//! events by any way an attacker would try.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use qm_client::types::{ErrorCode, EventKind, ListEvents, StoredEvent};
use qm_client::{CallError, Client};
use qm_integration_tests::refused_by_server;
use qm_integration_tests::stack::{bin, running, Stack};

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

fn key(e: &StoredEvent) -> (String, String, String) {
    (e.cursor.clone(), e.subject.clone(), e.event.to_string())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_follows_its_own_events_from_a_cursor_and_reads_no_one_elses() {
    let (_nats, _s3, mut stack) = running("integrations", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let alice = connect(&stack, "alice").await;
    let bob = connect(&stack, "bob").await;

    // Alice runs one job on her share's instance and one on capacity
    // borrowed from bob's idle share; both checkpoint. Bob takes his
    // share back: the borrowed job is preempted, waits, and resumes.
    let own = alice
        .submit(&trainer(&stack, "own", "400"))
        .await
        .expect("alice submits");
    stack
        .wait_for(&own.job_id, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let borrowed = alice
        .submit(&trainer(&stack, "borrowed", "600"))
        .await
        .expect("alice submits again");
    stack
        .wait_for(&borrowed.job_id, 60, "running borrowed", |j| {
            j.status == "RUNNING" && j.on_borrowed_capacity
        })
        .await;
    stack.wait_committed(&borrowed.job_id, 50).await;
    let mut reclaim = trainer(&stack, "reclaim", "100");
    reclaim.quota_share_name = Some("QS2".into());
    let theirs = bob.submit(&reclaim).await.expect("bob submits");
    for id in [&own.job_id, &borrowed.job_id, &theirs.job_id] {
        let j = stack.wait_final(id, 120).await;
        assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    }
    let j = stack.describe(&borrowed.job_id).await.expect("described");
    assert_eq!(
        j.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_CROSS_SHARE"),
        "{j:#?}"
    );

    // Alice reads her events from the oldest kept: only her share's, each
    // job's in order, the preemption's start and end, and checkpoints.
    let all = follow(&alice, ListEvents::default(), |seen| {
        finished(seen, &own.job_id) && finished(seen, &borrowed.job_id)
    })
    .await;
    assert!(
        all.iter().all(|e| e.quota_share_name == "QS1"),
        "another share's event reached alice: {all:#?}"
    );
    assert!(!all.iter().any(|e| e.job_id == theirs.job_id));
    let transitions = |job: &str| -> Vec<(String, String)> {
        all.iter()
            .filter(|e| e.job_id == job)
            .filter_map(|e| e.job())
            .filter(|c| c.from != c.to)
            .map(|c| (c.from, c.to))
            .collect()
    };
    let path = transitions(&borrowed.job_id);
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
        .filter(|e| e.job_id == borrowed.job_id)
        .filter_map(|e| e.preemption())
        .map(|p| format!("{} {}", p.kind, p.phase))
        .collect();
    assert_eq!(
        phases,
        vec!["CROSS_SHARE started", "CROSS_SHARE completed"],
        "{all:#?}"
    );
    for id in [&own.job_id, &borrowed.job_id] {
        assert!(
            all.iter()
                .any(|e| &e.job_id == id && e.kind == EventKind::Checkpoint),
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

    // A follower started from any event's cursor reads exactly the rest:
    // what an integration that stored that cursor reads after a restart.
    for k in [0, all.len() / 2, all.len() - 2] {
        let rest = follow(
            &alice,
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
    assert!(
        tail.events
            .iter()
            .all(|e| !all.iter().any(|a| a.cursor == e.cursor)),
        "after the last cursor, nothing read before comes again: {tail:#?}"
    );
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

    // `qm events` prints the same events, and goes on from a cursor.
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
    assert!(by_id.events.is_empty(), "{by_id:#?}");
    // 2. A cursor of hers gets him nothing of hers either.
    let page = bob
        .list_events(&ListEvents {
            after: Some(all[0].cursor.clone()),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(page.events.iter().all(|e| e.quota_share_name == "QS2"));
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
