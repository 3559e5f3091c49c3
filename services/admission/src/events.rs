//! `ListEvents`: the stored events a caller may read, from a cursor on
//! (ADR 0022). The scheduler leader stores job and preemption events many
//! to a message (frames on `qm.v1.events.frames`, ADR 0019) and the
//! checkpoint services store each commit on its own subject, all in the
//! stream `QM_EVENTS`; frames hold every team's events, so no team may read
//! the stream itself. Admission reads it for them and returns only the
//! events of the shares the caller may read, each with a cursor to resume
//! after it: an integration that keeps the cursor of the last event it
//! handled (in the same transaction as what it did with it) misses none and
//! handles none twice across its own restarts.

use std::time::Duration;

use async_nats::jetstream::consumer::{pull, DeliverPolicy};
use async_nats::jetstream::stream::Stream;
use futures::StreamExt;
use qm_service::api;
use qm_tenancy::authorize_read;
use qm_wire::messages::{
    parse_position, ApiError, Caller, ErrorCode, EventCursor, EventKind, EventPage, ListEvents,
    StoredEvent,
};
use qm_wire::subjects;
use serde_json::value::RawValue;

/// The most events one page returns, and its default.
const MAX_RESULTS: u32 = 1000;
const DEFAULT_RESULTS: u32 = 100;
/// The longest a request may wait for an event.
const MAX_WAIT_SECONDS: u32 = 20;
/// How long one page may read before it returns what it has (the cursor
/// moved past what it read): a caller far behind catches up page by page.
const READ_BUDGET: Duration = Duration::from_secs(2);
/// About the most a page's reply holds, well under NATS's 1 MiB message.
const MAX_PAGE_BYTES: usize = 512 * 1024;
/// How many `ListEvents` requests admission reads for at once, in all and
/// per principal: more are asked to try again (TRANSIENT).
const MAX_READS: usize = 64;
const MAX_READS_PER_PRINCIPAL: usize = 4;

/// The `ListEvents` requests in flight, per principal.
#[derive(Default)]
pub struct Reads(std::sync::Mutex<std::collections::HashMap<String, usize>>);

/// One request's place among [`Reads`], given back when dropped.
pub struct Read<'a> {
    reads: &'a Reads,
    principal: String,
}

impl Reads {
    /// A place for `principal`'s request, or TRANSIENT when too many are
    /// in flight.
    pub fn start(&self, principal: &str) -> Result<Read<'_>, ApiError> {
        let mut m = self
            .0
            .lock()
            .map_err(|_| api::error(ErrorCode::Internal, "reads poisoned"))?;
        let total: usize = m.values().sum();
        let mine = m.get(principal).copied().unwrap_or(0);
        if total >= MAX_READS || mine >= MAX_READS_PER_PRINCIPAL {
            return Err(api::error(
                ErrorCode::Transient,
                format!(
                    "too many event reads in flight ({total} in all, {mine} of principal {principal:?}; at most {MAX_READS} and {MAX_READS_PER_PRINCIPAL}); try again"
                ),
            ));
        }
        *m.entry(principal.to_string()).or_default() += 1;
        Ok(Read {
            reads: self,
            principal: principal.to_string(),
        })
    }
}

impl Drop for Read<'_> {
    fn drop(&mut self) {
        if let Ok(mut m) = self.reads.0.lock() {
            if let Some(n) = m.get_mut(&self.principal) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&self.principal);
                }
            }
        }
    }
}

fn transient(e: impl std::fmt::Display) -> ApiError {
    api::error(
        ErrorCode::Transient,
        format!("the stored events cannot be read now: {e}; try again"),
    )
}

