//! Training containers end to end (issue 27): the `container` runtime runs
//! a real PyTorch image (`examples/pytorch/build-image.sh`, Debian's CPU
//! build of PyTorch and a SageMaker-contract script under torchrun) on
//! executors that talk to the Docker engine; the `/opt/ml` contract, the
//! failure file, the runtime placement rule, a container that dies with its
//! executor, one stopped by its guard when its executor is frozen, and a
//! job trying what it must not.

use std::time::{Duration, Instant};

use qm_integration_tests::stack::{start_nats, Stack};
use qm_integration_tests::{start_s3, S3Server};
use qm_wire::messages::{CheckpointConfig, SubmitServiceJob};

/// The image the tests run (`make images-torch` builds it).
fn torch_image() -> String {
    std::env::var("QM_TORCH_IMAGE").unwrap_or_else(|_| "quartermaster/pytorch-trainer:local".into())
}

fn queue_yaml() -> String {
    let image = torch_image();
    let repository = image.rsplit_once(':').map_or(image.as_str(), |(r, _)| r);
    format!(
        r#"
jobQueue:
  jobQueueName: training
  queueingStrategy: BEST_EFFORT_FIFO
quotaShares:
  - quotaShareName: QS1
    capacityLimits: [{{capacityUnit: ml.g5.xlarge, maxCapacity: 2}}]
    resourceSharingConfiguration: {{strategy: LEND_AND_BORROW, borrowLimit: 100}}
    imagePrefixes: ["{repository}", "quartermaster/pytorch-base"]
  - quotaShareName: QS2
    capacityLimits: [{{capacityUnit: ml.g5.xlarge, maxCapacity: 2}}]
    resourceSharingConfiguration: {{strategy: LEND}}
    imagePrefixes: ["{repository}"]
  - quotaShareName: QS3
    capacityLimits: [{{capacityUnit: ml.g5.xlarge, maxCapacity: 0}}]
    resourceSharingConfiguration: {{strategy: LEND_AND_BORROW, borrowLimit: -1}}
  - quotaShareName: QS4
    capacityLimits: [{{capacityUnit: ml.g5.xlarge, maxCapacity: 0}}]
    resourceSharingConfiguration: {{strategy: LEND_AND_BORROW, borrowLimit: -1}}
    imagePrefixes: ["{repository}", "quartermaster/pytorch-base"]
    runAsNonRoot: true
"#
    )
}

fn docker(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker runs");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn assert_image_built() {
    let image = torch_image();
    assert!(
        !docker(&["image", "ls", "-q", &image]).is_empty(),
        "{image} is missing: run `make images-torch` (examples/pytorch/build-image.sh)"
    );
}

/// Containers an executor of `stack` labelled (running or not, or only
/// running): other tests' executors of the same id share the engine.
fn containers_of(stack: &Stack, executor: &str) -> Vec<String> {
    listed(stack, executor, "-a")
}

fn running_of(stack: &Stack, executor: &str) -> Vec<String> {
    listed(stack, executor, "")
}

fn listed(stack: &Stack, executor: &str, all: &str) -> Vec<String> {
    let work_dir = format!(
        "label=qm.work-dir={}",
        stack.path().join(executor).display()
    );
    let mut args = vec!["ps", "-q", "--filter", &work_dir];
    let by_id = format!("label=qm.executor={executor}");
    args.extend(["--filter", &by_id]);
    if !all.is_empty() {
        args.push(all);
    }
    docker(&args).lines().map(str::to_string).collect()
}

