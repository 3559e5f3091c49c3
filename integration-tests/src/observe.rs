//! What the tests see of observability: an OTLP/HTTP receiver inside the
//! test (decoding the protobuf export requests with the
//! `opentelemetry-proto` types; no collector image), and scrapes of a
//! service's metrics endpoint parsed with a Prometheus text-format parser.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

/// One span as the receiver got it.
#[derive(Clone, Debug)]
pub struct Span {
    /// `service.name` of the exporting process.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: BTreeMap<String, String>,
    /// (trace id, span id) of each link.
    pub links: Vec<(String, String)>,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Span {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    pub fn millis(&self) -> f64 {
        self.end_ns.saturating_sub(self.start_ns) as f64 / 1e6
    }
}

fn text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// Receives OTLP/HTTP protobuf trace exports on `http://127.0.0.1:<port>`
/// (`OTEL_EXPORTER_OTLP_ENDPOINT`), keeping every span.
#[derive(Clone)]
pub struct OtlpReceiver {
    pub port: u16,
    spans: Arc<Mutex<Vec<Span>>>,
}

fn decode(body: &[u8]) -> Result<Vec<Span>, prost::DecodeError> {
    let req = ExportTraceServiceRequest::decode(body)?;
    let mut out = Vec::new();
    for rs in req.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|a| a.key == "service.name"))
            .map(text)
            .unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                out.push(Span {
                    service: service.clone(),
                    name: s.name.clone(),
                    trace_id: hex::encode(&s.trace_id),
                    span_id: hex::encode(&s.span_id),
                    parent_span_id: hex::encode(&s.parent_span_id),
                    attributes: s
                        .attributes
                        .iter()
                        .map(|a| (a.key.clone(), text(a)))
                        .collect(),
                    links: s
                        .links
                        .iter()
                        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                        .collect(),
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                });
            }
        }
    }
    Ok(out)
}

impl OtlpReceiver {
    /// On this machine's loopback.
    pub async fn start() -> OtlpReceiver {
        OtlpReceiver::start_on("127.0.0.1:0").await
    }

    /// On every interface: reachable from containers, whose services send
    /// to `host.docker.internal` (the stack rewrites [`OtlpReceiver::env`]).
    pub async fn start_for_containers() -> OtlpReceiver {
        OtlpReceiver::start_on("0.0.0.0:0").await
    }

    async fn start_on(address: &str) -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .expect("bind the OTLP receiver");
        let port = listener.local_addr().expect("address").port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&spans);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let sink = Arc::clone(&sink);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let sink = Arc::clone(&sink);
                            async move {
                                let ok = req.uri().path() == "/v1/traces";
                                let body = req
                                    .into_body()
                                    .collect()
                                    .await
                                    .map(|b| b.to_bytes())
                                    .unwrap_or_default();
                                let status = match decode(&body) {
                                    Ok(spans) if ok => {
                                        if let Ok(mut all) = sink.lock() {
                                            all.extend(spans);
                                        }
                                        200
                                    }
                                    _ => 400,
                                };
                                let mut r = hyper::Response::new(Full::new(Bytes::new()));
                                *r.status_mut() =
                                    hyper::StatusCode::from_u16(status).unwrap_or_default();
                                Ok::<_, Infallible>(r)
                            }
                        },
                    );
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        OtlpReceiver { port, spans }
    }

    /// The environment that sends a service's spans here promptly.
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT".into(),
                format!("http://127.0.0.1:{}", self.port),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY".into(), "200".into()),
        ]
    }

    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Waits until `done` holds of the spans received (at most `secs`).
    pub async fn wait_for(
        &self,
        secs: u64,
        what: &str,
        done: impl Fn(&[Span]) -> bool,
    ) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "timed out waiting for spans: {what}; got:\n{}",
                    spans
                        .iter()
                        .map(|s| format!(
                            "  {} {} {} job={:?}",
                            s.service,
                            s.name,
                            s.trace_id,
                            s.attr("qm.job_id")
                        ))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// An HTTP GET of `path` on `127.0.0.1:port`, with a bearer token if