/// The request checked: its limits, its cursor, and that the caller may
/// read the queue and share it names.
fn check(caller: &Caller, req: &ListEvents) -> Result<(u32, u32, EventCursor), ApiError> {
    let mut problems = Vec::new();
    let max = req.max_results.unwrap_or(DEFAULT_RESULTS);
    if !(1..=MAX_RESULTS).contains(&max) {
        problems.push(api::problem(
            "maxResults",
            format!("must be 1-{MAX_RESULTS}, not {max}"),
        ));
    }
    let wait = req.wait_seconds.unwrap_or(0);
    if wait > MAX_WAIT_SECONDS {
        problems.push(api::problem(
            "waitSeconds",
            format!("must be 0-{MAX_WAIT_SECONDS}, not {wait}"),
        ));
    }
    let cursor = match &req.after {
        None => EventCursor::default(),
        Some(a) => EventCursor::parse(a).unwrap_or_else(|| {
            problems.push(api::problem(
                "after",
                format!("{a:?} is not a cursor this API returned"),
            ));
            EventCursor::default()
        }),
    };
    if req.quota_share_name.is_some() && req.job_queue.is_none() {
        problems.push(api::problem("quotaShareName", "needs jobQueue"));
    }
    for (field, value) in [
        ("jobQueue", &req.job_queue),
        ("quotaShareName", &req.quota_share_name),
        ("jobId", &req.job_id),
    ] {
        if let Some(Err(e)) = value.as_deref().map(subjects::token) {
            problems.push(api::problem(field, e.to_string()));
        }
    }
    if !problems.is_empty() {
        return Err(api::invalid("invalid ListEvents request", problems));
    }
    if let Some(queue) = &req.job_queue {
        authorize_read(caller, queue, req.quota_share_name.as_deref())
            .map_err(crate::errors::denied)?;
    }
    Ok((max, wait, cursor))
}

/// The stream subjects a request reads: every frame (they mix shares) and
/// the checkpoint commits it could want.
fn filter(req: &ListEvents) -> Vec<String> {
    let token = |v: &Option<String>| v.clone().unwrap_or_else(|| "*".into());
    vec![
        subjects::EVENT_FRAMES.to_string(),
        format!(
            "{}.{}.{}.{}",
            subjects::CHECKPOINT_EVENTS,
            token(&req.job_queue),
            token(&req.quota_share_name),
            token(&req.job_id)
        ),
    ]
}

/// The kind, queue, share and job of an event published on `subject`.
fn parse_subject(subject: &str) -> Option<(EventKind, &str, &str, &str)> {
    let mut t = subject.split('.');
    let (_, _, _, kind) = (t.next()?, t.next()?, t.next()?, t.next()?);
    let kind = match kind {
        "job" => EventKind::Job,
        "preemption" => EventKind::Preemption,
        "checkpoint" => EventKind::Checkpoint,
        _ => return None,
    };
    Some((kind, t.next()?, t.next()?, t.next()?))
}

/// Reads pages of events for one request.
struct Page<'a> {
    caller: &'a Caller,
    req: &'a ListEvents,
    max: usize,
    /// Where the page stands: past every event it has read.
    cursor: EventCursor,
    out: Vec<StoredEvent>,
    /// About how large the page's reply is so far.
    bytes: usize,
}

/// A stored frame, its events' payloads left unparsed.
#[derive(serde::Deserialize)]
struct RawFrame<'a> {
    #[serde(borrow)]
    events: Vec<RawFramed<'a>>,
}

#[derive(serde::Deserialize)]
struct RawFramed<'a> {
    #[serde(borrow)]
    subject: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    position: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    event: &'a RawValue,
}

