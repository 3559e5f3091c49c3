//! A whole stack started for a test, and where the binaries are.

use super::*;

/// NATS and S3 in containers, admission and one scheduler running, and
/// the queue `queue_yaml` applied (add executors with [`Stack::executor`]).
pub async fn running(name: &str, queue_yaml: &str) -> (Nats, S3Server, Stack) {
    running_on(start_nats().await, name, queue_yaml).await
}

/// [`running`] on a NATS already started (e.g. on a fixed port).
pub async fn running_on(nats: Nats, name: &str, queue_yaml: &str) -> (Nats, S3Server, Stack) {
    running_with(nats, name, queue_yaml, Vec::new()).await
}

/// [`running_on`], with settings for every service (e.g. where to send
/// traces).
pub async fn running_with(
    nats: Nats,
    name: &str,
    queue_yaml: &str,
    service_env: Vec<(String, String)>,
) -> (Nats, S3Server, Stack) {
    let s3 = crate::start_s3().await;
    let mut stack = Stack::new_with(&nats, &s3, name, service_env).await;
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(queue_yaml).await;
    stack.wait_leader("scheduler-1").await;
    (nats, s3, stack)
}

/// [`running_with`], but every service in its own container from the
/// service images (`make images`), on a Docker network of its own with
/// NATS and S3.
pub async fn running_in_containers(
    name: &str,
    queue_yaml: &str,
    service_env: Vec<(String, String)>,
) -> (Nats, S3Server, Stack) {
    let network = format!("qm-net-{name}-{}", free_port());
    let nats = start_nats_in(&network).await;
    let s3 = crate::start_s3_on(Some(&network)).await;
    let mut stack = Stack::new_with(&nats, &s3, name, service_env).await;
    stack.use_containers(&nats, &s3, &network);
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(queue_yaml).await;
    stack.wait_leader("scheduler-1").await;
    (nats, s3, stack)
}

/// A free TCP port on 127.0.0.1 (free when this returns).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Where the service binaries are: `QM_BIN_DIR`, else the workspace's
/// `target/debug` (run `cargo build --bins` first; `make test` does).
pub fn bin_dir() -> PathBuf {
    std::env::var_os("QM_BIN_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug"),
        PathBuf::from,
    )
}

pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --bins` first (or set QM_BIN_DIR)",
        path.display()
    );
    path
}
