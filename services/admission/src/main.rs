//! `qm-admission`: the front door. Answers every `qm.v1.api.*` subject:
//! validates submissions and configuration changes against the queue's
//! configuration (JetStream KV), stores them durably (the `QM_LOG` stream)
//! before replying, and relays job reads, priority updates and terminates
//! to the scheduler leader. Stateless: run as many as you like (queue group).
//!
//! Who asked is the principal in the request's subject
//! (`qm.v1.api.<principal>.<Operation>`): the NATS server lets only that
//! principal publish there. Every request is checked against the tenancy
//! file before anything is stored, and every accepted write is recorded in
//! the log with its principal (`qm audit`).
//!
//! | file | what |
//! |---|---|
//! | `main.rs` | start-up, and `Admission`, whose methods the files below hold |
//! | `handlers.rs` | who asked, and the dispatch: one line per operation |
//! | `queue_ops.rs`, `queues.rs` | queue and share changes (validated whole, compare-and-set) and reads |
//! | `jobs.rs`, `drills.rs` | submits, executors' registration, relays to the scheduler |
//! | `relays.rs` | the reads the scheduler answers, checked here first |
//! | `tenancy.rs`, `audit.rs`, `events.rs` | the stored tenancy, the audit log, the events stream |
//! | `errors.rs`, `ids.rs`, `settings.rs` | what every handler shares |
//!
//! Layers: `tests/layers.rs` (services/README.md).

mod audit;
mod drills;
mod errors;
mod events;
mod handlers;
mod ids;
mod jobs;
mod queue_ops;
mod queues;
mod relays;
mod settings;
mod tenancy;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use qm_core::Cluster;
use qm_service::nats;

use qm_service::tenancy::LiveTenancy;
use qm_tenancy::Tenancy;
use qm_wire::subjects;
use settings::{Settings, SPEC};

/// What admission measures (see docs/metrics.md).
struct Metrics {
    requests: prometheus::IntCounterVec,
    duration: prometheus::HistogramVec,
    append: prometheus::HistogramVec,
    submitted: prometheus::IntCounterVec,
}

impl Metrics {
    fn new() -> Metrics {
        use qm_service::observe::{counter, histogram, FAST_SECONDS};
        Metrics {
            requests: counter(
                "qm_api_requests_total",
                "API requests answered, by operation.",
                &["operation"],
            ),
            duration: histogram(
                "qm_api_request_duration_seconds",
                "Time to answer an API request, by operation.",
                &["operation"],
                FAST_SECONDS,
            ),
            append: histogram(
                "qm_log_append_duration_seconds",
                "Time to store an entry in the QM_LOG stream (until JetStream acknowledged it), by entry.",
                &["entry"],
                FAST_SECONDS,
            ),
            submitted: counter(
                "qm_jobs_submitted_total",
                "Submit requests accepted (stored in the log), by queue and share; a retry with the same clientToken counts again.",
                &["queue", "share"],
            ),
        }
    }
}

