//! The AWS Batch gateway, driven by clients nobody on this project wrote:
//! boto3 and the AWS CLI (pinned, in a virtual environment of their own:
//! `integration-tests/aws/setup.sh`) and the AWS SDK for Rust, against the
//! real services, NATS and S3. And the gateway's trust, tried as an
//! attacker would: forged signatures and bodies over HTTP, forged callers
//! over NATS.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use aws_sdk_batch::config::{BehaviorVersion, Credentials, Region};
use qm_integration_tests::gateway::{aws_clients, GatewayProc};
use qm_integration_tests::stack::{bin, digest_in, reference_digest, start_nats, Stack};
use qm_wire::subjects;

const REGION: &str = "eu-west-1";
/// The access key ids `deploy/tenancy.dev.yaml` maps to principals.
const KEYS: [(&str, &str); 4] = [
    ("platform", "AKIAQMPLATFORM00001"),
    ("alice", "AKIAQMALICE00000001"),
    ("bob", "AKIAQMBOB0000000001"),
    ("carol", "AKIAQMCAROL00000001"),
];
/// In the keys file, but mapped to no one by the tenancy.
const UNMAPPED: &str = "AKIAQMUNMAPPED00001";

fn secret_of(principal: &str) -> String {
    format!("{principal}-secret-{:08}-qm-test-key", std::process::id())
}

/// The gateway's keys file (mode 0600), and the keys as the Python
/// clients take them (principal -> [key id, secret]).
fn write_keys(dir: &Path) -> (PathBuf, serde_json::Value) {
    let mut file = String::new();
    let mut json = serde_json::Map::new();
    for (who, id) in KEYS {
        file.push_str(&format!("{id}: {{secret: {}}}\n", secret_of(who)));
        json.insert(who.into(), serde_json::json!([id, secret_of(who)]));
    }
    file.push_str(&format!(
        "{UNMAPPED}: {{secret: {}}}\n",
        secret_of("unmapped")
    ));
    json.insert(
        "unmapped".into(),
        serde_json::json!([UNMAPPED, secret_of("unmapped")]),
    );
    let path = dir.join("gateway-keys.yaml");
    std::fs::write(&path, file).expect("keys written");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    (path, serde_json::Value::Object(json))
}

/// The environment of an AWS client process: only what it needs (no
/// CA bundle or profile of this machine's).
fn client_env(cmd: &mut Command, home: &Path) {
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("AWS_CONFIG_FILE", home.join("none"))
        .env("AWS_SHARED_CREDENTIALS_FILE", home.join("none"))
        .env("AWS_EC2_METADATA_DISABLED", "true");
}

fn run_ok(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("--- {what}\n{stdout}{stderr}");
    assert!(out.status.success(), "{what} failed:\n{stdout}\n{stderr}");
    stdout
}

struct Gateway {
    endpoint: String,
    keys: serde_json::Value,
    proc: GatewayProc,
    /// Its CA and certificate, when it serves HTTPS.
    certs: Option<qm_integration_tests::tls::TestCerts>,
}

/// NATS, S3, admission, a scheduler and the gateway (no queue yet).
async fn started(
    name: &str,
    tls: Option<&Path>,
    extra: &[(String, String)],
) -> (
    Stack,
    Gateway,
    (
        qm_integration_tests::stack::Nats,
        qm_integration_tests::S3Server,
    ),
) {
    let nats = start_nats().await;
    let s3 = qm_integration_tests::start_s3().await;
    let mut stack = Stack::new(&nats, &s3, name).await;
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.wait_leader("scheduler-1").await;
    let (keys_file, keys) = write_keys(&stack.dir);
    let certs = tls.map(|dir| qm_integration_tests::tls::make(dir, "gateway"));
    let gw = GatewayProc::start(
        &mut stack,
        "gateway",
        &keys_file,
        certs.as_ref(),
        REGION,
        extra,
    )
    .await;
    let gateway = Gateway {
        endpoint: gw.endpoint.clone(),
        keys,
        proc: gw,
        certs,
    };
    // The servers live as long as the caller holds them.
    (stack, gateway, (nats, s3))
}

fn story_phase(venv: &Path, stack: &Stack, gw: &Gateway, phase: &str, out: &Path) -> String {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("aws/batch_story.py");
    let mut cmd = Command::new(venv.join("bin/python"));
    client_env(&mut cmd, &stack.dir);
    cmd.arg(&script)
        .arg(phase)
        .env("QM_GW_ENDPOINT", &gw.endpoint)
        .env("QM_GW_REGION", REGION)
        .env("QM_GW_KEYS", gw.keys.to_string())
        .env("QM_GW_TRAINER", bin("qm-trainer"))
        .env("QM_GW_BUCKET", &stack.s3.bucket)
        .env("QM_GW_OUT", out);
    run_ok(cmd, &format!("boto3: {phase}"))
}