/// A stack whose executors `ids` offer the container runtime (and the
/// process runtime when `process` too).
async fn stack(
    name: &str,
    ids: &[&str],
    process: bool,
) -> (qm_integration_tests::stack::Nats, S3Server, Stack) {
    assert_image_built();
    let nats = start_nats().await;
    let s3 = start_s3().await;
    let mut stack = Stack::new(&nats, &s3, name).await;
    stack.scheduler_env = vec![("QM_SCHEDULER_EXECUTOR_TIMEOUT_SECONDS".into(), "3".into())];
    let runtimes = if process {
        r#"["process","container"]"#
    } else {
        r#"["container"]"#
    };
    stack.executor_env = vec![
        ("QM_EXECUTOR_RUNTIMES".into(), runtimes.into()),
        ("QM_EXECUTOR_FENCE_AFTER_SECONDS".into(), "6".into()),
        ("QM_EXECUTOR_ADVERTISE_ADDRESS".into(), "127.0.0.1".into()),
    ];
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(&queue_yaml()).await;
    stack.wait_leader("scheduler-1").await;
    for id in ids {
        stack.executor(id, "training", "ml.g5.xlarge", 1);
    }
    (nats, s3, stack)
}

fn container_job(name: &str, share: &str, count: u32, hps: &[(&str, &str)]) -> SubmitServiceJob {
    let hps: std::collections::BTreeMap<&str, &str> = hps.iter().copied().collect();
    SubmitServiceJob {
        job_name: name.into(),
        job_queue: "training".into(),
        quota_share_name: Some(share.into()),
        instance_type: "ml.g5.xlarge".into(),
        instance_count: Some(count),
        container_image: Some(torch_image()),
        checkpoint_config: Some(CheckpointConfig::default()),
        environment: [(
            "SM_HPS".to_string(),
            serde_json::to_string(&hps).expect("json"),
        )]
        .into(),
        ..Default::default()
    }
}

