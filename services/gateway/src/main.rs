//! `qm-gateway`: AWS Batch's HTTP API in front of Quartermaster's NATS API,
//! so code written for `boto3.client("batch")`, the AWS CLI or the AWS SDKs
//! runs unchanged against `--endpoint-url`.
//!
//! Every request is checked before anything else: its size, then its AWS
//! Signature Version 4 against the keys file, then that the tenancy maps
//! the key to a principal (ADR 0012). It is then translated and made on
//! NATS on the gateway's own subject, naming that principal, whom admission
//! authorizes exactly as if it had asked directly. No scheduling rule lives
//! here: what AWS Batch has and Quartermaster's API does not (tags,
//! scheduling policies, service environments) is kept in the gateway's own
//! buckets ([`store`]).
//!
//! | file | what |
//! |---|---|
//! | `api.rs` | AWS Batch's operations (each name once), routes, errors |
//! | `http.rs` | the connection loop and every request's checks |
//! | `ops/` | each operation made on NATS; `ops/requests.rs` their inputs and shared checks |
//! | `payload.rs` | SageMaker's `CreateTrainingJob` payload read into a job |
//! | `arn.rs`, `store.rs`, `settings.rs` | ARNs, the gateway's buckets, settings |
//!
//! Layers: `tests/layers.rs` (services/README.md).

mod api;
mod arn;
mod http;
mod ops;
mod payload;
mod settings;
mod store;

use std::sync::Arc;
use std::time::Duration;

use qm_tenancy::Tenancy;
use settings::{Settings, SPEC};

/// What the gateway measures (see docs/metrics.md).
pub(crate) struct Metrics {
    requests: prometheus::IntCounterVec,
    duration: prometheus::HistogramVec,
    refused_connections: prometheus::IntCounterVec,
}

impl Metrics {
    fn new() -> Metrics {
        use qm_service::observe::{counter, histogram, FAST_SECONDS};
        Metrics {
            requests: counter(
                "qm_gateway_requests_total",
                "AWS Batch API requests answered, by operation and HTTP status (unauthenticated ones as operation \"unauthenticated\").",
                &["operation", "status"],
            ),
            duration: histogram(
                "qm_gateway_request_duration_seconds",
                "Time to answer an AWS Batch API request, by operation.",
                &["operation"],
                FAST_SECONDS,
            ),
            refused_connections: counter(
                "qm_gateway_refused_connections_total",
                "Connections closed as they arrived, by why (per_client: the client had maxConnectionsPerClient open).",
                &["reason"],
            ),
        }
    }
}

pub(crate) struct Gateway {
    settings: Settings,
    arns: arn::Arns,
    /// The tenancy in effect (the file, then each stored revision).
    tenancy: qm_service::tenancy::LiveTenancy,
    /// Access key id -> secret: the keys file, read again when it changes.
    secrets: qm_service::tenancy::KeysFile,
    /// Requests go on `qm.v1.api.<gateway principal>.*`.
    client: qm_service::client::Client,
    store: store::Store,
    metrics: Metrics,
    /// The bytes of request bodies being read at once
    /// (`maxBodiesInFlightBytes`).
    bodies: tokio::sync::Semaphore,
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    qm_service::main::<Settings, _, _>(&SPEC, run).await
}

async fn run(
    settings: Settings,
    nats_settings: qm_service::settings::NatsSettings,
    observe: qm_service::settings::ObserveSettings,
) -> std::process::ExitCode {
    let fail = |e: String| {
        eprintln!("qm-gateway: {e}");
        std::process::ExitCode::from(2)
    };
    let tenancy = match Tenancy::load(std::path::Path::new(&settings.tenancy)) {
        Ok(t) => t,
        Err(e) => return fail(e.to_string()),
    };
    let secrets = match qm_service::tenancy::KeysFile::follow(
        std::path::Path::new(&settings.keys_file),
        "gateway",
    ) {
        Ok(k) => k,
        Err(e) => return fail(e),
    };
    let in_file = secrets.get();
    let unmapped: Vec<&String> = in_file
        .keys()
        .filter(|k| tenancy.access_key_principal(k).is_none())
        .collect();
    if !unmapped.is_empty() {
        tracing::warn!(keys = ?unmapped, "keys in the keys file that the tenancy's awsAccessKeys does not map are refused");
    }
    let tls = match http::tls_config(&settings) {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let (client, principal) = match qm_service::connect(&nats_settings, "gateway").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if tenancy.role(&principal) != Some(qm_tenancy::Role::Gateway) {
        return fail(format!(
            "the NATS principal {principal:?} is not in the tenancy's services.gateway: admission would refuse every request"
        ));
    }
    // Not ready from the moment a shutdown begins, so load balancers stop
    // sending new connections while the ones in flight finish.
    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let endpoint = qm_service::observe::Endpoint::for_service("gateway", &client, {
        let stopping = Arc::clone(&stopping);
        Box::new(move || {
            if stopping.load(std::sync::atomic::Ordering::Relaxed) {
                Err("shutting down".into())
            } else {
                Ok(())
            }
        })
    });
    let metrics = Metrics::new();
    if let Err(code) = qm_service::serve_metrics(&observe, "gateway", endpoint).await {
        return code;
    }
    let js = async_nats::jetstream::new(client.clone());
    let age = Duration::from_secs(settings.job_record_days * 24 * 3600);
    let store = loop {
        match store::Store::open(&js, settings.stream_replicas, age).await {
            Ok(s) => break s,
            Err(e) => {
                tracing::warn!(error = %e, "the gateway's buckets are not ready; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    let mut api = qm_service::client::Client::new(client.clone(), principal.clone());
    api.timeout = Duration::from_millis(settings.request_timeout_ms);
    let listener = match settings.listener().bind().await {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let bodies = tokio::sync::Semaphore::new(settings.max_bodies_in_flight_bytes);
    let gateway = Arc::new(Gateway {
        bodies,
        arns: arn::Arns {
            region: settings.region.clone(),
            account: settings.account_id.clone(),
        },
        settings,
        tenancy: qm_service::tenancy::follow(client.clone(), "gateway", tenancy).await,
        secrets,
        client: api,
        store,
        metrics,
    });
    let scheme = if tls.is_some() { "https" } else { "http" };
    let bound = listener.local_addr().map_or_else(
        |_| gateway.settings.listen_address.clone(),
        |a| a.to_string(),
    );
    tracing::info!(%principal, keys = gateway.secrets.get().len(), "AWS Batch API at {scheme}://{bound} (region {})", gateway.settings.region);
    let shutdown = async {
        qm_service::nats::shutdown_signal().await;
        stopping.store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            "shutting down: not ready; serving {:?} more, then finishing the requests in flight",
            http::UNREADY_GRACE
        );
        tokio::time::sleep(http::UNREADY_GRACE).await;
    };
    http::serve(Arc::clone(&gateway), listener, tls, shutdown).await;
    qm_service::within("NATS flush", Duration::from_secs(2), client.flush()).await;
    tracing::info!("gateway stopped");
    std::process::ExitCode::SUCCESS
}