/// The preempted jobs resumed from their checkpoints: every job ends with
/// the digest of an uninterrupted run; HyperParameters arrive as SageMaker
/// gives them.
async fn assert_story_outputs(stack: &Stack, ids: &BTreeMap<String, String>) {
    let expected = reference_digest(&["--steps", "300", "--checkpoint-every", "10"]);
    for (name, id) in ids {
        let j = stack.describe(id).await.expect("described");
        let last = j.attempts.last().expect("attempts");
        let out = stack.attempt_stdout("node-1", id, last.attempt);
        assert_eq!(
            digest_in(&out).as_deref(),
            Some(expected.as_str()),
            "{name}: {out}"
        );
        if j.attempts.len() > 1 {
            assert!(out.contains("resumed from step"), "{name}: {out}");
        }
        // HyperParameters arrive as SageMaker gives them.
        let hps = stack
            .dir
            .join("node-1")
            .join(id)
            .join(format!("attempt-{}", last.attempt))
            .join("input/config/hyperparameters.json");
        let hps: BTreeMap<String, String> =
            serde_json::from_str(&std::fs::read_to_string(&hps).expect("hyperparameters.json"))
                .expect("json");
        assert_eq!(hps["learning-rate"], "0.1", "{name}");
    }
}

/// 30 describes of `id` on NATS directly: their p50 and max, printed.
async fn print_nats_baseline(stack: &Stack, id: &str) {
    let mut took: Vec<f64> = Vec::new();
    for _ in 0..30 {
        let t = std::time::Instant::now();
        stack.describe(id).await.expect("described");
        took.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    took.sort_by(f64::total_cmp);
    println!(
        "describe on NATS directly: p50 {:.1} ms, max {:.1} ms (30 calls)",
        took[15], took[29]
    );
}

/// What the Rust SDK is refused: a team member touching the queue's own
/// fields, a workload class its share lacks, an unknown job, a wrong secret.
async fn assert_sdk_refusals(gw: &Gateway, bob: &aws_sdk_batch::Client, payload: &str) {
    // A team member may not touch the queue's own fields, even those only
    // the gateway keeps (its priority, its scheduling policy).
    let refused = bob
        .update_job_queue()
        .job_queue("training")
        .priority(999)
        .send()
        .await
        .expect_err("bob may not change the queue's priority");
    let refused = format!("{:?}", refused.into_service_error());
    assert!(
        refused.contains("AccessDenied") && refused.contains("bob"),
        "{refused}"
    );
    let queues = bob
        .describe_job_queues()
        .job_queues("training")
        .send()
        .await
        .expect("describe");
    assert_ne!(
        queues.job_queues().first().and_then(|q| q.priority()),
        Some(999),
        "nothing changed"
    );
    let listed = bob
        .list_quota_shares()
        .job_queue("training")
        .send()
        .await
        .expect("shares");
    assert_eq!(listed.quota_shares().len(), 2);
    // AWS has no field for a workload class: the tag qm:workloadClass
    // names it (QS2 declares none, so naming one is refused, saying so).
    let e = bob
        .submit_service_job()
        .job_name("classy")
        .job_queue("training")
        .service_job_type(aws_sdk_batch::types::ServiceJobType::SagemakerTraining)
        .quota_share_name("QS2")
        .service_request_payload(payload.replace("from-the-cli", "classy"))
        .tags("qm:workloadClass", "urgent")
        .send()
        .await
        .expect_err("QS2 declares no classes");
    let message = aws_sdk_batch::error::ProvideErrorMetadata::message(&e)
        .unwrap_or_default()
        .to_string();
    assert!(message.contains("declares no workload classes"), "{e:?}");
    let e = bob
        .describe_service_job()
        .job_id("j-nosuchjob")
        .send()
        .await
        .expect_err("no such job");
    let e = e.into_service_error();
    assert!(e.is_client_exception(), "{e:?}");
    let wrong = {
        let conf = aws_sdk_batch::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(&gw.endpoint)
            .credentials_provider(Credentials::new(
                "AKIAQMBOB0000000001",
                "not-bobs-secret-at-all",
                None,
                None,
                "test",
            ))
            .build();
        aws_sdk_batch::Client::from_conf(conf)
    };
    let e = wrong
        .list_quota_shares()
        .job_queue("training")
        .send()
        .await
        .expect_err("a wrong secret");
    let meta = aws_sdk_batch::error::ProvideErrorMetadata::code(&e);
    assert_eq!(meta, Some("InvalidSignatureException"), "{e:?}");
}

/// The three-share story with boto3, then the AWS CLI and the AWS SDK for
/// Rust, then requests no client would make.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn aws_clients_drive_quartermaster_unchanged() {
    let venv = aws_clients();
    let (mut stack, gw, _servers) = started("gateway", None, &[]).await;
    let ids_file = stack.dir.join("story-jobs.json");

    story_phase(&venv, &stack, &gw, "setup", &ids_file);
    // The queue boto3 made draws on the service environment it named, with
    // its priority, as admission stores it; the fleet joins the
    // environment (three instances, one per share), not the queue.
    let described: qm_wire::system::QueueDocument = stack
        .client
        .call(
            subjects::Operation::DescribeJobQueue,
            &qm_wire::messages::QueueRef {
                job_queue: "training".into(),
            },
        )
        .await
        .expect("described");
    assert_eq!(
        (
            described.job_queue.service_environment.as_deref(),
            described.job_queue.priority
        ),
        (Some("fleet"), Some(1)),
        "{described:#?}"
    );
    stack.executor_joining("node-1", "fleet", "ml.g5.xlarge", 3);
    story_phase(&venv, &stack, &gw, "story", &ids_file);

    // The preempted jobs resumed from their checkpoints: every job ends
    // with the digest of an uninterrupted run.
    let ids: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(&ids_file).expect("job ids")).expect("json");
    assert_story_outputs(&stack, &ids).await;

    // The baseline of the story's timed round trip: the same describe on
    // NATS directly (printed, not asserted).
    if let Some(id) = ids.get("p1") {
        print_nats_baseline(&stack, id).await;
    }

    story_phase(&venv, &stack, &gw, "attacks", &ids_file);

    // The AWS CLI: a submit and a describe, output read as JSON.
    let aws = |args: &[&str], who: &str| {
        let (id, secret) = (
            KEYS.iter().find(|(p, _)| *p == who).expect("key").1,
            secret_of(who),
        );
        let mut cmd = Command::new(venv.join("bin/aws"));
        client_env(&mut cmd, &stack.dir);
        cmd.env("AWS_ACCESS_KEY_ID", id)
            .env("AWS_SECRET_ACCESS_KEY", secret)
            .env("AWS_DEFAULT_REGION", REGION)
            .args(["batch", "--endpoint-url", &gw.endpoint, "--output", "json"])
            .args(args);
        let out = run_ok(cmd, &format!("aws batch {}", args[0]));
        serde_json::from_str::<serde_json::Value>(&out).expect("the CLI prints JSON")
    };
    let payload = serde_json::json!({
        "TrainingJobName": "from-the-cli",
        "AlgorithmSpecification": {
            "TrainingImage": "quartermaster/qm-trainer:local",
            "ContainerEntrypoint": [bin("qm-trainer").display().to_string()],
            "ContainerArguments": ["--steps", "5", "--step-delay-ms", "10"],
        },
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1},
        "RoleArn": "arn:aws:iam::000000000000:role/x",
        "OutputDataConfig": {"S3OutputPath": "s3://out/cli"},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    })
    .to_string();
    let submitted = aws(
        &[
            "submit-service-job",
            "--job-name",
            "from-the-cli",
            "--job-queue",
            "training",
            "--service-job-type",
            "SAGEMAKER_TRAINING",
            "--quota-share-name",
            "QS2",
            "--service-request-payload",
            &payload,
        ],
        "bob",
    );
    let job_id = submitted["jobId"].as_str().expect("jobId").to_string();
    assert_eq!(submitted["jobName"], "from-the-cli");
    let final_state = stack.wait_final(&job_id, 120).await;
    assert_eq!(final_state.status, "SUCCEEDED", "{final_state:#?}");
    let described = aws(&["describe-service-job", "--job-id", &job_id], "bob");
    assert_eq!(described["status"], "SUCCEEDED", "{described}");
    assert_eq!(described["quotaShareName"], "QS2");
    assert_eq!(described["serviceJobType"], "SAGEMAKER_TRAINING");
    assert_eq!(
        described["jobQueue"],
        format!("arn:aws:batch:{REGION}:000000000000:job-queue/training")
    );

    // The AWS SDK for Rust.
    let bob = sdk(&gw, "bob");
    let r = bob
        .submit_service_job()
        .job_name("from-rust")
        .job_queue("training")
        .service_job_type(aws_sdk_batch::types::ServiceJobType::SagemakerTraining)
        .quota_share_name("QS2")
        .scheduling_priority(5)
        .service_request_payload(payload.replace("from-the-cli", "from-rust"))
        .tags("sdk", "rust")
        .send()
        .await
        .expect("the Rust SDK submits");
    let rust_job = r.job_id().expect("jobId").to_string();
    assert!(r.job_arn().unwrap_or_default().ends_with(&rust_job));
    let d = bob
        .describe_service_job()
        .job_id(&rust_job)
        .send()
        .await
        .expect("the Rust SDK describes");
    assert_eq!(d.job_name(), Some("from-rust"));
    assert_eq!(d.scheduling_priority(), Some(5));
    assert_eq!(
        d.tags().and_then(|t| t.get("sdk")).map(String::as_str),
        Some("rust")
    );
    let snapshot = bob
        .get_job_queue_snapshot()
        .job_queue("training")
        .send()
        .await
        .expect("snapshot");
    assert!(snapshot.queue_utilization().is_some());
    assert_sdk_refusals(&gw, &bob, &payload).await;
    let final_state = stack.wait_final(&rust_job, 120).await;
    assert_eq!(final_state.status, "SUCCEEDED", "{final_state:#?}");
    stack.stop_all();
}