/// What the job's rank 0 wrote to `/opt/ml/model/params.json`.
fn params(stack: &Stack, executor: &str, job_id: &str, attempt: u32) -> serde_json::Value {
    let path = stack
        .path()
        .join(executor)
        .join(job_id)
        .join(format!("attempt-{attempt}"))
        .join("ml/model/params.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), stack.logs()));
    serde_json::from_str(&text).expect("params.json is JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pytorch_image_trains_with_the_sagemaker_contract_and_its_failure_reaches_describe() {
    let (_nats, s3, mut stack) = stack("containers-contract", &["node-1"], false).await;

    // Hyperparameters arrive as strings; the run checkpoints and succeeds;
    // its model is delivered where OutputDataConfig says.
    let mut contract = container_job(
        "contract",
        "QS1",
        1,
        &[("steps", "30"), ("checkpoint_every", "10"), ("lr", "0.05")],
    );
    let output = format!("s3://{}/training/shares/QS1/models", s3.config.bucket);
    contract.output_data_config = Some(qm_wire::messages::OutputDataConfig {
        s3_output_path: output.clone(),
    });
    // An input channel of two files; the script adds their numbers to
    // its targets and records the sum.
    let store = s3.store();
    qm_checkpoint::ObjectStore::put(
        &store,
        "training/shares/QS1/data/train/a.txt",
        b"1 2 3".to_vec(),
    )
    .await
    .expect("put");
    qm_checkpoint::ObjectStore::put(
        &store,
        "training/shares/QS1/data/train/more/b.txt",
        b"4.5".to_vec(),
    )
    .await
    .expect("put");
    contract.input_data_config = vec![qm_wire::messages::InputChannel {
        channel_name: "train".into(),
        s3_uri: format!("s3://{}/training/shares/QS1/data/train/", s3.config.bucket),
        s3_data_distribution_type: None,
    }];
    let job = stack.submit(&contract).await;
    let done = stack.wait_final(&job, 180).await;
    assert_eq!(done.status, "SUCCEEDED", "{done:#?}\n{}", stack.logs());
    assert_eq!(
        done.container_image.as_deref(),
        Some(torch_image().as_str())
    );
    let p = params(&stack, "node-1", &job, 1);
    assert_eq!(p["hyperparameters"]["steps"], "30");
    assert_eq!(p["hyperparameters"]["lr"], "0.05");
    assert_eq!(p["world"], 1);
    assert_eq!(p["shift"], 10.5, "the input channel arrived: {p}");
    let data = stack
        .path()
        .join("node-1")
        .join(&job)
        .join("attempt-1/ml/input/data/train/more/b.txt");
    assert_eq!(std::fs::read_to_string(&data).expect("downloaded"), "4.5");
    let out = stack.attempt_stdout("node-1", &job, 1);
    assert!(
        out.contains("torch.distributed.run"),
        "started under torchrun: {out}"
    );
    assert!(out.contains("final digest"), "{out}");
    let detail = &done.attempts[0];
    assert_eq!(detail.last_checkpoint_step, Some(30), "{done:#?}");
    assert!(
        containers_of(&stack, "node-1").is_empty(),
        "no container of an ended attempt is left behind"
    );
    let model = qm_checkpoint::ObjectStore::get(
        &s3.store(),
        &format!("training/shares/QS1/models/{job}/output/model.tar.gz"),
    )
    .await
    .expect("S3 answers")
    .expect("model.tar.gz was uploaded");
    let mut names = Vec::new();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&model[..]));
    for entry in archive.entries().expect("a tar.gz") {
        let entry = entry.expect("an entry");
        names.push(entry.path().expect("path").display().to_string());
    }
    names.sort();
    assert_eq!(
        names,
        ["losses.json", "model.pt", "params.json"],
        "{names:?}"
    );
    assert!(qm_checkpoint::ObjectStore::exists(
        &s3.store(),
        &format!("training/shares/QS1/models/{job}/output/output.tar.gz"),
    )
    .await
    .expect("S3 answers"));
    // An output path outside what the share may write is refused at submit.
    let mut elsewhere = container_job("elsewhere", "QS1", 1, &[]);
    elsewhere.output_data_config = Some(qm_wire::messages::OutputDataConfig {
        s3_output_path: format!("s3://{}/training/shares/QS2/models", s3.config.bucket),
    });
    let e = stack.try_submit(&elsewhere).await.expect_err("refused");
    assert!(e.contains("outputDataConfig.s3OutputPath"), "{e}");
    // As an attacker: a channel another share's data is in is refused.
    let mut snoop = container_job("snoop", "QS1", 1, &[]);
    snoop.input_data_config = vec![qm_wire::messages::InputChannel {
        channel_name: "train".into(),
        s3_uri: format!("s3://{}/training/shares/QS2/data/", s3.config.bucket),
        s3_data_distribution_type: None,
    }];
    let e = stack.try_submit(&snoop).await.expect_err("refused");
    assert!(
        e.contains("inputDataConfig[0].s3Uri") && e.contains("inputS3Prefixes"),
        "{e}"
    );

    // A failing script: the first 1,024 characters of its failure file
    // become the attempt's reason.
    let job = stack
        .submit(&container_job(
            "fails",
            "QS1",
            1,
            &[("steps", "30"), ("fail_at_step", "3")],
        ))
        .await;
    let failed = stack.wait_final(&job, 180).await;
    assert_eq!(failed.status, "FAILED", "{failed:#?}");
    let reason = failed.attempts[0].status_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("diverged at step 3"),
        "the job's own words: {failed:#?}"
    );
    // The script exits 3 under torchrun, which reports a failed worker
    // by exiting 1 itself: the container's exit code is torchrun's.
    assert_eq!(failed.attempts[0].exit_code, Some(1));
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_job_waits_for_an_executor_that_runs_images_and_an_image_outside_the_share_is_refused(
) {
    assert_image_built();
    let nats = start_nats().await;
    let s3 = start_s3().await;
    let mut stack = Stack::new(&nats, &s3, "containers-placement").await;
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(&queue_yaml()).await;
    stack.wait_leader("scheduler-1").await;
    // An executor of host processes only.
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    let job = stack
        .submit(&container_job("waits", "QS1", 1, &[("steps", "5")]))
        .await;
    let waiting = stack
        .wait_for(&job, 30, "a reason", |j| {
            j.status_reason.starts_with("NO_EXECUTOR_FOR_RUNTIME")
        })
        .await;
    assert_eq!(waiting.status, "RUNNABLE");
    assert!(
        waiting.status_reason.contains("container runtime"),
        "{waiting:#?}"
    );
    // One that runs images registers: the job starts there, not on node-1.
    stack.executor_env = vec![("QM_EXECUTOR_RUNTIMES".into(), r#"["container"]"#.into())];
    stack.executor("node-2", "training", "ml.g5.xlarge", 1);
    let done = stack.wait_final(&job, 180).await;
    assert_eq!(done.status, "SUCCEEDED", "{done:#?}\n{}", stack.logs());
    assert_eq!(done.attempts[0].executor_id.as_deref(), Some("node-2"));

    // As an attacker: an image the share does not allow, or any image for
    // a share without imagePrefixes, is refused by name; nothing is stored.
    let mut evil = container_job("evil", "QS1", 1, &[]);
    evil.container_image = Some(format!(
        "{}-evil:1",
        torch_image().split(':').next().unwrap_or_default()
    ));
    let e = stack.try_submit(&evil).await.expect_err("refused");
    assert!(
        e.contains("containerImage") && e.contains("imagePrefixes"),
        "{e}"
    );
    let mut elsewhere = container_job("elsewhere", "QS3", 1, &[]);
    elsewhere.container_image = Some(torch_image());
    let e = stack.try_submit(&elsewhere).await.expect_err("refused");
    assert!(e.contains("may not run images"), "{e}");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_container_sees_no_docker_socket_no_credentials_and_no_other_job() {
    let (_nats, _s3, mut stack) = stack("containers-attacker", &["node-1"], false).await;
    let secret_dir = stack.path().to_path_buf();
    let probe = format!(
        "import os, sys\n\
         found = [p for p in ['/var/run/docker.sock', '/run/docker.sock', {secret:?}, {creds:?}] if os.path.exists(p)]\n\
         env = [k for k in os.environ if k.startswith(('QM_NATS', 'QM_EXECUTOR', 'AWS_', 'QM_CHECKPOINT_S3'))]\n\
         caps = open('/proc/self/status').read().split('CapEff:')[1].split()[0]\n\
         nnp = open('/proc/self/status').read().split('NoNewPrivs:')[1].split()[0]\n\
         print('found', found, 'env', env, 'caps', caps, 'nnp', nnp)\n\
         uid = os.getuid()\n\
         sys.exit(1 if found or env or nnp != '1' or uid != 0 or int(caps, 16) != 0 else 0)\n",
        secret = secret_dir.display().to_string(),
        creds = stack.auth.key("node-1").display().to_string(),
    );
    // As root (the base image has no user): root without a single
    // capability, or the probe fails.
    let mut job = container_job("probe", "QS1", 1, &[]);
    job.container_image = Some("quartermaster/pytorch-base:bookworm".into());
    job.command = vec!["python3".into(), "-c".into(), probe];
    job.checkpoint_config = None;
    let id = stack.submit(&job).await;
    let done = stack.wait_final(&id, 120).await;
    let out = stack.attempt_stdout("node-1", &id, 1);
    assert_eq!(done.status, "SUCCEEDED", "{out}\n{done:#?}");
    assert!(out.contains("found [] env []"), "{out}");

    // The image's own user by default (the trainer image runs as uid
    // 1000); a share that forbids root runs an image without a user (its
    // base, root) as nobody instead.
    let whoami = |share: &str, image: &str| {
        let mut job = container_job("whoami", share, 1, &[]);
        job.container_image = Some(image.to_string());
        job.checkpoint_config = None;
        job.command = vec!["id".into(), "-u".into()];
        job
    };
    let id = stack.submit(&whoami("QS1", &torch_image())).await;
    assert_eq!(stack.wait_final(&id, 120).await.status, "SUCCEEDED");
    assert_eq!(stack.attempt_stdout("node-1", &id, 1).trim(), "1000");
    let id = stack
        .submit(&whoami("QS4", "quartermaster/pytorch-base:bookworm"))
        .await;
    let done = stack.wait_final(&id, 120).await;
    assert_eq!(done.status, "SUCCEEDED", "{done:#?}");
    assert_eq!(stack.attempt_stdout("node-1", &id, 1).trim(), "65534");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_container_dies_with_its_executor_and_a_restart_reconciles() {
    let (_nats, _s3, mut stack) = stack("containers-kill9", &["node-1"], false).await;
    let job = stack
        .submit(&container_job(
            "long",
            "QS1",
            1,
            &[("steps", "100000"), ("step_seconds", "0.05")],
        ))
        .await;
    stack
        .wait_for(&job, 120, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let running: Vec<String> = containers_of(&stack, "node-1");
    assert_eq!(running.len(), 1, "one container for the attempt");
    // kill -9: no drain, no clean-up by the executor itself.
    stack.signal("node-1", "KILL");
    let killed_at = Instant::now();
    // The guard kills the container at once; the fencing bound (6 s
    // fenceAfterSeconds + the job's grace) is the most it may take.
    let bound = Duration::from_secs(6 + 120);
    loop {
        if running_of(&stack, "node-1").is_empty() {
            break;
        }
        assert!(
            killed_at.elapsed() < bound,
            "a container outlived its executor past the fencing bound"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gone_after = killed_at.elapsed();
    eprintln!("container gone {gone_after:?} after kill -9 of its executor");
    // A container the executor could not clean up (as if its guard had
    // died too) is stopped by the next start of the executor.
    let work_dir = format!("qm.work-dir={}", stack.path().join("node-1").display());
    let leftover = docker(&[
        "run",
        "-d",
        "--label",
        &work_dir,
        "--label",
        "qm.executor=node-1",
        "--label",
        "qm.job=stale",
        "--label",
        "qm.attempt=1",
        "--entrypoint",
        "sleep",
        &torch_image(),
        "600",
    ]);
    assert!(!leftover.is_empty());
    stack.restart("node-1");
    let deadline = Instant::now() + Duration::from_secs(60);
    // (The job's next attempt may already run there: only the stale one
    // must go.)
    while !docker(&["ps", "-a", "-q", "--filter", &format!("id={leftover}")]).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the restarted executor left a stale container\n{}",
            stack.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The job was requeued (HOST_LOST) and runs again on the restarted node.
    let again = stack
        .wait_for(&job, 120, "a second attempt", |j| j.attempts.len() >= 2)
        .await;
    assert_eq!(
        again.attempts[0].outcome.as_deref(),
        Some("HOST_LOST"),
        "{again:#?}"
    );
    stack.stop_all();
    let _ = docker(&["rm", "-f", &leftover]);
    // The long job still runs in its container (the executor was only
    // asked to drain): the test removes what it started.
    for id in containers_of(&stack, "node-1") {
        let _ = docker(&["rm", "-f", &id]);
    }
}

/// Milliseconds since the Unix epoch of the engine's RFC 3339 time
/// (`2026-12-05T11:30:01.123456789Z`).
fn engine_ms(rfc3339: &str) -> u64 {
    let t = time::OffsetDateTime::parse(
        rfc3339.trim(),
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap_or_else(|e| panic!("{rfc3339:?}: {e}"));
    (t.unix_timestamp_nanos() / 1_000_000) as u64
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_executors_container_is_stopped_by_its_guard_before_the_job_runs_elsewhere() {
    // Issue 28: the executor stopped (SIGSTOP) never runs its own fencing;
    // the container's guard must stop the container on the deadline.
    let (_nats, _s3, mut stack) = stack("containers-frozen", &["node-1"], false).await;
    let mut long = container_job(
        "long",
        "QS1",
        1,
        &[("steps", "100000"), ("step_seconds", "0.05")],
    );
    long.termination_grace_period_seconds = Some(5);
    let job = stack.submit(&long).await;
    stack
        .wait_for(&job, 120, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let first = containers_of(&stack, "node-1");
    assert_eq!(first.len(), 1, "one container for the attempt");
    stack.send_signal("node-1", "STOP");
    stack.executor("node-2", "training", "ml.g5.xlarge", 1);
    let moved = stack
        .wait_for(&job, 180, "a second attempt running on node-2", |j| {
            j.attempts.len() >= 2 && j.status == "RUNNING"
        })
        .await;
    assert_eq!(moved.attempts[0].outcome.as_deref(), Some("HOST_LOST"));
    let second = running_of(&stack, "node-2");
    assert_eq!(second.len(), 1, "{}", stack.logs());
    // The frozen executor's container had stopped before the new one
    // started (the engine's own clock for both).
    let finished = engine_ms(&docker(&[
        "inspect",
        "-f",
        "{{.State.FinishedAt}}",
        &first[0],
    ]));
    let started = engine_ms(&docker(&[
        "inspect",
        "-f",
        "{{.State.StartedAt}}",
        &second[0],
    ]));
    assert!(
        running_of(&stack, "node-1").is_empty() && finished > 0 && finished < started,
        "node-1's container (finished at {finished} ms) overlapped node-2's (started at {started} ms)\n{}",
        stack.logs()
    );
    assert!(
        stack
            .log_of("node-1")
            .contains("qm-executor guard: the executor has not renewed its fence deadline"),
        "the guard fenced it:\n{}",
        stack.log_of("node-1")
    );
    stack.send_signal("node-1", "CONT");
    stack.stop_all();
}

/// On a machine with an NVIDIA GPU and the NVIDIA Container Toolkit
/// (`examples/pytorch/gpu-check.sh` runs it): an executor with one GPU per
/// instance runs a container job on one instance, and the job sees exactly
/// one GPU, numbered 0. Ignored elsewhere, and reported so: it never passes
/// where it cannot run.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs an NVIDIA GPU and its container toolkit: examples/pytorch/gpu-check.sh"]
async fn on_a_gpu_node_a_container_job_sees_exactly_its_gpus() {
    assert_image_built();
    let nats = start_nats().await;
    let s3 = start_s3().await;
    let mut stack = Stack::new(&nats, &s3, "containers-gpu").await;
    stack.executor_env = vec![("QM_EXECUTOR_RUNTIMES".into(), r#"["container"]"#.into())];
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(&queue_yaml()).await;
    stack.wait_leader("scheduler-1").await;
    stack.checkpoint("node-b");
    let instances = r#"[{"instanceType":"ml.g5.xlarge","count":1,"gpusPerInstance":1}]"#;
    stack
        .executor_env
        .push(("QM_EXECUTOR_INSTANCES".into(), instances.into()));
    stack.executor_alone("node-b", "training", "ml.g5.xlarge", 1);
    let mut job = container_job("gpus", "QS1", 1, &[]);
    job.checkpoint_config = None;
    job.command = vec![
        "sh".into(),
        "-c".into(),
        "nvidia-smi -L; echo visible=$CUDA_VISIBLE_DEVICES count=$(nvidia-smi -L | wc -l)".into(),
    ];
    let id = stack.submit(&job).await;
    let done = stack.wait_final(&id, 300).await;
    let out = stack.attempt_stdout("node-b", &id, 1);
    eprintln!("{out}");
    assert_eq!(
        done.status,
        "SUCCEEDED",
        "{out}\n{done:#?}\n{}",
        stack.logs()
    );
    assert!(out.contains("visible=0 count=1"), "{out}");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_out_of_memory_kill_and_an_image_that_cannot_be_pulled_fail_the_attempt_saying_so() {
    assert_image_built();
    let nats = start_nats().await;
    let s3 = start_s3().await;
    let mut stack = Stack::new(&nats, &s3, "containers-oom").await;
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(&queue_yaml()).await;
    stack.wait_leader("scheduler-1").await;
    stack.executor_env = vec![
        ("QM_EXECUTOR_RUNTIMES".into(), r#"["container"]"#.into()),
        (
            "QM_EXECUTOR_INSTANCES".into(),
            r#"[{"instanceType":"ml.g5.xlarge","count":1,"memoryMiB":128}]"#.into(),
        ),
    ];
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    // 1 GiB in a container limited to 128 MiB.
    let mut hog = container_job("hog", "QS1", 1, &[]);
    hog.checkpoint_config = None;
    hog.command = vec![
        "python3".into(),
        "-c".into(),
        "b = bytearray(1 << 30); b[::4096] = b'x' * len(b[::4096]); print('survived')".into(),
    ];
    let id = stack.submit(&hog).await;
    let done = stack.wait_final(&id, 120).await;
    assert_eq!(done.status, "FAILED", "{done:#?}");
    let reason = done.attempts[0].status_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("OutOfMemory") && reason.contains("128 MiB"),
        "{done:#?}"
    );

    // An image the share may run but that is nowhere to be had: the pull's
    // own reason, once (no retry loop: the job allows one attempt).
    let mut missing = container_job("missing", "QS1", 1, &[]);
    missing.container_image = Some(format!(
        "{}:no-such-tag",
        torch_image()
            .rsplit_once(':')
            .map_or(torch_image(), |(r, _)| r.to_string())
    ));
    let id = stack.submit(&missing).await;
    let done = stack.wait_final(&id, 180).await;
    assert_eq!(done.status, "FAILED", "{done:#?}");
    assert_eq!(done.attempts.len(), 1, "not retried: {done:#?}");
    let reason = done.attempts[0].status_reason.clone().unwrap_or_default();
    assert!(reason.contains("no-such-tag"), "{done:#?}");
    assert_eq!(done.attempts[0].exit_code, Some(127));
    stack.stop_all();
}

/// A resume drill of the PyTorch image: its resumed copy, stopped after its
/// first committed checkpoint, ends with the uninterrupted copy's digest
/// (the image writes it to `/opt/ml/output/result`).
#[tokio::test(flavor = "multi_thread")]
async fn a_pytorch_image_passes_a_resume_drill() {
    use qm_wire::messages::{
        ListResumeDrills, ListResumeDrillsResponse, StartResumeDrill, StartResumeDrillResponse,
    };
    use qm_wire::subjects::Operation;
    let (_nats, _s3, mut stack) = stack("torch-drill", &["node-a", "node-b"], false).await;
    let with_classes = queue_yaml().replacen(
        "    resourceSharingConfiguration: {strategy: LEND_AND_BORROW, borrowLimit: 100}\n",
        "    resourceSharingConfiguration: {strategy: LEND_AND_BORROW, borrowLimit: 100}\n    workloadClasses: [{name: release, priorityBand: {min: 0, max: 99}, requiresCheckpoint: true}]\n",
        1,
    );
    assert_ne!(with_classes, queue_yaml(), "QS1 gets its class");
    stack.apply(&with_classes).await;
    let job = container_job(
        "torch",
        "QS1",
        1,
        &[
            ("steps", "120"),
            ("checkpoint_every", "10"),
            ("step_seconds", "0.1"),
        ],
    );
    let seed = (0..)
        .find(|s| qm_core::drill::delay_for(*s) < 1_500)
        .expect("a seed");
    let r: StartResumeDrillResponse = stack
        .client
        .call(
            Operation::StartResumeDrill,
            &StartResumeDrill {
                job,
                seed: Some(seed),
            },
        )
        .await
        .expect("the drill starts");
    let deadline = Instant::now() + Duration::from_secs(300);
    let drill = loop {
        let list: ListResumeDrillsResponse = stack
            .client
            .call(
                Operation::ListResumeDrills,
                &ListResumeDrills {
                    job_queue: "training".into(),
                    quota_share_name: None,
                },
            )
            .await
            .expect("listed");
        if let Some(d) = list
            .drills
            .into_iter()
            .find(|d| d.drill_id == r.drill_id && d.status != "RUNNING")
        {
            break d;
        }
        assert!(Instant::now() < deadline, "undecided:\n{}", stack.logs());
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(drill.status, "PASSED", "{drill:#?}\n{}", stack.logs());
    assert!(drill.artifact.starts_with("image:"), "{drill:#?}");
    assert!(drill.restored_step.is_some_and(|s| s >= 10), "{drill:#?}");
    stack.stop_all();
}
