//! Tenancy and trust, end to end, tried as an attacker would: NATS runs
//! with the authorization `qm auth` generates from `deploy/tenancy.dev.yaml`
//! (vision/alice owns training/QS1, speech/bob owns training/QS2), every
//! service and client has its own nkey. Each attack is refused by the NATS
//! server, by a service, or both, and nothing it aimed at changes.

use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use qm_integration_tests::refused_by_server;
use qm_integration_tests::stack::{
    bin, running, start_command, start_nats_with, trainer_job, Auth, Stack, Tls,
};
use qm_service::client::CallError;
use qm_wire::messages::{
    ErrorCode, GetServiceJobLogs, JobRef, ListServiceJobs, ListServiceJobsResponse, ServiceJob,
    SubmitServiceJob, SubmitServiceJobResponse, TerminateServiceJob, UpdateServiceJob,
};
use qm_wire::subjects::Operation;
use qm_wire::system::{CheckpointRequest, ExecCommand};

const QUEUE_YAML: &str = include_str!("../../examples/queues/three-shares.yaml");

/// A job that runs a while (so it can be attacked while RUNNING): the
/// story's sleeper at priority 1, stopped within a second.
fn sleeper(name: &str, share: &str, secs: u64) -> SubmitServiceJob {
    SubmitServiceJob {
        scheduling_priority: Some(1),
        termination_grace_period_seconds: Some(1),
        estimated_runtime_seconds: None,
        ..qm_integration_tests::story::sleeper(name, share, secs)
    }
}

fn denied(e: &CallError, needles: &[&str]) {
    assert_eq!(e.code(), Some(ErrorCode::AccessDenied), "{e}");
    for n in needles {
        assert!(e.to_string().contains(n), "{n:?} missing in {e}");
    }
}

/// A start command that would write `marker` if it ever ran.
fn forged_start(epoch: u64, marker: &std::path::Path) -> ExecCommand {
    start_command(
        epoch,
        "j-forged",
        vec![
            "sh".into(),
            "-c".into(),
            format!("id > {}", marker.display()),
        ],
    )
}

async fn job(stack: &Stack, id: &str) -> ServiceJob {
    stack
        .describe(id)
        .await
        .expect("the admin can read every job")
}

fn qm(stack: &Stack, principal: &str, args: &[&str]) -> std::process::Output {
    Command::new(bin("qm"))
        .args(["--nats", &stack.nats_url, "--nkey"])
        .arg(stack.auth.key(principal))
        .args(args)
        .output()
        .expect("qm runs")
}

/// Every operation of alice's on bob's share (`theirs`, his job) is
/// refused by admission or the scheduler, naming her, the operation and
/// the share.
async fn assert_alice_is_refused_on_bobs_share(alice: &qm_service::client::Client, theirs: &str) {
    let e = alice
        .call::<_, serde_json::Value>(Operation::SubmitServiceJob, &sleeper("x", "QS2", 1))
        .await
        .expect_err("not her share");
    denied(
        &e,
        &[
            "\"alice\" (team vision)",
            "submit jobs to share training/QS2",
        ],
    );
    let e = alice
        .call::<_, serde_json::Value>(
            Operation::UpdateServiceJob,
            &UpdateServiceJob {
                job_id: theirs.to_string(),
                scheduling_priority: 99,
            },
        )
        .await
        .expect_err("not her job");
    denied(
        &e,
        &["alice", "update or terminate jobs of share training/QS2"],
    );
    let e = alice
        .call::<_, serde_json::Value>(
            Operation::TerminateServiceJob,
            &TerminateServiceJob {
                job_id: theirs.to_string(),
                reason: "mine now".into(),
            },
        )
        .await
        .expect_err("not her job");
    denied(&e, &["alice", "training/QS2"]);
    for op in [Operation::DescribeServiceJob] {
        let e = alice
            .call::<_, serde_json::Value>(
                op,
                &JobRef {
                    job_id: theirs.to_string(),
                },
            )
            .await
            .expect_err("not her job");
        denied(&e, &["read jobs of share training/QS2"]);
    }
    let e = alice
        .call::<_, serde_json::Value>(
            Operation::GetServiceJobLogs,
            &GetServiceJobLogs {
                job_id: theirs.to_string(),
                ..Default::default()
            },
        )
        .await
        .expect_err("not her logs");
    denied(&e, &["read jobs of share training/QS2"]);
    let e = alice
        .call::<_, serde_json::Value>(
            Operation::ListServiceJobs,
            &ListServiceJobs {
                job_queue: "training".into(),
                quota_share_name: Some("QS2".into()),
                ..Default::default()
            },
        )
        .await
        .expect_err("not her share");
    denied(&e, &["read jobs of share training/QS2"]);
    let e = alice
        .call::<_, serde_json::Value>(
            Operation::ApplyJobQueue,
            &serde_yaml_ng::from_str::<serde_json::Value>(QUEUE_YAML).expect("yaml"),
        )
        .await
        .expect_err("teams do not change queues");
    denied(&e, &["change the configuration of job queue training"]);
}

