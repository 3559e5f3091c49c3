//! Following the stored events: every job state change, preemption and
//! committed checkpoint the caller may read, in the order they were
//! stored, resumable from any event's cursor (ADR 0022).

use std::collections::VecDeque;
use std::time::Duration;

use backon::Retryable;

use qm_wire::messages::{ErrorCode, ListEvents, StoredEvent};

use crate::{CallError, Client};

/// How long one request waits for new events.
const WAIT_SECONDS: u32 = 10;

/// An iterator of events over the API's `ListEvents`, from a cursor on.
/// It waits for new events (a long poll), and goes on across NATS outages
/// and admission restarts (retrying with backoff); it ends only with an
/// error no retry can mend (`ACCESS_DENIED`, `INVALID`).
///
/// Keep each event's [`StoredEvent::cursor`] with what you did with it;
/// after a restart, [`Client::events`] from that cursor resumes with the
/// next event: none missed, none twice.
pub struct Events {
    client: Client,
    request: ListEvents,
    buffer: VecDeque<StoredEvent>,
    /// Where a new follower would go on: past the last event returned (or
    /// past the last page, once its events are all returned).
    resume: Option<String>,
    failed: bool,
}

impl Client {
    /// Follows the events `request` selects (its `jobQueue`,
    /// `quotaShareName`, `jobId`), from its `after` cursor (else from its
    /// `since` time, else from the oldest event kept).
    pub fn events(&self, request: ListEvents) -> Events {
        let mut client = self.clone();
        client.timeout = client
            .timeout
            .max(Duration::from_secs(u64::from(WAIT_SECONDS) + 10));
        Events {
            client,
            resume: request.after.clone(),
            request,
            buffer: VecDeque::new(),
            failed: false,
        }
    }

    /// Submits a job exactly once, retrying while no answer comes or the
    /// service asks to try again: the job carries a client token (a new
    /// one unless it has its own), so every retry names the same job.
    pub async fn submit(
        &self,
        job: &qm_wire::messages::SubmitServiceJob,
    ) -> Result<qm_wire::messages::SubmitServiceJobResponse, CallError> {
        let mut job = job.clone();
        if job.client_token.as_deref().is_none_or(str::is_empty) {
            job.client_token = Some(format!("qm-client-{}", uuid::Uuid::new_v4().simple()));
        }
        (|| self.submit_service_job(&job))
            .retry(crate::retry::forever(Duration::from_millis(200)).with_max_times(8))
            .when(retryable)
            .notify(|e, _| {
                tracing::warn!(error = %e, "submit not answered; retrying with the same client token");
            })
            .await
    }
}

/// Whether asking again may help: no answer, a transport failure, or the
/// service's TRANSIENT.
pub fn retryable(e: &CallError) -> bool {
    match e {
        CallError::Api(api) => api.code == ErrorCode::Transient,
        CallError::NoReply { .. } | CallError::Transport(_) => true,
        CallError::Refused { .. } => false,
    }
}

impl Events {
    /// Where a new follower would go on: past the last event returned
    /// (or the cursor it started from), never past an event not yet
    /// returned.
    pub fn cursor(&self) -> Option<&str> {
        self.resume.as_deref()
    }

    /// The next event, waiting for it as long as it takes. None after an
    /// error no retry can mend (returned once, before).
    pub async fn next(&mut self) -> Option<Result<StoredEvent, CallError>> {
        loop {
            if let Some(e) = self.buffer.pop_front() {
                // The page's own cursor also passes the events it skipped.
                self.resume = if self.buffer.is_empty() {
                    self.request.after.clone()
                } else {
                    Some(e.cursor.clone())
                };
                return Some(Ok(e));
            }
            if self.failed {
                return None;
            }
            self.request.wait_seconds = Some(WAIT_SECONDS);
            let (client, request) = (&self.client, &self.request);
            let page = (|| client.list_events(request))
                .retry(crate::retry::forever(Duration::from_millis(200)))
                .when(retryable)
                .notify(|e, _| tracing::warn!(error = %e, "reading events failed; retrying"))
                .await;
            match page {
                Ok(page) => {
                    // Each event's cursor is the place past it; the page's
                    // is past what it skipped as well.
                    if page.gap {
                        tracing::warn!("events aged out of the stream before they were read (eventsRetentionDays)");
                    }
                    self.request.after = Some(page.after);
                    self.request.since = None;
                    if page.events.is_empty() {
                        self.resume = self.request.after.clone();
                    }
                    self.buffer.extend(page.events);
                }
                Err(e) => {
                    self.failed = true;
                    return Some(Err(e));
                }
            }
        }
    }

    /// The events as a `futures` stream.
    pub fn into_stream(self) -> impl futures::Stream<Item = Result<StoredEvent, CallError>> {
        futures::stream::unfold(self, |mut events| async move {
            let next = events.next().await?;
            Some((next, events))
        })
    }
}
