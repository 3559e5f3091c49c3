//! The compose file for one host (deploy/compose): `up.sh` brings the whole
//! system up (three NATS servers, S3, two admission replicas, two
//! schedulers, an executor and its checkpoint service, each container from
//! its image with its own credential), every container becomes healthy,
//! and the demo's three-share story runs against it; a NATS server without
//! the cluster's route credentials cannot join it. Then a scheduler
//! container is killed and restarted by its restart policy.
//!
//! Uses `docker compose` when the plugin is installed, else
//! `docker-compose`; set `QM_COMPOSE` to choose (e.g. `docker-compose`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use qm_integration_tests::containers::docker;
use qm_integration_tests::stack::{free_port, Auth, Stack};
use qm_integration_tests::story::{three_shares, QUEUE_YAML};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One compose project of this test, taken down (volumes too) when dropped.
struct Project {
    name: String,
    env: Vec<(String, String)>,
}

impl Project {
    fn compose(&self, args: &[&str]) -> std::process::Output {
        let file = root().join("deploy/compose/docker-compose.yml");
        let file = file.display().to_string();
        let mut base: Vec<String> = match std::env::var("QM_COMPOSE") {
            Ok(c) => c.split_whitespace().map(String::from).collect(),
            Err(_) => {
                let plugin = Command::new("docker")
                    .args(["compose", "version"])
                    .output()
                    .is_ok_and(|o| o.status.success());
                if plugin {
                    vec!["docker".into(), "compose".into()]
                } else {
                    vec!["docker-compose".into()]
                }
            }
        };
        base.extend(["-p".into(), self.name.clone(), "-f".into(), file]);
        base.extend(args.iter().map(|s| s.to_string()));
        Command::new(&base[0])
            .args(&base[1..])
            .envs(self.env.iter().cloned())
            .output()
            .expect("compose runs")
    }

