//! Logs and traces of a process: `tracing` to stderr (text, or JSON with
//! `QM_LOG_FORMAT=json`, filtered by `RUST_LOG`), and, when an OTLP
//! endpoint is configured, the spans of Quartermaster's own code exported
//! with OpenTelemetry.
//!
//! Traces follow OpenTelemetry's standard variables:
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! switches export on; `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`,
//! `OTEL_BSP_SCHEDULE_DELAY` and the rest are read by the SDK. The
//! protocol is OTLP over HTTP with protobuf (`http/protobuf`, the
//! collector's port 4318); `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none` switch export off.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

/// The exporter of a process, flushed by [`Telemetry::shutdown`].
#[must_use = "call shutdown() before exiting, or the last spans are lost"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

/// Whether the environment asks for trace export.
fn export_wanted(env: &dyn Fn(&str) -> Option<String>) -> Result<bool, String> {
    let set = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    if set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(false);
    }
    if set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none")) {
        return Ok(false);
    }
    if set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
        && set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
    {
        return Ok(false);
    }
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(p) = set(var) {
            if p != "http/protobuf" {
                return Err(format!(
                    "{var}={p}: Quartermaster exports OTLP over HTTP (http/protobuf, the collector's port 4318); unset it or set http/protobuf"
                ));
            }
            break;
        }
    }
    Ok(true)
}

fn provider(service: &str) -> Result<SdkTracerProvider, String> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()
        .map_err(|e| format!("OTLP exporter: {e}"))?;
    let mut resource = opentelemetry_sdk::Resource::builder().with_attribute(
        opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    );
    if std::env::var("OTEL_SERVICE_NAME").map_or(true, |v| v.is_empty()) {
        resource = resource.with_service_name(service.to_string());
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

/// The exporter the environment asks for, installed as the process's
/// tracer provider (the scheduler's per-job spans use it directly): None
/// when it asks for none, an error naming the bad setting. The exporter's
/// HTTP client is built (and later dropped) outside the async runtime, on
/// a thread of its own.
fn exporter(service: &str) -> Result<Option<SdkTracerProvider>, String> {
    let env = |k: &str| std::env::var(k).ok();
    if !export_wanted(&env)? {
        return Ok(None);
    }
    let name = service.to_string();
    let provider = match std::thread::spawn(move || provider(&name)).join() {
        Ok(made) => made?,
        Err(_) => return Err("OTLP exporter set-up panicked".to_string()),
    };
    opentelemetry::global::set_tracer_provider(provider.clone());
    Ok(Some(provider))
}

/// The layer that exports `provider`'s spans: Quartermaster's own only (a
/// library's spans, the S3 SDK's or NATS's, would swamp a job's trace).
fn export_layer<S>(provider: &SdkTracerProvider, service: &str) -> impl Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    let ours = tracing_subscriber::filter::filter_fn(|m| {
        m.target().starts_with("qm") && *m.level() <= tracing::Level::INFO
    });
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer(service.to_string()))
        .with_filter(ours)
}

/// Sets up logs (and traces when asked for) for `service` (e.g.
/// `qm-executor`). A bad trace setting is reported on stderr and export
/// stays off: observability never stops a service from starting.
pub fn init(service: &str) -> Telemetry {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let format = std::env::var("QM_LOG_FORMAT").unwrap_or_default();
    let json = format.eq_ignore_ascii_case("json");
    let unknown = !json && !format.is_empty() && !format.eq_ignore_ascii_case("text");
    // Colour codes only for a person at a terminal: a collector reading a
    // pipe or a file gets plain text.
    use std::io::IsTerminal;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(!json && std::io::stderr().is_terminal());
    let fmt = if json {
        fmt.json().with_filter(filter).boxed()
    } else {
        fmt.with_filter(filter).boxed()
    };
    let made = exporter(service);
    let provider = made.as_ref().ok().cloned().flatten();
    let otel = provider.as_ref().map(|p| export_layer(p, service));
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init();
    if unknown {
        tracing::warn!(QM_LOG_FORMAT = %format, "unknown log format (json or text): logging text");
    }
    match made {
        Err(e) => tracing::error!(error = %e, "traces are not exported"),
        Ok(Some(_)) => tracing::info!("exporting traces over OTLP"),
        Ok(None) => {}
    }
    Telemetry { provider }
}

/// For a command-line tool: spans exported when the environment asks for
/// it (as [`init`]), and no log output of its own (the tool prints what
/// it has to say). Nothing is installed when export is off.
pub fn init_cli(name: &str) -> Telemetry {
    let provider = match exporter(name) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{name}: traces are not exported: {e}");
            None
        }
    };
    if let Some(p) = &provider {
        let _ = tracing_subscriber::registry()
            .with(export_layer(p, name))
            .try_init();
    }
    Telemetry { provider }
}

impl Telemetry {
    /// Sends the spans still queued, waiting at most 5 s (a collector that
    /// is down must not hold up a stopping service).
    pub fn shutdown(self) {
        let Some(provider) = self.provider else {
            return;
        };
        let (done, wait) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = provider.shutdown_with_timeout(Duration::from_secs(4));
            let _ = done.send(());
        });
        if wait.recv_timeout(Duration::from_secs(5)).is_err() {
            eprintln!("traces: the collector did not take the last spans within 5 s");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn export_is_off_unless_an_endpoint_is_set() {
        assert_eq!(export_wanted(&env(&[])), Ok(false));
        let on = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")];
        assert_eq!(export_wanted(&env(&on)), Ok(true));
        let traces = [(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://c:4318/v1/traces",
        )];
        assert_eq!(export_wanted(&env(&traces)), Ok(true));
        let off = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert_eq!(export_wanted(&env(&off)), Ok(false));
        let none = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ];
        assert_eq!(export_wanted(&env(&none)), Ok(false));
    }

    #[test]
    fn a_protocol_not_built_in_is_named() {
        let grpc = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        let e = export_wanted(&env(&grpc)).expect_err("grpc is not built in");
        assert!(e.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc"), "{e}");
        // The signal's own variable wins over the generic one.
        let fine = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ];
        assert_eq!(export_wanted(&env(&fine)), Ok(true));
    }
}
