//! Each service's HTTP endpoint: Prometheus metrics and health.
//!
//! | path | answers | who may ask |
//! |---|---|---|
//! | `GET /metrics` | Prometheus text format 0.0.4 | a bearer token when `metricsTokenFile` is set (required off loopback) |
//! | `GET /healthz` | `200 ok`: the process serves | anyone (probes) |
//! | `GET /readyz` | `200 ready`, or `503 not ready: <what>` | anyone (probes) |
//!
//! Nothing else is served: other paths get 404, other methods 405. The
//! probes say only whether the service is alive or ready and, if not
//! ready, which dependency is missing; no names, ids or counts. It is
//! served by `http.rs` with [`crate::http::Limits::endpoint`]: at most 64
//! connections (16 from one address), a request head within 5 s and 16 KiB,
//! a connection closed after a minute; over HTTPS when
//! `metricsTlsCertFile` and `metricsTlsKeyFile` are set.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use prometheus::{Encoder, IntGauge, Opts, TextEncoder};

use crate::settings::ObserveSettings;

/// Whether a service is ready beyond its NATS connection (which
/// [`Endpoint::for_service`] checks first), and if not, what it lacks (a
/// few words).
pub type ReadyCheck = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

/// A check run just before each scrape (to refresh gauges).
pub type Refresh = Box<dyn Fn() + Send + Sync>;

/// What the endpoint serves: the process's metrics (the prometheus
/// crate's default registry, where each service registers its own), its
/// readiness, and checks run before each scrape.
pub struct Endpoint {
    token: Option<String>,
    ready: ReadyCheck,
    refresh: Vec<Refresh>,
}

/// Registers what every service reports, `qm_build_info` and
/// `qm_nats_connected`, and returns the refresh that keeps the latter
/// current.
pub fn common(service: &str, nats: &async_nats::Client) -> Refresh {
    let info = register(IntGauge::with_opts(
        Opts::new(
            "qm_build_info",
            "Always 1; the service and its version as labels.",
        )
        .const_label("service", service)
        .const_label("version", env!("CARGO_PKG_VERSION")),
    ));
    info.set(1);
    let connected = register(IntGauge::new(
        "qm_nats_connected",
        "1 while the service's NATS connection is up, 0 while it reconnects.",
    ));
    let nats = nats.clone();
    Box::new(move || connected.set(i64::from(nats_up(&nats))))
}

/// Whether a NATS client is connected now.
pub fn nats_up(nats: &async_nats::Client) -> bool {
    nats.connection_state() == async_nats::connection::State::Connected
}

/// Registers a metric in the default registry. A definition that is
/// invalid or registered twice is a programming error the tests catch.
pub fn register<M: prometheus::core::Collector + Clone + 'static>(
    metric: prometheus::Result<M>,
) -> M {
    #[allow(clippy::expect_used)]
    let metric = metric.expect("a valid metric definition");
    #[allow(clippy::expect_used)]
    prometheus::register(Box::new(metric.clone())).expect("each metric registered once");
    metric
}

/// A counter family in the default registry.
pub fn counter(name: &str, help: &str, labels: &[&str]) -> prometheus::IntCounterVec {
    register(prometheus::IntCounterVec::new(
        Opts::new(name, help),
        labels,
    ))
}

/// A gauge family in the default registry.
pub fn gauge(name: &str, help: &str, labels: &[&str]) -> prometheus::GaugeVec {
    register(prometheus::GaugeVec::new(Opts::new(name, help), labels))
}

/// A histogram family in the default registry, with `buckets` (seconds).
pub fn histogram(
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: &[f64],
) -> prometheus::HistogramVec {
    register(prometheus::HistogramVec::new(
        prometheus::HistogramOpts::new(name, help).buckets(buckets.to_vec()),
        labels,
    ))
}

/// Buckets for latencies of milliseconds to seconds (appends, calls).
pub const FAST_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Buckets for waits of a second to hours (queueing, restores, commits).
pub const SLOW_SECONDS: &[f64] = &[
    0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
    21600.0, 86400.0,
];

/// Ready needs nothing beyond the NATS connection.
pub fn nothing_more() -> ReadyCheck {
    Box::new(|| Ok(()))
}

