//! The log: applying an entry as it arrives, appending decisions (fenced),
//! and publishing what they cause: events on the events stream, commands
//! to executors (and sending those again until acknowledged).

use std::time::{Duration, Instant};

use qm_wire::subjects;
use qm_wire::system::{AttemptKey, ExecCommand, LogEntry};

use crate::state::{Effect, Effects};

use super::Runner;
use crate::stream::{ms_of, LeadError, AFTER_HEADER, POSITION_HEADER};

/// An event to store: subject, payload, headers (position and message id).
pub(super) type Event = (String, bytes::Bytes, async_nats::HeaderMap);

/// What the publisher task is given: an event, or a request to say when
/// every event given before it is stored (a snapshot waits for that, so
/// that no event it covers can be lost with a crash).
pub(super) enum Outbound {
    Event(Event),
    Flushed(tokio::sync::oneshot::Sender<()>),
}

/// How long a stored event waits for others to share its frame: under
/// load one message stores hundreds of events; live delivery never waits.
const FRAME_EVERY: Duration = Duration::from_millis(20);
/// Most events, and bytes, in one frame.
const FRAME_EVENTS: usize = 4096;
const FRAME_BYTES: usize = 512 * 1024;

/// Events waiting to be stored, as one frame.
#[derive(Default)]
struct Frame {
    events: Vec<(String, String, bytes::Bytes)>,
    bytes: usize,
    /// When its first event arrived.
    since: Option<tokio::time::Instant>,
}

impl Frame {
    fn push(&mut self, subject: String, position: String, payload: bytes::Bytes) {
        self.bytes += subject.len() + position.len() + payload.len() + 40;
        self.since.get_or_insert_with(tokio::time::Instant::now);
        self.events.push((subject, position, payload));
    }

    fn full(&self) -> bool {
        self.events.len() >= FRAME_EVENTS || self.bytes >= FRAME_BYTES
    }

    /// Stores the frame (until acknowledged; its message id, made of its
    /// first and last events' positions, keeps a frame sent again from
    /// doubling, while a new leader's frame republishing from the same
    /// position is never mistaken for a deposed leader's shorter one) and
    /// empties it.
    async fn store(&mut self, js: &async_nats::jetstream::Context) {
        let (Some(first), Some(last)) = (self.events.first(), self.events.last()) else {
            return;
        };
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(POSITION_HEADER, last.1.as_str());
        headers.insert(
            async_nats::header::NATS_MESSAGE_ID,
            format!("frame-{}-{}", first.1, last.1).as_str(),
        );
        let body = qm_wire::messages::EventFrame::encode(
            self.events
                .iter()
                .map(|(s, p, b)| (s.as_str(), p.as_str(), b.as_ref())),
        );
        let frame = (subjects::EVENT_FRAMES.to_string(), body.into(), headers);
        qm_service::nats::publish_batch_durably(js, vec![frame]).await;
        *self = Frame::default();
    }
}

/// Publishes each event live on its own subject at once, and stores them on
/// the events stream as frames (many events a message, in the order they
/// were produced; one frame acknowledged before the next is sent, so the
/// newest stored frame's position says every event up to it is stored).
/// Runs until the leader that feeds it is gone and its queue is empty.
pub(super) async fn publish_events(
    client: async_nats::Client,
    js: async_nats::jetstream::Context,
    mut queued: tokio::sync::mpsc::UnboundedReceiver<Outbound>,
) {
    let mut items = Vec::new();
    let mut frame = Frame::default();
    let mut flushed = Vec::new();
    let mut open = true;
    while open || !frame.events.is_empty() {
        let due = frame.since.map(|t| t + FRAME_EVERY);
        // None: the frame is due (nothing came before its time).
        let received = match due {
            _ if !open => Some(0),
            None => Some(queued.recv_many(&mut items, 1024).await),
            Some(due) => tokio::time::timeout_at(due, queued.recv_many(&mut items, 1024))
                .await
                .ok(),
        };
        if received == Some(0) {
            open = false; // the leader is gone and nothing is queued
        }
        for item in items.drain(..) {
            match item {
                Outbound::Event((subject, payload, headers)) => {
                    let position = headers
                        .get(POSITION_HEADER)
                        .map(|p| p.as_str().to_string())
                        .unwrap_or_default();
                    if let Err(e) = client
                        .publish_with_headers(subject.clone(), headers, payload.clone())
                        .await
                    {
                        tracing::warn!(error = %e, "event not published live");
                    }
                    frame.push(subject, position, payload);
                    if frame.full() {
                        frame.store(&js).await;
                    }
                }
                Outbound::Flushed(done) => flushed.push(done),
            }
        }
        let store_now =
            !open || !flushed.is_empty() || frame.since.is_some_and(|t| t.elapsed() >= FRAME_EVERY);
        if store_now {
            frame.store(&js).await;
            for done in flushed.drain(..) {
                let _ = done.send(());
            }
        }
    }
}

/// A command as the resend bookkeeping knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct SentCommand {
    executor: String,
    attempt: AttemptKey,
    start: bool,
}

