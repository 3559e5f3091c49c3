//! Connecting to NATS and setting up the JetStream streams and buckets every
//! service relies on (idempotent: whichever service starts first creates
//! them), logging, and shutdown on SIGTERM.

use std::time::Duration;

use async_nats::header::NATS_MESSAGE_ID;
use backon::Retryable;

use async_nats::jetstream::{self, kv, stream};
use qm_wire::subjects;

use crate::settings::NatsSettings;

pub use qm_client::connect::{disconnects, violation_since, ConnectError};

/// The connection `settings` describe (empty settings are absent).
pub fn connection(
    settings: &NatsSettings,
    name: &str,
    wait: Option<Duration>,
) -> qm_client::Connect {
    let given = |v: &str| (!v.is_empty()).then(|| v.to_string());
    qm_client::Connect {
        url: settings.nats_url.clone(),
        principal: given(&settings.nats_principal),
        nkey_file: given(&settings.nats_nkey_file).map(Into::into),
        creds_file: given(&settings.nats_creds).map(Into::into),
        user: given(&settings.nats_user),
        password: given(&settings.nats_password),
        ca_file: given(&settings.nats_ca_file).map(Into::into),
        cert_file: given(&settings.nats_cert_file).map(Into::into),
        key_file: given(&settings.nats_key_file).map(Into::into),
        name: name.to_string(),
        wait,
    }
}

/// The principal a connection acts as: `natsPrincipal`, else the name in
/// the nkey file's header, else `natsUser`, else `anonymous`.
pub fn principal(settings: &NatsSettings) -> Result<String, ConnectError> {
    connection(settings, "", None).principal_name()
}

/// Connects as the principal `settings` name. Waits for the server while it
/// cannot be reached (up to `wait`, None: forever), but fails at once when
/// it refuses the credentials or TLS fails. After an outage the client
/// reconnects by itself (subscriptions are restored, publishes buffered).
pub async fn connect(
    settings: &NatsSettings,
    name: &str,
    wait: Option<Duration>,
) -> Result<(async_nats::Client, String), ConnectError> {
    connection(settings, name, wait).connect_nats().await
}

/// A stream or KV bucket JetStream could not create or open.
#[derive(Debug, thiserror::Error)]
#[error("cannot create {what} {name}: {source}")]
pub struct StorageError {
    pub what: &'static str,
    pub name: String,
    #[source]
    pub source: async_nats::Error,
}

/// Opens KV bucket `config.bucket`, creating it as configured when it is
/// not there yet.
pub async fn bucket(
    js: &jetstream::Context,
    config: kv::Config,
) -> Result<kv::Store, StorageError> {
    let name = config.bucket.clone();
    match js.get_key_value(&name).await {
        Ok(store) => Ok(store),
        Err(_) => match js.create_key_value(config).await {
            Ok(store) => Ok(store),
            // Another admission created it at the same moment.
            Err(create) => js.get_key_value(&name).await.map_err(|_| StorageError {
                what: "KV bucket",
                name,
                source: create.into(),
            }),
        },
    }
}

async fn create_stream(
    js: &jetstream::Context,
    config: stream::Config,
) -> Result<(), StorageError> {
    let name = config.name.clone();
    js.get_or_create_stream(config)
        .await
        .map(drop)
        .map_err(|e| StorageError {
            what: "stream",
            name,
            source: e.into(),
        })
}

/// How long what ages out is kept: the events stream, and the client
/// tokens (a retried submit finds its job while its token lives).
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    pub events: Duration,
    pub client_tokens: Duration,
    /// Finished jobs' records, once the scheduler let them go.
    pub archive: Duration,
    /// Audit records (every accepted write).
    pub audit: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            events: Duration::from_secs(7 * 24 * 3600),
            client_tokens: Duration::from_secs(24 * 3600),
            archive: Duration::from_secs(7 * 24 * 3600),
            audit: Duration::from_secs(400 * 24 * 3600),
        }
    }
}

/// Sets the stream's `max_age` to `age` if it is another (existing streams
/// and buckets take a changed retention at admission's next start).
async fn retain(js: &jetstream::Context, name: &str, age: Duration) -> Result<(), StorageError> {
    reconfigure(js, name, |config| {
        if config.max_age == age {
            return false;
        }
        tracing::info!(stream = name, from = ?config.max_age, to = ?age, "retention changed");
        config.max_age = age;
        // JetStream refuses a deduplication window longer than the age.
        if !age.is_zero() && config.duplicate_window > age {
            config.duplicate_window = age;
        }
        true
    })
    .await
}

