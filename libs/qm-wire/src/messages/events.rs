//! Events: job state changes, preemptions and committed checkpoints.

use serde::{Deserialize, Serialize};

use crate::system::CheckpointCommit;

/// The header of a job or preemption event (live, and of a stored frame):
/// where in the scheduler's applied order it was produced, `a.b.i`.
pub const POSITION_HEADER: &str = "Qm-Position";

/// Where in the scheduler's applied order an event was produced: compared
/// as (`a`, `b`, `i`), numbers each.
pub type Position = (u64, u64, u64);

/// Parses an `a.b.i` position (None: not one).
pub fn parse_position(s: &str) -> Option<Position> {
    let mut it = s.split('.').map(|p| p.parse::<u64>().ok());
    let p = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(p)
}

/// Writes a position as its `a.b.i` text.
pub fn format_position(p: Position) -> String {
    format!("{}.{}.{}", p.0, p.1, p.2)
}

/// Published on `qm.v1.events.job.<queue>.<share>.<jobId>.<STATUS>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct JobStateChange {
    pub job_id: String,
    pub job_name: String,
    pub job_queue: String,
    pub quota_share_name: String,
    pub from: String,
    pub to: String,
    #[serde(default)]
    pub status_reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Milliseconds since the Unix epoch.
    pub at: u64,
}

/// Published on `qm.v1.events.preemption.<queue>.<share>.<jobId>.<phase>`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionEvent {
    pub job_id: String,
    pub attempt: u32,
    /// CROSS_SHARE | IN_SHARE | LIMIT_REDUCED
    #[schemars(extend("enum" = ["CROSS_SHARE", "IN_SHARE", "LIMIT_REDUCED", "BUDGET_EXHAUSTED", "REBALANCE"]))]
    pub kind: String,
    pub for_job_id: String,
    /// started | completed
    #[schemars(extend("enum" = ["started", "completed"]))]
    pub phase: String,
    pub at: u64,
}

/// Stored on `qm.v1.events.frames` (stream `QM_EVENTS`): job and preemption
/// events of the scheduler leader, consecutive and in the order they were
/// produced, many to a message. Each was also published live, unstored, on
/// its own subject. The message's `Qm-Position` header is its last event's
/// position: every event up to it is stored.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventFrame {
    pub events: Vec<FramedEvent>,
}

/// One event of an [`EventFrame`]: the subject it was published on, its
/// position (`a.b.i`, as its `Qm-Position` header said) and its payload (a
/// [`JobStateChange`] or a [`PreemptionEvent`], by the subject).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FramedEvent {
    pub subject: String,
    pub position: String,
    pub event: serde_json::Value,
}

impl EventFrame {
    /// Encodes a frame of events already encoded (subject, position,
    /// payload), without decoding any payload again. A payload that is not
    /// JSON is stored as null.
    pub fn encode<'a>(events: impl IntoIterator<Item = (&'a str, &'a str, &'a [u8])>) -> Vec<u8> {
        let mut out = b"{\"events\":[".to_vec();
        for (n, (subject, position, payload)) in events.into_iter().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            out.extend_from_slice(b"{\"subject\":");
            out.extend(serde_json::to_vec(subject).unwrap_or_default());
            out.extend_from_slice(b",\"position\":");
            out.extend(serde_json::to_vec(position).unwrap_or_default());
            out.extend_from_slice(b",\"event\":");
            if serde_json::from_slice::<serde::de::IgnoredAny>(payload).is_ok() {
                out.extend_from_slice(payload);
            } else {
                out.extend_from_slice(b"null");
            }
            out.push(b'}');
        }
        out.extend_from_slice(b"]}");
        out
    }
}

/// `ListEvents`: the stored events (stream `QM_EVENTS`, kept 7 days) the
/// caller may read, oldest first, from a cursor on. Job state changes,
/// preemptions and committed checkpoints of the shares the caller may read
/// (a team: its own shares; admins and readers: all), narrowed by the
/// optional queue, share and job.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListEvents {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota_share_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// A cursor this API returned (an event's `cursor`, or a page's
    /// `after`): the events stored after it. Absent: from the oldest event
    /// kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Without `after`: from the events stored since this time (ms since
    /// the Unix epoch) instead of the oldest kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<u64>,
    /// At most this many events (1-1000, default 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<u32>,
    /// When no event is there to return, wait up to this many seconds for
    /// one (0-20, default 0): a long poll.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_seconds: Option<u32>,
}