impl Page<'_> {
    fn wanted(&self, queue: &str, share: &str, job: &str) -> bool {
        (qm_tenancy::sees_all(self.caller) || qm_tenancy::owns(self.caller, queue, share))
            && self.req.job_queue.as_deref().is_none_or(|q| q == queue)
            && self
                .req
                .quota_share_name
                .as_deref()
                .is_none_or(|s| s == share)
            && self.req.job_id.as_deref().is_none_or(|j| j == job)
    }

    /// Takes in the events of the stored message `seq` (a frame, or one
    /// checkpoint commit). False once the page is full, by count or by
    /// size (the cursor then stands just past its last event, inside the
    /// message if it has more).
    fn take(&mut self, seq: u64, subject: &str, payload: &[u8]) -> bool {
        // Only the subjects are read for every event; a payload is decoded
        // only for an event the caller gets.
        let frame;
        let events: Vec<(&str, Option<&str>, &RawValue)> = if subject == subjects::EVENT_FRAMES {
            match serde_json::from_slice::<RawFrame>(payload) {
                Ok(f) => {
                    frame = f;
                    frame
                        .events
                        .iter()
                        .map(|e| (e.subject.as_ref(), Some(e.position.as_ref()), e.event))
                        .collect()
                }
                Err(e) => {
                    // The scheduler never writes one: a damaged message.
                    tracing::error!(seq, error = %e, "an unreadable event frame skipped");
                    Vec::new()
                }
            }
        } else {
            match serde_json::from_slice::<&RawValue>(payload) {
                Ok(event) => vec![(subject, None, event)],
                Err(e) => {
                    tracing::error!(seq, %subject, error = %e, "an unreadable stored event skipped");
                    Vec::new()
                }
            }
        };
        let count = events.len() as u32;
        for (index, (subject, position, event)) in events.into_iter().enumerate() {
            let index = index as u32;
            if (seq, index) < (self.cursor.seq, self.cursor.index) {
                continue; // returned before
            }
            let mut next = EventCursor {
                seq,
                index: index + 1,
                position: self.cursor.position,
            };
            if let Some(p) = position.and_then(parse_position) {
                if next.position.is_some_and(|seen| p <= seen) {
                    self.cursor = next;
                    continue; // a republished event: returned before
                }
                next.position = Some(p);
            }
            let wanted = parse_subject(subject)
                .filter(|(_, queue, share, job)| self.wanted(queue, share, job));
            let Some((kind, queue, share, job)) = wanted else {
                self.cursor = next;
                continue;
            };
            let size = event.get().len() + 2 * subject.len() + 160;
            if !self.out.is_empty() && self.bytes + size > MAX_PAGE_BYTES {
                return false; // the next page starts with this event
            }
            self.cursor = next;
            self.bytes += size;
            self.out.push(StoredEvent {
                cursor: next.to_string(),
                kind,
                job_queue: queue.to_string(),
                quota_share_name: share.to_string(),
                job_id: job.to_string(),
                subject: subject.to_string(),
                position: position.map(String::from),
                event: serde_json::from_str(event.get()).unwrap_or(serde_json::Value::Null),
            });
            if self.out.len() >= self.max {
                if index + 1 == count {
                    self.past(seq);
                }
                return false;
            }
        }
        self.past(seq);
        true
    }

    /// Past the whole message `seq`: the next page starts at the next one.
    fn past(&mut self, seq: u64) {
        if (seq + 1, 0) > (self.cursor.seq, self.cursor.index) {
            self.cursor.seq = seq + 1;
            self.cursor.index = 0;
        }
    }
}

/// Where a cursor stands against the stream's first and last stored
/// message: INVALID past the newest (the stream was replaced, or the
/// cursor forged), and whether stored events between it and the oldest
/// kept have aged out (a gap).
fn placed(cursor: &EventCursor, given: bool, first: u64, last: u64) -> Result<bool, ApiError> {
    if !given {
        return Ok(false);
    }
    if cursor.seq > last + 1 {
        return Err(api::invalid(
            "invalid ListEvents request",
            vec![api::problem(
                "after",
                format!(
                    "cursor {cursor} is past the newest stored event ({last}): the events stream was replaced; start again with since"
                ),
            )],
        ));
    }
    Ok(first > 0 && cursor.seq < first)
}