/// Over NATS, only a gateway principal may name the caller, and only for
/// principals holding access keys: a team cannot borrow an admin's rights
/// with the header, nor publish on the gateway's subject, and the gateway
/// cannot act for a service or for a user without a key.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_gateway_names_the_caller_and_only_for_key_holders() {
    let nats = start_nats().await;
    let s3 = qm_integration_tests::start_s3().await;
    let mut stack = Stack::new(&nats, &s3, "gateway-trust").await;
    stack.admission();
    let ask = |client: &async_nats::Client, subject: String, caller: Option<&str>| {
        let client = client.clone();
        let caller = caller.map(str::to_string);
        async move {
            let mut headers = async_nats::HeaderMap::new();
            if let Some(who) = caller {
                headers.insert(subjects::CALLER_HEADER, who.as_str());
            }
            let body =
                serde_json::to_vec(&serde_json::json!({"jobQueueName": "stolen"})).expect("json");
            let r = tokio::time::timeout(
                Duration::from_secs(10),
                client.request_with_headers(subject, headers, body.into()),
            )
            .await;
            match r {
                Ok(Ok(m)) => {
                    Ok(serde_json::from_slice::<serde_json::Value>(&m.payload).expect("a reply"))
                }
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no reply (the server refused the publish)".to_string()),
            }
        }
    };
    let whoami = |v: &serde_json::Value| v["ok"]["principal"].as_str().map(str::to_string);

    // alice names platform in the header on her own subject: she is still alice.
    let alice = stack.auth.client(&stack.nats_url, "alice").await.nats;
    let who = subjects::Operation::WhoAmI
        .subject("alice")
        .expect("subject");
    for _ in 0..300 {
        if ask(&alice, who.clone(), None).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let r = ask(
        &alice,
        subjects::Operation::WhoAmI
            .subject("alice")
            .expect("subject"),
        Some("platform"),
    )
    .await
    .expect("answered");
    assert_eq!(whoami(&r).as_deref(), Some("alice"), "{r}");
    let r = ask(
        &alice,
        subjects::Operation::CreateJobQueue
            .subject("alice")
            .expect("subject"),
        Some("platform"),
    )
    .await
    .expect("answered");
    assert_eq!(r["error"]["code"], "ACCESS_DENIED", "{r}");
    // ...and cannot publish on the gateway's subject at all.
    let r = ask(
        &alice,
        subjects::Operation::CreateJobQueue
            .subject("gateway")
            .expect("subject"),
        Some("platform"),
    )
    .await;
    assert!(
        r.is_err(),
        "alice published on the gateway's subject: {r:?}"
    );

    // The gateway acts for key holders only.
    let gateway = stack.auth.client(&stack.nats_url, "gateway").await.nats;
    let on = |op: subjects::Operation| op.subject("gateway").expect("subject");
    let r = ask(&gateway, on(subjects::Operation::WhoAmI), Some("alice"))
        .await
        .expect("answered");
    assert_eq!(whoami(&r).as_deref(), Some("alice"), "{r}");
    let r = ask(&gateway, on(subjects::Operation::WhoAmI), None)
        .await
        .expect("answered");
    assert_eq!(r["error"]["code"], "ACCESS_DENIED", "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("Qm-Caller"),
        "{r}"
    );
    for who in ["scheduler", "admission", "node-1", "dashboard", "nobody"] {
        let r = ask(&gateway, on(subjects::Operation::CreateJobQueue), Some(who))
            .await
            .expect("answered");
        assert_eq!(r["error"]["code"], "ACCESS_DENIED", "{who}: {r}");
    }
    // Nothing was created.
    let r = ask(
        &gateway,
        on(subjects::Operation::ListJobQueues),
        Some("platform"),
    )
    .await
    .expect("answered");
    assert_eq!(r["ok"]["jobQueues"], serde_json::json!([]), "{r}");
    // The gateway may not write the log or command executors itself.
    let r = ask(
        &gateway,
        format!("{}.submit.training", subjects::LOG_PREFIX),
        None,
    )
    .await;
    assert!(r.is_err(), "the gateway wrote the log: {r:?}");
    stack.stop_all();
}

