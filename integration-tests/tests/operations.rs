//! Operating Quartermaster end to end: jobs spread over several executors,
//! checkpoints kept where the job says, a NATS outage, and services stopped
//! during one.

use std::time::Duration;

use qm_checkpoint::store::ObjectStore;
use qm_integration_tests::stack::{
    digest_in, free_port, reference_digest, running, running_on, start_nats_on, trainer_job, Stack,
};
use qm_wire::messages::{CheckpointConfig, SubmitServiceJob};

const TEAM_QUEUE: &str = "jobQueue: {jobQueueName: ops}
quotaShares:
  - quotaShareName: team
    capacityLimits: [{capacityUnit: cpu.small, maxCapacity: 2}]
    resourceSharingConfiguration: {strategy: RESERVE}
";

/// The example trainer on the ops queue's instance type.
fn ops_trainer(name: &str, args: &[&str]) -> SubmitServiceJob {
    let mut job = trainer_job(name, "ops", "team", 1, args);
    job.instance_type = "cpu.small".into();
    job
}

fn shell_job(name: &str, count: u32, script: &str) -> SubmitServiceJob {
    SubmitServiceJob {
        job_name: name.into(),
        job_queue: "ops".into(),
        quota_share_name: Some("team".into()),
        instance_type: "cpu.small".into(),
        instance_count: Some(count),
        command: vec!["sh".into(), "-c".into(), script.into()],
        termination_grace_period_seconds: Some(1),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_over_two_executors_runs_every_rank_and_a_failing_rank_fails_it() {
    let (_nats, _s3, mut stack) = running("gang", TEAM_QUEUE).await;
    stack.executor("node-a", "ops", "cpu.small", 1);
    stack.executor("node-b", "ops", "cpu.small", 1);

    let gang = stack
        .submit(&shell_job(
            "gang",
            2,
            "echo rank=$QM_NODE_RANK nodes=$QM_NUM_NODES hosts=$QM_HOSTS",
        ))
        .await;
    let j = stack.wait_final(&gang, 60).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    // Each node ran its own rank, and both know every node.
    let a = stack.attempt_stdout("node-a", &gang, 1);
    let b = stack.attempt_stdout("node-b", &gang, 1);
    let ranks: Vec<&str> = [&a, &b]
        .iter()
        .map(|out| out.split_whitespace().next().unwrap_or(""))
        .collect();
    let mut sorted = ranks.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["rank=0", "rank=1"], "node-a: {a}\nnode-b: {b}");
    for out in [&a, &b] {
        assert!(out.contains("nodes=2"), "{out}");
        let hosts = out.split("hosts=").nth(1).unwrap_or("").trim();
        assert_eq!(hosts.split(',').count(), 2, "{out}");
    }

    // Rank 1 fails at once while rank 0 would run for ten minutes: rank 0
    // is stopped and the job fails with rank 1's exit code.
    let failing = stack
        .submit(&shell_job(
            "failing",
            2,
            "if [ \"$QM_NODE_RANK\" = 1 ]; then exit 3; fi; exec sleep 600",
        ))
        .await;
    let j = stack.wait_final(&failing, 90).await;
    assert_eq!(j.status, "FAILED", "{j:#?}");
    assert_eq!(j.attempts.len(), 1, "{j:#?}");
    assert_eq!(j.attempts[0].exit_code, Some(3), "{j:#?}");
    // Both instances are free again: a two-node job starts.
    let again = stack
        .submit(&shell_job("again", 2, "echo rank=$QM_NODE_RANK"))
        .await;
    stack
        .wait_for(&again, 60, "SUCCEEDED", |j| j.status == "SUCCEEDED")
        .await;
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoints_live_at_the_jobs_s3_uri_and_a_later_job_resumes_from_them() {
    let (_nats, s3, mut stack) = running("s3uri", TEAM_QUEUE).await;
    stack.executor("node-1", "ops", "cpu.small", 2);
    let store = s3.store();
    let bucket = s3.config.bucket.clone();
    let args = [
        "--steps",
        "300",
        "--checkpoint-every",
        "50",
        "--step-delay-ms",
        "5",
    ];
    let expected = reference_digest(&args);
    let located = |name: &str| {
        let mut job = ops_trainer(name, &args);
        job.checkpoint_config = Some(CheckpointConfig {
            s3_uri: Some(format!("s3://{bucket}/ops/shares/team/run-1")),
            local_path: Some("state/ckpt".into()),
            ..Default::default()
        });
        job
    };

    // A bad URI is refused at submit, naming the field.
    let mut bad = located("bad");
    bad.checkpoint_config = Some(CheckpointConfig {
        s3_uri: Some("s3://Not_A_Bucket/x".into()),
        local_path: None,
        ..Default::default()
    });
    let err = stack
        .client
        .call::<_, serde_json::Value>(qm_wire::subjects::Operation::SubmitServiceJob, &bad)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("checkpointConfig.s3Uri"), "{err}");
    // So is one outside the share's own prefix (ops/shares/team/).
    bad.checkpoint_config = Some(CheckpointConfig {
        s3_uri: Some(format!("s3://{bucket}/custom/run-1")),
        local_path: None,
        ..Default::default()
    });
    let err = stack
        .client
        .call::<_, serde_json::Value>(qm_wire::subjects::Operation::SubmitServiceJob, &bad)
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("outside s3://"), "{err}");

    let first = stack.submit(&located("first")).await;
    let j = stack.wait_final(&first, 120).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    let out = stack.attempt_stdout("node-1", &first, 1);
    assert_eq!(digest_in(&out).as_deref(), Some(expected.as_str()), "{out}");
    // QM_CHECKPOINT_DIR was the localPath inside the attempt's directory.
    let local = stack
        .path()
        .join("node-1")
        .join(&first)
        .join("attempt-1/state/ckpt/qm-checkpoint.json");
    assert!(local.exists(), "{} is missing", local.display());
    // The manifests are under the job's prefix, none under the default one.
    let manifests = store
        .list("ops/shares/team/run-1/manifests/")
        .await
        .expect("list");
    assert!(
        !manifests.is_empty(),
        "no manifests under ops/shares/team/run-1"
    );
    let default = store.list(&format!("ops/{first}/")).await.expect("list");
    assert!(default.is_empty(), "{default:?}");

    // A second job naming the same URI starts from the first one's final
    // checkpoint and prints the same digest.
    let second = stack.submit(&located("second")).await;
    let j = stack.wait_final(&second, 120).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    assert_eq!(j.attempts[0].restored_checkpoint_step, Some(300), "{j:#?}");
    let out = stack.attempt_stdout("node-1", &second, 1);
    assert_eq!(digest_in(&out).as_deref(), Some(expected.as_str()), "{out}");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nats_outage_loses_no_work() {
    let nats = start_nats_on(Some(free_port())).await;
    let (nats, _s3, mut stack) = running_on(nats, "outage", TEAM_QUEUE).await;
    stack.executor("node-1", "ops", "cpu.small", 2);
    let args = [
        "--steps",
        "400",
        "--checkpoint-every",
        "50",
        "--step-delay-ms",
        "10",
    ];
    let expected = reference_digest(&args);
    let job = ops_trainer("through", &args);
    let through = stack.submit(&job).await;
    stack
        .wait_for(&through, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;

    // NATS goes away for a few seconds, while the job runs (and ends).
    nats.container.stop().await.expect("NATS stops");
    tokio::time::sleep(Duration::from_secs(5)).await;
    nats.container.start().await.expect("NATS starts again");

    // Every service is still up and the running job's end is recorded.
    let j = stack.wait_final(&through, 120).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    assert_eq!(j.attempts.len(), 1, "the attempt was not lost: {j:#?}");
    // Every status change reached the events stream, in order, through the
    // outage: each starts where the one before it ended.
    let stored = stack.stored_transitions(&through).await;
    let statuses: Vec<&str> = stored
        .iter()
        .filter(|(from, to)| from != to)
        .map(|(_, to)| to.as_str())
        .collect();
    assert_eq!(
        statuses,
        ["RUNNABLE", "SCHEDULED", "STARTING", "RUNNING", "SUCCEEDED"],
        "{stored:?}"
    );
    for pair in stored.windows(2) {
        assert_eq!(
            pair[0].1, pair[1].0,
            "a gap in the stored events: {stored:?}"
        );
    }
    let out = stack.attempt_stdout("node-1", &through, 1);
    assert_eq!(digest_in(&out).as_deref(), Some(expected.as_str()), "{out}");
    // New work is accepted, scheduled and run after the outage.
    let after = ops_trainer("after", &["--steps", "20"]);
    let after = stack.submit(&after).await;
    stack
        .wait_for(&after, 60, "SUCCEEDED", |j| j.status == "SUCCEEDED")
        .await;
    let up = stack.all_running();
    assert!(up, "a service exited:\n{}", stack.logs());
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn services_stopped_during_a_nats_outage_exit_and_what_they_could_not_send_is_delivered_later(
) {
    let nats = start_nats_on(Some(free_port())).await;
    let (nats, _s3, mut stack) = running_on(nats, "stop-in-outage", TEAM_QUEUE).await;
    stack.executor("node-1", "ops", "cpu.small", 1);
    let job = stack.submit(&shell_job("brief", 1, "sleep 3")).await;
    stack
        .wait_for(&job, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;

    // NATS goes away; the job ends meanwhile, so its end cannot be reported.
    nats.container.stop().await.expect("NATS stops");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while stack.attempt_run("node-1", &job, 1).is_none() {
        assert!(std::time::Instant::now() < deadline, "the job did not end");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Every service exits on SIGTERM although NATS is unreachable (the
    // executor bounds each step: its jobs' grace, withdrawing its
    // instances, delivering reports; the others 5-25 s at most).
    for name in ["node-1", "checkpoint-node-1", "scheduler-1", "admission"] {
        let took = stack.stop_within(name, "TERM", 90);
        assert!(
            took.is_some(),
            "{name} did not exit on SIGTERM during the outage\n{}",
            stack.logs()
        );
    }
    let kept = stack.path().join("node-1").join("undelivered-reports.json");
    assert!(
        kept.exists(),
        "the job's end was kept on disk\n{}",
        stack.logs()
    );

    // NATS is back; the services start again, the executor on the same work
    // directory: the kept report is delivered before it registers, so the
    // job's attempt ends as it did (not HOST_LOST).
    nats.container.start().await.expect("NATS starts again");
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.executor("node-1", "ops", "cpu.small", 1);
    let j = stack.wait_final(&job, 120).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}\n{}", stack.logs());
    assert_eq!(j.attempts.len(), 1, "{j:#?}");
    assert_eq!(j.attempts[0].outcome.as_deref(), Some("SUCCEEDED"));
    assert!(!kept.exists(), "delivered once, then forgotten");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_service_stopped_with_sigterm_commits_what_it_tracks() {
    let (_nats, s3, mut stack) = running("ckpt-term", TEAM_QUEUE).await;
    // Scans every ten minutes: only the final commit on SIGTERM can upload.
    stack.checkpoint_env = vec![("QM_CHECKPOINT_SCAN_INTERVAL_MS".into(), "600000".into())];
    stack.executor("node-1", "ops", "cpu.small", 1);
    let job = ops_trainer(
        "long",
        &[
            "--steps",
            "100000",
            "--checkpoint-every",
            "20",
            "--step-delay-ms",
            "5",
        ],
    );
    let id = stack.submit(&job).await;
    stack
        .wait_for(&id, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let written = stack
        .path()
        .join("node-1")
        .join(&id)
        .join("attempt-1/checkpoint/qm-checkpoint.json");
    for _ in 0..200 {
        if written.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(written.exists(), "the trainer wrote no checkpoint");
    let store = s3.store();
    let manifests = format!("ops/{id}/manifests/");
    assert!(store.list(&manifests).await.expect("list").is_empty());
    stack.signal("checkpoint-node-1", "TERM");
    let stored = store.list(&manifests).await.expect("list");
    assert_eq!(stored.len(), 1, "one final commit: {stored:?}");
    let log = stack.log_of("checkpoint-node-1");
    assert!(log.contains("final commit before stopping"), "{log}");
    stack.stop_all();
}

/// Attempt 1 of `job_id` on node-1 (team share of the ops queue): its
/// checkpoint directory, holding one file, and the request naming it.
fn checkpoint_dir(
    stack: &qm_integration_tests::stack::Stack,
    job_id: &str,
) -> (std::path::PathBuf, qm_wire::system::CheckpointRequest) {
    let dir = stack
        .path()
        .join(format!("node-1/{job_id}/attempt-1/checkpoint"));
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("weights"), "step 10").expect("file");
    let request = qm_wire::system::CheckpointRequest {
        job_queue: "ops".into(),
        quota_share_name: "team".into(),
        job_id: job_id.into(),
        attempt: 1,
        dir: dir.display().to_string(),
        s3_uri: None,
        epoch: None,
        answer_within_ms: None,
        shard: None,
    };
    (dir, request)
}

/// Calls node-1's checkpoint service (`op`: restore, track, flush) as the
/// node's executor would.
async fn checkpoint_call(
    node: &qm_service::client::Client,
    op: &str,
    request: &qm_wire::system::CheckpointRequest,
) -> Result<qm_wire::system::CheckpointReply, qm_service::client::CallError> {
    node.request_raw(
        format!("qm.v1.ckpt.node-1.{op}"),
        serde_json::to_vec(request).expect("json").into(),
        "checkpoint",
    )
    .await
}

/// An executor re-asserts tracking every few seconds; one that races the
/// attempt's end arrives after the flush. It must not start tracking the
/// ended attempt again (a stray tracker would commit the same checkpoint
/// again under a new number and run until the next flush of that job).
#[tokio::test(flavor = "multi_thread")]
async fn a_track_that_arrives_after_its_attempts_flush_starts_nothing() {
    use qm_integration_tests::observe::Metrics;
    let (_nats, _s3, mut stack) = running("late-track", TEAM_QUEUE).await;
    stack.checkpoint("node-1");
    let node = stack.auth.client(&stack.nats_url, "node-1").await;
    let (dir, request) = checkpoint_dir(&stack, "j-late");
    let call = |op: &'static str| checkpoint_call(&node, op, &request);
    // The service may still be starting.
    let mut flushed = call("flush").await;
    for _ in 0..60 {
        if flushed.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        flushed = call("flush").await;
    }
    let flushed = flushed.expect("flush answered");
    assert_eq!(
        flushed.checkpoint.map(|c| c.seq),
        Some(1),
        "the flush commits"
    );
    // The late re-assertion, then the directory changes.
    call("track").await.expect("track answered");
    std::fs::write(dir.join("weights"), "step 20").expect("file");
    tokio::time::sleep(Duration::from_secs(3)).await; // ten scan intervals
    let m = Metrics::scrape(stack.metrics_port("checkpoint-node-1"), None).await;
    assert_eq!(
        m.value("qm_checkpoint_commits_total", &[("result", "committed")]),
        1.0,
        "nothing tracks the ended attempt"
    );
    assert_eq!(
        m.value("qm_checkpoint_jobs", &[]),
        0.0,
        "no state kept for it"
    );
    stack.stop_all();
}

/// An attempt that ends without a flush (its executor died, was cut off,
/// or lost the flush) is no longer re-asserted: after `trackLeaseSeconds`
/// the checkpoint service commits what its directory holds one last time,
/// stops tracking it and forgets the job (no state grows with every job
/// that ever ran on the node).
#[tokio::test(flavor = "multi_thread")]
async fn tracking_no_executor_re_asserts_ends_with_a_last_commit_after_the_lease() {
    use qm_integration_tests::observe::Metrics;
    let (_nats, s3, mut stack) = running("track-lease", TEAM_QUEUE).await;
    // Scans every ten minutes: only the sweep's last commit can upload the
    // second version.
    stack.checkpoint_env = vec![
        ("QM_CHECKPOINT_SCAN_INTERVAL_MS".into(), "600000".into()),
        ("QM_CHECKPOINT_TRACK_LEASE_SECONDS".into(), "10".into()),
    ];
    stack.checkpoint("node-1");
    let node = stack.auth.client(&stack.nats_url, "node-1").await;
    let (dir, request) = checkpoint_dir(&stack, "j-gone");
    let track = || checkpoint_call(&node, "track", &request);
    let mut tracked = track().await;
    for _ in 0..60 {
        if tracked.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        tracked = track().await;
    }
    tracked.expect("track answered");
    let port = stack.metrics_port("checkpoint-node-1");
    let jobs = |m: &Metrics| m.value("qm_checkpoint_jobs", &[]);
    assert_eq!(jobs(&Metrics::scrape(port, None).await), 1.0);
    // The attempt writes once more, then its executor goes silent.
    std::fs::write(dir.join("weights"), "step 20").expect("file");
    let store = s3.store();
    let manifests = "ops/j-gone/manifests/";
    let started = std::time::Instant::now();
    loop {
        let m = Metrics::scrape(port, None).await;
        if jobs(&m) == 0.0 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the job was not forgotten within 60 s of a 10 s lease\n{}",
            stack.log_of("checkpoint-node-1")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Not before the lease: it was tracked at least that long.
    assert!(
        started.elapsed() >= Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    let stored = store.list(manifests).await.expect("list");
    assert_eq!(stored.len(), 1, "the last commit: {stored:?}");
    let log = stack.log_of("checkpoint-node-1");
    assert!(log.contains("tracking not re-asserted"), "{log}");
    // Nothing tracks it any more: a later write is not committed.
    std::fs::write(dir.join("weights"), "step 30").expect("file");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let m = Metrics::scrape(port, None).await;
    assert_eq!(
        m.value("qm_checkpoint_commits_total", &[("result", "committed")]),
        1.0
    );
    stack.stop_all();
}

/// What ages out is bounded by admission's settings: a client token names
/// its job for `clientTokenHours` (24 by default, AWS keeps them 8), the
/// events stream keeps `eventsRetentionDays` (7); a changed setting is
/// applied to the existing stream and bucket at admission's next start.
#[tokio::test(flavor = "multi_thread")]
async fn client_tokens_and_events_age_out_as_admissions_settings_say() {
    let (_nats, _s3, mut stack) = running("retention", TEAM_QUEUE).await;
    let admission = stack.auth.client(&stack.nats_url, "admission").await;
    let js = async_nats::jetstream::new(admission.nats.clone());
    let max_age = |name: &'static str| {
        let js = js.clone();
        async move {
            let mut stream = js.get_stream(name).await.expect("stream");
            stream.info().await.expect("info").config.max_age
        }
    };
    let day = Duration::from_secs(24 * 3600);
    assert_eq!(max_age("KV_qm_client_tokens").await, day);
    assert_eq!(max_age("QM_EVENTS").await, 7 * day);

    stack.signal("admission", "TERM");
    stack.admission_env = vec![
        ("QM_ADMISSION_CLIENT_TOKEN_HOURS".into(), "48".into()),
        ("QM_ADMISSION_EVENTS_RETENTION_DAYS".into(), "30".into()),
    ];
    stack.admission();
    let started = std::time::Instant::now();
    while max_age("KV_qm_client_tokens").await != 2 * day {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the new retention was not applied\n{}",
            stack.log_of("admission")
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(max_age("QM_EVENTS").await, 30 * day);
    // Only admission may change them: a user (or an executor) trying to
    // make the events age out at once is refused, and nothing changes.
    for who in ["alice", "node-1"] {
        let attacker = stack.auth.client(&stack.nats_url, who).await;
        let theirs = async_nats::jetstream::new(attacker.nats.clone());
        let mut config = js
            .get_stream("QM_EVENTS")
            .await
            .expect("stream")
            .info()
            .await
            .expect("info")
            .config
            .clone();
        config.max_age = Duration::from_secs(1);
        let refused = tokio::time::timeout(Duration::from_secs(10), theirs.update_stream(config))
            .await
            .map_or(true, |r| r.is_err());
        assert!(refused, "{who} changed the events stream's retention");
        assert_eq!(max_age("QM_EVENTS").await, 30 * day, "after {who}'s try");
    }
    // A client token still names its job: a retried submit returns it.
    let mut job = ops_trainer("once", &["--steps", "1"]);
    job.client_token = Some("retention-1".into());
    let first = stack.submit(&job).await;
    assert_eq!(stack.submit(&job).await, first);

    // Bad settings are refused at start with the setting named.
    let out = std::process::Command::new(qm_integration_tests::stack::bin("qm-admission"))
        .env("QM_ADMISSION_TENANCY", "/nonexistent")
        .env("QM_ADMISSION_CLIENT_TOKEN_HOURS", "1")
        .output()
        .expect("qm-admission runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("clientTokenHours: 1 is not 8 to 8760"),
        "{said}"
    );
    stack.stop_all();
}

/// A restore is done once per attempt. Asked again (an executor whose call
/// timed out, or that polls for progress) or after the checkpoint service
/// was killed and restarted, it gives the same answer and never finds its
/// own, already restored directory "in use". Its record of the answer
/// lives where only the service may write.
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_asked_again_or_after_a_restart_answers_the_same() {
    use std::os::unix::fs::PermissionsExt;
    let (_nats, _s3, mut stack) = running("restore-again", TEAM_QUEUE).await;
    stack.checkpoint("node-1");
    let node = stack.auth.client(&stack.nats_url, "node-1").await;
    let (_dir, request) = checkpoint_dir(&stack, "j-again");
    // Attempt 1 commits its directory (the service may still be starting).
    let mut flushed = checkpoint_call(&node, "flush", &request).await;
    for _ in 0..60 {
        if flushed.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        flushed = checkpoint_call(&node, "flush", &request).await;
    }
    assert_eq!(flushed.expect("flush").checkpoint.map(|c| c.seq), Some(1));
    // Attempt 2 restores it into its own, empty directory.
    let dir = stack.path().join("node-1/j-again/attempt-2/checkpoint");
    std::fs::create_dir_all(&dir).expect("dir");
    let restore = qm_wire::system::CheckpointRequest {
        attempt: 2,
        dir: dir.display().to_string(),
        answer_within_ms: Some(10_000),
        shard: None,
        ..request.clone()
    };
    let first = checkpoint_call(&node, "restore", &restore)
        .await
        .expect("restored");
    assert!(!first.pending, "a small checkpoint is restored within 10 s");
    assert_eq!(first.checkpoint.as_ref().map(|c| c.seq), Some(1));
    assert_eq!(
        std::fs::read(dir.join("weights")).expect("file"),
        b"step 10"
    );
    let again = checkpoint_call(&node, "restore", &restore)
        .await
        .expect("asked again: answered, not refused");
    assert_eq!(again, first);
    stack.signal("checkpoint-node-1", "KILL");
    stack.restart("checkpoint-node-1");
    let mut after = checkpoint_call(&node, "restore", &restore).await;
    for _ in 0..60 {
        if after.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = checkpoint_call(&node, "restore", &restore).await;
    }
    assert_eq!(
        after.expect("after a restart: answered from its record, not refused"),
        first
    );
    assert_eq!(
        std::fs::read(dir.join("weights")).expect("file"),
        b"step 10"
    );
    let records = stack.path().join("node-1/.qm-checkpoint/restores");
    let mode = std::fs::metadata(&records)
        .expect("records")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o700,
        "only the service may write its records"
    );
    // A flush of the job forgets them.
    checkpoint_call(&node, "flush", &restore)
        .await
        .expect("flush");
    assert_eq!(std::fs::read_dir(&records).expect("records").count(), 0);
    stack.stop_all();
}

/// `qm submit --dry-run` against the live state, then the real submit: the
/// scheduler does what the dry run said (the three-share story's moves).
#[tokio::test(flavor = "multi_thread")]
async fn a_dry_run_says_what_the_scheduler_then_does() {
    use qm_integration_tests::story::QUEUE_YAML;
    use qm_wire::messages::{JobOutlook, JobRef};
    use qm_wire::subjects::Operation;
    let (_nats, _s3, mut stack) = running("dry-run", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let long = [
        "--steps",
        "2000",
        "--checkpoint-every",
        "50",
        "--step-delay-ms",
        "20",
    ];
    let dry = |job: SubmitServiceJob| {
        let c = stack.client.clone();
        async move {
            c.call::<_, JobOutlook>(Operation::DryRunServiceJob, &job)
                .await
                .expect("a dry run answers")
        }
    };
    let p3 = stack
        .submit(&stack.trainer_job("p3", "training", "QS1", 3, &long))
        .await;
    stack
        .wait_for(&p3, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let list = serde_json::json!({"jobQueue": "training"});
    let count = || {
        let (c, list) = (stack.client.clone(), list.clone());
        async move {
            let v: serde_json::Value = c
                .call(Operation::ListServiceJobs, &list)
                .await
                .expect("list");
            v["jobSummaryList"].as_array().map_or(0, Vec::len)
        }
    };
    let before = count().await;

    // p2 would borrow QS2's idle instance: it does.
    let p2_job = stack.trainer_job("p2", "training", "QS1", 2, &long);
    let o = dry(p2_job.clone()).await;
    assert_eq!(
        (o.outcome.as_str(), o.own_instances, o.borrowed_instances),
        ("STARTS", 0, 1),
        "{o:?}"
    );
    assert!(o.lending_shares.contains(&"QS2".to_string()), "{o:?}");
    assert_eq!(count().await, before, "a dry run stores nothing");
    let p2 = stack.submit(&p2_job).await;
    let j = stack
        .wait_for(&p2, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    assert!(j.on_borrowed_capacity, "{j:#?}");

    // QS2's owner would preempt p2: it does.
    let q2_job = stack.trainer_job("qs2_job", "training", "QS2", 1, &long);
    let o = dry(q2_job.clone()).await;
    assert_eq!(o.outcome, "PREEMPTS", "{o:?}");
    assert_eq!(o.victims.len(), 1, "{o:?}");
    assert_eq!(o.victims[0].job_id, p2);
    assert_eq!(o.victims[0].kind, "CROSS_SHARE");
    assert_eq!(o.victims[0].quota_share_name, "QS1");
    let q2 = stack.submit(&q2_job).await;
    let j = stack
        .wait_for(&p2, 60, "preempted", |j| {
            j.attempts.first().is_some_and(|a| a.outcome.is_some())
        })
        .await;
    assert_eq!(
        j.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_CROSS_SHARE"),
        "{j:#?}"
    );
    stack
        .wait_for(&q2, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;

    // p1 would wait behind the requeued p2; explained the same once there.
    let p1_job = stack.trainer_job("p1", "training", "QS1", 1, &long);
    let o = dry(p1_job.clone()).await;
    assert_eq!(o.outcome, "WAITS", "{o:?}");
    assert_eq!(o.ahead, vec![p2.clone()], "{o:?}");
    let p1 = stack.submit(&p1_job).await;
    let explained: JobOutlook = stack
        .client
        .call(Operation::ExplainServiceJob, &JobRef { job_id: p1.clone() })
        .await
        .expect("explained");
    assert_eq!(explained.outcome, "WAITS", "{explained:?}");
    assert_eq!(explained.job_id.as_deref(), Some(p1.as_str()));
    assert_eq!(explained.status_reason, o.status_reason, "the same reason");

    // A job that can never fit is refused as a submit is; another team
    // may not dry-run into QS1.
    let mut huge = stack.trainer_job("huge", "training", "QS1", 1, &long);
    huge.instance_count = Some(9);
    let e = stack
        .client
        .call::<_, JobOutlook>(Operation::DryRunServiceJob, &huge)
        .await
        .expect_err("never fits");
    assert!(e.to_string().contains("MISCONFIGURATION"), "{e}");
    // ...nor have another team's job explained (it names the victims and
    // the jobs ahead in line).
    let bob = stack.auth.client(&stack.nats_url, "bob").await;
    for (op, request) in [
        (Operation::DryRunServiceJob, serde_json::json!(p1_job)),
        (
            Operation::ExplainServiceJob,
            serde_json::json!(JobRef { job_id: p1.clone() }),
        ),
    ] {
        let e = bob
            .call::<_, JobOutlook>(op, &request)
            .await
            .expect_err("not bob's");
        assert_eq!(
            e.code(),
            Some(qm_wire::messages::ErrorCode::AccessDenied),
            "{op:?}: {e}"
        );
    }
    for id in [&p1, &p2, &p3, &q2] {
        stack
            .client
            .call::<_, serde_json::Value>(
                Operation::TerminateServiceJob,
                &serde_json::json!({"jobId": id, "reason": "test over"}),
            )
            .await
            .expect("terminated");
    }
    stack.stop_all();
}

/// `qm` as `principal`: its exit code, stdout and stderr.
fn qm_as(
    stack: &qm_integration_tests::stack::Stack,
    principal: &str,
    args: &[&str],
) -> (i32, String, String) {
    let out = std::process::Command::new(qm_integration_tests::stack::bin("qm"))
        .args(["--nats", &stack.nats_url, "--nkey"])
        .arg(stack.auth.key(principal))
        .args(args)
        .output()
        .expect("qm runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A queue's whole life: DISABLED stops new jobs and nothing else; it is
/// deleted only once drained (the refusal names the jobs left), by an
/// admin; its finished jobs stay readable from the archive; a scheduler
/// restart does not bring it back; made anew, it starts empty on the
/// executors that stayed.
#[tokio::test(flavor = "multi_thread")]
async fn a_queue_is_disabled_drained_and_deleted_and_its_finished_jobs_stay_readable() {
    let (_nats, _s3, mut stack) = running("retire", TEAM_QUEUE).await;
    stack.executor("node-1", "ops", "cpu.small", 2);
    let done = stack.submit(&shell_job("done", 1, "exit 0")).await;
    assert_eq!(stack.wait_final(&done, 60).await.status, "SUCCEEDED");
    let running = stack.submit(&shell_job("long", 1, "sleep 600")).await;
    stack
        .wait_for(&running, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;

    let (code, _, err) = qm_as(&stack, "platform", &["queue", "delete", "ops"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is ENABLED: disable it first"), "{err}");
    // Only who may change the queue's configuration may end it.
    for who in ["alice", "dashboard"] {
        let (code, _, err) = qm_as(&stack, who, &["queue", "disable", "ops"]);
        assert_ne!(code, 0, "{who} disabled the queue");
        let (code, _, err2) = qm_as(&stack, who, &["queue", "delete", "ops"]);
        assert_ne!(code, 0, "{who} deleted the queue");
        for said in [&err, &err2] {
            assert!(
                said.contains("may not change the configuration of job queue ops"),
                "{who}: {said}"
            );
        }
    }

    let (code, out, err) = qm_as(&stack, "platform", &["queue", "disable", "ops"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("job queue ops is DISABLED"), "{out}");
    let refused = stack
        .try_submit(&shell_job("late", 1, "exit 0"))
        .await
        .expect_err("a DISABLED queue takes no job");
    assert!(refused.contains("DISABLED"), "{refused}");
    let (code, _, err) = qm_as(&stack, "platform", &["queue", "delete", "ops"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cannot be deleted yet")
            && err.contains("1 RUNNING job")
            && err.contains(&running),
        "the refusal names the job left: {err}"
    );
    assert_eq!(
        stack.describe(&running).await.expect("running").status,
        "RUNNING",
        "DISABLED stops nothing that runs"
    );

    let (code, _, err) = qm_as(&stack, "platform", &["terminate", &running]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(stack.wait_final(&running, 60).await.status, "FAILED");
    let (code, out, err) = qm_as(&stack, "platform", &["queue", "delete", "ops"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("job queue ops deleted"), "{out}");

    // Gone from the configuration and the scheduler; its jobs archived.
    let (code, _, err) = qm_as(&stack, "platform", &["snapshot", "--queue", "ops"]);
    assert_ne!(code, 0);
    assert!(err.contains("no job queue \"ops\""), "{err}");
    for job in [&done, &running] {
        let j = stack.describe(job).await.expect("archived, still readable");
        assert_eq!(j.job_queue, "ops");
    }
    let refused = stack
        .try_submit(&shell_job("after", 1, "exit 0"))
        .await
        .expect_err("no queue");
    assert!(refused.contains("no job queue"), "{refused}");
    // Deleting it again says it is not there.
    let (code, _, err) = qm_as(&stack, "platform", &["queue", "delete", "ops"]);
    assert_eq!(code, 1);
    assert!(err.contains("no job queue"), "{err}");
    let (code, out, _) = qm_as(&stack, "platform", &["audit", "--queue", "ops"]);
    assert_eq!(code, 0);
    assert!(
        out.lines()
            .any(|l| l.contains("DeleteJobQueue") && l.contains("platform")),
        "{out}"
    );

    // A scheduler killed and restarted replays the log, the deletion in it.
    stack.signal("scheduler-1", "KILL");
    stack.restart("scheduler-1");
    stack.wait_leader("scheduler-1").await;

    // Made anew: empty, and the executor that stayed runs its jobs.
    stack.apply(TEAM_QUEUE).await;
    let again = stack.submit(&shell_job("again", 1, "exit 0")).await;
    assert_eq!(stack.wait_final(&again, 60).await.status, "SUCCEEDED");
    stack.stop_all();
}

/// Two queues attached to one service environment, by `qm apply`.
const SHARED_FLEET: [&str; 2] = [
    "jobQueue: {jobQueueName: research, serviceEnvironment: gpu-fleet, priority: 10}
quotaShares:
  - quotaShareName: team
    capacityLimits: [{capacityUnit: cpu.small, maxCapacity: 2}]
    resourceSharingConfiguration: {strategy: RESERVE}
",
    "jobQueue: {jobQueueName: batch, serviceEnvironment: gpu-fleet}
quotaShares:
  - quotaShareName: team
    capacityLimits: [{capacityUnit: cpu.small, maxCapacity: 2}]
    resourceSharingConfiguration: {strategy: RESERVE}
",
];

fn queue_job(queue: &str, name: &str, script: &str) -> SubmitServiceJob {
    SubmitServiceJob {
        job_queue: queue.into(),
        ..shell_job(name, 1, script)
    }
}

/// A registration must say what it serves, once, in a name that is one
/// subject token (node-1's own identity tries; nothing is stored).
async fn assert_registrations_name_what_they_serve(stack: &Stack) {
    let node = stack.auth.client(&stack.nats_url, "node-1").await;
    for (body, says) in [
        (
            serde_json::json!({"executorId": "node-1", "instances": []}),
            "jobQueue or serviceEnvironment is required",
        ),
        (
            serde_json::json!({"executorId": "node-1", "jobQueue": "batch",
                               "serviceEnvironment": "gpu-fleet", "instances": []}),
            "give jobQueue or serviceEnvironment, not both",
        ),
        (
            serde_json::json!({"executorId": "node-1", "serviceEnvironment": "gpu.>",
                               "instances": []}),
            "serviceEnvironment:",
        ),
    ] {
        let e = node
            .call::<_, serde_json::Value>(qm_wire::subjects::Operation::RegisterExecutor, &body)
            .await
            .expect_err("refused");
        assert!(e.to_string().contains(says), "{body}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_queues_share_one_fleet_the_higher_priority_first_and_neither_preempts_the_other() {
    let (_nats, _s3, mut stack) = running("fleet", SHARED_FLEET[0]).await;
    // Both queues in one file, as `qm apply -f` takes them.
    let file = stack.dir.join("shared-fleet.yaml");
    std::fs::write(&file, SHARED_FLEET.join("---\n")).expect("written");
    let (code, out, err) = qm_as(
        &stack,
        "platform",
        &["apply", "-f", &file.display().to_string()],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("job queue research applied in service environment gpu-fleet (priority 10)")
            && out
                .contains("job queue batch applied in service environment gpu-fleet (priority 0)"),
        "{out}"
    );
    assert_registrations_name_what_they_serve(&stack).await;
    // UpdateJobQueue changes only the fields it is given, and only for who
    // may change the queue: tried raw, as an attacker would.
    let update = qm_wire::subjects::Operation::UpdateJobQueue;
    let alice = stack.auth.client(&stack.nats_url, "alice").await;
    let e = alice
        .call::<_, serde_json::Value>(
            update,
            &serde_json::json!({"jobQueueName": "research", "priority": 1000}),
        )
        .await
        .expect_err("alice may not change the queue");
    assert!(
        e.to_string()
            .contains("may not change the configuration of job queue research"),
        "{e}"
    );
    for (body, says) in [
        (serde_json::json!("research"), "invalid"),
        (
            serde_json::json!({"priority": 5}),
            "jobQueueName: is required",
        ),
        (
            serde_json::json!({"jobQueueName": "nowhere", "priority": 5}),
            "no job queue \"nowhere\"",
        ),
        (
            serde_json::json!({"jobQueueName": "research", "priority": 5000}),
            "priority: must be 0..=1000",
        ),
        (
            serde_json::json!({"jobQueueName": "research", "serviceEnvironment": "other"}),
            "cannot change",
        ),
        (
            serde_json::json!({"jobQueueName": "research", "serviceEnvironment": null}),
            "cannot change",
        ),
    ] {
        let e = stack
            .client
            .call::<_, serde_json::Value>(update, &body)
            .await
            .expect_err("refused");
        assert!(e.to_string().contains(says), "{body}: {e}");
    }
    let stored: qm_wire::system::QueueDocument = stack
        .client
        .call(
            qm_wire::subjects::Operation::DescribeJobQueue,
            &qm_wire::messages::QueueRef {
                job_queue: "research".into(),
            },
        )
        .await
        .expect("described");
    assert_eq!(
        (
            stored.job_queue.service_environment.as_deref(),
            stored.job_queue.priority
        ),
        (Some("gpu-fleet"), Some(10)),
        "nothing refused was stored"
    );
    // One executor joins the environment: both queues run on it.
    stack.executor_joining("node-1", "gpu-fleet", "cpu.small", 2);
    let b1 = stack.submit(&queue_job("batch", "b1", "sleep 600")).await;
    let b2 = stack.submit(&queue_job("batch", "b2", "sleep 600")).await;
    for j in [&b1, &b2] {
        stack
            .wait_for(j, 60, "RUNNING", |j| j.status == "RUNNING")
            .await;
    }

    // research has the higher priority, but no queue stops another's job:
    // its job waits, and says on whose instances.
    let r1 = stack
        .submit(&queue_job("research", "r1", "sleep 600"))
        .await;
    let waiting = stack
        .wait_for(&r1, 60, "a waiting reason", |j| {
            j.status_reason
                .starts_with("WAITING_FOR_ENVIRONMENT_CAPACITY")
        })
        .await;
    assert!(
        waiting
            .status_reason
            .contains("in service environment gpu-fleet, queue batch (priority 0) holds 2"),
        "{}",
        waiting.status_reason
    );
    let b3 = stack.submit(&queue_job("batch", "b3", "exit 0")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for j in [&b1, &b2] {
        assert_eq!(stack.describe(j).await.expect("job").status, "RUNNING");
    }

    // An instance frees: research, served first, takes it; b3 waits on.
    let (code, _, err) = qm_as(&stack, "platform", &["terminate", &b1]);
    assert_eq!(code, 0, "{err}");
    stack
        .wait_for(&r1, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let b3_job = stack
        .wait_for(&b3, 60, "waiting on research", |j| {
            j.status_reason
                .contains("queue research (priority 10) holds 1")
        })
        .await;
    assert_eq!(
        b3_job.status, "RUNNABLE",
        "the lower-priority queue's job comes second"
    );
    // Then batch gets what research leaves.
    let (code, _, err) = qm_as(&stack, "platform", &["terminate", &r1]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(stack.wait_final(&b3, 60).await.status, "SUCCEEDED");

    // Nothing was preempted on the way: b2 ran through on its first attempt.
    let b2_job = stack.describe(&b2).await.expect("b2");
    assert_eq!(
        (b2_job.status.as_str(), b2_job.attempts.len()),
        ("RUNNING", 1)
    );
    let (code, _, err) = qm_as(&stack, "platform", &["terminate", &b2]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(stack.wait_final(&b2, 60).await.status, "FAILED");
}
