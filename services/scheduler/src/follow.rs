//! A hot standby: a scheduler that does not lead keeps its own copy of the
//! leader's state by following the log as it is written, so that taking
//! over costs the entries of the last moments, not a snapshot load and a
//! replay of everything after it (ADR 0011).
//!
//! A follower loads the newest readable snapshot, then reads the log after
//! its cut through an ordered consumer and feeds every entry to a
//! [`Replay`], exactly as a leader rebuilding from cold does; when it wins
//! the lease it reads up to the log's last entry and hands the state to the
//! leader's loop ([`crate::runner`]), with the consumer still open. A cold
//! start is the same thing with no time spent following.
//!
//! The replay keeps every event it produces, for the new leader to
//! republish those the old one had not yet stored. While following, the
//! follower asks every two seconds where the stored events end and drops
//! those before it, so what it holds is the events of a few seconds.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::stream::LastRawMessageErrorKind;
use futures::StreamExt;
use qm_service::nats::Storage;
use qm_wire::subjects;
use qm_wire::system::LogEntry;
use tokio::time::Instant;

use crate::state::{Cut, Logged, Position, Positions, Replay, State};
use crate::stream::{log_error, parse_position, LeadError, AFTER_HEADER, POSITION_HEADER};

/// How often a follower drops the events the leader has stored.
const PRUNE_EVERY: Duration = Duration::from_secs(2);

fn events_error(e: impl Into<async_nats::Error>) -> LeadError {
    LeadError::Events(e.into())
}

/// The state rebuilt so far from the newest snapshot and the log after it.
pub struct Follower {
    pub state: State,
    pub traces: crate::observe::Traces,
    /// Sequence of the last non-decision entry read (`Qm-After`).
    pub after: u64,
    /// Sequence of the last decision read (the fence).
    pub sched_seq: u64,
    /// The log, read from the snapshot's cut on.
    pub messages: pull::Ordered,
    /// Snapshots found damaged when this follower started.
    pub damaged: Vec<String>,
    /// The snapshot's cut (the default when it started from the empty
    /// state).
    pub cut: Cut,
    /// The first log entry read.
    pub from: u64,
    /// The last log entry read.
    pub seq: u64,
    /// The replay in progress; its events are kept until the stored
    /// events show them published ([`Replay::finish_after`] at takeover).
    pub replay: Replay,
    /// When this follower started (loading the snapshot).
    pub started: std::time::Instant,
    last_prune: Instant,
}

impl Follower {
    /// Loads the newest readable snapshot and opens the log after its cut.
    pub async fn start(storage: &Storage) -> Result<Follower, LeadError> {
        let started = std::time::Instant::now();
        let mut log = storage.log.clone();
        let first = log.info().await.map_err(log_error)?.state.first_sequence;
        let found = crate::snapshot::load_newest(&storage.snapshots, first).await?;
        let mut state = State::default();
        let mut traces = crate::observe::Traces::default();
        let (cut, positions) = match found.loaded {
            Some(l) => {
                tracing::info!(
                    snapshot = %l.name, jobs = l.header.jobs, bytes = l.header.body_bytes,
                    taken_by = %l.header.holder, ms = started.elapsed().as_millis() as u64,
                    "snapshot loaded"
                );
                traces.import(&l.image.traces, &l.image.state);
                state = l.image.state;
                (l.header.cut, l.header.positions)
            }
            None => (Cut::default(), Positions::default()),
        };
        let from = crate::snapshot::needs_from(cut);
        let consumer = log
            .create_consumer(pull::OrderedConfig {
                deliver_policy: DeliverPolicy::ByStartSequence {
                    start_sequence: from,
                },
                ..Default::default()
            })
            .await
            .map_err(log_error)?;
        let messages = consumer.messages().await.map_err(log_error)?;
        Ok(Follower {
            state,
            traces,
            after: cut.after,
            sched_seq: cut.sched,
            messages,
            damaged: found.damaged,
            cut,
            from,
            seq: from - 1,
            // Every event is kept until the stored events show it was
            // published (pruned while following, settled at takeover).
            replay: Replay::new(cut, positions, Some((0, 0, 0))),
            started,
            last_prune: Instant::now(),
        })
    }

    /// Log entries read since the snapshot's cut.
    pub fn entries(&self) -> u64 {
        self.seq.saturating_sub(self.from - 1)
    }

    /// Reads the next entry as it arrives, or drops the events already
    /// stored when that is due. Cancel-safe: an entry is applied whole or
    /// not read.
    pub async fn step(&mut self, js: &async_nats::jetstream::Context) -> Result<(), LeadError> {
        tokio::select! {
            msg = self.messages.next() => {
                let msg = msg.ok_or(LeadError::LogEnded("while following"))?.map_err(log_error)?;
                self.read(&msg)
            }
            _ = tokio::time::sleep_until(self.last_prune + PRUNE_EVERY) => {
                // An idle log keeps no events: nothing to ask NATS about.
                if self.replay.keeps_events() {
                    let published = last_published(js).await?;
                    self.replay.prune(published);
                }
                self.last_prune = Instant::now();
                Ok(())
            }
        }
    }

    /// Reads the log up to its last entry now.
    pub async fn catch_up(&mut self, storage: &Storage) -> Result<(), LeadError> {
        let mut log = storage.log.clone();
        let last = log.info().await.map_err(log_error)?.state.last_sequence;
        while self.seq < last {
            let Some(msg) = self.messages.next().await else {
                return Err(LeadError::LogEnded("during replay"));
            };
            self.read(&msg.map_err(log_error)?)?;
        }
        Ok(())
    }

