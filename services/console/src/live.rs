//! Live updates: every event (job state changes, preemptions, committed
//! checkpoints) numbered as it arrives and kept for a while; an open page
//! asks for what happened after the last number it saw (a long poll that
//! answers as soon as something it may read happens), then re-renders.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use qm_wire::messages::{JobStateChange, PreemptionEvent};
use qm_wire::system::CheckpointCommit;

/// Events kept for pages that ask late.
const KEPT: usize = 4096;

/// One event, as the feed shows it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    pub seq: u64,
    pub queue: String,
    pub share: String,
    #[serde(rename = "jobId")]
    pub job_id: String,
    /// A line for people ("train-1: RUNNABLE -> RUNNING").
    pub text: String,
    /// When the event was published (ms since the Unix epoch).
    pub at: u64,
}

pub struct Live {
    recent: Mutex<VecDeque<Change>>,
    next: Mutex<u64>,
    notify: tokio::sync::Notify,
}

impl Default for Live {
    fn default() -> Self {
        Live {
            recent: Mutex::new(VecDeque::new()),
            next: Mutex::new(1),
            notify: tokio::sync::Notify::new(),
        }
    }
}

/// The change an event on `subject` with `payload` makes, if it is one.
pub fn change_of(subject: &str, payload: &[u8]) -> Option<(String, String, String, String, u64)> {
    let mut t = subject.split('.');
    let (_, _, _, kind, queue, share) = (
        t.next()?,
        t.next()?,
        t.next()?,
        t.next()?,
        t.next()?,
        t.next()?,
    );
    let (job, text, at) = match kind {
        "job" => {
            let e: JobStateChange = serde_json::from_slice(payload).ok()?;
            let why = if e.status_reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", e.status_reason)
            };
            let text = format!("{}: {} -> {}{why}", e.job_name, e.from, e.to);
            (e.job_id, text, e.at)
        }
        "preemption" => {
            let e: PreemptionEvent = serde_json::from_slice(payload).ok()?;
            let text = format!(
                "{} attempt {}: preemption {} ({}, for {})",
                e.job_id, e.attempt, e.phase, e.kind, e.for_job_id
            );
            (e.job_id, text, e.at)
        }
        "checkpoint" => {
            // What the checkpoint service publishes (and QM_EVENTS stores).
            let e: CheckpointCommit = serde_json::from_slice(payload).ok()?;
            let step = e.step.map(|s| format!(" at step {s}")).unwrap_or_default();
            let text = format!(
                "{} attempt {}: checkpoint {} committed{step}",
                e.job_id, e.attempt, e.seq
            );
            (e.job_id, text, e.created_at)
        }
        _ => return None,
    };
    Some((queue.to_string(), share.to_string(), job, text, at))
}

impl Live {
    /// Records one event.
    pub fn record(&self, subject: &str, payload: &[u8]) {
        let Some((queue, share, job_id, text, at)) = change_of(subject, payload) else {
            return;
        };
        let Ok(mut next) = self.next.lock() else {
            return;
        };
        let seq = *next;
        *next += 1;
        if let Ok(mut r) = self.recent.lock() {
            r.push_back(Change {
                seq,
                queue,
                share,
                job_id,
                text,
                at,
            });
            while r.len() > KEPT {
                r.pop_front();
            }
        }
        drop(next);
        self.notify.notify_waiters();
    }

    /// The number of the last event recorded.
    pub fn last(&self) -> u64 {
        self.next.lock().map_or(0, |n| *n - 1)
    }

    /// The changes after `since` that `may_read(queue, share)` lets the
    /// viewer see (at most 50, oldest first), and the last number seen.
    pub fn after(
        &self,
        since: u64,
        may_read: &(dyn Fn(&str, &str) -> bool + Sync),
    ) -> (u64, Vec<Change>) {
        let last = self.last();
        let r = match self.recent.lock() {
            Ok(r) => r,
            Err(_) => return (last, Vec::new()),
        };
        let changes: Vec<Change> = r
            .iter()
            .filter(|c| c.seq > since && may_read(&c.queue, &c.share))
            .take(50)
            .cloned()
            .collect();
        let seen = changes
            .last()
            .map_or(last, |c| if changes.len() == 50 { c.seq } else { last });
        (seen, changes)
    }

