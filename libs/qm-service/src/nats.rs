//! Connecting to NATS and setting up the JetStream streams and buckets every
//! service relies on (idempotent: whichever service starts first creates
//! them), logging, and shutdown on SIGTERM.

use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use qm_wire::subjects;

/// Structured logs (`tracing`) to stderr. `RUST_LOG` filters (default
/// `info`); `QM_LOG_FORMAT=json` writes one JSON object per line.
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("QM_LOG_FORMAT").as_deref() == Ok("json") {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// Connects, retrying until the server is up; after an outage the client
/// reconnects by itself (subscriptions are restored, publishes are buffered).
pub async fn connect(
    url: &str,
    name: &str,
) -> Result<async_nats::Client, async_nats::ConnectError> {
    let name = name.to_string();
    async_nats::ConnectOptions::new()
        .name(&name)
        .retry_on_initial_connect()
        .max_reconnects(None)
        .event_callback(move |event| {
            let name = name.clone();
            async move {
                match event {
                    async_nats::Event::Connected => {
                        tracing::info!(service = %name, "connected to NATS")
                    }
                    async_nats::Event::Disconnected => {
                        tracing::warn!(service = %name, "disconnected from NATS; reconnecting")
                    }
                    other => tracing::debug!(service = %name, event = %other, "NATS event"),
                }
            }
        })
        .connect(url)
        .await
}

/// The durable storage of Quartermaster.
pub struct Storage {
    pub js: jetstream::Context,
    pub log: stream::Stream,
    pub config: kv::Store,
    pub tokens: kv::Store,
    pub leader: kv::Store,
}

/// Errors setting up or using JetStream, as one message.
pub type StorageError = Box<dyn std::error::Error + Send + Sync>;

async fn bucket(js: &jetstream::Context, config: kv::Config) -> Result<kv::Store, StorageError> {
    let name = config.bucket.clone();
    match js.get_key_value(&name).await {
        Ok(store) => Ok(store),
        Err(_) => match js.create_key_value(config).await {
            Ok(store) => Ok(store),
            // Another service created it at the same moment.
            Err(create) => js
                .get_key_value(&name)
                .await
                .map_err(|_| format!("cannot create KV bucket {name}: {create}").into()),
        },
    }
}

/// Creates (or opens) the log and events streams and the KV buckets.
pub async fn storage(client: &async_nats::Client) -> Result<Storage, StorageError> {
    let js = jetstream::new(client.clone());
    let log = js
        .get_or_create_stream(stream::Config {
            name: subjects::LOG_STREAM.into(),
            subjects: vec![format!("{}.>", subjects::LOG_PREFIX)],
            storage: stream::StorageType::File,
            // Deduplication window for idempotent appends (Nats-Msg-Id).
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        })
        .await?;
    js.get_or_create_stream(stream::Config {
        name: subjects::EVENTS_STREAM.into(),
        subjects: vec!["qm.v1.events.>".into()],
        storage: stream::StorageType::File,
        max_age: Duration::from_secs(7 * 24 * 3600),
        ..Default::default()
    })
    .await?;
    let config = bucket(
        &js,
        kv::Config {
            bucket: subjects::CONFIG_BUCKET.into(),
            history: 16,
            storage: stream::StorageType::File,
            ..Default::default()
        },
    )
    .await?;
    let tokens = bucket(
        &js,
        kv::Config {
            bucket: subjects::TOKENS_BUCKET.into(),
            storage: stream::StorageType::File,
            ..Default::default()
        },
    )
    .await?;
    let leader = bucket(
        &js,
        kv::Config {
            bucket: subjects::LEADER_BUCKET.into(),
            storage: stream::StorageType::File,
            ..Default::default()
        },
    )
    .await?;
    Ok(Storage {
        js,
        log,
        config,
        tokens,
        leader,
    })
}

/// Like [`storage`], retrying (with a log line) until JetStream answers.
pub async fn storage_with_retry(client: &async_nats::Client) -> Storage {
    let mut delay = Duration::from_millis(200);
    loop {
        match storage(client).await {
            Ok(s) => return s,
            Err(e) => {
                tracing::warn!(error = %e, "JetStream not ready; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Resolves on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending::<()>().await,
    }
}

/// Appends `payload` to the log on `subject`, retrying transient failures
/// until the server acknowledges it (a NATS outage delays, never loses, it).
/// With `msg_id`, a retried append is stored once.
pub async fn append_durably(
    js: &jetstream::Context,
    subject: String,
    payload: bytes::Bytes,
    msg_id: Option<String>,
) -> u64 {
    let mut delay = Duration::from_millis(100);
    loop {
        let mut headers = async_nats::HeaderMap::new();
        if let Some(id) = &msg_id {
            headers.insert("Nats-Msg-Id", id.as_str());
        }
        let result = match js
            .publish_with_headers(subject.clone(), headers, payload.clone())
            .await
        {
            Ok(ack) => ack.await.map(|a| a.sequence).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(seq) => return seq,
            Err(e) => {
                tracing::warn!(%subject, error = %e, "append to the log failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// One entry for [`append_batch_durably`]: subject, payload, message id.
pub type Append = (String, bytes::Bytes, String);

/// Appends several entries, pipelined: all are sent, then their
/// acknowledgements awaited in order; any that failed is appended again
/// (durably, in order; its message id keeps a stored one from doubling).
pub async fn append_batch_durably(js: &jetstream::Context, batch: Vec<Append>) {
    let mut pending = Vec::with_capacity(batch.len());
    for (subject, payload, id) in batch {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert("Nats-Msg-Id", id.as_str());
        let ack = js
            .publish_with_headers(subject.clone(), headers, payload.clone())
            .await;
        pending.push((subject, payload, id, ack));
    }
    let mut failed = Vec::new();
    for (subject, payload, id, ack) in pending {
        let stored = match ack {
            Ok(ack) => ack.await.is_ok(),
            Err(_) => false,
        };
        if !stored {
            failed.push((subject, payload, id));
        }
    }
    for (subject, payload, id) in failed {
        append_durably(js, subject, payload, Some(id)).await;
    }
}
