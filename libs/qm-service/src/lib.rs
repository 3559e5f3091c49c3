//! What every Quartermaster service shares, so that the services stay thin:
//! configuration from file and environment ([`settings`]), NATS connection and
//! the JetStream streams and buckets ([`nats`]), request decoding and replies
//! ([`api`]), trace context in message headers ([`trace`]), HTTP serving
//! ([`http`], with the listener settings the console and the gateway share)
//! and the typed API client `qm` and the tests use ([`client`]), with its
//! one retry schedule ([`retry`]). The settings' checks of the repository
//! (docs and deploy files) are compiled for tests only (the
//! `repository-checks` feature).
//! Wire <-> core conversion lives in `qm_wire::to_core`, which the simulator
//! uses too.

pub mod api;
/// The typed API client (the `qm-client` crate).
pub mod client {
    pub use qm_client::{CallError, Client};
}
pub mod http;
pub mod memory;
pub mod nats;
pub mod observe;
pub use qm_client::retry;
pub mod settings;
pub mod telemetry;
pub mod tenancy;
pub use qm_client::trace;

/// Milliseconds since the Unix epoch, from the system clock.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What a service starts with: its settings, how it reaches NATS, where
/// it serves metrics, and its trace exporter (flush it before exiting).
pub struct Started<T> {
    pub settings: T,
    pub nats: settings::NatsSettings,
    pub observe: settings::ObserveSettings,
    pub telemetry: telemetry::Telemetry,
}

/// The start of every service's `main`: logs and traces, the command line
/// (`--config FILE`, a flag per key, `--help`, `--version`: see
/// [`settings::Spec`]), then settings from every layer. On a problem it
/// prints one message naming every problem and returns exit code 2.
pub fn start<T>(spec: &settings::Spec) -> Result<Started<T>, std::process::ExitCode>
where
    T: serde::de::DeserializeOwned + settings::Validate + serde::Serialize + Default,
{
    let invocation = match spec.parse_args::<T>(std::env::args()) {
        Ok(i) => i,
        Err(e) => e.exit(),
    };
    let service = spec.service;
    let telemetry = telemetry::init(&format!("qm-{service}"));
    let loaded = settings::load_layers::<T>(
        service,
        invocation.config.as_deref(),
        std::env::vars(),
        &invocation.flags,
    );
    match loaded {
        Ok((settings, nats, observe)) => Ok(Started {
            settings,
            nats,
            observe,
            telemetry,
        }),
        Err(e) => {
            eprintln!("qm-{service}: {e}");
            telemetry.shutdown();
            Err(std::process::ExitCode::from(2))
        }
    }
}

/// A service's `main`: [`start`], then `run` with the settings, then the
/// last spans flushed, whatever `run` returned.
pub async fn main<T, F, Fut>(spec: &settings::Spec, run: F) -> std::process::ExitCode
where
    T: serde::de::DeserializeOwned + settings::Validate + serde::Serialize + Default,
    F: FnOnce(T, settings::NatsSettings, settings::ObserveSettings) -> Fut,
    Fut: std::future::Future<Output = std::process::ExitCode>,
{
    let started = match start::<T>(spec) {
        Ok(s) => s,
        Err(code) => return code,
    };
    memory::release_periodically();
    let code = run(started.settings, started.nats, started.observe).await;
    started.telemetry.shutdown();
    code
}

/// Serves the service's metrics and health endpoint (see [`observe`]), or
/// prints why it cannot (exit code 2: the address is taken, the token
/// file unreadable).
pub async fn serve_metrics(
    started: &settings::ObserveSettings,
    service: &str,
    endpoint: observe::Endpoint,
) -> Result<(), std::process::ExitCode> {
    observe::serve(started, service, endpoint)
        .await
        .map(|_| ())
        .map_err(|e| {
            eprintln!("qm-{service}: {e}");
            std::process::ExitCode::from(2)
        })
}

/// Connects a service to NATS as its principal (waiting while the server
/// is down), or prints why not and returns the exit code: 3 when the server
/// refused the credentials or TLS failed, 2 for unusable settings.
pub async fn connect(
    settings: &settings::NatsSettings,
    service: &str,
) -> Result<(async_nats::Client, String), std::process::ExitCode> {
    nats::connect(settings, &format!("qm-{service}"), None)
        .await
        .map_err(|e| {
            eprintln!("qm-{service}: {e}");
            std::process::ExitCode::from(e.exit_code())
        })
}

/// A random identifier (a version 4 UUID, 32 hex digits): job ids and
/// executor incarnations. Unique across processes and machines without
/// coordination, and safe as a subject token.
pub fn random_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Waits for `work` for at most `limit`, for the steps of a shutdown that
/// need NATS or S3: a service must exit within its stated time on SIGTERM
/// even while they are unreachable. Logs what it gave up on.
pub async fn within<T>(
    what: &str,
    limit: std::time::Duration,
    work: impl std::future::Future<Output = T>,
) -> Option<T> {
    match tokio::time::timeout(limit, work).await {
        Ok(v) => Some(v),
        Err(_) => {
            tracing::warn!(
                what,
                seconds = limit.as_secs(),
                "gave up waiting while shutting down (NATS or S3 unreachable?)"
            );
            None
        }
    }
}