/// Over HTTPS, boto3 trusting the gateway's CA works and one that does not
/// trust it is refused; on a non-loopback address plain HTTP is refused at
/// start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn https_with_a_ca_made_at_test_time_and_no_plain_http_beyond_loopback() {
    let venv = aws_clients();
    let dir = std::env::temp_dir().join(format!("qm-gw-tls-{}", std::process::id()));
    let (mut stack, gw, _servers) = started("gateway-tls", Some(&dir), &[]).await;
    let ca = gw.certs.as_ref().expect("HTTPS").ca.clone();
    assert!(gw.endpoint.starts_with("https://"), "{}", gw.endpoint);
    let (id, secret) = (KEYS[0].1, secret_of(KEYS[0].0));
    let probe = |verify: &str| {
        let mut cmd = Command::new(venv.join("bin/python"));
        client_env(&mut cmd, &stack.dir);
        cmd.args([
            "-c",
            &format!(
                "import boto3, sys\n\
             b = boto3.client('batch', endpoint_url='{}', region_name='{REGION}', \
             aws_access_key_id='{id}', aws_secret_access_key='{secret}', verify={verify})\n\
             try:\n    print(b.describe_service_environments()['serviceEnvironments'])\n\
             except Exception as e:\n    print(type(e).__name__, e)\n    sys.exit(1)",
                gw.endpoint
            ),
        ]);
        cmd.output().expect("python runs")
    };
    let trusted = probe(&format!("'{}'", ca.display()));
    assert!(
        trusted.status.success(),
        "boto3 with the CA: {}{}",
        String::from_utf8_lossy(&trusted.stdout),
        String::from_utf8_lossy(&trusted.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&trusted.stdout).trim(), "[]");
    let untrusted = probe("True");
    let said = String::from_utf8_lossy(&untrusted.stdout);
    assert!(
        !untrusted.status.success() && said.contains("SSL"),
        "{said}"
    );

    // The command `make demo` prints, as a person types it: the AWS CLI,
    // unchanged, trusting the CA.
    let line = gw
        .proc
        .aws_command(id, &secret, Some(&ca), "describe-service-environments");
    let mut cmd = Command::new("sh");
    client_env(&mut cmd, &stack.dir);
    cmd.env(
        "PATH",
        format!(
            "{}:{}",
            venv.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    )
    .args(["-c", &line]);
    let said = run_ok(cmd, "the printed aws batch command");
    assert!(said.contains("\"serviceEnvironments\": []"), "{said}");

    // Plain HTTP on an address other hosts reach: refused at start, named.
    let out = Command::new(bin("qm-gateway"))
        .env_clear()
        .env("QM_GATEWAY_TENANCY", &stack.auth.tenancy_file)
        .env("QM_GATEWAY_KEYS_FILE", stack.dir.join("gateway-keys.yaml"))
        .env("QM_GATEWAY_LISTEN_ADDRESS", "0.0.0.0:9650")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("reachable from other hosts: give tlsCertFile and tlsKeyFile"),
        "{err}"
    );
    stack.stop_all();
    let _ = std::fs::remove_dir_all(&dir);
}

