//! HTTP: the connection loop (HTTPS when configured) and the checks every
//! request passes before it is read as an operation (size, signature,
//! key -> principal); the operations, routes and error shape are
//! `api.rs`'s.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};

use crate::api::{route, AwsError};
use crate::settings::Settings;
use crate::Gateway;

fn respond(status: u16, body: &serde_json::Value, error: Option<&str>) -> Response<Full<Bytes>> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut r = Response::new(Full::new(Bytes::from(bytes)));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    if let Ok(id) = hyper::header::HeaderValue::from_str(&qm_service::random_id()) {
        h.insert("x-amzn-requestid", id);
    }
    if let Some(code) = error.and_then(|c| hyper::header::HeaderValue::from_str(c).ok()) {
        h.insert("x-amzn-errortype", code);
    }
    r
}

fn error_response(e: &AwsError) -> Response<Full<Bytes>> {
    respond(
        e.status,
        &serde_json::json!({ "__type": e.code, "message": e.message }),
        Some(e.code),
    )
}

fn now_secs() -> i64 {
    (qm_service::now_ms() / 1000) as i64
}

impl Gateway {
    /// The secret of `key`, if the keys file has it and the tenancy maps
    /// it to a principal (else the key is unknown).
    fn secret(&self, key: &str) -> Option<String> {
        self.tenancy.get().access_key_principal(key)?;
        self.secrets.get().get(key).cloned()
    }

    /// Answers one request: checked, then run, timed and counted.
    async fn answer(&self, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
        let started = std::time::Instant::now();
        // One span per request (a trace's root, or a child of nothing: AWS
        // clients send no W3C context); the NATS request is its child.
        let span = tracing::info_span!(
            "aws batch request",
            otel.kind = "server",
            otel.name = tracing::field::Empty,
            http.request.method = %req.method(),
            http.response.status_code = tracing::field::Empty,
        );
        let (label, result) = {
            use tracing::Instrument;
            self.checked(req).instrument(span.clone()).await
        };
        span.record("otel.name", format!("aws batch {label}"));
        let (status, response) = match result {
            Ok(body) => (200, respond(200, &body, None)),
            Err(e) => {
                if e.status >= 500 {
                    tracing::warn!(operation = %label, error = %e.message, "request failed");
                }
                (e.status, error_response(&e))
            }
        };
        span.record("http.response.status_code", status);
        self.metrics
            .requests
            .with_label_values(&[label.as_str(), &status.to_string()])
            .inc();
        self.metrics
            .duration
            .with_label_values(&[label.as_str()])
            .observe(started.elapsed().as_secs_f64());
        response
    }