    /// Waits up to `limit` for a change after `since` the viewer may read.
    pub async fn wait(
        &self,
        since: u64,
        limit: Duration,
        may_read: &(dyn Fn(&str, &str) -> bool + Sync),
    ) -> (u64, Vec<Change>) {
        let deadline = tokio::time::Instant::now() + limit;
        let mut since = since;
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (seen, changes) = self.after(since, may_read);
            if !changes.is_empty() {
                return (seen, changes);
            }
            // Nothing for this viewer up to `seen`: wait past it.
            since = seen;
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return (since, Vec::new());
            }
        }
    }
}

/// Follows the live events (not the stored frames) into `live` until the
/// subscriptions end (the NATS client reconnects by itself; a closed one
/// ends the process).
pub async fn follow(client: async_nats::Client, live: std::sync::Arc<Live>) {
    loop {
        let mut subs = Vec::new();
        for subject in qm_wire::subjects::live_events() {
            match client.subscribe(subject).await {
                Ok(sub) => subs.push(sub),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot subscribe to the events; retrying");
                    break;
                }
            }
        }
        if subs.len() == 3 {
            let mut all = futures::stream::select_all(subs);
            while let Some(m) = all.next().await {
                live.record(&m.subject, &m.payload);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job_event(share: &str, name: &str, to: &str) -> (String, Vec<u8>) {
        let e = JobStateChange {
            job_id: format!("j-{name}"),
            job_name: name.into(),
            job_queue: "training".into(),
            quota_share_name: share.into(),
            from: "RUNNABLE".into(),
            to: to.into(),
            at: 5,
            ..Default::default()
        };
        (
            format!("qm.v1.events.job.training.{share}.j-{name}.{to}"),
            serde_json::to_vec(&e).expect("json"),
        )
    }

    #[test]
    fn a_committed_checkpoint_as_the_checkpoint_service_publishes_it_is_shown() {
        let commit = CheckpointCommit {
            job_queue: "training".into(),
            job_id: "j-1".into(),
            attempt: 2,
            seq: 7,
            step: Some(300),
            created_at: 1_700_000_000_000,
            node: None,
        };
        let subject =
            qm_wire::subjects::checkpoint_event("training", "QS1", "j-1").expect("subject");
        let (queue, share, job, text, at) =
            change_of(&subject, &serde_json::to_vec(&commit).expect("json")).expect("a change");
        assert_eq!(
            (queue.as_str(), share.as_str(), job.as_str()),
            ("training", "QS1", "j-1")
        );
        assert_eq!(text, "j-1 attempt 2: checkpoint 7 committed at step 300");
        assert_eq!(at, 1_700_000_000_000);
    }

    #[test]
    fn each_viewer_sees_only_the_changes_of_shares_they_may_read() {
        let live = Live::default();
        let (s, p) = job_event("QS1", "<img src=x>", "RUNNING");
        live.record(&s, &p);
        let (s, p) = job_event("QS2", "theirs", "RUNNING");
        live.record(&s, &p);
        live.record("qm.v1.events.job.training.QS1.x.RUNNING", b"not json");
        let qs1 = |_: &str, share: &str| share == "QS1";
        let (seen, changes) = live.after(0, &qs1);
        assert_eq!(seen, 2);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].text, "<img src=x>: RUNNABLE -> RUNNING");
        assert_eq!(live.after(seen, &qs1).1, Vec::new());
    }

    #[tokio::test]
    async fn a_waiting_page_is_answered_as_soon_as_its_change_happens() {
        let live = std::sync::Arc::new(Live::default());
        let waiter = {
            let live = std::sync::Arc::clone(&live);
            tokio::spawn(async move {
                let qs1 = |_: &str, share: &str| share == "QS1";
                live.wait(0, Duration::from_secs(30), &qs1).await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (s, p) = job_event("QS2", "not-mine", "RUNNING");
        live.record(&s, &p);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "another share's change wakes no one");
        let (s, p) = job_event("QS1", "mine", "RUNNING");
        live.record(&s, &p);
        let (seen, changes) = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("answered at once")
            .expect("joined");
        assert_eq!((seen, changes.len()), (2, 1));
        assert_eq!(changes[0].job_id, "j-mine");
    }
}