/// A SageMaker training image on two instances across two executors,
/// submitted by boto3 through the gateway: preempted by a reclaim mid-run,
/// resumed from its checkpoint, and finished with the same model as an
/// uninterrupted run; the model lands in S3 as `model.tar.gz`, with the
/// hyperparameters it was given.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn boto3_runs_a_training_image_on_two_nodes_that_resumes_after_a_reclaim() {
    let image = std::env::var("QM_TORCH_IMAGE")
        .unwrap_or_else(|_| "quartermaster/pytorch-trainer:local".into());
    let listed = Command::new("docker")
        .args(["image", "ls", "-q", &image])
        .output()
        .expect("docker runs");
    assert!(
        !listed.stdout.is_empty(),
        "{image} is missing: run `make images-torch`"
    );
    let venv = aws_clients();
    let (mut stack, gw, servers) = started("gateway-containers", None, &[]).await;
    let repository = image.rsplit_once(':').map_or(image.as_str(), |(r, _)| r);
    stack
        .apply(&format!(
            r#"
jobQueue: {{jobQueueName: training}}
quotaShares:
  - quotaShareName: QS1
    capacityLimits: [{{capacityUnit: ml.g5.xlarge, maxCapacity: 0}}]
    resourceSharingConfiguration: {{strategy: LEND_AND_BORROW, borrowLimit: -1}}
    imagePrefixes: ["{repository}"]
  - quotaShareName: QS2
    capacityLimits: [{{capacityUnit: ml.g5.xlarge, maxCapacity: 2}}]
    resourceSharingConfiguration: {{strategy: LEND}}
    imagePrefixes: ["{repository}"]
"#
        ))
        .await;
    stack.executor_env = vec![
        ("QM_EXECUTOR_RUNTIMES".into(), r#"["container"]"#.into()),
        ("QM_EXECUTOR_ADVERTISE_ADDRESS".into(), "127.0.0.1".into()),
    ];
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);
    stack.executor("node-2", "training", "ml.g5.xlarge", 1);
    let python = |args: &[&str]| {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("aws/container_story.py");
        let mut cmd = Command::new(venv.join("bin/python"));
        client_env(&mut cmd, &stack.dir);
        cmd.arg(&script)
            .args(args)
            .env("QM_GW_ENDPOINT", &gw.endpoint)
            .env("QM_GW_REGION", REGION)
            .env("QM_GW_KEYS", gw.keys.to_string())
            .env("QM_GW_IMAGE", &image)
            .env("QM_GW_BUCKET", &stack.s3.bucket);
        run_ok(cmd, &format!("boto3: {}", args.join(" ")))
            .trim()
            .to_string()
    };
    // The uninterrupted run: the reference.
    let reference = python(&["submit", "reference", "alice", "QS1", "120"]);
    let done = stack.wait_final(&reference, 600).await;
    assert_eq!(done.status, "SUCCEEDED", "{done:#?}\n{}", stack.logs());
    let ranks: Vec<_> = ["node-1", "node-2"]
        .into_iter()
        .filter(|e| stack.attempt_dirs(e, &reference) > 0)
        .collect();
    assert_eq!(ranks.len(), 2, "one rank on each executor");
    python(&["verify", &reference]);
    let reference_model = model_files(&servers.1, &reference).await;
    let params: serde_json::Value =
        serde_json::from_str(&reference_model["params.json"]).expect("params.json");
    assert_eq!(params["world"], 2, "{params}");
    assert_eq!(params["hyperparameters"]["steps"], "120");
    assert_eq!(params["hyperparameters"]["seed"], "11");

    // The same job again; once it has committed a checkpoint, bob's team
    // takes its two instances back.
    let resumed = python(&["submit", "resumed", "alice", "QS1", "120"]);
    stack
        .wait_for(&resumed, 600, "a checkpoint at step 20", |j| {
            j.attempts
                .last()
                .and_then(|a| a.last_checkpoint_step)
                .is_some_and(|s| s >= 20)
        })
        .await;
    let owner = python(&["submit", "owner", "bob", "QS2", "20"]);
    let done = stack.wait_final(&owner, 600).await;
    assert_eq!(done.status, "SUCCEEDED", "{done:#?}");
    let done = stack.wait_final(&resumed, 600).await;
    assert_eq!(done.status, "SUCCEEDED", "{done:#?}\n{}", stack.logs());
    let first = &done.attempts[0];
    assert_eq!(
        first.outcome.as_deref(),
        Some("PREEMPTED_CROSS_SHARE"),
        "{done:#?}"
    );
    let restored = done
        .attempts
        .last()
        .and_then(|a| a.restored_checkpoint_step);
    assert!(
        restored.is_some_and(|s| s >= 20),
        "resumed from its checkpoint: {done:#?}"
    );
    python(&["verify", &resumed, "preempted"]);
    let resumed_model = model_files(&servers.1, &resumed).await;
    let resumed_params: serde_json::Value =
        serde_json::from_str(&resumed_model["params.json"]).expect("params.json");
    // gloo's all-reduce of two ranks adds two numbers, which is exact in
    // either order: the resumed run's weights are bitwise those of the
    // uninterrupted one, and so is every step's loss.
    assert_eq!(
        resumed_params["digest"], params["digest"],
        "the resumed model differs from the uninterrupted one"
    );
    assert_eq!(resumed_model["losses.json"], reference_model["losses.json"]);
    println!(
        "two-node resume: restored at step {}, digest {} (same as uninterrupted)",
        restored.unwrap_or(0),
        params["digest"]
    );
    stack.stop_all();
}

