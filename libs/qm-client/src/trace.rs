//! Trace context on the wire: W3C Trace Context (`traceparent`,
//! `tracestate`) in NATS message headers, never in bodies. One helper for
//! every service, so that a job keeps one trace across `qm`, admission,
//! the log, the scheduler, the executor and the checkpoint service.
//!
//! - [`inject`] / [`headers`]: before a publish or request, write the
//!   current `tracing` span's context into the message's headers.
//! - [`extract`]: on receive, read the context a message carries (an empty
//!   context when it carries none or a malformed one: the receiver then
//!   starts a trace of its own).
//! - [`process_span`] / [`client_span`]: the messaging spans of
//!   OpenTelemetry's semantic conventions (`messaging.system = "nats"`),
//!   with the `qm.*` attributes recorded later as they become known.
//!
//! Without an exporter installed (no `OTEL_EXPORTER_OTLP_ENDPOINT`) the
//! spans are not recorded, but a context that arrives is still passed on.

use async_nats::HeaderMap;
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C header that carries the trace and parent span ids.
pub const TRACEPARENT: &str = "traceparent";

struct Inject<'a>(&'a mut HeaderMap);

impl Injector for Inject<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

struct Extract<'a>(&'a HeaderMap);

impl Extractor for Extract<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_ref()).collect()
    }
}

/// Writes `cx` into `headers` (nothing when it has no valid span).
pub fn inject_context(cx: &Context, headers: &mut HeaderMap) {
    if cx.span().span_context().is_valid() {
        TraceContextPropagator::new().inject_context(cx, &mut Inject(headers));
    }
}

/// Writes `span`'s context into `headers`, as it continues a trace: the
/// receiver's spans become its children.
pub fn inject_span(span: &SpanContext, headers: &mut HeaderMap) {
    inject_context(
        &Context::new().with_remote_span_context(span.clone()),
        headers,
    );
}

/// Writes the current `tracing` span's context into `headers`.
pub fn inject(headers: &mut HeaderMap) {
    inject_context(&tracing::Span::current().context(), headers);
}

/// Headers carrying the current span's context (empty when there is none).
pub fn headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    inject(&mut h);
    h
}

/// The context a message carries; empty when it carries none, or one that
/// is malformed (a sender cannot break the receiver's tracing).
pub fn extract(headers: Option<&HeaderMap>) -> Context {
    match headers {
        Some(h) => TraceContextPropagator::new().extract(&Extract(h)),
        None => Context::new(),
    }
}

/// The span context a message carries, if it carries a valid one.
pub fn extract_span(headers: Option<&HeaderMap>) -> Option<SpanContext> {
    let cx = extract(headers);
    let span = cx.span().span_context().clone();
    span.is_valid().then_some(span)
}

/// Makes `span` a child of `parent` (when `parent` has a valid span; a span
/// that has started already keeps its parent). Call before entering it.
pub fn follow(span: &tracing::Span, parent: Context) {
    if parent.span().span_context().is_valid() {
        let _ = span.set_parent(parent);
    }
}

/// The span of processing one received message (kind consumer; server for
/// a request that is answered), named `process <template>` as the
/// semantic conventions ask, where `template` is the subject with its
/// variable tokens as `{placeholders}`. A child of the message's context.
pub fn process_span(template: &str, message: &async_nats::Message) -> tracing::Span {
    let kind = if message.reply.is_some() {
        "server"
    } else {
        "consumer"
    };
    let span = tracing::info_span!(
        "process",
        otel.name = %format!("process {template}"),
        otel.kind = kind,
        otel.status_code = tracing::field::Empty,
        messaging.system = "nats",
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = %message.subject,
        messaging.destination.template = template,
        messaging.message.body.size = message.payload.len(),
        qm.job_id = tracing::field::Empty,
        qm.queue = tracing::field::Empty,
        qm.share = tracing::field::Empty,
        qm.attempt = tracing::field::Empty,
    );
    follow(&span, extract(message.headers.as_ref()));
    span
}

/// The span of sending a request or a publish (kind client for a request,
/// producer for a publish), named `send <template>`; its context is what
/// [`inject`] writes while it is entered.
pub fn client_span(template: &str, subject: &str, request: bool) -> tracing::Span {
    let (kind, op) = if request {
        ("client", "send")
    } else {
        ("producer", "publish")
    };
    tracing::info_span!(
        "send",
        otel.name = %format!("{op} {template}"),
        otel.kind = kind,
        otel.status_code = tracing::field::Empty,
        messaging.system = "nats",
        messaging.operation.type = op,
        messaging.operation.name = op,
        messaging.destination.name = subject,
        messaging.destination.template = template,
        qm.job_id = tracing::field::Empty,
        qm.queue = tracing::field::Empty,
        qm.share = tracing::field::Empty,
        qm.attempt = tracing::field::Empty,
    )
}

/// The subject template of a concrete subject: `qm.v1.api.alice.Submit...`
/// becomes `qm.v1.api.{principal}.SubmitServiceJob`, and so on for every
/// subject family of API v1 (one name per operation, not per principal,
/// job or node, so that span names stay few).
pub fn template(subject: &str) -> String {
    let parts: Vec<&str> = subject.split('.').collect();
    let named = |names: &[&str]| -> String {
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| match names.get(i) {
                Some(n) if !n.is_empty() => format!("{{{n}}}"),
                _ => (*p).to_string(),
            })
            .collect::<Vec<_>>()
            .join(".")
    };
    match parts.as_slice() {
        ["qm", "v1", "api", _, _] => named(&["", "", "", "principal"]),
        ["qm", "v1", "exec", _, _] => named(&["", "", "", "executor"]),
        ["qm", "v1", "ckpt", _, _] => named(&["", "", "", "node"]),
        ["qm", "v1", "log", "submit", _] => named(&["", "", "", "", "queue"]),
        _ => subject.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    fn span() -> SpanContext {
        SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").expect("trace id"),
            SpanId::from_hex("00f067aa0ba902b7").expect("span id"),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        )
    }

    #[test]
    fn a_span_context_survives_the_headers() {
        let mut h = HeaderMap::new();
        inject_span(&span(), &mut h);
        assert_eq!(
            h.get(TRACEPARENT).map(|v| v.as_str()),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        );
        let back = extract_span(Some(&h)).expect("extracted");
        assert_eq!(back.trace_id(), span().trace_id());
        assert_eq!(back.span_id(), span().span_id());
        assert!(back.is_remote() && back.is_sampled());
    }

    #[test]
    fn no_or_malformed_context_starts_nothing() {
        assert!(extract_span(None).is_none());
        let mut h = HeaderMap::new();
        assert!(extract_span(Some(&h)).is_none());
        for bad in [
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            h.insert(TRACEPARENT, bad);
            assert!(extract_span(Some(&h)).is_none(), "{bad}");
        }
        // Nothing to carry: no header written.
        let mut empty = HeaderMap::new();
        inject_context(&Context::new(), &mut empty);
        assert!(empty.get(TRACEPARENT).is_none());
    }

    #[test]
    fn templates_name_operations_not_principals_or_jobs() {
        assert_eq!(
            template("qm.v1.api.alice.SubmitServiceJob"),
            "qm.v1.api.{principal}.SubmitServiceJob"
        );
        assert_eq!(
            template("qm.v1.exec.node-1.command"),
            "qm.v1.exec.{executor}.command"
        );
        assert_eq!(
            template("qm.v1.log.submit.training"),
            "qm.v1.log.submit.{queue}"
        );
        assert_eq!(template("qm.v1.sched.request"), "qm.v1.sched.request");
    }
}