/// given: the status and the body.
pub async fn get(port: u16, path: &str, token: Option<&str>) -> Result<(u16, String), String> {
    let auth = token.map(|t| format!("Bearer {t}"));
    raw(port, "GET", path, auth.as_deref()).await
}

/// Any method, any `Authorization` header: what an attacker would try.
pub async fn raw(
    port: u16,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> Result<(u16, String), String> {
    let stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    request_over(stream, port, method, path, authorization).await
}

/// One request over an open connection (plain or TLS).
pub async fn request_over<S>(
    stream: S,
    port: u16,
    method: &str,
    path: &str,
    authorization: Option<&str>,
) -> Result<(u16, String), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let headers: Vec<(&str, &str)> = authorization
        .map(|a| ("authorization", a))
        .into_iter()
        .collect();
    exchange(
        stream,
        port,
        method,
        path,
        &headers,
        "",
        Duration::from_secs(10),
    )
    .await
    .map(|a| (a.status, a.body))
}

/// Any request over an open connection, with the headers and body given,
/// answered within `limit`: the whole answer.
pub async fn exchange<S>(
    stream: S,
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    limit: Duration,
) -> Result<crate::tls::Answer, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", format!("127.0.0.1:{port}"));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.to_string())))
        .map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(limit, send.send_request(req))
        .await
        .map_err(|_| format!("no answer within {} s", limit.as_secs()))?
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    Ok(crate::tls::Answer {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// Polls `path` on `port` until it answers `status` (at most `secs`).
pub async fn wait_status(port: u16, path: &str, status: u16, secs: u64) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let got = get(port, path, None).await;
        if let Ok((s, body)) = &got {
            if *s == status {
                return body.clone();
            }
        }
        if tokio::time::Instant::now() > deadline {
            panic!("{path} on port {port} did not answer {status} within {secs} s: {got:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A parsed scrape of a service's `/metrics`.
pub struct Metrics(pub prometheus_parse::Scrape);

impl Metrics {
    /// Scrapes `/metrics` on `port`; panics unless it answers 200.
    pub async fn scrape(port: u16, token: Option<&str>) -> Metrics {
        let (status, body) = get(port, "/metrics", token)
            .await
            .unwrap_or_else(|e| panic!("scrape of port {port}: {e}"));
        assert_eq!(status, 200, "scrape of port {port}: {body}");
        let lines = body.lines().map(|l| Ok(l.to_string()));
        Metrics(prometheus_parse::Scrape::parse(lines).expect("Prometheus text format"))
    }

    /// The names of every metric family in the scrape (a histogram's
    /// `_bucket`, `_sum` and `_count` under its own name).
    pub fn names(&self) -> std::collections::BTreeSet<String> {
        self.0
            .samples
            .iter()
            .map(|s| {
                let m = s.metric.as_str();
                for suffix in ["_bucket", "_sum", "_count"] {
                    if let Some(base) = m.strip_suffix(suffix) {
                        if self.0.docs.contains_key(base) {
                            return base.to_string();
                        }
                    }
                }
                m.to_string()
            })
            .collect()
    }

    /// The sum of the samples of `metric` whose labels include `labels`
    /// (a counter's or gauge's value; a histogram's observation count).
    pub fn value(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        self.0
            .samples
            .iter()
            .filter(|s| s.metric == metric || s.metric == format!("{metric}_count"))
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match &s.value {
                prometheus_parse::Value::Counter(v)
                | prometheus_parse::Value::Gauge(v)
                | prometheus_parse::Value::Untyped(v) => *v,
                prometheus_parse::Value::Histogram(_) | prometheus_parse::Value::Summary(_) => 0.0,
            })
            .sum()
    }
}