/// Adds to stream `name` those of `want` it does not store (a subject that
/// an existing one already covers is left out: JetStream refuses
/// overlapping subjects).
async fn add_subjects(
    js: &jetstream::Context,
    name: &str,
    want: Vec<String>,
) -> Result<(), StorageError> {
    reconfigure(js, name, |config| {
        let missing: Vec<String> = want
            .into_iter()
            .filter(|w| !config.subjects.iter().any(|s| subject_covers(s, w)))
            .collect();
        if missing.is_empty() {
            return false;
        }
        tracing::info!(stream = name, added = ?missing, "stored subjects added");
        config.subjects.extend(missing);
        true
    })
    .await
}

/// Whether subject pattern `pattern` matches every subject `subject`
/// matches (`*` one token, `>` the rest).
fn subject_covers(pattern: &str, subject: &str) -> bool {
    let (mut p, mut s) = (pattern.split('.'), subject.split('.'));
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(t)) if t != ">" => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// Reads stream `name`'s configuration and stores it again if `change`
/// changed it (says true).
async fn reconfigure(
    js: &jetstream::Context,
    name: &str,
    change: impl FnOnce(&mut stream::Config) -> bool,
) -> Result<(), StorageError> {
    let failed = |e: async_nats::Error| StorageError {
        what: "stream",
        name: name.to_string(),
        source: e,
    };
    let mut stream = js.get_stream(name).await.map_err(|e| failed(e.into()))?;
    let mut config = stream
        .info()
        .await
        .map_err(|e| failed(e.into()))?
        .config
        .clone();
    if change(&mut config) {
        js.update_stream(config)
            .await
            .map_err(|e| failed(e.into()))?;
    }
    Ok(())
}

/// Creates (or opens) the log and events streams and the KV buckets, each
/// kept in `replicas` copies: what admission does at start (only its
/// identity may create them). Existing ones are opened as they are, but
/// for the retention of the events and of the client tokens.
pub async fn create_storage(
    client: &async_nats::Client,
    replicas: usize,
    retention: Retention,
) -> Result<(), StorageError> {
    let js = jetstream::new(client.clone());
    create_stream(
        &js,
        stream::Config {
            name: subjects::LOG_STREAM.into(),
            subjects: vec![subjects::all_log()],
            storage: stream::StorageType::File,
            // Deduplication window for idempotent appends (Nats-Msg-Id).
            duplicate_window: Duration::from_secs(120),
            num_replicas: replicas,
            ..Default::default()
        },
    )
    .await?;
    create_stream(
        &js,
        stream::Config {
            name: subjects::EVENTS_STREAM.into(),
            subjects: subjects::stored_events(),
            storage: stream::StorageType::File,
            max_age: retention.events,
            num_replicas: replicas,
            ..Default::default()
        },
    )
    .await?;
    create_stream(
        &js,
        stream::Config {
            name: subjects::ARCHIVE_STREAM.into(),
            subjects: vec![subjects::all_archived()],
            storage: stream::StorageType::File,
            max_age: retention.archive,
            // One record per job: a record archived again replaces it.
            max_messages_per_subject: 1,
            num_replicas: replicas,
            ..Default::default()
        },
    )
    .await?;
    create_stream(
        &js,
        stream::Config {
            name: subjects::AUDIT_STREAM.into(),
            subjects: vec![subjects::all_audit()],
            storage: stream::StorageType::File,
            max_age: retention.audit,
            // A record copied twice (a redelivery) is stored once.
            duplicate_window: Duration::from_secs(120),
            num_replicas: replicas,
            ..Default::default()
        },
    )
    .await?;
    if js
        .get_object_store(subjects::SNAPSHOT_BUCKET)
        .await
        .is_err()
    {
        let created = js
            .create_object_store(jetstream::object_store::Config {
                bucket: subjects::SNAPSHOT_BUCKET.into(),
                description: Some("the scheduler leader's snapshots of its state".into()),
                storage: stream::StorageType::File,
                num_replicas: replicas,
                ..Default::default()
            })
            .await;
        // Another admission may have created it at the same moment.
        if let Err(e) = created {
            js.get_object_store(subjects::SNAPSHOT_BUCKET)
                .await
                .map_err(|_| StorageError {
                    what: "object store",
                    name: subjects::SNAPSHOT_BUCKET.into(),
                    source: e.into(),
                })?;
        }
    }
    for (name, history, max_age) in [
        (subjects::CONFIG_BUCKET, 16, Duration::ZERO),
        (subjects::TOKENS_BUCKET, 1, retention.client_tokens),
        (subjects::LEADER_BUCKET, 1, Duration::ZERO),
    ] {
        bucket(
            &js,
            kv::Config {
                bucket: name.into(),
                history,
                max_age,
                storage: stream::StorageType::File,
                num_replicas: replicas,
                ..Default::default()
            },
        )
        .await?;
    }
    // Events are stored as frames since issue 34. A stream created before
    // gets the frames' subject added and keeps its own: a scheduler of an
    // earlier release may still lead, and it stores each event alone (it
    // would retry forever on a subject no stream stores). Once every
    // scheduler runs this release, an operator removes the old subjects
    // (docs/deploying.md); until then live events are stored twice.
    if let Err(e) = add_subjects(&js, subjects::EVENTS_STREAM, subjects::stored_events()).await {
        tracing::warn!(stream = subjects::EVENTS_STREAM, error = %e, "the stream's subjects not changed (rerun `qm auth` and reload the NATS servers if it was refused)");
    }
    // A changed retention that cannot be applied (e.g. the servers still
    // have the authorization of a version without it: rerun `qm auth`) is
    // reported, not fatal: admission serves with the retention as it is.
    for (name, age) in [
        (subjects::EVENTS_STREAM.to_string(), retention.events),
        (
            format!("KV_{}", subjects::TOKENS_BUCKET),
            retention.client_tokens,
        ),
        (subjects::ARCHIVE_STREAM.to_string(), retention.archive),
        (subjects::AUDIT_STREAM.to_string(), retention.audit),
    ] {
        if let Err(e) = retain(&js, &name, age).await {
            tracing::warn!(stream = %name, error = %e, "retention not changed (rerun `qm auth` and reload the NATS servers if it was refused)");
        }
    }
    Ok(())
}