/// The JSON files of a job's `model.tar.gz` in S3 (QS1's models).
async fn model_files(
    s3: &qm_integration_tests::S3Server,
    job: &str,
) -> std::collections::BTreeMap<String, String> {
    let bytes = qm_checkpoint::ObjectStore::get(
        &s3.store(),
        &format!("training/shares/QS1/models/{job}/output/model.tar.gz"),
    )
    .await
    .expect("S3 answers")
    .unwrap_or_else(|| panic!("model.tar.gz of {job} is in S3"));
    let mut files = std::collections::BTreeMap::new();
    let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(&bytes[..]));
    for entry in archive.entries().expect("a tar.gz") {
        let mut entry = entry.expect("an entry");
        let name = entry.path().expect("a path").display().to_string();
        if name.ends_with(".json") {
            let mut body = String::new();
            std::io::Read::read_to_string(&mut entry, &mut body).expect("text");
            files.insert(name, body);
        }
    }
    files
}

/// The AWS SDK for Rust, signing as `who` (a principal of [`KEYS`]).
fn sdk(gw: &Gateway, who: &str) -> aws_sdk_batch::Client {
    let id = KEYS.iter().find(|(p, _)| *p == who).expect("key").1;
    let conf = aws_sdk_batch::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .endpoint_url(&gw.endpoint)
        .credentials_provider(Credentials::new(id, secret_of(who), None, None, "test"))
        .build();
    aws_sdk_batch::Client::from_conf(conf)
}