impl Runner<'_> {
    /// Applies one entry that arrived live. False: another leader's
    /// decision arrived, so this one has been deposed.
    pub(super) async fn apply_message(
        &mut self,
        msg: &async_nats::jetstream::Message,
        live: bool,
    ) -> bool {
        let Ok(info) = msg.info() else {
            return true;
        };
        let (seq, at) = (info.stream_sequence, ms_of(&info));
        if msg.subject.as_str() == subjects::LOG_SCHED {
            if self.own.remove(&seq) {
                return true; // appended and applied by this leader
            }
            tracing::error!(seq, "another scheduler appended a decision");
            return false;
        }
        self.after = self.after.max(seq);
        self.positions.input(seq);
        self.upkeep.applied(1);
        let entry = serde_json::from_slice::<LogEntry>(&msg.payload)
            .map_err(|e| e.to_string())
            .and_then(|mut entry| {
                entry.bind_to_subject(msg.subject.as_str())?;
                Ok(entry)
            });
        match entry {
            Ok(entry) => {
                let submitted = crate::observe::Traces::submitted(&entry, msg.headers.as_ref());
                let registrations = matches!(
                    entry,
                    LogEntry::Register(_) | LogEntry::ExecutorLost { .. } | LogEntry::Leader { .. }
                );
                let fx = self.state.apply(entry, at);
                self.traces.keep(submitted, &self.state);
                if registrations {
                    self.refresh_acks();
                }
                self.dirty = true;
                if live {
                    self.publish(fx).await;
                }
            }
            Err(e) => {
                tracing::warn!(seq, subject = %msg.subject, error = %e, "log entry skipped: unreadable, or not allowed on its subject")
            }
        }
        true
    }

    pub(super) async fn subscribe(
        &self,
        subject: String,
    ) -> Result<async_nats::Subscriber, LeadError> {
        self.client
            .subscribe(subject.clone())
            .await
            .map_err(|source| LeadError::Subscribe { subject, source })
    }

    /// Appends a decision, fenced on the decisions subject. None: another
    /// leader appended one first, or the log is unreachable.
    pub(super) async fn append(&mut self, entry: &LogEntry) -> Option<u64> {
        let body = serde_json::to_vec(entry).ok()?;
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(
            "Nats-Expected-Last-Subject-Sequence",
            self.sched_seq.to_string().as_str(),
        );
        headers.insert(AFTER_HEADER, self.after.to_string().as_str());
        let ack = self
            .storage
            .js
            .publish_with_headers(subjects::LOG_SCHED, headers, body.into())
            .await
            .ok()?;
        match ack.await {
            Ok(ack) => {
                self.sched_seq = ack.sequence;
                self.own.insert(ack.sequence);
                self.upkeep.applied(1);
                self.positions.decision(self.after, ack.sequence);
                Some(ack.sequence)
            }
            Err(e) => {
                tracing::warn!(error = %e, "decision not stored");
                None
            }
        }
    }

    pub(super) async fn publish(&mut self, fx: Effects) {
        for effect in fx {
            if let Effect::Job(e, _) = &effect {
                self.metrics.event(&self.state, e);
                self.traces.event(e);
            }
            self.send(effect, false).await;
        }
    }

    pub(super) async fn send(&mut self, effect: Effect, resend: bool) {
        let mut headers = async_nats::HeaderMap::new();
        if effect.is_event() {
            let (a, b, i) = self.positions.next_event();
            let position = format!("{a}.{b}.{i}");
            // The position names the event: a subscriber tells one
            // republished after a failover by it.
            headers.insert(POSITION_HEADER, position.as_str());
        }
        let (subject, body) = match &effect {
            Effect::Job(e, subject) => (subject.clone(), serde_json::to_vec(e)),
            Effect::Preemption(e, subject) => (subject.clone(), serde_json::to_vec(e)),
            Effect::Command(executor, cmd) => {
                if !self.tenure.current() {
                    // Executors would refuse its epoch anyway; the leader
                    // that holds the lease sends its own.
                    return;
                }
                let (job, attempt, start) = match &**cmd {
                    ExecCommand::Start {
                        job_id, attempt, ..
                    } => (job_id, *attempt, true),
                    ExecCommand::Stop {
                        job_id, attempt, ..
                    }
                    | ExecCommand::Checkpoint {
                        job_id, attempt, ..
                    } => (job_id, *attempt, false),
                };
                let key = SentCommand {
                    executor: executor.clone(),
                    attempt: AttemptKey::new(job.clone(), attempt),
                    start,
                };
                if resend {
                    let wait = Duration::from_secs(self.settings.resend_seconds);
                    if self.sent.get(&key).is_some_and(|t| t.elapsed() < wait) {
                        return;
                    }
                    // Routine under load (a report still in flight): a
                    // counter, and the details at debug.
                    self.metrics.resent.inc();
                    tracing::debug!(job = %job, attempt, start, executor = %executor, "resending command");
                }
                self.sent.insert(key, Instant::now());
                let Ok(subject) = subjects::executor_command(executor) else {
                    return;
                };
                // The command continues the job's trace.
                if let Some(cx) = self.traces.of(job) {
                    qm_service::trace::inject_span(&cx, &mut headers);
                }
                (subject, serde_json::to_vec(cmd))
            }
        };
        let Ok(body) = body else { return };
        if effect.is_event() {
            // Events go out through the publisher: live at once, and stored
            // (acknowledged) at least once, in frames.
            let _ = self
                .events
                .send(Outbound::Event((subject, body.into(), headers)));
        } else if let Err(e) = self
            .client
            .publish_with_headers(subject, headers, body.into())
            .await
        {
            tracing::warn!(error = %e, "publish failed");
        }
    }

    pub(super) async fn resend(&mut self) {
        let fx: Vec<Effect> = self
            .state
            .unstarted()
            .into_iter()
            .chain(self.state.stops())
            .collect();
        for e in fx {
            self.send(e, true).await;
        }
        // Forget commands of attempts that have moved on.
        if self.sent.len() > 10_000 {
            self.sent
                .retain(|_, t| t.elapsed() < Duration::from_secs(60));
        }
    }
}