/// [`create_storage`], retrying (with a log line) until JetStream answers.
pub async fn create_storage_with_retry(
    client: &async_nats::Client,
    replicas: usize,
    retention: Retention,
) {
    crate::retry::settled(
        (|| create_storage(client, replicas, retention))
            .retry(crate::retry::forever(Duration::from_millis(200)))
            .notify(|e, _| tracing::warn!(error = %e, "JetStream not ready; retrying"))
            .await,
    )
}

/// Opens a stream admission created, waiting (with a log line) until it
/// exists.
pub async fn open_stream(js: &jetstream::Context, name: &str) -> stream::Stream {
    until_there("stream", name, || js.get_stream(name)).await
}

/// Retries `open` with backoff (and a log line) until it succeeds.
async fn until_there<T, E, F, Fut>(what: &str, name: &str, open: F) -> T
where
    E: std::fmt::Display,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    crate::retry::settled(
        open.retry(crate::retry::forever(Duration::from_millis(200)))
            .notify(|e: &E, _| {
                tracing::warn!(what, name, error = %e, "not there yet (admission creates it); retrying")
            })
            .await,
    )
}

/// Opens a KV bucket admission created, waiting until it exists.
pub async fn open_bucket(js: &jetstream::Context, name: &str) -> kv::Store {
    until_there("KV bucket", name, || js.get_key_value(name)).await
}

/// What the scheduler reads and writes: the log, the leader lease, its
/// snapshots and the archive of finished jobs.
pub struct Storage {
    pub js: jetstream::Context,
    pub log: stream::Stream,
    pub leader: kv::Store,
    pub snapshots: jetstream::object_store::ObjectStore,
    pub archive: stream::Stream,
}