/// `X-Amz-Date` now (`YYYYMMDDTHHMMSSZ`), from the system clock.
fn amz_now() -> String {
    let t = time::OffsetDateTime::now_utc();
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// The head of a request an attacker can make: a real access key id (key
/// ids are not secret), the right scope and date, a made-up signature.
fn forged_head(port: u16, length: usize) -> String {
    let now = amz_now();
    format!(
        "POST /v1/listservicejobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nX-Amz-Date: {now}\r\nAuthorization: AWS4-HMAC-SHA256 Credential={}/{}/{REGION}/batch/aws4_request, SignedHeaders=content-type;host;x-amz-date, Signature={}\r\nContent-Length: {length}\r\n\r\n",
        KEYS[1].1,
        &now[..8],
        "0".repeat(64)
    )
}

/// A connection from loopback address 127.0.0.`host` (a client of its own).
async fn connect_from(host: u8, port: u16) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(std::net::SocketAddr::from(([127, 0, 0, host], 0)))?;
    socket
        .connect(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
        .await
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_and_unauthenticated_clients_neither_lock_others_out_nor_exhaust_the_gateway() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (stack, gw, _servers) = started("gw-hostile", None, &[]).await;
    let port: u16 = gw
        .endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port");
    let admin = sdk(&gw, "platform");

    let pid = stack.pid("gateway").expect("the gateway runs as a process");
    let before = rss_kib(pid, "VmRSS:");

    // 1. 520 slow clients on 8 addresses: each sends its head, then one
    // body byte a second for 40 s. Before issue 28 they held every slot.
    let attack = Duration::from_secs(40);
    let started_at = std::time::Instant::now();
    let mut slow = Vec::new();
    for i in 0..520u32 {
        slow.push(tokio::spawn(async move {
            let Ok(mut c) = connect_from(2 + (i % 8) as u8, port).await else {
                return (Duration::ZERO, String::new());
            };
            let begun = std::time::Instant::now();
            if c.write_all(forged_head(port, 1 << 20).as_bytes()).await.is_err() {
                return (begun.elapsed(), String::new());
            }
            let mut answer = vec![0u8; 512];
            while begun.elapsed() < attack {
                tokio::select! {
                    n = c.read(&mut answer) => {
                        let n = n.unwrap_or(0);
                        return (begun.elapsed(), String::from_utf8_lossy(&answer[..n]).into_owned());
                    }
                    () = tokio::time::sleep(Duration::from_secs(1)) => {
                        if c.write_all(b"x").await.is_err() {
                            return (begun.elapsed(), String::new());
                        }
                    }
                }
            }
            (begun.elapsed(), "held".into())
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // A client with a key is answered while the attack goes on.
    let answered = tokio::time::timeout(
        attack - started_at.elapsed(),
        admin.describe_job_queues().send(),
    )
    .await;
    assert!(
        matches!(answered, Ok(Ok(_))),
        "no answer while slow clients held connections: {answered:?}\n{}",
        stack.log_of("gateway")
    );
    let mut held = 0;
    let mut timed_out = 0;
    for s in slow {
        let (_, said) = s.await.expect("task");
        held += usize::from(said == "held");
        timed_out += usize::from(said.starts_with("HTTP/1.1 408"));
    }
    assert_eq!(
        held, 0,
        "no slow client keeps its connection for the whole attack"
    );
    assert!(timed_out > 0, "slow bodies are answered 408");

    // 2. 400 clients each sending a 1 MiB body fast with a forged
    // signature. Before issue 28 every body was read (360 MiB more).
    let mut floods = Vec::new();
    for i in 0..400u32 {
        floods.push(tokio::spawn(async move {
            let Ok(mut c) = connect_from(10 + (i % 8) as u8, port).await else {
                return String::new();
            };
            let mut request = forged_head(port, 1 << 20).into_bytes();
            request.extend(std::iter::repeat_n(b'{', 1 << 20));
            let _ = c.write_all(&request).await;
            let mut answer = vec![0u8; 256];
            let n = c.read(&mut answer).await.unwrap_or(0);
            String::from_utf8_lossy(&answer[..n]).into_owned()
        }));
    }
    let mut statuses = BTreeMap::new();
    for f in floods {
        let said = f.await.expect("task");
        let status = said.get(9..12).unwrap_or("closed").to_string();
        *statuses.entry(status).or_insert(0) += 1;
    }
    let peak = rss_kib(pid, "VmHWM:");
    assert!(
        !statuses.contains_key("200"),
        "a forged signature was answered: {statuses:?}"
    );
    assert!(
        statuses.contains_key("429"),
        "bodies past the in-flight budget are turned away unread: {statuses:?}"
    );
    let grew_mib = peak.saturating_sub(before) / 1024;
    // The bodies' budget (32 MiB by default), twice over for the
    // allocator, and the connections' own buffers: well under the 256 MiB
    // that deploy/kubernetes/gateway.yaml gives the gateway.
    assert!(
        grew_mib < 128,
        "the gateway grew {grew_mib} MiB under 400 MiB of forged bodies (budget 32 MiB): {statuses:?}"
    );
    // 3. The other limits on a request's head, each tried once: a client
    // that sends nothing is closed after the header deadline (10 s); a
    // head over 64 KiB is refused; a body of unknown length (chunked) gets
    // 411 before a byte of it is read.
    let said = |request: Vec<u8>, host: u8| async move {
        let Ok(mut c) = connect_from(host, port).await else {
            return String::from("refused");
        };
        let _ = c.write_all(&request).await;
        let mut answer = vec![0u8; 256];
        let read = tokio::time::timeout(Duration::from_secs(30), c.read(&mut answer)).await;
        match read {
            Ok(Ok(n)) => String::from_utf8_lossy(&answer[..n]).into_owned(),
            Ok(Err(_)) => String::from("reset"),
            Err(_) => String::from("still open after 30 s"),
        }
    };
    let silent = said(Vec::new(), 20).await;
    assert!(
        silent.is_empty() || silent.starts_with("HTTP/1.1 408") || silent == "reset",
        "a silent client is closed after the header deadline: {silent:?}"
    );
    let huge = format!(
        "POST /v1/listservicejobs HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\n\r\n",
        "a".repeat(100 * 1024)
    );
    let refused = said(huge.into_bytes(), 21).await;
    assert!(
        refused.starts_with("HTTP/1.1 431") || refused.is_empty() || refused == "reset",
        "a 100 KiB head is refused: {refused:?}"
    );
    let chunked = forged_head(port, 0)
        .replace("Content-Length: 0\r\n", "Transfer-Encoding: chunked\r\n")
        + "5\r\nhello\r\n";
    let unknown_length = said(chunked.into_bytes(), 22).await;
    assert!(
        unknown_length.starts_with("HTTP/1.1 411"),
        "a body of unknown length: {unknown_length:?}"
    );
    // Still serving.
    admin
        .describe_job_queues()
        .send()
        .await
        .expect("answered after the flood");
    println!("slow clients answered 408: {timed_out}; flood: {statuses:?}; grew {grew_mib} MiB");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_changes_of_one_queue_through_the_gateway_all_land() {
    let (stack, gw, _servers) = started("gw-concurrent", None, &[]).await;
    stack
        .apply(include_str!("../../examples/queues/three-shares.yaml"))
        .await;
    let admin = sdk(&gw, "platform");
    let arn = format!("arn:aws:batch:{REGION}:000000000000:job-queue/training");
    use aws_sdk_batch::types::JqState;
    for round in 1..=20 {
        let state = if round % 2 == 0 {
            JqState::Disabled
        } else {
            JqState::Enabled
        };
        // Three changes of one queue at once: its priority, its state, a
        // tag. Each is answered 200 only if it is kept.
        let (p, s, t) = tokio::join!(
            admin
                .update_job_queue()
                .job_queue("training")
                .priority(round)
                .send(),
            admin
                .update_job_queue()
                .job_queue("training")
                .state(state.clone())
                .send(),
            admin
                .tag_resource()
                .resource_arn(&arn)
                .tags("round", round.to_string())
                .send(),
        );
        p.expect("priority updated");
        s.expect("state updated");
        t.expect("tagged");
        let d = admin
            .describe_job_queues()
            .job_queues("training")
            .send()
            .await
            .expect("described");
        let q = d.job_queues().first().expect("the queue");
        assert_eq!(q.priority(), Some(round), "round {round}: priority lost");
        assert_eq!(q.state(), Some(&state), "round {round}: state lost");
        assert_eq!(
            q.tags().and_then(|t| t.get("round")).map(String::as_str),
            Some(round.to_string().as_str()),
            "round {round}: tag lost"
        );
    }
}

/// The status code of `GET path` on 127.0.0.1:`port`, or None when nothing
/// answers.
async fn status_of(port: u16, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .ok()?;
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut answer))
        .await
        .ok()?
        .ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stopping_gateway_turns_unready_first_then_drains_and_exits() {
    let (mut stack, gw, _servers) = started("gw-stop", None, &[]).await;
    let metrics = stack.metrics_port("gateway");
    let api: u16 = gw
        .endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("the API's port");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while status_of(metrics, "/readyz").await != Some(200) {
        assert!(
            std::time::Instant::now() < deadline,
            "the gateway never got ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stack.send_signal("gateway", "TERM");
    let termed = std::time::Instant::now();
    // Not ready at once, while the API still takes connections (the grace
    // that lets a load balancer stop routing to it).
    let deadline = termed + Duration::from_secs(2);
    while status_of(metrics, "/readyz").await != Some(503) {
        assert!(
            std::time::Instant::now() < deadline,
            "still ready after SIGTERM:\n{}",
            stack.log_of("gateway")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let answered = status_of(api, "/").await.is_some();
    // The grace is 3 s: asked well within it, the API must answer (on a
    // machine too loaded to ask within 2 s, this says nothing).
    if termed.elapsed() < Duration::from_secs(2) {
        assert!(answered, "the API answers during the grace");
    }
    assert!(
        stack.stop_within("gateway", "TERM", 30).is_some(),
        "the gateway exits by itself after draining:\n{}",
        stack.log_of("gateway")
    );
    assert!(
        status_of(api, "/").await.is_none(),
        "nothing answers once it has exited"
    );
}