/// What kind of event a [`StoredEvent`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventKind {
    /// A job state change ([`JobStateChange`]).
    Job,
    /// A preemption started or completed ([`PreemptionEvent`]).
    Preemption,
    /// A checkpoint committed ([`CheckpointCommit`]).
    Checkpoint,
}

/// One stored event, as `ListEvents` returns it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoredEvent {
    /// Resume after this event: pass it as `after`.
    pub cursor: String,
    pub kind: EventKind,
    /// The subject it was published on live.
    pub subject: String,
    pub job_queue: String,
    pub quota_share_name: String,
    pub job_id: String,
    /// Its `Qm-Position` (job and preemption events; a checkpoint has
    /// none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<String>,
    /// The event: a [`JobStateChange`], a [`PreemptionEvent`] or a
    /// [`CheckpointCommit`], by `kind`.
    pub event: serde_json::Value,
}

impl StoredEvent {
    /// The job state change, when it is one.
    pub fn job(&self) -> Option<JobStateChange> {
        (self.kind == EventKind::Job)
            .then(|| serde_json::from_value(self.event.clone()).ok())
            .flatten()
    }

    /// The preemption, when it is one.
    pub fn preemption(&self) -> Option<PreemptionEvent> {
        (self.kind == EventKind::Preemption)
            .then(|| serde_json::from_value(self.event.clone()).ok())
            .flatten()
    }

    /// The committed checkpoint, when it is one.
    pub fn checkpoint(&self) -> Option<CheckpointCommit> {
        (self.kind == EventKind::Checkpoint)
            .then(|| serde_json::from_value(self.event.clone()).ok())
            .flatten()
    }
}

/// The answer to `ListEvents`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventPage {
    pub events: Vec<StoredEvent>,
    /// Resume here for the next page: past every event this page
    /// returned, and past the stored events it skipped (those the caller
    /// may not read or did not ask for), so a follower never reads them
    /// again. Equal to the request's `after` when nothing new was stored.
    pub after: String,
    /// True when the page ends at the newest event stored when it was
    /// read (ask again with `waitSeconds` to wait for more).
    pub caught_up: bool,
    /// True when events stored after the request's cursor have aged out
    /// of the stream (`eventsRetentionDays`) before they were read: the
    /// page goes on from the oldest kept, and what was between is lost.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gap: bool,
}

/// A place in the stored events: the `QM_EVENTS` message (`seq`), how many
/// of its events are behind (`index`), and the newest job or preemption
/// position behind it, so a republished event (one a new leader stored
/// again after a failover) is never returned twice. Written
/// `<seq>-<index>` or `<seq>-<index>-<a>.<b>.<i>`; clients treat it as
/// opaque.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventCursor {
    pub seq: u64,
    pub index: u32,
    pub position: Option<Position>,
}

impl EventCursor {
    pub fn parse(s: &str) -> Option<EventCursor> {
        let mut parts = s.splitn(3, '-');
        let seq = parts.next()?.parse().ok()?;
        let index = parts.next()?.parse().ok()?;
        let position = match parts.next() {
            Some(p) => Some(parse_position(p)?),
            None => None,
        };
        Some(EventCursor {
            seq,
            index,
            position,
        })
    }
}

impl std::fmt::Display for EventCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.seq, self.index)?;
        if let Some(p) = self.position {
            write!(f, "-{}", format_position(p))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_reads_back_what_it_wrote_and_refuses_anything_else() {
        for c in [
            EventCursor::default(),
            EventCursor {
                seq: 42,
                index: 7,
                position: Some((9, 0, 3)),
            },
        ] {
            assert_eq!(EventCursor::parse(&c.to_string()), Some(c));
        }
        assert_eq!(
            EventCursor::parse("42-7-9.0.3").map(|c| c.position),
            Some(Some((9, 0, 3)))
        );
        for bad in [
            "",
            "42",
            "x-1",
            "4-2-1.2",
            "4-2-1.2.3.4",
            "-1-1",
            "1-1-a.b.c",
        ] {
            assert_eq!(EventCursor::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn positions_parse_only_three_numbers() {
        assert_eq!(parse_position("1.2.3"), Some((1, 2, 3)));
        assert_eq!(format_position((1, 2, 3)), "1.2.3");
        for bad in ["", "1.2", "1.2.3.4", "1.x.3", "-1.2.3"] {
            assert_eq!(parse_position(bad), None, "{bad:?}");
        }
    }
}