/// Opens the scheduler's [`Storage`], waiting for admission to create it.
pub async fn scheduler_storage(client: &async_nats::Client) -> Storage {
    let js = jetstream::new(client.clone());
    let log = open_stream(&js, subjects::LOG_STREAM).await;
    let leader = open_bucket(&js, subjects::LEADER_BUCKET).await;
    let snapshots = until_there("object store", subjects::SNAPSHOT_BUCKET, || {
        js.get_object_store(subjects::SNAPSHOT_BUCKET)
    })
    .await;
    let archive = open_stream(&js, subjects::ARCHIVE_STREAM).await;
    Storage {
        js,
        log,
        leader,
        snapshots,
        archive,
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
/// With `msg_id`, a retried append is stored once. Returns its sequence.
pub async fn append_durably(
    js: &jetstream::Context,
    subject: String,
    payload: bytes::Bytes,
    msg_id: Option<String>,
) -> u64 {
    let mut headers = async_nats::HeaderMap::new();
    if let Some(id) = &msg_id {
        headers.insert(NATS_MESSAGE_ID, id.as_str());
    }
    publish_durably(js, subject, payload, headers).await
}

/// One entry for [`append_batch_durably`]: subject, payload, message id.
pub type Append = (String, bytes::Bytes, String);

/// Appends several entries, pipelined: all are sent, then their
/// acknowledgements awaited in order; any that failed is appended again
/// (durably, in order; its message id keeps a stored one from doubling).
pub async fn append_batch_durably(js: &jetstream::Context, batch: Vec<Append>) {
    let batch = batch
        .into_iter()
        .map(|(subject, payload, id)| {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(NATS_MESSAGE_ID, id.as_str());
            (subject, payload, headers)
        })
        .collect();
    publish_batch_durably(js, batch).await;
}

/// [`append_batch_durably`] with headers of the caller's own; they must
/// include a `Nats-Msg-Id` unique to the entry, so that an entry stored
/// but not acknowledged is not stored twice when it is sent again.
pub async fn publish_batch_durably(
    js: &jetstream::Context,
    batch: Vec<(String, bytes::Bytes, async_nats::HeaderMap)>,
) {
    publish_windowed_durably(js, batch, usize::MAX).await;
}

/// [`publish_batch_durably`] with at most `window` messages awaiting their
/// acknowledgement at a time: a large batch (the archive's) is then fed to
/// the server at the pace it stores it, interleaved with everyone else's
/// messages, instead of queued ahead of them all at once.
pub async fn publish_windowed_durably(
    js: &jetstream::Context,
    batch: Vec<(String, bytes::Bytes, async_nats::HeaderMap)>,
    window: usize,
) {
    type Pending = (
        String,
        bytes::Bytes,
        async_nats::HeaderMap,
        Result<jetstream::context::PublishAckFuture, jetstream::context::PublishError>,
    );
    async fn settle(
        pending: Pending,
        failed: &mut Vec<(String, bytes::Bytes, async_nats::HeaderMap)>,
    ) {
        let (subject, payload, headers, ack) = pending;
        let stored = match ack {
            Ok(ack) => ack.await.is_ok(),
            Err(_) => false,
        };
        if !stored {
            failed.push((subject, payload, headers));
        }
    }
    let window = window.max(1);
    let mut pending = std::collections::VecDeque::with_capacity(batch.len().min(window));
    let mut failed = Vec::new();
    for (subject, payload, headers) in batch {
        if pending.len() >= window {
            if let Some(oldest) = pending.pop_front() {
                settle(oldest, &mut failed).await;
            }
        }
        let ack = js
            .publish_with_headers(subject.clone(), headers.clone(), payload.clone())
            .await;
        pending.push_back((subject, payload, headers, ack));
    }
    for p in pending {
        settle(p, &mut failed).await;
    }
    for (subject, payload, headers) in failed {
        publish_durably(js, subject, payload, headers).await;
    }
}

/// Publishes to a stream until the server acknowledges it (retrying with
/// backoff), with the caller's headers (a `Nats-Msg-Id` among them makes a
/// retry stored once). Returns the stored sequence.
async fn publish_durably(
    js: &jetstream::Context,
    subject: String,
    payload: bytes::Bytes,
    headers: async_nats::HeaderMap,
) -> u64 {
    let publish = || async {
        match js
            .publish_with_headers(subject.clone(), headers.clone(), payload.clone())
            .await
        {
            Ok(ack) => ack.await.map(|a| a.sequence).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    crate::retry::settled(
        publish
            .retry(crate::retry::forever(Duration::from_millis(100)))
            .notify(|e: &String, _| {
                tracing::warn!(%subject, error = %e, "append to a stream failed; retrying")
            })
            .await,
    )
}

#[cfg(test)]
mod tests {
    use super::subject_covers;

    #[test]
    fn a_stream_subject_covers_what_its_wildcards_match() {
        assert!(subject_covers("qm.v1.events.>", "qm.v1.events.frames"));
        assert!(subject_covers(
            "qm.v1.events.>",
            "qm.v1.events.checkpoint.>"
        ));
        assert!(subject_covers(
            "qm.v1.events.checkpoint.>",
            "qm.v1.events.checkpoint.>"
        ));
        assert!(subject_covers("qm.v1.events.*", "qm.v1.events.frames"));
        assert!(subject_covers("qm.v1.events.frames", "qm.v1.events.frames"));
        assert!(!subject_covers("qm.v1.events.job.>", "qm.v1.events.frames"));
        assert!(!subject_covers(
            "qm.v1.events.*",
            "qm.v1.events.checkpoint.>"
        ));
        assert!(!subject_covers("qm.v1.events.frames", "qm.v1.events.>"));
        assert!(!subject_covers("qm.v1.events", "qm.v1.events.frames"));
    }
}