struct Admission {
    metrics: Metrics,
    client: async_nats::Client,
    js: async_nats::jetstream::Context,
    /// The log, and the audit records (`QM_AUDIT`) `qm audit` reads.
    log: async_nats::jetstream::stream::Stream,
    audit: async_nats::jetstream::stream::Stream,
    /// The stored events (`QM_EVENTS`) `ListEvents` reads for callers.
    events: async_nats::jetstream::stream::Stream,
    /// The `ListEvents` reads in flight (bounded per principal and in all).
    event_reads: events::Reads,
    config: async_nats::jetstream::kv::Store,
    tokens: async_nats::jetstream::kv::Store,
    settings: Settings,
    /// The tenancy in effect: the file at start, then each stored
    /// revision (`qm tenancy apply`) as it is written.
    tenancy: LiveTenancy,
    /// Where revisions are stored (None: the NATS authorization predates
    /// them; the file stays in effect).
    tenancy_bucket: Option<async_nats::jetstream::kv::Store>,
    /// Who this admission is on NATS.
    principal: String,
    /// Per queue: the configuration revision and an empty cluster of it,
    /// cloned to validate each submit with the core's own rules.
    scratch: Mutex<HashMap<String, (u64, Cluster)>>,
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
    let (tenancy, tenancy_text) = match std::fs::read_to_string(&settings.tenancy) {
        Ok(text) => match Tenancy::parse(&text) {
            Ok(t) => (t, text),
            Err(e) => {
                eprintln!("qm-admission: {}: {e}", settings.tenancy);
                return std::process::ExitCode::from(2);
            }
        },
        Err(e) => {
            eprintln!(
                "qm-admission: invalid tenancy (1 problem):\n  - {}: cannot read: {e}",
                settings.tenancy
            );
            return std::process::ExitCode::from(2);
        }
    };
    let (client, principal) = match qm_service::connect(&nats_settings, "admission").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !client.server_info().auth_required && !settings.insecure_allow_unauthenticated_nats {
        eprintln!(
            "qm-admission: the NATS server at {} lets anyone connect, so any client could claim any principal; run it with the configuration `qm auth` generates (or set insecureAllowUnauthenticatedNats for a throwaway test setup)",
            nats_settings.nats_url
        );
        return std::process::ExitCode::from(2);
    }
    let endpoint = qm_service::observe::Endpoint::for_service(
        "admission",
        &client,
        qm_service::observe::nothing_more(),
    );
    let metrics = Metrics::new();
    if let Err(code) = qm_service::serve_metrics(&observe, "admission", endpoint).await {
        return code;
    }
    tracing::info!(%principal, teams = tenancy.teams.len(), principals = tenancy.principals().len(), "tenancy loaded");
    let retention = nats::Retention {
        events: Duration::from_secs(settings.events_retention_days * 24 * 3600),
        client_tokens: Duration::from_secs(settings.client_token_hours * 3600),
        archive: Duration::from_secs(settings.archive_retention_seconds),
        audit: Duration::from_secs(settings.audit_retention_days * 24 * 3600),
    };
    nats::create_storage_with_retry(&client, settings.stream_replicas, retention).await;
    let js = async_nats::jetstream::new(client.clone());
    let log = nats::open_stream(&js, subjects::LOG_STREAM).await;
    let audit = nats::open_stream(&js, subjects::AUDIT_STREAM).await;
    let events = nats::open_stream(&js, subjects::EVENTS_STREAM).await;
    // Every accepted write is copied to the audit stream (audit.rs).
    let copier = tokio::spawn(audit::copy(js.clone(), log.clone()));
    // The tenancy: the file applied when its text changed, then whatever
    // revision is stored, followed live.
    let tenancy_bucket = tenancy::bucket(&client, settings.stream_replicas).await;
    if let Some(bucket) = &tenancy_bucket {
        tenancy::apply_file(
            &js,
            bucket,
            &settings.tenancy,
            &tenancy_text,
            tenancy.clone(),
            &principal,
        )
        .await;
    }
    let tenancy = qm_service::tenancy::follow(client.clone(), "admission", tenancy).await;
    let config = nats::open_bucket(&js, subjects::CONFIG_BUCKET).await;
    let tokens = nats::open_bucket(&js, subjects::TOKENS_BUCKET).await;
    let mut requests = match client
        .queue_subscribe(subjects::all_api_requests(), "qm-admission".into())
        .await
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("qm-admission: cannot subscribe: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let admission = Arc::new(Admission {
        metrics,
        client: client.clone(),
        js,
        log,
        audit,
        events,
        event_reads: events::Reads::default(),
        config,
        tokens,
        settings,
        tenancy,
        tenancy_bucket,
        principal: principal.clone(),
        scratch: Mutex::new(HashMap::new()),
    });
    tracing::info!("admission ready");
    let shutdown = nats::shutdown_signal();
    tokio::pin!(shutdown);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            msg = requests.next() => match msg {
                Some(msg) => {
                    let a = Arc::clone(&admission);
                    tasks.spawn(async move { a.handle(msg).await });
                }
                None => break,
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    // Finish the requests in hand (they are durable once acknowledged; one
    // that cannot be stored within 10 s is not acknowledged, and its client
    // retries it with the same clientToken).
    qm_service::within(
        "unsubscribing",
        Duration::from_secs(2),
        requests.unsubscribe(),
    )
    .await;
    let in_hand = async { while tasks.join_next().await.is_some() {} };
    qm_service::within("requests in hand", Duration::from_secs(10), in_hand).await;
    // A record being copied is copied again by the next admission (the
    // consumer redelivers what was not acknowledged).
    copier.abort();
    qm_service::within("NATS flush", Duration::from_secs(2), client.flush()).await;
    tracing::info!("admission stopped");
    std::process::ExitCode::SUCCESS
}
