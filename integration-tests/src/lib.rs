//! Test harness: real servers in containers, started with testcontainers from
//! images built locally by `deploy/images/build.sh` (no registry needed).
//!
//! Image names are overridable so the same tests run against upstream images:
//! - `QM_GARAGE_IMAGE` (default `quartermaster/garage:local`); set
//!   `QM_S3_FLAVOUR=minio` and `QM_GARAGE_IMAGE=minio/minio:latest` to run the
//!   S3 tests against MinIO instead.

use std::time::Duration;

pub mod bench;
pub mod browser;
pub mod containers;
pub mod gateway;
pub mod observe;
pub mod proxy;
pub mod stack;
pub mod story;
pub mod tls;

use qm_checkpoint::s3::{S3Config, S3Store};
use testcontainers::core::{ExecCommand, IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

pub const BUCKET: &str = "qm-checkpoints";

/// Waits up to 3 s for the NATS server to report a permissions violation
/// on `subject` to this process's connections since `since`.
pub async fn refused_by_server(since: std::time::Instant, subject: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        if let Some(v) = qm_service::nats::violation_since(since) {
            if v.contains(subject) {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the server reported no permissions violation for {subject}; last: {:?}",
        qm_service::nats::violation_since(since)
    );
}

fn image_from_env(var: &str, default: &str) -> (String, String) {
    let full = std::env::var(var).unwrap_or_else(|_| default.to_string());
    match full.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name.to_string(), tag.to_string()),
        _ => (full, "latest".to_string()),
    }
}

/// A running S3-compatible server with a bucket and a key for it.
pub struct S3Server {
    pub container: ContainerAsync<GenericImage>,
    pub config: S3Config,
    /// The endpoint from inside its Docker network (when started on one).
    pub inside_endpoint: Option<String>,
}

impl S3Server {
    pub fn store(&self) -> S3Store {
        S3Store::new(&self.config)
    }
}

pub(crate) fn image(var: &str, default: &str) -> (String, String) {
    image_from_env(var, default)
}

async fn exec(container: &ContainerAsync<GenericImage>, cmd: &[&str]) -> String {
    let mut result = container
        .exec(ExecCommand::new(cmd.iter().map(|s| s.to_string())))
        .await
        .unwrap_or_else(|e| panic!("exec {cmd:?}: {e}"));
    let stdout = result.stdout_to_vec().await.expect("exec stdout");
    let stderr = result.stderr_to_vec().await.expect("exec stderr");
    let out = String::from_utf8_lossy(&stdout).into_owned();
    assert!(
        result.exit_code().await.ok().flatten().unwrap_or(0) == 0,
        "{cmd:?} failed: {out}{}",
        String::from_utf8_lossy(&stderr)
    );
    out
}

/// Starts the S3 server (Garage by default) and prepares a bucket and key.
pub async fn start_s3() -> S3Server {
    start_s3_on(None).await
}

/// [`start_s3`], also reachable as `http://<its name>:<port>` from the
/// Docker network `network` (services in containers use that).
pub async fn start_s3_on(network: Option<&str>) -> S3Server {
    let (name, tag) = image_from_env("QM_GARAGE_IMAGE", "quartermaster/garage:local");
    let on_network =
        |request: testcontainers::ContainerRequest<GenericImage>, port: u16| match network {
            Some(n) => {
                let host = format!("qm-s3-{}", stack::free_port());
                let inside = format!("http://{host}:{port}");
                (
                    request.with_network(n).with_container_name(host),
                    Some(inside),
                )
            }
            None => (request, None),
        };
    if std::env::var("QM_S3_FLAVOUR").as_deref() == Ok("minio") {
        let (request, inside_endpoint) = on_network(
            GenericImage::new(name, tag)
                .with_exposed_port(9000.tcp())
                .with_wait_for(WaitFor::message_on_stdout("API:"))
                .with_env_var("MINIO_ROOT_USER", "quartermaster")
                .with_env_var("MINIO_ROOT_PASSWORD", "quartermaster-secret")
                .with_cmd(["server", "/data"]),
            9000,
        );
        let container = request.start().await.expect("MinIO starts");
        let port = container
            .get_host_port_ipv4(9000.tcp())
            .await
            .expect("port");
        let config = S3Config {
            endpoint: Some(format!("http://127.0.0.1:{port}")),
            region: "us-east-1".into(),
            access_key_id: "quartermaster".into(),
            secret_access_key: "quartermaster-secret".into(),
            credentials: None,
            bucket: BUCKET.into(),
            force_path_style: true,
            transfer: Default::default(),
            journal: None,
        };
        create_bucket_with_sdk(&config).await;
        return S3Server {
            container,
            config,
            inside_endpoint,
        };
    }
    let (request, inside_endpoint) = on_network(
        GenericImage::new(name, tag)
            .with_exposed_port(3900.tcp())
            .with_wait_for(WaitFor::message_on_stderr("S3 API server listening"))
            .with_cmd(["server"]),
        3900,
    );
    let container = request
        .start()
        .await
        .expect("Garage starts (run deploy/images/build.sh first)");
    // A single node: give it the whole layout, then a key and a bucket.
    let node = exec(&container, &["/garage", "node", "id", "-q"]).await;
    let node = node.trim().split('@').next().expect("node id").to_string();
    exec(
        &container,
        &[
            "/garage", "layout", "assign", "-z", "dc1", "-c", "1G", &node,
        ],
    )
    .await;
    exec(
        &container,
        &["/garage", "layout", "apply", "--version", "1"],
    )
    .await;
    let key = exec(&container, &["/garage", "key", "create", "quartermaster"]).await;
    let field = |label: &str| {
        key.lines()
            .find_map(|l| l.trim().strip_prefix(label).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {label} in: {key}"))
    };
    let (id, secret) = (field("Key ID:"), field("Secret key:"));
    exec(&container, &["/garage", "bucket", "create", BUCKET]).await;
    exec(
        &container,
        &[
            "/garage",
            "bucket",
            "allow",
            "--read",
            "--write",
            "--owner",
            BUCKET,
            "--key",
            "quartermaster",
        ],
    )
    .await;
    let port = container
        .get_host_port_ipv4(3900.tcp())
        .await
        .expect("port");
    let config = S3Config {
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        region: "garage".into(),
        access_key_id: id,
        secret_access_key: secret,
        credentials: None,
        bucket: BUCKET.into(),
        force_path_style: true,
        transfer: Default::default(),
        journal: None,
    };
    // The layout takes a moment to apply everywhere.
    tokio::time::sleep(Duration::from_millis(500)).await;
    S3Server {
        container,
        config,
        inside_endpoint,
    }
}

async fn create_bucket_with_sdk(config: &S3Config) {
    let store = S3Store::new(config);
    store.create_bucket().await.expect("bucket created");
}