/// qm whoami and qm audit, as the real command line: every write audited
/// with who made it, none of the refused ones; a team's audit shows its
/// own shares only; filters work.
fn assert_whoami_and_audit(stack: &Stack, mine: &str, theirs: &str) {
    let out = qm(stack, "alice", &["whoami"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(
        text.contains("alice (team, team vision)") && text.contains("owns training/QS1"),
        "{text}"
    );
    let out = qm(stack, "platform", &["audit", "--output", "json"]);
    assert!(out.status.success(), "{out:?}");
    let all: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    let seen: Vec<(String, String, String)> = all
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or("").to_string();
            (s("principal"), s("operation"), s("jobId"))
        })
        .collect();
    for expected in [
        (
            "platform".to_string(),
            "ApplyJobQueue".to_string(),
            String::new(),
        ),
        ("alice".into(), "SubmitServiceJob".into(), mine.to_string()),
        ("bob".into(), "SubmitServiceJob".into(), theirs.to_string()),
        ("alice".into(), "UpdateServiceJob".into(), mine.to_string()),
        (
            "alice".into(),
            "TerminateServiceJob".into(),
            mine.to_string(),
        ),
    ] {
        assert!(
            seen.contains(&expected),
            "{expected:?} missing in {seen:#?}"
        );
    }
    // The refused writes left no trace: nothing by alice on bob's job.
    assert!(
        !seen.iter().any(|(p, _, j)| p == "alice" && j == theirs),
        "{seen:#?}"
    );
    // A team's audit shows its own shares only; filters work.
    let out = qm(stack, "alice", &["audit", "--output", "json"]);
    assert!(out.status.success(), "{out:?}");
    let hers: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert!(!hers.is_empty());
    assert!(
        hers.iter().all(|e| e["quotaShareName"] != "QS2"),
        "{hers:#?}"
    );
    let out = qm(
        stack,
        "platform",
        &["audit", "--by", "bob", "--output", "json"],
    );
    let bobs: Vec<serde_json::Value> =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
    assert_eq!(bobs.len(), 1, "{bobs:#?}");
    let out = qm(
        stack,
        "platform",
        &["audit", "--since", "2999-01-01T00:00:00Z"],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        1,
        "only the header"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn teams_act_on_their_own_shares_only_and_every_write_is_audited() {
    let (_nats, _s3, mut stack) = running("tenancy", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let alice = stack.auth.client(&stack.nats_url, "alice").await;
    let bob = stack.auth.client(&stack.nats_url, "bob").await;
    // `qm watch` as alice: it subscribes to her shares only.
    let mut watch = Command::new(bin("qm"))
        .args(["--nats", &stack.nats_url, "--nkey"])
        .arg(stack.auth.key("alice"))
        .args(["watch", "--queue", "training"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("qm watch runs");
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Each team submits to its own share.
    let mine: SubmitServiceJobResponse = alice
        .call(Operation::SubmitServiceJob, &sleeper("alice-1", "QS1", 60))
        .await
        .expect("alice submits to QS1");
    let theirs: SubmitServiceJobResponse = bob
        .call(Operation::SubmitServiceJob, &sleeper("bob-1", "QS2", 60))
        .await
        .expect("bob submits to QS2");
    stack
        .wait_for(&theirs.job_id, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;

    assert_alice_is_refused_on_bobs_share(&alice, &theirs.job_id).await;
    // Listing the whole queue shows her own jobs only.
    let listed: ListServiceJobsResponse = alice
        .call(
            Operation::ListServiceJobs,
            &ListServiceJobs {
                job_queue: "training".into(),
                ..Default::default()
            },
        )
        .await
        .expect("alice lists her queue");
    let ids: Vec<&str> = listed
        .job_summary_list
        .iter()
        .map(|j| j.job_id.as_str())
        .collect();
    assert_eq!(ids, vec![mine.job_id.as_str()], "{listed:#?}");

    // Bob's job is untouched: still running, at its priority, one attempt.
    let b = job(&stack, &theirs.job_id).await;
    assert_eq!(
        (b.status.as_str(), b.scheduling_priority),
        ("RUNNING", 1),
        "{b:#?}"
    );
    assert_eq!(b.attempts.len(), 1, "{b:#?}");

    // Alice may change and end her own job.
    let _: ServiceJob = alice
        .call(
            Operation::UpdateServiceJob,
            &UpdateServiceJob {
                job_id: mine.job_id.clone(),
                scheduling_priority: 7,
            },
        )
        .await
        .expect("her own job");
    let _: serde_json::Value = alice
        .call(
            Operation::TerminateServiceJob,
            &TerminateServiceJob {
                job_id: mine.job_id.clone(),
                reason: "done with it".into(),
            },
        )
        .await
        .expect("her own job");
    let a = stack.wait_final(&mine.job_id, 60).await;
    assert_eq!(a.status, "FAILED", "{a:#?}");

    // alice's watch saw her job and nothing of bob's.
    let _ = watch.kill();
    let watched = watch.wait_with_output().expect("qm watch output");
    let seen = String::from_utf8_lossy(&watched.stdout);
    let said = String::from_utf8_lossy(&watched.stderr);
    assert!(
        said.contains("qm.v1.events.job.training.QS1."),
        "watches her share: {said}"
    );
    assert!(
        seen.contains("alice-1") || seen.contains(&mine.job_id),
        "{seen}"
    );
    assert!(
        !seen.contains("bob-1") && !seen.contains(&theirs.job_id),
        "alice's watch saw bob's job: {seen}"
    );

    assert_whoami_and_audit(&stack, &mine.job_id, &theirs.job_id);
    stack.stop_all();
}

/// Going around admission: a relayed request with a forged admin caller
/// straight to the scheduler, deposing the leader by writing its lease,
/// answering for a dead leader (a standby would then wait out its lease
/// instead of taking over at once) or probing for it, and writing the
/// configuration bucket directly: the server refuses each.
async fn assert_scheduler_and_config_subjects_refused(alice: &qm_service::client::Client) {
    let forged_relay = serde_json::json!({
        "operation": "TerminateServiceJob",
        "body": {"jobId": "j-anything", "reason": "forged"},
        "caller": {"principal": "platform", "role": "ADMIN"}
    });
    let t = Instant::now();
    alice
        .nats
        .publish(
            "qm.v1.sched.request",
            serde_json::to_vec(&forged_relay).expect("json").into(),
        )
        .await
        .expect("sent");
    refused_by_server(t, "qm.v1.sched.request").await;
    let t = Instant::now();
    alice
        .nats
        .publish(
            "$KV.qm_leader.scheduler",
            br#"{"holder":"me","expiresAt":99999999999999}"#.to_vec().into(),
        )
        .await
        .expect("sent");
    refused_by_server(t, "$KV.qm_leader.scheduler").await;
    // 2c. Answering for a dead leader (a standby would then wait out its
    //     lease instead of taking over at once), or probing for it.
    let t = Instant::now();
    let _answer = alice
        .nats
        .subscribe("qm.v1.sched.presence.*")
        .await
        .expect("sent");
    refused_by_server(t, "qm.v1.sched.presence.*").await;
    let t = Instant::now();
    alice
        .nats
        .publish("qm.v1.sched.presence.scheduler-1", "".into())
        .await
        .expect("sent");
    refused_by_server(t, "qm.v1.sched.presence.scheduler-1").await;
    // 3. Writing the configuration bucket directly.
    let t = Instant::now();
    alice
        .nats
        .publish("$KV.qm_config.queue.training", b"{}".to_vec().into())
        .await
        .expect("sent");
    refused_by_server(t, "$KV.qm_config.queue.training").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_team_client_cannot_reach_what_only_services_may_touch() {
    let (_nats, _s3, mut stack) = running("tenancy-raw", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let alice = stack.auth.client(&stack.nats_url, "alice").await;
    let bob = stack.auth.client(&stack.nats_url, "bob").await;
    let marker = stack.path().join("pwned");
    let admission = stack.auth.client(&stack.nats_url, "admission").await;
    let js = async_nats::jetstream::new(admission.nats.clone());
    let log_last = || {
        let js = js.clone();
        async move {
            let mut log = js.get_stream("QM_LOG").await.expect("log");
            log.info().await.expect("info").state.last_sequence
        }
    };

    // 1. A start command straight to the executor, with the largest epoch.
    let forged = forged_start(u64::MAX, &marker);
    let t = Instant::now();
    alice
        .nats
        .publish(
            "qm.v1.exec.node-1.command",
            serde_json::to_vec(&forged).expect("json").into(),
        )
        .await
        .expect("sent");
    refused_by_server(t, "qm.v1.exec.node-1.command").await;

    // 2. Appending to the log (a submit, a decision).
    let before = log_last().await;
    for subject in [
        "qm.v1.log.submit.training",
        "qm.v1.log.sched",
        "qm.v1.log.register.node-1",
    ] {
        let t = Instant::now();
        alice
            .nats
            .publish(
                subject,
                br#"{"entry":"leader","epoch":1,"holder":"me"}"#.to_vec().into(),
            )
            .await
            .expect("sent");
        refused_by_server(t, subject).await;
    }
    assert_scheduler_and_config_subjects_refused(&alice).await;
    // 4. Registering as an executor: the server lets her reach admission
    //    (her own API subject), admission refuses.
    let e = alice
        .call::<_, serde_json::Value>(
            Operation::RegisterExecutor,
            &serde_json::json!({
                "executorId": "node-1", "jobQueue": "training", "incarnation": "evil",
                "instances": [{"instanceType": "ml.g5.xlarge", "count": 100}]
            }),
        )
        .await
        .expect_err("not an executor");
    denied(&e, &["\"alice\" may not register executor \"node-1\""]);
    // 5. Speaking as bob: his API subject, his inbox.
    let t = Instant::now();
    alice
        .nats
        .publish(
            "qm.v1.api.bob.TerminateServiceJob",
            br#"{"jobId":"x","reason":"y"}"#.to_vec().into(),
        )
        .await
        .expect("sent");
    refused_by_server(t, "qm.v1.api.bob.TerminateServiceJob").await;
    // 6. Listening to bob's share's events, the executor's logs subject,
    //    bob's replies.
    for subject in [
        "qm.v1.events.job.training.QS2.>",
        "qm.v1.events.>",
        "qm.v1.exec.node-1.logs",
        "_INBOX_bob.>",
    ] {
        let t = Instant::now();
        let _sub = alice.nats.subscribe(subject).await.expect("sent");
        refused_by_server(t, subject).await;
    }
    let mut own = alice
        .nats
        .subscribe("qm.v1.events.job.training.QS1.>")
        .await
        .expect("her own share's events");
    let mut spy = alice
        .nats
        .subscribe("qm.v1.events.job.training.QS2.>")
        .await
        .expect("sent");
    alice.nats.flush().await.expect("flush");
    let theirs: SubmitServiceJobResponse = bob
        .call(Operation::SubmitServiceJob, &sleeper("bob-1", "QS2", 1))
        .await
        .expect("bob submits");
    let b = stack.wait_final(&theirs.job_id, 60).await;
    assert_eq!(b.status, "SUCCEEDED", "{b:#?}");
    let hers: SubmitServiceJobResponse = alice
        .call(Operation::SubmitServiceJob, &sleeper("alice-1", "QS1", 1))
        .await
        .expect("alice submits");
    let first = tokio::time::timeout(Duration::from_secs(30), own.next())
        .await
        .expect("alice hears her own job's events")
        .expect("an event");
    assert!(first.subject.contains(&hers.job_id), "{}", first.subject);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), spy.next())
            .await
            .is_err(),
        "alice heard an event of bob's share"
    );

    // Nothing ran and nothing was stored by any of it.
    assert!(!marker.exists(), "the forged command ran");
    assert_eq!(stack.attempt_dirs("node-1", "j-forged"), 0);
    let after = log_last().await;
    let a = stack.wait_final(&hers.job_id, 60).await;
    assert_eq!(a.status, "SUCCEEDED", "{a:#?}");
    // Only the story's own entries were added (bob's and alice's jobs):
    // every entry after `before` is one the services wrote.
    let log = js.get_stream("QM_LOG").await.expect("log");
    for seq in before + 1..=after {
        let m = log.get_raw_message(seq).await.expect("entry");
        assert!(
            !m.payload.windows(4).any(|w| w == b"\"me\""),
            "a forged entry was stored at {seq}: {}",
            String::from_utf8_lossy(&m.payload)
        );
    }
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forged_start_never_runs_and_the_executor_obeys_the_real_leader() {
    let (_nats, _s3, mut stack) = running("tenancy-epoch", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let marker = stack.path().join("pwned");
    let first = stack.submit(&sleeper("warm-up", "QS1", 1)).await;
    assert_eq!(stack.wait_final(&first, 60).await.status, "SUCCEEDED");
    let forged = |epoch: u64| forged_start(epoch, &marker);
    // From a non-scheduler identity (the executor's own, even): the server
    // refuses it.
    let node = stack.auth.client(&stack.nats_url, "node-1").await;
    let t = Instant::now();
    node.nats
        .publish(
            "qm.v1.exec.node-1.command",
            serde_json::to_vec(&forged(u64::MAX)).expect("json").into(),
        )
        .await
        .expect("sent");
    refused_by_server(t, "qm.v1.exec.node-1.command").await;
    // With the scheduler's stolen credentials but not the lease's epoch:
    // the executor ignores it (and does not take its epoch as the new one).
    let stolen = stack.auth.client(&stack.nats_url, "scheduler").await;
    for epoch in [u64::MAX, 0] {
        stolen
            .nats
            .publish(
                "qm.v1.exec.node-1.command",
                serde_json::to_vec(&forged(epoch)).expect("json").into(),
            )
            .await
            .expect("sent");
    }
    stolen.nats.flush().await.expect("flush");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !stack
        .log_of("node-1")
        .contains("its epoch is not the current scheduler lease's")
    {
        assert!(Instant::now() < deadline, "{}", stack.log_of("node-1"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The real leader's next job runs as usual.
    let next = stack.submit(&sleeper("after", "QS1", 1)).await;
    assert_eq!(stack.wait_final(&next, 60).await.status, "SUCCEEDED");
    assert!(!marker.exists(), "a forged start ran");
    assert_eq!(stack.attempt_dirs("node-1", "j-forged"), 0);
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoint_requests_outside_the_work_directory_or_allowed_prefixes_are_refused() {
    let (_nats, s3, mut stack) = running("tenancy-ckpt", QUEUE_YAML).await;
    stack.checkpoint("node-1");
    let node = stack.auth.client(&stack.nats_url, "node-1").await;
    let work = stack.path().join("node-1");
    std::fs::create_dir_all(work.join("j-1/attempt-1/checkpoint")).expect("dir");
    let outside = stack.path().join("secrets");
    std::fs::create_dir_all(&outside).expect("dir");
    std::fs::write(outside.join("key"), "secret").expect("file");
    std::os::unix::fs::symlink(&outside, work.join("j-1/attempt-1/linked")).expect("link");
    let request = |dir: String, s3_uri: Option<String>| CheckpointRequest {
        job_queue: "training".into(),
        quota_share_name: "QS1".into(),
        job_id: "j-1".into(),
        attempt: 1,
        dir,
        s3_uri,
        epoch: None,
        answer_within_ms: None,
        shard: None,
    };
    let call = |req: CheckpointRequest| {
        let node = node.clone();
        async move {
            node.request_raw::<serde_json::Value>(
                "qm.v1.ckpt.node-1.restore".into(),
                serde_json::to_vec(&req).expect("json").into(),
                "checkpoint",
            )
            .await
        }
    };
    let retry_until_up = Instant::now() + Duration::from_secs(30);
    let inside = work.join("j-1/attempt-1/checkpoint").display().to_string();
    loop {
        match call(request(inside.clone(), None)).await {
            Ok(_) => break,
            Err(e) => {
                assert!(Instant::now() < retry_until_up, "checkpoint service: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    let bucket = s3.config.bucket.clone();
    for (req, why) in [
        (
            request(outside.display().to_string(), None),
            "is outside the work directory",
        ),
        (
            request("/etc".into(), None),
            "is outside the work directory",
        ),
        (
            request(
                work.join("j-1/attempt-1/linked").display().to_string(),
                None,
            ),
            "goes through a symbolic link",
        ),
        (
            request(format!("{}/../../secrets", inside), None),
            "must not contain '.' or '..'",
        ),
        (
            request("relative/dir".into(), None),
            "must be an absolute path",
        ),
        (
            request(
                inside.clone(),
                Some(format!("s3://{bucket}/training/j-someone-else")),
            ),
            "outside s3://",
        ),
        (
            request(
                inside.clone(),
                Some(format!("s3://{bucket}/training/shares/QS2/run")),
            ),
            "outside s3://",
        ),
    ] {
        let e = call(req).await.expect_err(why);
        assert!(e.to_string().contains(why), "{why:?} missing in {e}");
    }
    // Its own share's prefix is fine.
    call(request(
        inside.clone(),
        Some(format!("s3://{bucket}/training/shares/QS1/run")),
    ))
    .await
    .expect("inside the share's prefix");
    // A team cannot call the checkpoint service at all.
    let alice = stack.auth.client(&stack.nats_url, "alice").await;
    let t = Instant::now();
    let _ = alice
        .request_raw::<serde_json::Value>(
            "qm.v1.ckpt.node-1.restore".into(),
            serde_json::to_vec(&request(outside.display().to_string(), None))
                .expect("json")
                .into(),
            "checkpoint",
        )
        .await
        .expect_err("refused");
    refused_by_server(t, "qm.v1.ckpt.node-1.restore").await;
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_credentials_are_refused_with_a_clear_message_by_every_service_and_qm() {
    let (nats, _s3, stack) = running("tenancy-creds", QUEUE_YAML).await;
    // A key the server has never seen, named like a real principal.
    let stranger = Auth::dev("stranger");
    let wrong = stranger.key("alice");
    let out = Command::new(bin("qm"))
        .args(["--nats", &nats.url, "--nkey"])
        .arg(&wrong)
        .arg("whoami")
        .output()
        .expect("qm runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.starts_with("qm: error: NATS refused the credentials for alice at "),
        "{err}"
    );
    // No credentials at all.
    let out = Command::new(bin("qm"))
        .args(["--nats", &nats.url, "whoami"])
        .env_remove("QM_NATS_NKEY_FILE")
        .output()
        .expect("qm runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("NATS refused the credentials for anonymous"),
        "{err}"
    );
    // Every service exits at once, naming the problem.
    let tenancy =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/tenancy.dev.yaml");
    for (binary, principal, env) in [
        (
            "qm-admission",
            "admission",
            vec![("QM_ADMISSION_TENANCY", tenancy.display().to_string())],
        ),
        ("qm-scheduler", "scheduler", vec![]),
        (
            "qm-executor",
            "node-1",
            vec![
                ("QM_EXECUTOR_EXECUTOR_ID", "node-1".to_string()),
                ("QM_EXECUTOR_JOB_QUEUE", "training".to_string()),
                (
                    "QM_EXECUTOR_INSTANCES",
                    r#"[{"instanceType":"ml.g5.xlarge","count":1}]"#.to_string(),
                ),
                (
                    "QM_EXECUTOR_WORK_DIR",
                    stack.path().join("w").display().to_string(),
                ),
            ],
        ),
        (
            "qm-checkpoint",
            "ckpt-node-1",
            vec![
                ("QM_CHECKPOINT_NODE", "node-1".to_string()),
                ("QM_CHECKPOINT_S3_BUCKET", "b".to_string()),
                (
                    "QM_CHECKPOINT_WORK_DIR",
                    stack.path().join("w").display().to_string(),
                ),
            ],
        ),
    ] {
        let started = Instant::now();
        let out = Command::new(bin(binary))
            .env("QM_NATS_URL", &nats.url)
            .env("QM_NATS_NKEY_FILE", stranger.key(principal))
            .envs(env)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{binary}: {err}");
        assert!(
            err.contains(&format!(
                "NATS refused the credentials for {principal} at {}",
                nats.url
            )),
            "{binary}: {err}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{binary} retried"
        );
    }
}

/// A CA, and a server certificate it signs for 127.0.0.1.
fn test_tls() -> Tls {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "quartermaster test CA");
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let server_key = rcgen::KeyPair::generate().expect("key");
    let server_params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("params");
    let server_cert = server_params.signed_by(&server_key, &issuer).expect("cert");
    Tls {
        ca_pem: ca_cert.pem(),
        cert_pem: server_cert.pem(),
        key_pem: server_key.serialize_pem(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn over_tls_with_a_ca_made_at_test_time_jobs_run_and_plain_clients_are_refused() {
    let tls = test_tls();
    let nats = start_nats_with(None, Some(tls.clone())).await;
    assert!(nats.url.starts_with("tls://"), "{}", nats.url);
    let ca_file = std::env::temp_dir().join(format!("qm-test-ca-{}.pem", std::process::id()));
    std::fs::write(&ca_file, &tls.ca_pem).expect("ca");
    let s3 = qm_integration_tests::start_s3().await;
    let mut stack = Stack::new_with(
        &nats,
        &s3,
        "tenancy-tls",
        vec![("QM_NATS_CA_FILE".into(), ca_file.display().to_string())],
    )
    .await;
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(QUEUE_YAML).await;
    // The checkpoint service finds its S3 keys through the AWS default
    // chain (the standard variables), not its own settings.
    stack.checkpoint_env = vec![
        ("QM_CHECKPOINT_S3_ACCESS_KEY_ID".into(), String::new()),
        ("QM_CHECKPOINT_S3_SECRET_ACCESS_KEY".into(), String::new()),
        ("AWS_ACCESS_KEY_ID".into(), s3.config.access_key_id.clone()),
        (
            "AWS_SECRET_ACCESS_KEY".into(),
            s3.config.secret_access_key.clone(),
        ),
    ];
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    let args = [
        "--steps",
        "40",
        "--checkpoint-every",
        "10",
        "--step-delay-ms",
        "5",
    ];
    let id = stack
        .submit(&trainer_job("over-tls", "training", "QS1", 1, &args))
        .await;
    let j = stack.wait_final(&id, 120).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}\n{}", stack.logs());
    assert!(
        stack
            .log_of("checkpoint-node-1")
            .contains("AWS default chain"),
        "{}",
        stack.log_of("checkpoint-node-1")
    );
    use qm_checkpoint::store::ObjectStore;
    let manifests = s3
        .store()
        .list(&format!("training/{id}/manifests/"))
        .await
        .expect("list");
    assert!(
        !manifests.is_empty(),
        "checkpoints were committed with the chain's keys"
    );
    // qm with the CA works; without it the TLS handshake fails, clearly.
    let with_ca = Command::new(bin("qm"))
        .args(["--nats", &nats.url, "--tls-ca"])
        .arg(&ca_file)
        .arg("--nkey")
        .arg(stack.auth.key("alice"))
        .arg("whoami")
        .output()
        .expect("qm runs");
    assert!(with_ca.status.success(), "{with_ca:?}");
    let without = Command::new(bin("qm"))
        .args(["--nats", &nats.url, "--nkey"])
        .arg(stack.auth.key("alice"))
        .arg("whoami")
        .env_remove("QM_NATS_CA_FILE")
        .output()
        .expect("qm runs");
    let err = String::from_utf8_lossy(&without.stderr);
    assert_eq!(without.status.code(), Some(3), "{err}");
    assert!(err.contains("TLS to tls://127.0.0.1"), "{err}");
    // Both client libraries connect over TLS with the CA and alice's key,
    // and read the job's events; without the CA, the handshake fails.
    let client = qm_client::Connect::new(&nats.url)
        .nkey_file(stack.auth.key("alice"))
        .ca_file(&ca_file)
        .connect()
        .await
        .expect("qm_client over TLS");
    let me = client
        .who_am_i(&qm_wire::messages::Empty {})
        .await
        .expect("answered");
    assert_eq!(me.principal, "alice");
    let page = client
        .list_events(&qm_wire::messages::ListEvents {
            job_id: Some(id.clone()),
            ..Default::default()
        })
        .await
        .expect("a page");
    assert!(
        page.events
            .iter()
            .any(|e| e.job().is_some_and(|c| c.to == "SUCCEEDED")),
        "{page:#?}"
    );
    let e = qm_client::Connect::new(&nats.url)
        .nkey_file(stack.auth.key("alice"))
        .connect()
        .await
        .err()
        .expect("no CA: refused");
    assert!(matches!(e, qm_client::ConnectError::Tls { .. }), "{e}");
    let python =
        qm_integration_tests::gateway::pinned_clients("../clients/python").join("bin/python");
    let script = r#"
import asyncio, sys, quartermaster as qm
async def main(url, nkey, ca, job):
    async with await qm.connect(url, nkey_file=nkey, ca_file=ca) as c:
        me = await c.who_am_i()
        page = await c.list_events(job_id=job)
        print(me.principal, [e.job().to for e in page.events if e.job()][-1])
    try:
        await qm.connect(url, nkey_file=nkey)
    except qm.ConnectFailed as e:
        print("without the CA:", e)
asyncio.run(main(*sys.argv[1:]))
"#;
    let out = Command::new(python)
        .args(["-c", script, &nats.url])
        .arg(stack.auth.key("alice"))
        .arg(&ca_file)
        .arg(&id)
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("alice SUCCEEDED"), "{text}");
    assert!(
        text.contains("without the CA: cannot connect to NATS at tls://"),
        "{text}"
    );
    stack.stop_all();
    let _ = std::fs::remove_file(ca_file);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_runs_unprivileged_and_cannot_read_the_nodes_credentials() {
    let (_nats, _s3, mut stack) = running("tenancy-uid", QUEUE_YAML).await;
    stack.executor_env = vec![
        ("QM_EXECUTOR_RUN_AS_USER".into(), "65534".into()),
        ("QM_EXECUTOR_RUN_AS_GROUP".into(), "65534".into()),
    ];
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    let key = stack.auth.key("node-1");
    // A file the node can write but the job must not reach through the
    // files the executor writes after the job ends.
    let victim = stack.path().join("victim.txt");
    std::fs::write(&victim, "precious").expect("victim");
    let mut job = sleeper("snoop", "QS1", 0);
    job.command = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "id -u; env | grep -c '^QM_NATS' || true; cat {} && echo READ-THE-KEY; echo done > out.txt; \
             ln -s {v} run.json; ln -s {v} ../attempt-1.run.json 2>/dev/null; \
             echo '[]' > ../../undelivered-reports.json 2>/dev/null; true",
            key.display(),
            v = victim.display()
        ),
    ];
    let id = stack.submit(&job).await;
    let j = stack.wait_final(&id, 60).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    let out = stack.attempt_stdout("node-1", &id, 1);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"65534"), "runs as nobody: {out}");
    assert_eq!(
        lines.get(1),
        Some(&"0"),
        "no QM_NATS_* variable leaks into a job: {out}"
    );
    assert!(
        !out.contains("READ-THE-KEY"),
        "the job read the node's nkey: {out}"
    );
    // The same output through the API (admission asks the executor).
    let logs: qm_wire::system::LogsResponse = stack
        .client
        .call(
            Operation::GetServiceJobLogs,
            &GetServiceJobLogs {
                job_id: id.clone(),
                ..Default::default()
            },
        )
        .await
        .expect("the admin reads the logs");
    assert_eq!(logs.stdout, out);
    // It could still write its own directory.
    let written = stack
        .path()
        .join("node-1")
        .join(&id)
        .join("attempt-1/out.txt");
    assert!(written.exists(), "{}", written.display());
    // It could not make the executor write through a planted link, nor
    // leave reports for the executor's next start.
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious"
    );
    assert!(
        stack.attempt_run("node-1", &id, 1).is_some(),
        "the run was recorded"
    );
    assert!(!stack
        .path()
        .join("node-1/undelivered-reports.json")
        .exists());
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn admission_refuses_a_nats_server_that_lets_anyone_in() {
    use testcontainers::core::{IntoContainerPort, WaitFor};
    use testcontainers::runners::AsyncRunner;
    use testcontainers::{GenericImage, ImageExt};
    let name = std::env::var("QM_NATS_IMAGE").unwrap_or_else(|_| "quartermaster/nats:local".into());
    let (image, tag) = name.rsplit_once(':').unwrap_or((name.as_str(), "latest"));
    let open = GenericImage::new(image, tag)
        .with_exposed_port(4222.tcp())
        .with_wait_for(WaitFor::message_on_stderr("Server is ready"))
        .with_cmd(["-js", "-sd", "/tmp/js"])
        .start()
        .await
        .expect("NATS starts");
    let port = open.get_host_port_ipv4(4222.tcp()).await.expect("port");
    let tenancy =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/tenancy.dev.yaml");
    let out = Command::new(bin("qm-admission"))
        .env("QM_NATS_URL", format!("nats://127.0.0.1:{port}"))
        .env("QM_NATS_PRINCIPAL", "admission")
        .env("QM_ADMISSION_TENANCY", tenancy)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("lets anyone connect, so any client could claim any principal"),
        "{err}"
    );
}