    /// Reads a body of at most `max` bytes, each frame paid for from the
    /// bodies' budget as it arrives; the permits are held as long as the
    /// body is.
    async fn read_body(
        &self,
        mut body: hyper::body::Incoming,
        max: usize,
    ) -> Result<(Bytes, Option<tokio::sync::SemaphorePermit<'_>>), AwsError> {
        // The frames as they came (no copy while reading), joined once whole.
        let mut frames: Vec<Bytes> = Vec::new();
        let mut length = 0usize;
        let mut budget: Option<tokio::sync::SemaphorePermit<'_>> = None;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                AwsError::client(format!("the request body could not be read: {e}"))
            })?;
            let Ok(data) = frame.into_data() else {
                continue; // trailers
            };
            if length + data.len() > max {
                return Err(AwsError {
                    status: 413,
                    code: "ClientException",
                    message: format!("the request body is larger than {max} bytes"),
                });
            }
            let Ok(paid) = self.bodies.try_acquire_many(data.len() as u32) else {
                return Err(AwsError {
                    status: 429,
                    code: "TooManyRequestsException",
                    message: "too many request bodies are being read: retry later".into(),
                });
            };
            match &mut budget {
                Some(b) => b.merge(paid),
                None => budget = Some(paid),
            }
            length += data.len();
            frames.push(data);
        }
        let body = match frames.len() {
            0 => Bytes::new(),
            1 => frames.pop().unwrap_or_default(),
            _ => {
                let mut whole = Vec::with_capacity(length);
                for f in frames {
                    whole.extend_from_slice(&f);
                }
                Bytes::from(whole)
            }
        };
        Ok((body, budget))
    }

    async fn checked(
        &self,
        req: Request<hyper::body::Incoming>,
    ) -> (String, Result<serde_json::Value, AwsError>) {
        let unauthenticated = "unauthenticated".to_string();
        let (parts, body) = req.into_parts();
        let max = self.settings.max_body_bytes;
        let too_large = || AwsError {
            status: 413,
            code: "ClientException",
            message: format!("the request body is larger than {max} bytes"),
        };
        let declared = parts
            .headers
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max as u64) {
            return (unauthenticated, Err(too_large()));
        }
        let chunked = parts.headers.contains_key(hyper::header::TRANSFER_ENCODING);
        if chunked && declared.is_none() {
            // AWS clients send Content-Length; a body of unknown size
            // cannot be budgeted before it is read.
            return (
                unauthenticated,
                Err(AwsError {
                    status: 411,
                    code: "ClientException",
                    message: "a request body needs a Content-Length".into(),
                }),
            );
        }
        let headers: Vec<(String, String)> = parts
            .headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let path = parts.uri.path();
        let query = parts.uri.query().unwrap_or("");
        let scope = qm_sigv4::Scope {
            region: self.settings.region.clone(),
            service: "batch".into(),
        };
        let refused = |e: qm_sigv4::SigError| {
            tracing::info!(path, error = %e, "request refused: signature");
            AwsError {
                status: e.status(),
                code: e.code(),
                message: e.to_string(),
            }
        };
        // Everything the signature allows to be checked without the body is
        // checked first: an unsigned request, an unknown key or a stale date
        // is refused before a byte of its body is read.
        let head = qm_sigv4::Request {
            method: parts.method.as_str(),
            path,
            query,
            headers: &headers,
            body: b"",
        };
        if let Err(e) = qm_sigv4::verify_before_body(&head, &scope, |k| self.secret(k), now_secs())
        {
            return (unauthenticated, Err(refused(e)));
        }
        // The bodies being read together stay within their budget, counted
        // as their bytes arrive (a slow client holds only what it sent):
        // past it, the request is turned away and the rest of its body is
        // not read (clients retry throttling with backoff).
        let deadline = Duration::from_secs(self.settings.body_read_timeout_seconds);
        let read = tokio::time::timeout(deadline, self.read_body(body, max)).await;
        let (body, _budget) = match read {
            Err(_) => {
                return (
                    unauthenticated,
                    Err(AwsError {
                        status: 408,
                        code: "ClientException",
                        message: format!(
                            "the request body did not arrive within {} s",
                            deadline.as_secs()
                        ),
                    }),
                )
            }
            Ok(Ok(read)) => read,
            Ok(Err(e)) => return (unauthenticated, Err(e)),
        };
        let signed = qm_sigv4::Request {
            body: &body,
            ..head
        };
        let key = match qm_sigv4::verify(&signed, &scope, |k| self.secret(k), now_secs()) {
            Ok(k) => k,
            Err(e) => return (unauthenticated, Err(refused(e))),
        };
        let tenancy = self.tenancy.get();
        let principal = tenancy.access_key_principal(&key).unwrap_or_default();
        let caller = match tenancy.spoken_for(principal) {
            Ok(c) => c,
            Err(e) => {
                return (
                    unauthenticated,
                    Err(AwsError {
                        status: 403,
                        code: "AccessDeniedException",
                        message: e.0,
                    }),
                )
            }
        };
        let Some((op, arn)) = route(&parts.method, path) else {
            return (
                "unknown".into(),
                Err(AwsError {
                    status: 404,
                    code: "UnknownOperationException",
                    message: format!(
                        "{} {path} is not an AWS Batch operation this endpoint serves",
                        parts.method
                    ),
                }),
            );
        };
        let request = crate::ops::Call {
            caller: &caller,
            body: &body,
            arn: arn.as_deref(),
            query,
        };
        (op.name(), self.run(op, request).await)
    }
}

/// The TLS configuration, when `tlsCertFile` is set.
pub fn tls_config(settings: &Settings) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
    settings.listener().tls_config()
}

/// How long the gateway keeps accepting connections after a shutdown
/// begins, answering `/readyz` 503 meanwhile, so a load balancer (a
/// Kubernetes Service) stops routing to it before its listener closes.
pub const UNREADY_GRACE: Duration = Duration::from_secs(3);

/// How long a shutdown waits for requests in flight (a submit's round trip
/// through admission included) before cutting their connections.
pub const DRAIN: Duration = Duration::from_secs(20);

/// Accepts connections until `shutdown` completes, then drains (at most
/// [`DRAIN`]), through the HTTP module
/// every surface shares (`qm_service::http`), with the gateway's limits:
/// `maxConnections`, `maxConnectionsPerClient` (more are closed as they
/// arrive), a TLS handshake and each request's headers within
/// `headerReadTimeoutSeconds`, 64 KiB of headers, a connection closed after
/// 5 minutes; a body within `bodyReadTimeoutSeconds` and the budget of
/// `maxBodiesInFlightBytes` (read by [`Gateway::answer`]).
pub async fn serve(
    gateway: Arc<Gateway>,
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let limits = gateway.settings.listener().limits(
        Duration::from_secs(gateway.settings.header_read_timeout_seconds),
        64 * 1024,
        Duration::from_secs(300),
        DRAIN,
    );
    let refused = {
        let gateway = Arc::clone(&gateway);
        move |ip: std::net::IpAddr| {
            tracing::debug!(client = %ip, "connection closed: the client has maxConnectionsPerClient open");
            gateway
                .metrics
                .refused_connections
                .with_label_values(&["per_client"])
                .inc();
        }
    };
    qm_service::http::serve(
        listener,
        tls,
        limits,
        move |req| {
            let gateway = Arc::clone(&gateway);
            async move { gateway.answer(req).await }
        },
        refused,
        shutdown,
    )
    .await;
}