/// The events after `req.after` the caller may read, oldest first.
pub async fn list(
    events: &Stream,
    reads: &Reads,
    caller: &Caller,
    req: ListEvents,
) -> Result<EventPage, ApiError> {
    let (max, wait, cursor) = check(caller, &req)?;
    let _read = reads.start(&caller.principal)?;
    let mut page = Page {
        caller,
        req: &req,
        max: max as usize,
        cursor,
        out: Vec::new(),
        bytes: 0,
    };
    let mut stream = events.clone();
    let (first, last) = {
        let state = &stream.info().await.map_err(transient)?.state;
        (state.first_sequence, state.last_sequence)
    };
    let gap = placed(&cursor, req.after.is_some(), first, last)?;
    let start = cursor.seq.max(1);
    let started = tokio::time::Instant::now();
    let wait_until = started + Duration::from_secs(u64::from(wait));
    let mut caught_up = last < start;
    if !caught_up || wait > 0 {
        let deliver_policy = match (&req.after, req.since) {
            (None, Some(ms)) => DeliverPolicy::ByStartTime {
                start_time: time::OffsetDateTime::from_unix_timestamp_nanos(
                    i128::from(ms) * 1_000_000,
                )
                .unwrap_or(time::OffsetDateTime::UNIX_EPOCH),
            },
            _ => DeliverPolicy::ByStartSequence {
                start_sequence: start,
            },
        };
        let consumer = events
            .create_consumer(pull::OrderedConfig {
                deliver_policy,
                filter_subjects: filter(&req),
                ..Default::default()
            })
            .await
            .map_err(transient)?;
        let name = consumer.cached_info().name.clone();
        // Nothing this request reads is stored after the cursor.
        caught_up |= consumer.cached_info().num_pending == 0;
        let mut messages = consumer.messages().await.map_err(transient)?;
        loop {
            // Caught up with nothing to return: wait (as asked) for what
            // is stored next. Otherwise read on within the page's budget.
            let until = if caught_up {
                if !page.out.is_empty() {
                    break;
                }
                wait_until
            } else {
                started + READ_BUDGET
            };
            let now = tokio::time::Instant::now();
            if now >= until {
                break;
            }
            let Ok(Some(Ok(msg))) = tokio::time::timeout(until - now, messages.next()).await else {
                break;
            };
            let Ok(info) = msg.info() else { break };
            let (seq, pending) = (info.stream_sequence, info.pending);
            let room = page.take(seq, msg.subject.as_str(), &msg.payload);
            // Caught up: nothing stored after this message, and the page
            // did not stop inside it.
            caught_up = room && pending == 0 && page.cursor.index == 0;
            if !room {
                break;
            }
        }
        drop(messages);
        // Its server side would linger 30 s after the last read.
        let events = events.clone();
        tokio::spawn(async move {
            let _ = events.delete_consumer(&name).await;
        });
    }
    if caught_up && (page.cursor.seq, page.cursor.index) < (last + 1, 0) {
        // Everything stored up to `last` was read or is not the caller's:
        // the next page starts after it (also when `since` found nothing).
        page.cursor.seq = last + 1;
        page.cursor.index = 0;
    }
    Ok(EventPage {
        events: page.out,
        after: page.cursor.to_string(),
        caught_up,
        gap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use qm_wire::messages::{EventFrame, JobStateChange};

    fn team(shares: &[&str]) -> Caller {
        Caller {
            principal: "team-a-ci".into(),
            role: "TEAM".into(),
            team: Some("team-a".into()),
            shares: shares.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn frame(events: &[(&str, &str, &str, &str)]) -> Vec<u8> {
        let encoded: Vec<(String, String, Vec<u8>)> = events
            .iter()
            .map(|(share, job, to, position)| {
                let e = JobStateChange {
                    job_id: job.to_string(),
                    job_queue: "training".into(),
                    quota_share_name: share.to_string(),
                    to: to.to_string(),
                    ..Default::default()
                };
                (
                    subjects::job_event("training", share, job, to).expect("subject"),
                    position.to_string(),
                    serde_json::to_vec(&e).expect("json"),
                )
            })
            .collect();
        EventFrame::encode(
            encoded
                .iter()
                .map(|(s, p, b)| (s.as_str(), p.as_str(), b.as_slice())),
        )
    }

    fn page<'a>(
        caller: &'a Caller,
        req: &'a ListEvents,
        max: usize,
        after: EventCursor,
    ) -> Page<'a> {
        Page {
            caller,
            req,
            max,
            cursor: after,
            out: Vec::new(),
            bytes: 0,
        }
    }

    #[test]
    fn a_team_gets_only_its_own_shares_events_and_the_cursor_passes_the_rest() {
        let caller = team(&["training/QS1"]);
        let req = ListEvents::default();
        let mut p = page(&caller, &req, 100, EventCursor::default());
        let f = frame(&[
            ("QS1", "j-1", "RUNNABLE", "5.0.0"),
            ("QS2", "j-2", "RUNNABLE", "6.0.0"),
            ("QS1", "j-1", "SCHEDULED", "7.0.0"),
        ]);
        assert!(p.take(3, subjects::EVENT_FRAMES, &f));
        let seen: Vec<(&str, &str)> = p
            .out
            .iter()
            .map(|e| (e.job_id.as_str(), e.cursor.as_str()))
            .collect();
        assert_eq!(seen, vec![("j-1", "3-1-5.0.0"), ("j-1", "3-3-7.0.0")]);
        assert_eq!(p.cursor.to_string(), "4-0-7.0.0");
        let ckpt = subjects::checkpoint_event("training", "QS2", "j-2").expect("subject");
        assert!(p.take(4, &ckpt, b"{}"));
        assert_eq!(p.out.len(), 2, "another team's checkpoint is not returned");
        assert_eq!(p.cursor.to_string(), "5-0-7.0.0");
    }

    #[test]
    fn a_full_page_stops_inside_a_frame_and_the_next_resumes_there() {
        let caller = team(&["training/QS1"]);
        let req = ListEvents::default();
        let f = frame(&[
            ("QS1", "j-1", "RUNNABLE", "5.0.0"),
            ("QS1", "j-1", "SCHEDULED", "5.0.1"),
            ("QS1", "j-1", "STARTING", "5.0.2"),
        ]);
        let mut first = page(&caller, &req, 2, EventCursor::default());
        assert!(!first.take(9, subjects::EVENT_FRAMES, &f));
        let mut second = page(&caller, &req, 2, first.cursor);
        assert!(second.take(9, subjects::EVENT_FRAMES, &f));
        let all: Vec<String> = first
            .out
            .iter()
            .chain(&second.out)
            .map(|e| e.position.clone().unwrap_or_default())
            .collect();
        assert_eq!(all, vec!["5.0.0", "5.0.1", "5.0.2"]);
    }

    #[test]
    fn an_event_a_new_leader_stored_again_is_not_returned_twice() {
        let caller = team(&["training/QS1"]);
        let req = ListEvents::default();
        let mut p = page(&caller, &req, 100, EventCursor::default());
        p.take(
            1,
            subjects::EVENT_FRAMES,
            &frame(&[
                ("QS1", "j-1", "RUNNABLE", "5.0.0"),
                ("QS1", "j-1", "SCHEDULED", "6.0.0"),
            ]),
        );
        // Stored again after a failover, then the new leader's own.
        p.take(
            2,
            subjects::EVENT_FRAMES,
            &frame(&[
                ("QS1", "j-1", "SCHEDULED", "6.0.0"),
                ("QS1", "j-1", "STARTING", "8.0.0"),
            ]),
        );
        let tos: Vec<String> = p.out.iter().filter_map(|e| e.job()).map(|e| e.to).collect();
        assert_eq!(tos, vec!["RUNNABLE", "SCHEDULED", "STARTING"]);
    }

    #[test]
    fn bad_requests_name_every_problem_and_another_teams_queue_is_refused() {
        let caller = team(&["training/QS1"]);
        let bad = ListEvents {
            after: Some("not-a-cursor".into()),
            max_results: Some(0),
            wait_seconds: Some(60),
            quota_share_name: Some("QS1".into()),
            ..Default::default()
        };
        let e = check(&caller, &bad).expect_err("invalid");
        assert_eq!(e.code, ErrorCode::Invalid);
        let fields: Vec<&str> = e.problems.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            vec!["maxResults", "waitSeconds", "after", "quotaShareName"]
        );
        let theirs = ListEvents {
            job_queue: Some("training".into()),
            quota_share_name: Some("QS2".into()),
            ..Default::default()
        };
        assert_eq!(
            check(&caller, &theirs).expect_err("denied").code,
            ErrorCode::AccessDenied
        );
        let other_queue = ListEvents {
            job_queue: Some("research".into()),
            ..Default::default()
        };
        assert_eq!(
            check(&caller, &other_queue).expect_err("denied").code,
            ErrorCode::AccessDenied
        );
    }

    #[test]
    fn a_page_stops_before_it_outgrows_a_message_and_the_next_starts_there() {
        let caller = team(&["training/QS1"]);
        let req = ListEvents::default();
        let reason = "x".repeat(200 * 1024);
        let big: Vec<(String, String, Vec<u8>)> = (0..4)
            .map(|i| {
                let e = JobStateChange {
                    job_id: format!("j-{i}"),
                    status_reason: reason.clone(),
                    ..Default::default()
                };
                (
                    subjects::job_event("training", "QS1", &format!("j-{i}"), "RUNNING")
                        .expect("subject"),
                    format!("{i}.0.0"),
                    serde_json::to_vec(&e).expect("json"),
                )
            })
            .collect();
        let f = EventFrame::encode(
            big.iter()
                .map(|(s, p, b)| (s.as_str(), p.as_str(), b.as_slice())),
        );
        let mut first = page(&caller, &req, 1000, EventCursor::default());
        assert!(!first.take(5, subjects::EVENT_FRAMES, &f), "full by size");
        assert_eq!(first.out.len(), 2, "two of 200 KiB fit in 512 KiB");
        assert_eq!(first.cursor.to_string(), "5-2-1.0.0");
        let mut second = page(&caller, &req, 1000, first.cursor);
        assert!(second.take(5, subjects::EVENT_FRAMES, &f), "the rest fits");
        assert_eq!(second.cursor.to_string(), "6-0-3.0.0");
        let ids: Vec<String> = first
            .out
            .iter()
            .chain(&second.out)
            .map(|e| e.job_id.clone())
            .collect();
        assert_eq!(ids, vec!["j-0", "j-1", "j-2", "j-3"]);
    }

    #[test]
    fn a_cursor_past_the_stream_is_refused_and_one_before_its_oldest_is_a_gap() {
        let at = |seq| EventCursor {
            seq,
            index: 0,
            position: None,
        };
        assert!(!placed(&at(50), true, 10, 100).expect("inside"));
        assert!(!placed(&at(101), true, 10, 100).expect("the next to come"));
        let e = placed(&at(102), true, 10, 100).expect_err("past the newest");
        assert_eq!(e.problems[0].field, "after");
        assert!(placed(&at(3), true, 10, 100).expect("aged out"));
        assert!(!placed(&at(0), false, 10, 100).expect("no cursor"));
    }

    #[test]
    fn reads_in_flight_are_bounded_per_principal_and_given_back() {
        let reads = Reads::default();
        let held: Vec<Read<'_>> = (0..MAX_READS_PER_PRINCIPAL)
            .map(|_| reads.start("alice").expect("a place"))
            .collect();
        let e = reads.start("alice").err().expect("too many");
        assert_eq!(e.code, ErrorCode::Transient);
        assert!(reads.start("bob").is_ok(), "others are not held up");
        drop(held);
        assert!(reads.start("alice").is_ok());
    }
}
