//! Failures end to end: preemption budgets, a scheduler killed with SIGKILL,
//! a lost executor, a partitioned executor, and bad messages on every API
//! subject.

use qm_integration_tests::proxy::Proxy;
use qm_integration_tests::stack::{
    digest_in, reference_digest, start_command, start_nats, trainer_job, Stack,
};
use qm_integration_tests::{start_s3, S3Server};
use std::time::{Duration, Instant};

use qm_service::client::CallError;
use qm_wire::messages::{
    JobRef, ListServiceJobs, ListServiceJobsResponse, QueueRef, Reply, ServiceJob,
};
use qm_wire::subjects::Operation;
use qm_wire::system::ExecCommand;

const QUEUE_YAML: &str = include_str!("../../examples/queues/three-shares.yaml");

async fn stack(name: &str) -> (qm_integration_tests::stack::Nats, S3Server, Stack) {
    stack_with_lease(name, 2).await
}

/// NATS, S3, admission and a leading scheduler-1 whose lease is `lease`
/// seconds.
async fn stack_with_lease(
    name: &str,
    lease: u32,
) -> (qm_integration_tests::stack::Nats, S3Server, Stack) {
    stack_with(name, lease, &[]).await
}

/// The same, the checkpoint services started with `checkpoint_env` too.
async fn stack_with(
    name: &str,
    lease: u32,
    checkpoint_env: &[(&str, &str)],
) -> (qm_integration_tests::stack::Nats, S3Server, Stack) {
    let nats = start_nats().await;
    let s3 = start_s3().await;
    let mut stack = Stack::new(&nats, &s3, name).await;
    stack.checkpoint_env = checkpoint_env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    stack.scheduler_env = vec![
        ("QM_SCHEDULER_LEASE_SECONDS".into(), lease.to_string()),
        ("QM_SCHEDULER_EXECUTOR_TIMEOUT_SECONDS".into(), "3".into()),
    ];
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(QUEUE_YAML).await;
    stack.wait_leader("scheduler-1").await;
    (nats, s3, stack)
}

/// A checkpointing trainer job of `steps` steps (25 ms each) submitted to
/// QS1 and RUNNING; returns its id and the digest an uninterrupted run
/// ends with.
async fn long_job_running(stack: &Stack, steps: &str) -> (String, String) {
    let args = [
        "--steps",
        steps,
        "--checkpoint-every",
        "20",
        "--step-delay-ms",
        "25",
    ];
    let expected = reference_digest(&args[..4]);
    let long = stack
        .submit(&trainer_job("long", "training", "QS1", 1, &args))
        .await;
    stack
        .wait_for(&long, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    (long, expected)
}

/// Starts node-1 (executor and checkpoint service) reaching NATS only
/// through a proxy the test can cut, the executor fencing after
/// `fence_after` seconds.
async fn node_1_behind_a_proxy(
    stack: &mut Stack,
    nats: &qm_integration_tests::stack::Nats,
    fence_after: &str,
) -> Proxy {
    let proxy = Proxy::start(nats.url.trim_start_matches("nats://")).await;
    let via_proxy = vec![("QM_NATS_URL".to_string(), proxy.url.clone())];
    stack.executor_env = via_proxy.clone();
    stack
        .executor_env
        .push(("QM_EXECUTOR_FENCE_AFTER_SECONDS".into(), fence_after.into()));
    stack.checkpoint_env = via_proxy;
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    stack.executor_env.clear();
    stack.checkpoint_env.clear();
    proxy
}

/// A checkpointing trainer job of `steps` steps (25 ms each, a checkpoint
/// every 10) submitted to QS1 as `name`, with a checkpoint committed at step
/// 50 or later; returns its id and the digest an uninterrupted run ends with.
async fn committed_job(stack: &Stack, name: &str, steps: &str) -> (String, String) {
    let args = [
        "--steps",
        steps,
        "--checkpoint-every",
        "10",
        "--step-delay-ms",
        "25",
    ];
    let expected = reference_digest(&args[..4]);
    let job = stack
        .submit(&trainer_job(name, "training", "QS1", 1, &args))
        .await;
    stack.wait_committed(&job, 50).await;
    (job, expected)
}

/// The job once final: SUCCEEDED on a second attempt, on node-2, after its
/// first, on node-1, ended HOST_LOST.
async fn resumed_on_node_2(stack: &Stack, job: &str) -> ServiceJob {
    let j = stack.wait_final(job, 180).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}\n{}", stack.logs());
    assert_eq!(j.attempts.len(), 2, "{j:#?}");
    assert_eq!(
        j.attempts[0].outcome.as_deref(),
        Some("HOST_LOST"),
        "{j:#?}"
    );
    assert_eq!(j.attempts[0].executor_id.as_deref(), Some("node-1"));
    assert_eq!(j.attempts[1].executor_id.as_deref(), Some("node-2"));
    j
}