impl Endpoint {
    /// The endpoint of `service`: ready while connected to NATS and `ready`
    /// holds, and reporting what every service reports ([`common`]).
    pub fn for_service(service: &str, nats: &async_nats::Client, ready: ReadyCheck) -> Endpoint {
        let connected = nats.clone();
        Endpoint {
            token: None,
            ready: Box::new(move || {
                if nats_up(&connected) {
                    ready()
                } else {
                    Err("NATS disconnected".into())
                }
            }),
            refresh: vec![common(service, nats)],
        }
    }

    /// Runs `f` before every scrape.
    pub fn refresh(mut self, f: Refresh) -> Endpoint {
        self.refresh.push(f);
        self
    }

    fn authorized(&self, req: &Request<hyper::body::Incoming>) -> bool {
        let Some(token) = &self.token else {
            return true;
        };
        let Some(given) = req
            .headers()
            .get(hyper::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        // Compared in time independent of where they differ.
        let (a, b) = (given.as_bytes(), token.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }

    fn answer(&self, req: &Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let reply = |status: StatusCode, body: String| {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            *r.status_mut() = status;
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        };
        let path = req.uri().path();
        if !matches!(path, "/metrics" | "/healthz" | "/readyz") {
            return reply(StatusCode::NOT_FOUND, "not found\n".into());
        }
        if req.method() != Method::GET && req.method() != Method::HEAD {
            let mut r = reply(StatusCode::METHOD_NOT_ALLOWED, "use GET\n".into());
            r.headers_mut().insert(
                hyper::header::ALLOW,
                hyper::header::HeaderValue::from_static("GET, HEAD"),
            );
            return r;
        }
        match path {
            "/healthz" => reply(StatusCode::OK, "ok\n".into()),
            "/readyz" => match (self.ready)() {
                Ok(()) => reply(StatusCode::OK, "ready\n".into()),
                Err(why) => reply(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("not ready: {why}\n"),
                ),
            },
            _ if !self.authorized(req) => {
                let mut r = reply(
                    StatusCode::UNAUTHORIZED,
                    "a bearer token is required\n".into(),
                );
                r.headers_mut().insert(
                    hyper::header::WWW_AUTHENTICATE,
                    hyper::header::HeaderValue::from_static("Bearer realm=\"metrics\""),
                );
                r
            }
            _ => {
                for f in &self.refresh {
                    f();
                }
                let mut body = Vec::new();
                let encoder = TextEncoder::new();
                if let Err(e) = encoder.encode(&prometheus::gather(), &mut body) {
                    return reply(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n"));
                }
                let mut r = Response::new(Full::new(Bytes::from(body)));
                if let Ok(v) = hyper::header::HeaderValue::from_str(encoder.format_type()) {
                    r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
                }
                r
            }
        }
    }
}

/// Binds the endpoint and serves it in the background. Ok(None) when the
/// settings switch it off; an error (an address in use, an unreadable
/// token) names the setting, for the service to print and exit on.
pub async fn serve(
    settings: &ObserveSettings,
    service: &str,
    endpoint: Endpoint,
) -> Result<Option<SocketAddr>, String> {
    let Some(addr) = settings.address() else {
        return Ok(None);
    };
    let mut endpoint = endpoint;
    endpoint.token = settings.token()?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        format!(
            "metricsAddress {addr}: cannot listen: {e} (set QM_{}_METRICS_ADDRESS to another port, or off)",
            service.to_ascii_uppercase()
        )
    })?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let tls = settings.tls()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    if tls.is_none() && !bound.ip().is_loopback() {
        tracing::warn!(address = %bound, "metrics served over plain HTTP beyond loopback: the bearer token travels in clear (set metricsTlsCertFile and metricsTlsKeyFile)");
    }
    let endpoint = Arc::new(endpoint);
    tokio::spawn(crate::http::serve(
        listener,
        tls,
        crate::http::Limits::endpoint(),
        move |req| {
            let r = endpoint.answer(&req);
            async move { r }
        },
        |ip| tracing::debug!(client = %ip, "metrics connection refused: too many from one client"),
        // Served as long as the process lives: readiness must answer
        // through a shutdown.
        std::future::pending(),
    ));
    tracing::info!(address = %bound, "metrics at {scheme}://{bound}/metrics, health at /healthz and /readyz");
    Ok(Some(bound))
}
