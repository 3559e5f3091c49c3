//! `qm-console`: Quartermaster's web console (ADR 0018).
//!
//! A person signs in with the access key and secret `qm auth` gave them
//! (or is named by an authenticating proxy the settings trust); every page
//! is read, and every write made, through the NATS API as that person
//! (the console's own subject, naming them in `Qm-Caller`, which admission
//! believes only from a console principal and only for people). Pages are
//! rendered on the server; the one script and the one style sheet are
//! embedded; an open page follows the events stream through a long poll.
//! Layers: `tests/layers.rs` (services/README.md).

mod http;
mod live;
mod pages;
mod session;
mod settings;

use std::sync::Arc;
use std::time::Duration;

use qm_tenancy::Tenancy;
use settings::{Settings, SPEC};

/// What the console measures (see docs/metrics.md).
pub(crate) struct Metrics {
    requests: prometheus::IntCounterVec,
    duration: prometheus::HistogramVec,
    sessions: prometheus::GaugeVec,
}

impl Metrics {
    fn new() -> Metrics {
        use qm_service::observe::{counter, histogram, FAST_SECONDS};
        Metrics {
            requests: counter(
                "qm_console_requests_total",
                "Console requests answered, by route and HTTP status.",
                &["route", "status"],
            ),
            duration: histogram(
                "qm_console_request_duration_seconds",
                "Time to answer a console request, by route (a live poll waits up to 25 s by design).",
                &["route"],
                FAST_SECONDS,
            ),
            sessions: qm_service::observe::gauge(
                "qm_console_sessions",
                "Sign-in sessions live now.",
                &[],
            ),
        }
    }
}

pub(crate) struct Console {
    settings: Settings,
    /// The tenancy in effect (the file, then each stored revision).
    tenancy: qm_service::tenancy::LiveTenancy,
    sessions: session::Sessions,
    live: Arc<live::Live>,
    /// Requests go on `qm.v1.api.<console principal>.*`.
    client: qm_service::client::Client,
    proxies: Vec<std::net::IpAddr>,
    metrics: Metrics,
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
        eprintln!("qm-console: {e}");
        std::process::ExitCode::from(2)
    };
    let tenancy = match Tenancy::load(std::path::Path::new(&settings.tenancy)) {
        Ok(t) => t,
        Err(e) => return fail(e.to_string()),
    };
    let secrets = if settings.keys_file.is_empty() {
        qm_service::tenancy::KeysFile::fixed(Default::default())
    } else {
        match qm_service::tenancy::KeysFile::follow(
            std::path::Path::new(&settings.keys_file),
            "console",
        ) {
            Ok(k) => k,
            Err(e) => return fail(e),
        }
    };
    let tls = match settings.listener().tls_config() {
        Ok(t) => t,
        Err(e) => return fail(e),
    };
    let (client, principal) = match qm_service::connect(&nats_settings, "console").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if tenancy.role(&principal) != Some(qm_tenancy::Role::Console) {
        return fail(format!(
            "the NATS principal {principal:?} is not in the tenancy's services.console: admission would refuse every request"
        ));
    }
    let endpoint =
        qm_service::observe::Endpoint::for_service("console", &client, Box::new(|| Ok(())));
    let metrics = Metrics::new();
    if let Err(code) = qm_service::serve_metrics(&observe, "console", endpoint).await {
        return code;
    }
    let mut api = qm_service::client::Client::new(client.clone(), principal.clone());
    api.timeout = Duration::from_millis(settings.request_timeout_ms);
    let listener = match settings.listener().bind().await {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let live = Arc::new(live::Live::default());
    tokio::spawn(live::follow(client.clone(), Arc::clone(&live)));
    let console = Arc::new(Console {
        sessions: session::Sessions::new(
            secrets,
            Duration::from_secs(settings.session_minutes * 60),
        ),
        proxies: settings.proxies(),
        settings,
        tenancy: qm_service::tenancy::follow(client.clone(), "console", tenancy).await,
        live,
        client: api,
        metrics,
    });
    let scheme = if tls.is_some() { "https" } else { "http" };
    let bound = listener.local_addr().map_or_else(
        |_| console.settings.listen_address.clone(),
        |a| a.to_string(),
    );
    tracing::info!(%principal, "console at {scheme}://{bound}/");
    // A connection lives long enough for a live poll (25 s) on a
    // kept-alive connection.
    let limits = console.settings.listener().limits(
        Duration::from_secs(10),
        32 * 1024,
        Duration::from_secs(600),
        Duration::from_secs(5),
    );
    let handler = {
        let console = Arc::clone(&console);
        move |req| {
            let console = Arc::clone(&console);
            async move { console.answer(req).await }
        }
    };
    qm_service::http::serve(
        listener,
        tls,
        limits,
        handler,
        |ip| tracing::warn!(%ip, "a client with too many connections: closed"),
        qm_service::nats::shutdown_signal(),
    )
    .await;
    tracing::info!("console stopped");
    std::process::ExitCode::SUCCESS
}