    fn read(&mut self, msg: &async_nats::jetstream::Message) -> Result<(), LeadError> {
        let info = msg.info().map_err(log_error)?;
        let at = info.stream_sequence;
        if at != self.seq + 1 {
            return Err(LeadError::Gap {
                from: self.seq,
                to: at,
            });
        }
        self.seq = at;
        if let Some(logged) = self.logged(msg) {
            let submitted = crate::observe::Traces::submitted(&logged.entry, msg.headers.as_ref());
            self.replay.push(&mut self.state, logged);
            self.traces.keep(submitted, &self.state);
        }
        Ok(())
    }

    /// A stored entry as a replay reads it (None: unreadable, skipped).
    fn logged(&mut self, msg: &async_nats::jetstream::Message) -> Option<Logged> {
        let info = msg.info().ok()?;
        let (seq, at) = (info.stream_sequence, crate::stream::ms_of(&info));
        let decision = msg.subject.as_str() == subjects::LOG_SCHED;
        if decision {
            self.sched_seq = self.sched_seq.max(seq);
        } else {
            self.after = self.after.max(seq);
        }
        let entry = match serde_json::from_slice::<LogEntry>(&msg.payload) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(seq, subject = %msg.subject, error = %e, "unreadable log entry skipped");
                return None;
            }
        };
        let mut entry = entry;
        if let Err(e) = entry.bind_to_subject(msg.subject.as_str()) {
            tracing::warn!(seq, subject = %msg.subject, error = %e, "log entry refused: its subject does not allow it");
            return None;
        }
        let after = decision.then(|| {
            msg.headers
                .as_ref()
                .and_then(|h| h.get(AFTER_HEADER))
                .and_then(|v| v.as_str().parse().ok())
                .unwrap_or(0)
        });
        Some(Logged {
            seq,
            after,
            entry,
            at,
        })
    }
}

/// How many of the newest stored events [`last_published`] reads one by
/// one before it asks NATS for the last matching one instead.
const WALK_BACK: u64 = 1024;

/// The position of the newest job or preemption event stored (a frame's
/// position is its last event's). When the
/// events stream has never stored anything, no leader ever published:
/// every event of the log is due (the position before the first), so
/// submits stored before the first leader started are announced too. When
/// events were stored but none is left (aged out), nothing is known to
/// be missing: None, and nothing is republished.
///
/// It reads the stream backwards from its last message, by sequence (a
/// lookup by index), until one is a job or preemption event: nearly
/// always the last message itself, as only checkpoint events interleave.
/// Asking NATS for the last message matching the two wildcard subjects
/// instead costs a scan of the stream's subjects, which grows with its
/// size: with the events of a million jobs stored, each such ask took
/// seconds of the server's time, and a standby asks every two seconds.
/// That ask is kept only for a stream whose last [`WALK_BACK`] messages
/// are all checkpoint events.
pub async fn last_published(
    js: &async_nats::jetstream::Context,
) -> Result<Option<Position>, LeadError> {
    let mut stream = js
        .get_stream(subjects::EVENTS_STREAM)
        .await
        .map_err(events_error)?;
    let info = stream.info().await.map_err(events_error)?;
    let (state, stored) = (info.state.clone(), info.config.subjects.clone());
    if state.last_sequence == 0 {
        return Ok(Some((0, 0, 0)));
    }
    if state.messages == 0 {
        return Ok(None);
    }
    // A frame, or an event stored one a message (before issue 34).
    let scheduler_event = |subject: &str| {
        subject == subjects::EVENT_FRAMES
            || [subjects::JOB_EVENTS, subjects::PREEMPTION_EVENTS]
                .iter()
                .any(|p| subject.strip_prefix(p).is_some_and(|r| r.starts_with('.')))
    };
    let lowest = state
        .first_sequence
        .max(state.last_sequence.saturating_sub(WALK_BACK - 1));
    for seq in (lowest..=state.last_sequence).rev() {
        match stream.get_raw_message(seq).await {
            Ok(msg) if scheduler_event(msg.subject.as_str()) => {
                return Ok(position_of(msg.headers.get(POSITION_HEADER)));
            }
            Ok(_) => {}
            // Deleted (or aged out since the info was read).
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => {}
            Err(e) => return Err(events_error(e)),
        }
    }
    if lowest == state.first_sequence {
        return Ok(None);
    }
    let mut consumer = stream
        .create_consumer(pull::OrderedConfig {
            deliver_policy: DeliverPolicy::Last,
            // Only subjects the stream stores (JetStream refuses a filter
            // outside them): frames, and events one a message where an
            // older stream still stores them.
            filter_subjects: subjects::all_job_and_preemption_events()
                .into_iter()
                .chain([subjects::EVENT_FRAMES.to_string()])
                .filter(|f| {
                    stored
                        .iter()
                        .any(|s| s == f || s == "qm.v1.events.>" || s == ">")
                })
                .collect(),
            ..Default::default()
        })
        .await
        .map_err(events_error)?;
    if consumer.info().await.map_err(events_error)?.num_pending == 0 {
        return Ok(None);
    }
    let mut messages = consumer.messages().await.map_err(events_error)?;
    let msg = tokio::time::timeout(Duration::from_secs(10), messages.next())
        .await
        .map_err(|_| events_error("the last stored event did not arrive in 10 s"))?
        .ok_or_else(|| events_error("the events consumer ended"))?
        .map_err(events_error)?;
    Ok(position_of(
        msg.headers.as_ref().and_then(|h| h.get(POSITION_HEADER)),
    ))
}

fn position_of(header: Option<&async_nats::HeaderValue>) -> Option<Position> {
    header.and_then(|v| parse_position(v.as_str()))
}