#[tokio::test(flavor = "multi_thread")]
async fn zero_preemption_retries_fail_the_job_at_its_first_preemption() {
    let (_n, _s, mut stack) = stack("retries").await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let args = ["--steps", "2000", "--step-delay-ms", "20"];
    let own = stack
        .submit(&trainer_job("own", "training", "QS1", 5, &args))
        .await;
    stack
        .wait_for(&own, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let mut fragile = trainer_job("fragile", "training", "QS1", 1, &args);
    fragile.preemption_configuration = Some(qm_wire::messages::JobPreemptionConfiguration {
        preemption_retries_before_termination: Some(0),
    });
    let fragile = stack.submit(&fragile).await;
    let j = stack
        .wait_for(&fragile, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    assert!(j.on_borrowed_capacity, "{j:#?}");
    let owner = stack
        .submit(&trainer_job("owner", "training", "QS2", 1, &args))
        .await;
    let j = stack
        .wait_for(&fragile, 60, "a final status", |j| {
            j.status == "FAILED" || j.status == "SUCCEEDED"
        })
        .await;
    assert_eq!(j.status, "FAILED", "{j:#?}");
    assert!(
        j.status_reason.starts_with("PREEMPTION_RETRIES_EXHAUSTED"),
        "{}",
        j.status_reason
    );
    assert_eq!(j.attempts.len(), 1);
    assert_eq!(
        j.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_CROSS_SHARE")
    );
    stack
        .wait_for(&owner, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scheduler_killed_mid_run_loses_no_job_and_runs_none_twice() {
    let (_n, _s, mut stack) = stack("kill-scheduler").await;
    // Its reports are batched (STARTING and RUNNING of each launch are one
    // log entry): the failover replays and republishes those too.
    stack
        .executor_env
        .push(("QM_EXECUTOR_BATCH_REPORTS".into(), "true".into()));
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let args = [
        "--steps",
        "150",
        "--checkpoint-every",
        "10",
        "--step-delay-ms",
        "20",
    ];
    let expected = reference_digest(&args[..4]);
    let mut jobs = Vec::new();
    for (i, share) in ["QS1", "QS2", "QS3", "QS1", "QS2", "QS3"]
        .iter()
        .enumerate()
    {
        jobs.push(
            stack
                .submit(&trainer_job(
                    &format!("job{i}"),
                    "training",
                    share,
                    1,
                    &args,
                ))
                .await,
        );
    }
    stack
        .wait_for(&jobs[0], 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    stack.signal("scheduler-1", "KILL");
    // Submits are stored while no scheduler runs.
    jobs.push(
        stack
            .submit(&trainer_job("late", "training", "QS3", 1, &args))
            .await,
    );
    stack.scheduler("scheduler-2");
    for id in &jobs {
        let j = stack.wait_final(id, 180).await;
        assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
        assert_eq!(j.attempts.len(), 1, "ran once: {j:#?}");
        assert_eq!(
            stack.attempt_dirs("node-1", id),
            1,
            "the executor launched {id} once"
        );
        let out = stack.attempt_stdout("node-1", id, 1);
        assert_eq!(out.matches("starting from step 0").count(), 1, "{out}");
        assert_eq!(digest_in(&out).as_deref(), Some(expected.as_str()));
    }
    // Subscribers saw every job's transitions across the failover, the
    // late job's admission too: it was stored while no leader ran, so only
    // the new leader's republishing announces it. (Whether the kill fell
    // between storing an entry and publishing its events is luck;
    // State::replay's unit test covers republishing exactly those.)
    for id in &jobs {
        assert!(
            stack.events.announced(id),
            "no SUBMITTED -> RUNNABLE event of {id}"
        );
        let statuses = stack.events.statuses(id);
        for s in ["RUNNABLE", "SCHEDULED", "STARTING", "RUNNING"] {
            assert!(statuses.iter().any(|x| x == s), "{id} {s}: {statuses:?}");
        }
        assert_eq!(
            statuses.last().map(String::as_str),
            Some("SUCCEEDED"),
            "{id}: {statuses:?}"
        );
    }
    // The log holds each launch's STARTING and RUNNING as one entry.
    let batches = stack
        .log_entries(&qm_wire::subjects::log_executor("node-1").expect("subject"))
        .await
        .into_iter()
        .filter_map(|e| match e {
            qm_wire::system::LogEntry::Reports { reports } => Some(reports),
            _ => None,
        })
        .map(|r| {
            r.windows(2)
                .filter(|w| {
                    w[0].phase == qm_wire::system::ReportPhase::Starting
                        && w[1].phase == qm_wire::system::ReportPhase::Running
                        && w[0].job_id == w[1].job_id
                })
                .count()
        })
        .sum::<usize>();
    assert_eq!(
        batches,
        jobs.len(),
        "every launch's STARTING and RUNNING in one entry"
    );
    let log = stack.log_of("scheduler-2");
    // Started after the kill, it took over cold or after following the
    // log for a moment (the presence probe shows the leader gone at once).
    assert!(
        log.contains("state rebuilt from the log")
            || log.contains("took over from following the log"),
        "{log}"
    );
    // The new leader found where the old one's events ended.
    assert!(
        log.lines()
            .any(|l| l.contains("newest stored event position") && l.contains("Some(")),
        "{log}"
    );
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standby_takes_over_from_a_killed_leader_at_once_not_after_its_lease() {
    // A 60 s lease: within the waits below, only the standby's presence
    // probe (the leader's connection is gone) can make it lead.
    let (_n, _s, mut stack) = stack_with_lease("warm-standby", 60).await;
    stack.scheduler("scheduler-2");
    stack.executor("node-1", "training", "ml.g5.xlarge", 2);
    let (long, expected) = long_job_running(&stack, "200").await;
    // The standby follows the log: it has read the long job's start.
    stack.wait_standing_by("scheduler-2").await;
    stack.signal("scheduler-1", "KILL");
    let next = stack
        .submit(&trainer_job(
            "after-the-kill",
            "training",
            "QS2",
            1,
            &["--steps", "5"],
        ))
        .await;
    let j = stack.wait_final(&next, 40).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}\n{}", stack.logs());
    // The job that ran across the takeover ran once, to the end.
    let l = stack.wait_final(&long, 120).await;
    assert_eq!(l.status, "SUCCEEDED", "{l:#?}");
    assert_eq!(l.attempts.len(), 1, "ran once: {l:#?}");
    assert_eq!(stack.attempt_dirs("node-1", &long), 1);
    let out = stack.attempt_stdout("node-1", &long, 1);
    assert_eq!(digest_in(&out).as_deref(), Some(expected.as_str()), "{out}");
    stack.assert_stored_events(&long, "SUCCEEDED").await;
    // The usage ledger counted the long job's run across the takeover once.
    let (ledger, attempts) = stack
        .usage_against_attempts("training", &[long.clone(), next.clone()])
        .await;
    assert!(
        (ledger - attempts).abs() < 0.001,
        "the new leader's ledger holds {ledger} instance-seconds, the attempts {attempts}"
    );
    let log = stack.log_of("scheduler-2");
    assert!(log.contains("the leader's connection is gone"), "{log}");
    assert!(log.contains("took over from following the log"), "{log}");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_executor_ends_its_attempts_host_lost_and_they_resume_elsewhere() {
    let (_n, _s, mut stack) = stack("lost-executor").await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    let (job, expected) = committed_job(&stack, "survivor", "400").await;
    // The node dies: executor and its checkpoint service, without warning.
    stack.signal("node-1", "KILL");
    stack.signal("checkpoint-node-1", "KILL");
    stack.executor("node-2", "training", "ml.g5.xlarge", 1);
    let j = resumed_on_node_2(&stack, &job).await;
    let restored = j.attempts[1].restored_checkpoint_step.unwrap_or(0);
    assert!(
        restored >= 50,
        "resumed from its checkpoint, not from scratch: {j:#?}"
    );
    let out = stack.attempt_stdout("node-2", &job, 2);
    assert!(
        out.contains(&format!("resumed from step {restored}")),
        "{out}"
    );
    assert_eq!(digest_in(&out).as_deref(), Some(expected.as_str()), "{out}");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_executor_fences_itself_so_its_job_never_runs_twice() {
    let (nats, _s, mut stack) = stack("partition").await;
    let proxy = node_1_behind_a_proxy(&mut stack, &nats, "5").await;
    let (job, expected) = committed_job(&stack, "partitioned", "800").await;
    // The partition: node-1 is cut off from NATS but keeps running.
    proxy.cut();
    stack.executor("node-2", "training", "ml.g5.xlarge", 1);
    let j = resumed_on_node_2(&stack, &job).await;
    let logs = stack.logs();
    // The old copy was dead before the new one started.
    let (_, first_ended) = stack
        .attempt_run("node-1", &job, 1)
        .expect("node-1 recorded its attempt's run");
    let (second_launched, _) = stack
        .attempt_run("node-2", &job, 2)
        .expect("node-2 recorded its attempt's run");
    assert!(
        first_ended < second_launched,
        "attempt 1 ended at {first_ended} ms, attempt 2 launched at {second_launched} ms: they overlapped\n{logs}"
    );
    assert!(
        std::fs::read_to_string(stack.path().join("node-1.log"))
            .unwrap_or_default()
            .contains("fencing"),
        "node-1 fenced itself\n{logs}"
    );
    let restored = j.attempts[1].restored_checkpoint_step.unwrap_or(0);
    assert!(restored >= 50, "resumed from its checkpoint: {j:#?}");
    let out = stack.attempt_stdout("node-2", &job, 2);
    assert_eq!(digest_in(&out).as_deref(), Some(expected.as_str()), "{out}");

    // Healed: node-1 rejoins, runs nothing stale, and serves new work.
    proxy.heal();
    stack.signal("node-2", "TERM");
    let next = stack
        .submit(&trainer_job(
            "after-heal",
            "training",
            "QS1",
            1,
            &["--steps", "20"],
        ))
        .await;
    let n = stack.wait_final(&next, 120).await;
    assert_eq!(n.status, "SUCCEEDED", "{n:#?}\n{}", stack.logs());
    assert_eq!(n.attempts[0].executor_id.as_deref(), Some("node-1"));
    assert_eq!(
        stack.attempt_dirs("node-1", &job),
        1,
        "node-1 never ran the first job again"
    );
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_executor_is_fenced_by_its_attempts_watchdog_so_its_job_never_runs_twice() {
    // Issue 28: with only the executor stopped (SIGSTOP: a stuck runtime, a
    // blocking call or a frozen cgroup behave the same), its own watchdog
    // never runs; the attempt's supervisor must fence the job on time.
    let (_n, _s, mut stack) = stack("frozen-executor").await;
    stack
        .executor_env
        .push(("QM_EXECUTOR_FENCE_AFTER_SECONDS".into(), "5".into()));
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    stack.executor_env.clear();
    let (job, expected) = committed_job(&stack, "frozen", "2400").await;
    // Frozen with about a minute of work left: unfenced, its copy would
    // run on beside the next attempt (placed some 20 s after the freeze).
    stack.send_signal("node-1", "STOP");
    stack.executor("node-2", "training", "ml.g5.xlarge", 1);
    resumed_on_node_2(&stack, &job).await;
    // node-1 runs again: it records attempt 1's run, with the end its
    // supervisor saw.
    stack.send_signal("node-1", "CONT");
    let mut first = None;
    for _ in 0..300 {
        first = stack.attempt_run("node-1", &job, 1);
        if first.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let logs = stack.logs();
    let (_, first_ended) =
        first.unwrap_or_else(|| panic!("node-1 never recorded attempt 1\n{logs}"));
    let (second_launched, _) = stack
        .attempt_run("node-2", &job, 2)
        .expect("node-2 recorded its attempt's run");
    assert!(
        first_ended < second_launched,
        "attempt 1 ended at {first_ended} ms, attempt 2 launched at {second_launched} ms: they overlapped\n{logs}"
    );
    let node_1 = stack.log_of("node-1");
    assert!(
        node_1.contains("qm-supervise: the executor has not renewed its fence deadline"),
        "the supervisor, not the frozen executor, fenced the job:\n{node_1}"
    );
    let out = stack.attempt_stdout("node-2", &job, 2);
    assert_eq!(digest_in(&out).as_deref(), Some(expected.as_str()), "{out}");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_that_ends_during_a_nats_outage_on_an_executor_then_stopped_is_not_run_again() {
    // Issue 28: the job exits 0 while NATS is unreachable; its final
    // checkpoint flush waits on the outage; the executor is then stopped (a
    // node restart). The end must survive, and the job end SUCCEEDED once.
    let (nats, _s, mut stack) = stack("end-in-outage").await;
    // Not fenced, nor declared lost, during the outage.
    let proxy = node_1_behind_a_proxy(&mut stack, &nats, "120").await;
    let args = [
        "--steps",
        "240",
        "--checkpoint-every",
        "20",
        "--step-delay-ms",
        "25",
    ];
    let expected = reference_digest(&args[..4]);
    let job = stack
        .submit(&trainer_job("outage", "training", "QS1", 1, &args))
        .await;
    stack.wait_committed(&job, 20).await;
    proxy.cut();
    let mut out = String::new();
    for _ in 0..600 {
        out = stack.attempt_stdout("node-1", &job, 1);
        if digest_in(&out).is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        digest_in(&out).as_deref(),
        Some(expected.as_str()),
        "the job finished during the outage: {out}"
    );
    // The node restarts while NATS is still unreachable.
    assert!(
        stack.stop_within("node-1", "TERM", 120).is_some(),
        "node-1 stopped\n{}",
        stack.log_of("node-1")
    );
    proxy.heal();
    stack.restart("node-1");
    let j = stack.wait_final(&job, 120).await;
    let logs = stack.logs();
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}\n{logs}");
    assert_eq!(j.attempts.len(), 1, "it ran once: {j:#?}\n{logs}");
    assert_eq!(j.attempts[0].exit_code, Some(0), "{j:#?}");
    assert_eq!(
        stack.attempt_dirs("node-1", &job),
        1,
        "never launched again"
    );
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_swapping_its_checkpoint_for_links_in_a_loop_gets_nothing_outside_it_uploaded() {
    // Issue 28: the checkpoint service listed a directory, then read each
    // file by path; a job that swaps a directory or a file for a symbolic
    // link between the two had the service upload what the link points to.
    let (_n, s3, mut stack) =
        stack_with("link-race", 2, &[("QM_CHECKPOINT_SCAN_INTERVAL_MS", "50")]).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    let marker = format!("TOP-SECRET-{}", std::process::id());
    let secret = stack.path().join("secret");
    std::fs::create_dir_all(&secret).expect("secret dir");
    // Named as the files the job swaps out: a link in their place points
    // at it.
    std::fs::write(secret.join("f"), &marker).expect("secret");
    // Big files first in the listing: hashing them is the time between the
    // listing and the reads of the `zz-` files, which flip all along.
    let script = format!(
        r#"cd "$QM_CHECKPOINT_DIR"
for k in 1 2 3 4 5 6 7 8; do head -c 2097152 /dev/urandom > "big-$k"; done
end=$(( $(date +%s) + 12 ))
i=0
while [ "$(date +%s)" -lt "$end" ]; do
  i=$((i+1))
  mkdir -p zz-d && echo "inner $i" > zz-d/f
  echo "plain $i" > zz-f.new && mv -T zz-f.new zz-f
  ln -sfn {secret}/f zz-f.link && mv -T zz-f.link zz-f
  mv -T zz-d zz-d.old && ln -sfn {secret} zz-d
  sleep 0.02
  rm zz-d && mv -T zz-d.old zz-d
done
echo "plain final" > zz-f.new && mv -T zz-f.new zz-f
echo '{{"step": 1}}' > qm-checkpoint.json
sleep 3
echo swapped "$i" times
"#,
        secret = secret.display()
    );
    let job = stack.submit(&script_job("link-race", &script)).await;
    let j = stack.wait_final(&job, 120).await;
    let logs = stack.logs();
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}\n{logs}");
    let out = stack.attempt_stdout("node-1", &job, 1);
    assert!(out.contains("swapped"), "{out}");
    // Every object the service stored, committed or not (blobs go up before
    // the manifest that would reference them).
    use qm_checkpoint::ObjectStore;
    let store = s3.store();
    let keys = store.list("").await.expect("list");
    assert!(
        keys.iter().any(|k| k.contains("/manifests/")),
        "the job's checkpoint was committed once it stopped swapping: {keys:?}\n{logs}"
    );
    for key in &keys {
        let body = store.get(key).await.expect("get").unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&body).contains(&marker),
            "{key} holds the file a link pointed to\n{logs}"
        );
    }
    // The race was run: at least one sync met the directory changing under
    // it, either a link where a file or folder was listed (refused) or a
    // listed entry already swapped away (a loaded machine's timing often
    // gives only the second). Both end the same way: nothing outside it is
    // read, and the commit is retried.
    let refused = stack.log_of("checkpoint-node-1");
    assert!(
        refused.contains("symbolic link")
            || refused
                .lines()
                .any(|l| l.contains("sync failed") && l.contains("No such file or directory")),
        "the race was run (the service saw the checkpoint change under it):\n{refused}"
    );
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leader_paused_past_its_lease_changes_nothing_when_it_resumes() {
    let (_n, _s, mut stack) = stack("paused-leader").await;
    stack.scheduler("scheduler-2");
    stack.executor("node-1", "training", "ml.g5.xlarge", 2);
    let (long, expected) = long_job_running(&stack, "400").await;

    // Two schedulers believe they lead: scheduler-1 is paused (SIGSTOP)
    // past its 2 s lease, and scheduler-2 takes over and decides.
    stack.send_signal("scheduler-1", "STOP");
    stack.wait_leader("scheduler-2").await;
    let short = stack
        .submit(&trainer_job(
            "short",
            "training",
            "QS1",
            1,
            &["--steps", "20"],
        ))
        .await;
    let s = stack.wait_final(&short, 60).await;
    assert_eq!(s.status, "SUCCEEDED", "{s:#?}");

    // scheduler-1 resumes with its stale state (it never saw `short`): it
    // must not answer for the queue, nor command executors, nor store a
    // decision.
    stack.send_signal("scheduler-1", "CONT");
    for _ in 0..40 {
        let r: Result<ServiceJob, CallError> = stack
            .client
            .call(
                Operation::DescribeServiceJob,
                &JobRef {
                    job_id: short.clone(),
                },
            )
            .await;
        match r {
            Ok(j) => assert_eq!(j.status, "SUCCEEDED", "a stale read: {j:#?}"),
            Err(CallError::Api(e)) => panic!("a stale read answered: {e:?}\n{}", stack.logs()),
            Err(_) => {} // no answer: retried
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let j = stack.wait_final(&long, 120).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}\n{}", stack.logs());
    assert_eq!(j.attempts.len(), 1, "it ran once: {j:#?}");
    assert_eq!(stack.attempt_dirs("node-1", &long), 1);
    assert_eq!(stack.attempt_dirs("node-1", &short), 1);
    let out = stack.attempt_stdout("node-1", &long, 1);
    assert_eq!(digest_in(&out).as_deref(), Some(expected.as_str()), "{out}");
    // Its events, across the change of leader, reached the stream in order
    // and without a gap.
    stack.assert_stored_events(&long, "SUCCEEDED").await;
    let old = stack.log_of("scheduler-1");
    assert!(
        old.contains("lost the scheduler lease")
            || old.contains("another scheduler appended a decision"),
        "scheduler-1 noticed it was deposed:\n{old}"
    );
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stop_for_an_attempt_whose_start_was_lost_is_answered_and_a_late_start_ignored() {
    let (_n, _s, mut stack) = stack("stop-settles").await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    let warm = stack
        .submit(&trainer_job(
            "warm-up",
            "training",
            "QS1",
            1,
            &["--steps", "5"],
        ))
        .await;
    assert_eq!(stack.wait_final(&warm, 60).await.status, "SUCCEEDED");
    // The leader's current epoch, as the executor reads it.
    let scheduler = stack.auth.client(&stack.nats_url, "scheduler").await;
    let js = async_nats::jetstream::new(scheduler.nats.clone());
    let lease = js.get_key_value("qm_leader").await.expect("lease bucket");
    let entry = lease
        .entry("scheduler")
        .await
        .expect("read")
        .expect("a lease");
    let epoch = serde_json::from_slice::<qm_wire::system::LeaderLease>(&entry.value)
        .expect("lease")
        .epoch_at(entry.revision);
    // A stop arrives for an attempt whose start was lost; the start comes
    // later (as a resend might).
    let marker = stack.path().join("late-start-ran");
    let stop = ExecCommand::Stop {
        epoch,
        job_id: "j-lost-start".into(),
        attempt: 1,
        grace_seconds: 1,
        reason: "reclaimed".into(),
    };
    let start = start_command(
        epoch,
        "j-lost-start",
        vec!["touch".into(), marker.display().to_string()],
    );
    for cmd in [&stop, &start] {
        scheduler
            .nats
            .publish(
                "qm.v1.exec.node-1.command",
                serde_json::to_vec(cmd).expect("json").into(),
            )
            .await
            .expect("sent");
    }
    scheduler.nats.flush().await.expect("flush");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !stack
        .log_of("node-1")
        .contains("stop for an attempt never started here: answered as ended")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            stack.log_of("node-1")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Its end is in the log (for the scheduler to settle the attempt).
    let admission = stack.auth.client(&stack.nats_url, "admission").await;
    let log = async_nats::jetstream::new(admission.nats.clone())
        .get_stream("QM_LOG")
        .await
        .expect("log");
    let last = log
        .get_last_raw_message_by_subject("qm.v1.log.exec.node-1")
        .await
        .expect("a report");
    let report: serde_json::Value = serde_json::from_slice(&last.payload).expect("json");
    assert_eq!(report["jobId"], "j-lost-start", "{report}");
    assert_eq!(report["cause"], "NOT_STARTED", "{report}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!marker.exists(), "the late start ran");
    assert_eq!(stack.attempt_dirs("node-1", "j-lost-start"), 0);
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_and_oversized_requests_get_errors_and_change_nothing() {
    let (_n, _s, mut stack) = stack("bad-input").await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let before: serde_json::Value = stack
        .client
        .call(
            Operation::ListQuotaShares,
            &QueueRef {
                job_queue: "training".into(),
            },
        )
        .await
        .expect("shares");
    let oversized = vec![b'x'; qm_wire::MAX_REQUEST_BYTES + 1];
    let bodies: [(&str, Vec<u8>); 4] = [
        ("not JSON", b"{not json".to_vec()),
        (
            "wrong shape",
            br#"{"jobQueue": 7, "quotaShares": "many"}"#.to_vec(),
        ),
        ("oversized", oversized),
        ("empty", Vec::new()),
    ];
    for op in Operation::ALL {
        if matches!(op, Operation::ListJobQueues | Operation::WhoAmI) {
            continue; // takes no body
        }
        for (what, body) in &bodies {
            let msg = stack
                .client
                .nats
                .request(
                    op.subject("platform").expect("a token"),
                    body.clone().into(),
                )
                .await
                .unwrap_or_else(|e| panic!("{} {what}: no reply: {e}", op.name()));
            let reply: Reply<serde_json::Value> = serde_json::from_slice(&msg.payload)
                .unwrap_or_else(|e| panic!("{} {what}: unreadable reply: {e}", op.name()));
            match reply {
                Reply::Error(e) => {
                    assert!(!e.message.is_empty());
                    if *what == "oversized" {
                        assert!(e.message.contains("limit"), "{}: {}", op.name(), e.message);
                    }
                }
                Reply::Ok(v) => panic!("{} accepted {what}: {v}", op.name()),
            }
        }
    }
    // Garbage written straight into the log (only admission's identity may
    // write there) is skipped by the scheduler.
    let admission = stack.auth.client(&stack.nats_url, "admission").await;
    admission
        .nats
        .publish("qm.v1.log.submit.training", "garbage".into())
        .await
        .expect("publish");
    admission.nats.flush().await.expect("flush");
    let after: serde_json::Value = stack
        .client
        .call(
            Operation::ListQuotaShares,
            &QueueRef {
                job_queue: "training".into(),
            },
        )
        .await
        .expect("shares");
    assert_eq!(before, after, "configuration unchanged");
    let jobs: ListServiceJobsResponse = stack
        .client
        .call(
            Operation::ListServiceJobs,
            &ListServiceJobs {
                job_queue: "training".into(),
                ..Default::default()
            },
        )
        .await
        .expect("list");
    assert!(
        jobs.job_summary_list.is_empty(),
        "no job was created: {jobs:?}"
    );
    // And the system still works.
    let ok = stack
        .submit(&trainer_job(
            "after",
            "training",
            "QS1",
            1,
            &["--steps", "5"],
        ))
        .await;
    stack
        .wait_for(&ok, 60, "SUCCEEDED", |j| j.status == "SUCCEEDED")
        .await;
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_first_scheduler_announces_the_submits_stored_before_it_started() {
    // Admission runs and stores submits; no scheduler has ever run, so no
    // event was ever published. The first leader must announce them (before
    // the fix it read "nothing published" as "publish nothing", and these
    // jobs' SUBMITTED -> RUNNABLE events never appeared).
    let nats = start_nats().await;
    let s3 = start_s3().await;
    let mut stack = Stack::new(&nats, &s3, "first-leader").await;
    stack.admission();
    stack.apply(QUEUE_YAML).await;
    let args = ["--steps", "20"];
    let mut jobs = Vec::new();
    for (i, share) in ["QS1", "QS2"].iter().enumerate() {
        jobs.push(
            stack
                .submit(&trainer_job(
                    &format!("early{i}"),
                    "training",
                    share,
                    1,
                    &args,
                ))
                .await,
        );
    }
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    stack.scheduler("scheduler-1");
    for id in &jobs {
        let j = stack.wait_final(id, 120).await;
        assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    }
    for id in &jobs {
        assert!(
            stack.events.announced(id),
            "no SUBMITTED -> RUNNABLE event of {id}"
        );
    }
    stack.stop_all();
}

/// One executor of three instances, and QS1's own instance taken by a job
/// that runs until the end: a QS1 job submitted next borrows QS2's, which
/// QS2's next job reclaims.
async fn lender_stack(name: &str) -> (qm_integration_tests::stack::Nats, S3Server, Stack) {
    lender_stack_with(name, &[]).await
}

/// The same, the checkpoint services started with `checkpoint_env` too.
async fn lender_stack_with(
    name: &str,
    checkpoint_env: &[(&str, &str)],
) -> (qm_integration_tests::stack::Nats, S3Server, Stack) {
    let (n, s, mut stack) = stack_with(name, 2, checkpoint_env).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let forever = ["--steps", "1000000", "--step-delay-ms", "20"];
    let own = stack
        .submit(&trainer_job("own", "training", "QS1", 5, &forever))
        .await;
    stack
        .wait_for(&own, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    (n, s, stack)
}

/// Checkpoint-then-preempt with the example trainer, run three times on
/// the same fleet: QS1 borrows QS2's instance for a victim that saves only
/// when asked (no periodic checkpoint falls in the run, and SIGTERM ends it
/// without saving, as many scripts do); QS2's owner then reclaims it.
/// - setting on: the victim is sent SIGUSR1, its checkpoint is committed,
///   and only then is it stopped: the next attempt restores (nearly) the
///   step it was stopped at;
/// - setting off: stopped at once, it had saved nothing: everything is
///   recomputed;
/// - on, but the job ignores the signal: stopped when the window ends.
#[tokio::test(flavor = "multi_thread")]
async fn checkpoint_then_preempt_saves_the_work_a_plain_reclaim_loses() {
    let (_n, _s, mut stack) = lender_stack("ckpt-first").await;
    const WINDOW: u64 = 8;
    for (mode, window, deaf) in [("on", 60, false), ("off", 0, false), ("deaf", WINDOW, true)] {
        let mut args = vec![
            "--steps",
            "1000000",
            "--checkpoint-every",
            "1000000",
            "--step-delay-ms",
            "20",
            "--no-save-on-stop",
        ];
        if deaf {
            args.push("--ignore-checkpoint-signal");
        }
        let mut victim = trainer_job(&format!("victim-{mode}"), "training", "QS1", 1, &args);
        victim.checkpoint_config = Some(qm_wire::messages::CheckpointConfig {
            checkpoint_before_preempt_seconds: Some(window),
            ..Default::default()
        });
        let victim = stack.submit(&victim).await;
        let j = stack
            .wait_for(&victim, 60, "RUNNING", |j| j.status == "RUNNING")
            .await;
        assert!(j.on_borrowed_capacity, "{mode}: {j:#?}");
        // Some work, none of it saved yet.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let reclaimed = Instant::now();
        let owner = stack
            .submit(&trainer_job(
                &format!("owner-{mode}"),
                "training",
                "QS2",
                1,
                &["--steps", "5"],
            ))
            .await;
        let j = stack
            .wait_for(&victim, 90, "attempt 1 ended", |j| {
                j.attempts.first().is_some_and(|a| a.outcome.is_some())
            })
            .await;
        let stopped_after = reclaimed.elapsed();
        assert_eq!(
            j.attempts[0].outcome.as_deref(),
            Some("PREEMPTED_CROSS_SHARE"),
            "{mode}: {j:#?}"
        );
        let out = stack.attempt_stdout("node-1", &victim, 1);
        let stopped_at: u64 = out
            .lines()
            .find_map(|l| l.strip_prefix("stopping at step "))
            .and_then(|rest| rest.split(':').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{mode}: the trainer says where it stopped:\n{out}"));
        stack
            .wait_for(&owner, 60, "SUCCEEDED", |j| j.status == "SUCCEEDED")
            .await;
        // The victim borrows again and restores what was committed.
        let j = stack
            .wait_for(&victim, 90, "attempt 2 running", |j| {
                j.attempts.len() >= 2 && j.status == "RUNNING"
            })
            .await;
        let restored = j.attempts[1].restored_checkpoint_step.unwrap_or(0);
        let recomputed = stopped_at.saturating_sub(restored);
        // The lost-work ledger names the beneficiary and the time lost.
        let first = &j.attempts[0];
        assert_eq!(
            (
                first.preempted_for_job_id.as_deref(),
                first.preempted_for_share.as_deref()
            ),
            (Some(owner.as_str()), Some("QS2")),
            "{mode}: {first:#?}"
        );
        let lost_ms = first
            .recomputed_ms
            .unwrap_or_else(|| panic!("{mode}: {first:#?}"));
        eprintln!("{mode}: stopped at step {stopped_at} {:.1} s after the reclaim; restored step {restored}: {recomputed} steps recomputed", stopped_after.as_secs_f64());
        assert!(stopped_at >= 100, "{mode}: it trained a while: {out}");
        match mode {
            "on" => {
                assert!(
                    out.contains("(asked)"),
                    "{mode}: it saved when asked:\n{out}"
                );
                assert_eq!(
                    j.attempts[0].last_checkpoint_step,
                    Some(restored),
                    "{mode}: the checkpoint it was asked for is the one restored"
                );
                // Only what ran between the commit and the stop is lost:
                // well under half of the work (the commit is seen within
                // about a second, the stop follows at once).
                assert!(
                    recomputed * 4 < stopped_at,
                    "{mode}: {recomputed} of {stopped_at} steps recomputed"
                );
                assert!(
                    stopped_after < Duration::from_secs(window / 2),
                    "{mode}: stopped after the commit, not at the window's end: {stopped_after:?}"
                );
                assert!(
                    lost_ms < 3_000,
                    "{mode}: only the time from the commit to the stop is lost: {lost_ms} ms"
                );
            }
            "off" => {
                assert_eq!(restored, 0, "{mode}: nothing was saved: {j:#?}");
                assert!(!out.contains("(asked)"), "{mode}: never asked:\n{out}");
                assert!(
                    lost_ms >= 6_000,
                    "{mode}: all of its 6 s and more are lost: {lost_ms} ms"
                );
            }
            _ => {
                assert_eq!(restored, 0, "{mode}: it never saved: {j:#?}");
                assert!(
                    stopped_after >= Duration::from_secs(WINDOW),
                    "{mode}: stopped when the {WINDOW} s window ended, not before: {stopped_after:?}"
                );
            }
        }
        let _: serde_json::Value = stack
            .client
            .call(
                Operation::TerminateServiceJob,
                &qm_wire::messages::TerminateServiceJob {
                    job_id: victim.clone(),
                    reason: "next mode".into(),
                },
            )
            .await
            .expect("terminated");
        let j = stack.wait_final(&victim, 60).await;
        assert_eq!(j.status, "FAILED", "{mode}: {j:#?}");
    }
    stack.stop_all();
}

/// A checkpointing job of QS1 (priority 1, 5 s grace) that runs `script`
/// with `sh -c`.
fn script_job(name: &str, script: &str) -> qm_wire::messages::SubmitServiceJob {
    qm_wire::messages::SubmitServiceJob {
        job_name: name.into(),
        job_queue: "training".into(),
        quota_share_name: Some("QS1".into()),
        instance_type: "ml.g5.xlarge".into(),
        scheduling_priority: Some(1),
        checkpoint_config: Some(Default::default()),
        termination_grace_period_seconds: Some(5),
        command: vec!["sh".into(), "-c".into(), script.into()],
        ..Default::default()
    }
}

/// What `qm describe JOB` prints, as the admin.
fn qm_describe(stack: &Stack, job: &str) -> String {
    let out = std::process::Command::new(qm_integration_tests::stack::bin("qm"))
        .args(["--nats", &stack.nats_url, "--nkey"])
        .arg(stack.auth.key("platform"))
        .args(["describe", job])
        .output()
        .expect("qm runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// QS2's owner reclaims the instance a QS1 job borrows; waits for the
/// owner to succeed and the job to end (within `secs`), which must have
/// been preempted once and then succeeded.
async fn reclaim_and_resume(stack: &Stack, job: &str, secs: u64) -> ServiceJob {
    let owner = stack
        .submit(&trainer_job(
            "owner",
            "training",
            "QS2",
            1,
            &["--steps", "5"],
        ))
        .await;
    stack
        .wait_for(&owner, secs, "SUCCEEDED", |j| j.status == "SUCCEEDED")
        .await;
    let j = stack.wait_final(job, secs).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    assert_eq!(
        j.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_CROSS_SHARE"),
        "{j:#?}"
    );
    j
}

/// The digest attempt 1 of `job` printed (`wrote <sha256>`).
fn written_digest(stack: &Stack, job: &str) -> String {
    let wrote = stack.attempt_stdout("node-1", job, 1);
    wrote
        .lines()
        .find_map(|l| l.strip_prefix("wrote "))
        .unwrap_or_else(|| panic!("attempt 1 prints its digest: {wrote}"))
        .to_string()
}

/// Peak resident memory (VmHWM) of a process, in bytes.
fn peak_rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("its status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}

/// A job writes a 2 GiB checkpoint file (more than one 64 MiB part), is
/// preempted once it is committed, and its next attempt finds the file
/// restored byte for byte; the node's checkpoint service moved it both
/// ways without its memory growing with it.
#[tokio::test(flavor = "multi_thread")]
async fn a_two_gib_checkpoint_survives_a_preemption_byte_for_byte_in_bounded_memory() {
    let (_n, _s, mut stack) = lender_stack("big-ckpt").await;
    // Attempt 1 writes the file (whole, then renamed) and its step, prints
    // its digest and waits to be preempted; a later attempt prints the
    // digest of what it found and ends.
    let script = r#"set -e
d="$QM_CHECKPOINT_DIR"
if [ -f "$d/big.bin" ]; then
  echo "restored $(sha256sum "$d/big.bin" | cut -d' ' -f1) $(stat -c %s "$d/big.bin")"
  exit 0
fi
head -c 2147483648 /dev/urandom > "$d/.big.tmp"
mv "$d/.big.tmp" "$d/big.bin"
echo "wrote $(sha256sum "$d/big.bin" | cut -d' ' -f1)"
echo '{"step": 1}' > "$d/.step.tmp" && mv "$d/.step.tmp" "$d/qm-checkpoint.json"
sleep 100000
"#;
    let big = stack.submit(&script_job("big", script)).await;
    let pid = stack
        .pid("checkpoint-node-1")
        .expect("the checkpoint service");
    let before = peak_rss_of(pid);
    let j = stack
        .wait_for(&big, 600, "its 2 GiB checkpoint committed", |j| {
            j.attempts
                .first()
                .is_some_and(|a| a.last_checkpoint_step == Some(1))
        })
        .await;
    assert!(j.on_borrowed_capacity, "{j:#?}");
    let digest = written_digest(&stack, &big);
    let up = peak_rss_of(pid);
    let j = reclaim_and_resume(&stack, &big, 900).await;
    assert_eq!(j.attempts[1].restored_checkpoint_step, Some(1));
    // The ledger's bytes moved: the 2 GiB file and the step file.
    assert!(
        j.attempts[1]
            .restored_bytes
            .is_some_and(|b| (2 << 30..(2 << 30) + 4096).contains(&b)),
        "{:#?}",
        j.attempts[1]
    );
    let found = stack.attempt_stdout("node-1", &big, 2);
    assert_eq!(
        found.trim(),
        format!("restored {digest} 2147483648"),
        "byte for byte"
    );
    let down = peak_rss_of(pid);
    eprintln!(
        "checkpoint service peak memory: {} MiB at start, {} MiB after the upload, {} MiB after the restore",
        before >> 20,
        up >> 20,
        down >> 20
    );
    for (what, peak) in [("uploading", up), ("restoring", down)] {
        assert!(
            peak < 256 << 20,
            "the checkpoint service's peak memory {what} 2 GiB: {} MiB (bound 256 MiB)",
            peak >> 20
        );
    }
    stack.stop_all();
    // 4 GiB of attempt directories: not kept for a post-mortem of a pass.
    let _ = std::fs::remove_dir_all(stack.dir.join("node-1").join(&big));
}

/// A blob of the newest checkpoint is damaged in S3 before the job is
/// preempted: its next attempt restores the checkpoint before it (the
/// trainer finds that one's content), and the attempt record, as
/// `DescribeServiceJob` and `qm describe` show it, says which checkpoint
/// was skipped and why.
#[tokio::test(flavor = "multi_thread")]
async fn a_damaged_blob_falls_back_to_the_previous_checkpoint_and_the_attempt_says_so() {
    use qm_checkpoint::manifest::{blob_key, manifests_prefix, Manifest};
    use qm_checkpoint::ObjectStore;
    let (_n, s3, mut stack) = lender_stack("damaged-blob").await;
    // Attempt 1 commits "one" (step 1), then "two" (step 2), and waits to
    // be preempted; a later attempt prints what it found and ends.
    let script = r#"set -e
d="$QM_CHECKPOINT_DIR"
if [ -f "$d/data.txt" ]; then echo "found $(cat "$d/data.txt")"; exit 0; fi
save() { echo "$1" > "$d/.t" && mv "$d/.t" "$d/data.txt"; echo "{\"step\": $2}" > "$d/.s" && mv "$d/.s" "$d/qm-checkpoint.json"; }
save one 1
sleep 4
save two 2
sleep 100000
"#;
    let job = stack.submit(&script_job("damaged", script)).await;
    stack.wait_committed(&job, 2).await;
    // Damage data.txt's blob in the newest manifest (step 2's).
    let store = s3.store();
    let prefix = format!("training/{job}");
    let mut keys = store
        .list(&manifests_prefix(&prefix))
        .await
        .expect("manifests listed");
    keys.sort();
    let newest = keys.last().expect("a manifest").clone();
    let manifest: Manifest = serde_json::from_slice(
        &store
            .get(&newest)
            .await
            .expect("read")
            .expect("the newest manifest"),
    )
    .expect("a manifest");
    assert_eq!(manifest.step, Some(2), "{newest}");
    let blob = manifest
        .files
        .iter()
        .find(|f| f.path == "data.txt")
        .expect("data.txt is in it");
    store
        .put(&blob_key(&prefix, &blob.sha256), b"garbage\n".to_vec())
        .await
        .expect("damaged");
    // QS2's owner reclaims the borrowed instance.
    let j = reclaim_and_resume(&stack, &job, 120).await;
    assert_eq!(
        stack.attempt_stdout("node-1", &job, 2).trim(),
        "found one",
        "the previous checkpoint's content, not the damaged one's"
    );
    let second = &j.attempts[1];
    assert_eq!(second.restored_checkpoint_step, Some(1), "{second:#?}");
    // Every checkpoint holding the damaged blob is skipped, newest first,
    // each named: step 2's, and any commit the service made between the
    // script's two renames (content "two", the marker still at step 1: a
    // checkpoint written file by file may be committed half old, half new,
    // docs/checkpoints.md).
    let mut damaged: Vec<u64> = Vec::new();
    for key in store
        .list(&manifests_prefix(&prefix))
        .await
        .expect("manifests listed")
    {
        let m: Manifest =
            serde_json::from_slice(&store.get(&key).await.expect("read").expect("the manifest"))
                .expect("a manifest");
        if m.files.iter().any(|f| f.sha256 == blob.sha256) {
            damaged.push(m.seq);
        }
    }
    damaged.sort_unstable_by(|a, b| b.cmp(a));
    assert!(damaged.contains(&manifest.seq), "{damaged:?}");
    assert_eq!(
        second.restore_skipped.len(),
        damaged.len(),
        "{damaged:?}: {second:#?}"
    );
    for (skipped, seq) in second.restore_skipped.iter().zip(&damaged) {
        assert!(
            skipped.starts_with(&format!("{seq}:")) && skipped.contains("data.txt"),
            "names each skipped checkpoint and why: {second:#?}"
        );
    }
    assert!(second.restored_bytes.is_some_and(|b| b > 0), "{second:#?}");
    let text = qm_describe(&stack, &job);
    assert!(
        text.contains("attempt 2 restored an older checkpoint; skipped: ")
            && text.contains(&second.restore_skipped[0]),
        "{text}"
    );
    stack.stop_all();
}

/// S3 stops answering for a while (its container paused) during a run:
/// the job keeps running, its commits fail after the response timeout and
/// `DescribeServiceJob` (and `qm describe`) show since when and why; once
/// S3 answers again the uploads catch up, the lag clears, and the job ends
/// with the digest of an uninterrupted run.
#[tokio::test(flavor = "multi_thread")]
async fn an_s3_outage_leaves_the_job_running_shows_the_lag_and_uploads_catch_up() {
    let (_nats, s3, mut stack) = stack_with(
        "s3-outage",
        2,
        &[("QM_CHECKPOINT_S3_RESPONSE_TIMEOUT_SECONDS", "2")],
    )
    .await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    let (job, expected) = long_job_running(&stack, "1200").await;
    let j = stack
        .wait_for(&job, 60, "checkpoints committed", |j| {
            j.attempts[0].last_checkpoint_step.unwrap_or(0) >= 40
        })
        .await;
    assert!(
        j.attempts[0].checkpoint_upload_failing_since.is_none(),
        "{j:#?}"
    );
    let paused_at = qm_service::now_ms();
    s3.container.pause().await.expect("S3 paused");
    let j = stack
        .wait_for(&job, 60, "the lag reported", |j| {
            j.attempts[0].checkpoint_upload_failing_since.is_some()
        })
        .await;
    assert_eq!(j.status, "RUNNING", "the job keeps running: {j:#?}");
    let a = &j.attempts[0];
    let since = a.checkpoint_upload_failing_since.expect("lagging");
    assert!(since >= paused_at, "{since} < {paused_at}");
    assert!(a.checkpoint_upload_error.is_some(), "{a:#?}");
    let stuck = a.last_checkpoint_step.unwrap_or(0);
    let text = qm_describe(&stack, &job);
    assert!(
        text.contains("attempt 1: checkpoints not uploaded since "),
        "{text}"
    );
    tokio::time::sleep(Duration::from_secs(4)).await;
    let j = stack.describe(&job).await.expect("described");
    assert_eq!(j.status, "RUNNING", "{j:#?}");
    assert_eq!(
        j.attempts[0].last_checkpoint_step.unwrap_or(0),
        stuck,
        "nothing committed while S3 is away"
    );
    s3.container.unpause().await.expect("S3 back");
    let j = stack
        .wait_for(&job, 90, "uploads caught up", |j| {
            j.attempts[0].checkpoint_upload_failing_since.is_none()
                && j.attempts[0].last_checkpoint_step.unwrap_or(0) > stuck
        })
        .await;
    assert!(j.attempts[0].checkpoint_upload_error.is_none(), "{j:#?}");
    let j = stack.wait_final(&job, 120).await;
    assert_eq!(j.status, "SUCCEEDED", "{j:#?}");
    assert_eq!(j.attempts.len(), 1, "never restarted: {j:#?}");
    let out = stack.attempt_stdout("node-1", &job, 1);
    assert_eq!(digest_in(&out), Some(expected), "{out}");
    stack.stop_all();
}

/// The node's checkpoint service is killed (-9) while it uploads a large
/// checkpoint in parts: that checkpoint is not committed (the last complete
/// one stays the newest), the restarted service aborts the cut-short upload
/// from its journal (no part of it survives), commits the checkpoint again,
/// and after a preemption the next attempt restores it byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn a_checkpoint_service_killed_mid_upload_leaves_no_part_and_the_restore_is_whole() {
    // Small parts, two at a time: the upload takes long enough to be cut.
    let (_nats, s3, mut stack) = lender_stack_with(
        "killed-upload",
        &[
            ("QM_CHECKPOINT_PART_SIZE_MIB", "5"),
            ("QM_CHECKPOINT_TRANSFER_PARALLELISM", "2"),
        ],
    )
    .await;
    let script = r#"set -e
d="$QM_CHECKPOINT_DIR"
if [ -f "$d/state.bin" ]; then echo "found $(sha256sum "$d/state.bin" | cut -d' ' -f1) $(cat "$d/step.txt")"; exit 0; fi
save() { echo "$1" > "$d/.t" && mv "$d/.t" "$d/step.txt"; echo "{\"step\": $2}" > "$d/.s" && mv "$d/.s" "$d/qm-checkpoint.json"; }
save one 1
sleep 3
head -c 805306368 /dev/urandom > "$d/.big"
echo "wrote $(sha256sum "$d/.big" | cut -d' ' -f1)"
mv "$d/.big" "$d/state.bin"
save two 2
sleep 100000
"#;
    let job = stack.submit(&script_job("cut", script)).await;
    stack.wait_committed(&job, 1).await;
    let store = s3.store();
    let prefix = format!("training/{job}");
    let deadline = Instant::now() + Duration::from_secs(120);
    let cut = loop {
        let uploads = store.uploads(&prefix).await.expect("uploads listed");
        if !uploads.is_empty() {
            break uploads;
        }
        assert!(
            Instant::now() < deadline,
            "no upload of the large checkpoint seen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stack.signal("checkpoint-node-1", "KILL");
    let j = stack.describe(&job).await.expect("described");
    assert_eq!(
        j.attempts[0].last_checkpoint_step,
        Some(1),
        "the cut-short checkpoint is not committed: {j:#?}"
    );
    stack.restart("checkpoint-node-1");
    // The restarted service aborts the cut-short upload (its journal names
    // it); it may start uploads of its own.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = store.uploads(&prefix).await.expect("uploads listed");
        if !now.iter().any(|u| cut.iter().any(|c| c.1 == u.1)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cut-short upload survives: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // QS2's owner reclaims the borrowed instance; the job resumes.
    let j = reclaim_and_resume(&stack, &job, 600).await;
    assert_eq!(j.attempts[1].restored_checkpoint_step, Some(2), "{j:#?}");
    let digest = written_digest(&stack, &job);
    assert_eq!(
        stack.attempt_stdout("node-1", &job, 2).trim(),
        format!("found {digest} two"),
        "byte for byte"
    );
    // Nothing in flight is left behind.
    let left = store.uploads(&prefix).await.expect("uploads listed");
    assert!(left.is_empty(), "{left:?}");
    stack.stop_all();
    let _ = std::fs::remove_dir_all(stack.dir.join("node-1").join(&job));
}