    /// The container of compose service `service`.
    fn container(&self, service: &str) -> String {
        let out = self.compose(&["ps", "-q", service]);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    fn health(&self, service: &str) -> String {
        docker(&[
            "inspect",
            "-f",
            "{{ .State.Status }} {{ if .State.Health }}{{ .State.Health.Status }}{{ end }}",
            &self.container(service),
        ])
        .unwrap_or_default()
        .trim()
        .to_string()
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        let out = self.compose(&["down", "-v", "--remove-orphans"]);
        if !out.status.success() {
            eprintln!("compose down: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

/// `qm tenancy apply` as the admin, with the credentials directory's keys;
/// the revision stored.
fn tenancy_apply(project: &Project, url: &str, credentials: &Path, file: &Path, keys: &str) -> u64 {
    let out = Command::new(qm_integration_tests::stack::bin("qm"))
        .args(["--nats", url, "--nkey"])
        .arg(credentials.join("platform.nk"))
        .args(["--output", "json", "tenancy", "apply", "-f"])
        .arg(file)
        .args(["--keys", keys])
        .output()
        .expect("qm runs");
    if !out.status.success() {
        let logs: Vec<String> = ["admission-1", "admission-2", "sync-1"]
            .iter()
            .map(|s| {
                let l = Command::new("docker")
                    .args(["logs", "--tail", "40", &project.container(s)])
                    .output()
                    .expect("docker logs");
                format!(
                    "--- {s}\n{}{}",
                    String::from_utf8_lossy(&l.stdout),
                    String::from_utf8_lossy(&l.stderr)
                )
            })
            .collect();
        panic!(
            "qm tenancy apply: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            logs.join("\n")
        );
    }
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    r["revision"].as_u64().expect("a revision")
}

/// Waits until sidecar `sync` has had its server reload revision `n`.
async fn synced(project: &Project, sync: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("docker")
            .args(["logs", &project.container(sync)])
            .output()
            .expect("docker logs");
        let log = String::from_utf8_lossy(&out.stdout).into_owned();
        let done = log.lines().any(|l| {
            l.starts_with(&format!("revision {n}: ")) && l.contains("sent SIGHUP to nats-server")
        });
        if done {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{sync} did not reload revision {n}:\n{log}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn open_to_all(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).expect("dir");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
}

const SERVICES: [&str; 12] = [
    "nats-1",
    "nats-2",
    "nats-3",
    "s3",
    "admission-1",
    "admission-2",
    "scheduler-1",
    "scheduler-2",
    "executor-node-1",
    "checkpoint-node-1",
    "console",
    "gateway",
];

/// The cluster's routes need its credentials (issue 28): a NATS server
/// on the compose network without them is refused, never joins.
async fn assert_rogue_route_refused(project: &Project) {
    let network = format!("{}_quartermaster", project.name);
    let nats_image =
        std::env::var("QM_NATS_IMAGE").unwrap_or_else(|_| "quartermaster/nats:local".into());
    let rogue = docker(&[
        "run",
        "-d",
        "--network",
        &network,
        &nats_image,
        "--server_name",
        "rogue",
        "--cluster_name",
        "quartermaster",
        "--cluster",
        "nats://0.0.0.0:6222",
        "--routes",
        "nats-route://nats-1:6222",
    ])
    .expect("a rogue NATS server starts");
    let rogue = rogue.trim().to_string();
    let mut said = String::new();
    for _ in 0..60 {
        let out = Command::new("docker")
            .args(["logs", &rogue])
            .output()
            .expect("docker logs");
        said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if said.contains("Authorization Violation") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let _ = docker(&["rm", "-f", &rogue]);
    // (Each route's TCP connection is "created" before the server checks
    // it; without the credentials every one is then refused. A cluster
    // whose routes need none accepts the rogue and says no such thing.)
    assert!(
        said.contains("Authorization Violation"),
        "a server without the route credentials was not refused:\n{said}"
    );
}

/// Each service holds only its own credential (the executor's mounts).
fn assert_only_own_credential(project: &Project) {
    let mounts = docker(&[
        "inspect",
        "-f",
        "{{ range .Mounts }}{{ .Source }} {{ end }}",
        &project.container("executor-node-1"),
    ])
    .expect("inspect");
    assert!(mounts.contains("node-1.nk"), "{mounts}");
    for other in [
        "admission.nk",
        "scheduler.nk",
        "platform.nk",
        "ckpt-node-1.nk",
    ] {
        assert!(
            !mounts.contains(other),
            "the executor sees {other}: {mounts}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn compose_up_starts_every_service_healthy_and_the_demo_story_runs_against_it() {
    let port = free_port();
    let gateway_port = free_port();
    let base = std::env::temp_dir().join(format!("qm-compose-{}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let credentials = base.join("credentials");
    let work = base.join("work");
    open_to_all(&work);
    let project = Project {
        name: format!("qm-compose-test-{port}"),
        env: vec![
            ("QM_COMPOSE_NATS_PORT".into(), port.to_string()),
            (
                "QM_COMPOSE_CREDENTIALS".into(),
                credentials.display().to_string(),
            ),
            ("QM_COMPOSE_NODE_1_DIR".into(), work.display().to_string()),
            ("QM_COMPOSE_GATEWAY_PORT".into(), gateway_port.to_string()),
            ("QM_COMPOSE_CONSOLE_PORT".into(), free_port().to_string()),
        ],
    };
    let up = Command::new(root().join("deploy/compose/up.sh"))
        .env("QM_COMPOSE_PROJECT", &project.name)
        .envs(project.env.iter().cloned())
        .output()
        .expect("up.sh runs");
    let said = String::from_utf8_lossy(&up.stderr);
    assert!(up.status.success(), "up.sh failed:\n{said}");
    assert!(said.contains("containers healthy"), "{said}");

    // Every service is its own healthy container, running as user 65532
    // (NATS and Garage are the servers' own images).
    for service in SERVICES {
        assert_eq!(project.health(service), "running healthy", "{service}");
        if !service.starts_with("nats") && service != "s3" {
            let user = docker(&[
                "inspect",
                "-f",
                "{{ .Config.User }}",
                &project.container(service),
            ])
            .expect("inspect");
            assert_eq!(user.trim(), "65532:65532", "{service} runs as nonroot");
        }
    }
    assert_rogue_route_refused(&project).await;
    assert_only_own_credential(&project);

    // The demo's story, from this machine, as the admin.
    let auth = Auth::existing(&credentials, &root().join("deploy/tenancy.dev.yaml"));
    let url = format!("nats://127.0.0.1:{port}");
    let stack = Stack::attach(&url, &auth, work.clone()).await;
    stack.apply(QUEUE_YAML).await;
    let jobs = three_shares(&stack, None, None).await;
    println!(
        "compose: the story's jobs {} {} {} {}",
        jobs.p1, jobs.p2, jobs.p3, jobs.q2
    );

    // The AWS Batch API (issue 35): the AWS CLI, unchanged, as alice with
    // the credentials file `qm auth` wrote, trusting the CA up.sh made; it
    // refuses the certificate without that CA.
    let venv = qm_integration_tests::gateway::aws_clients();
    let aws = |ca: bool| {
        let mut cmd = Command::new(venv.join("bin/aws"));
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &base)
            .env("AWS_CONFIG_FILE", base.join("no-config"))
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                credentials.join("alice.aws-credentials"),
            )
            .args([
                "batch",
                "describe-job-queues",
                "--profile",
                "quartermaster",
                "--region",
                "us-east-1",
                "--endpoint-url",
                &format!("https://127.0.0.1:{gateway_port}"),
            ]);
        if ca {
            cmd.arg("--ca-bundle").arg(credentials.join("ca.crt"));
        }
        cmd.output().expect("aws runs")
    };
    let out = aws(true);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("\"jobQueueName\": \"training\""),
        "aws batch describe-job-queues through the compose gateway:\n{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = aws(false);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("SSL"),
        "trusted without the CA: {err}"
    );

    // The tenancy, live (issue 35): applied with the keys up.sh made, a
    // new team member can connect at once, through every server of the
    // cluster's sidecar having reloaded it, and is cut off once removed.
    let keys = credentials.display().to_string();
    let dev = root().join("deploy/tenancy.dev.yaml");
    let applied = tenancy_apply(&project, &url, &credentials, &dev, &keys);
    for sync in ["sync-1", "sync-2", "sync-3"] {
        synced(&project, sync, applied).await;
    }
    let with_erin = base.join("with-erin.yaml");
    let text = std::fs::read_to_string(&dev)
        .expect("the dev tenancy")
        .replace("users: [alice]", "users: [alice, erin]");
    std::fs::write(&with_erin, text).expect("written");
    let added = tenancy_apply(&project, &url, &credentials, &with_erin, &keys);
    for sync in ["sync-1", "sync-2", "sync-3"] {
        synced(&project, sync, added).await;
    }
    let erin = auth.client(&url, "erin").await;
    let me: qm_wire::messages::Caller = erin
        .call(qm_wire::subjects::Operation::WhoAmI, &serde_json::json!({}))
        .await
        .expect("erin is known at once");
    assert_eq!(me.team.as_deref(), Some("vision"));
    let removed = tenancy_apply(&project, &url, &credentials, &dev, &keys);
    synced(&project, "sync-1", removed).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while erin.nats.connection_state() == async_nats::connection::State::Connected {
        assert!(Instant::now() < deadline, "erin's connection stayed open");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The restart policy: a scheduler that crashes (its process killed
    // from this machine; `docker kill` would count as stopping it by hand)
    // comes back by itself and is ready again (leading, or standing by
    // with a live leader).
    let before = project.container("scheduler-1");
    let pid = docker(&["inspect", "-f", "{{ .State.Pid }}", &before]).expect("inspect");
    let killed = Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .expect("kill runs");
    assert!(killed.success(), "kill -KILL {pid}");
    let started = Instant::now();
    loop {
        let restarts = docker(&["inspect", "-f", "{{ .RestartCount }}", &before])
            .unwrap_or_default()
            .trim()
            .parse::<u32>()
            .unwrap_or(0);
        if restarts >= 1 && project.health("scheduler-1") == "running healthy" {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "scheduler-1 was not restarted and healthy within 120 s: {}",
            project.health("scheduler-1")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    drop(stack);
    drop(project);
    let _ = std::fs::remove_dir_all(&base);
}
