//! The leader's loop: replay the log, announce the new epoch, then apply new
//! entries as they arrive, answer requests, watch heartbeats, and run passes.
//!
//! Every decision is appended to the log *fenced* on the decisions subject
//! (`Nats-Expected-Last-Subject-Sequence`): once another leader has appended
//! anything, this one can append nothing more. Each decision also records,
//! in the `Qm-After` header, the sequence of the last non-decision entry the
//! leader had applied when it decided. Submits and reports keep arriving
//! while a decision is on its way, so a decision may be stored after entries
//! it did not see; a replay puts every decision back right after its
//! `Qm-After` entry (decisions in their stored order), which is exactly the
//! order the leader applied things in. So a replay rebuilds the state the
//! leader had, without ever refusing a decision because a report slipped in.
//!
//! Events. Every event carries a `Qm-Position` header `a.b.i`: the position
//! of the entry whose application produced it in that order (`a` the input's
//! sequence, or a decision's `Qm-After`; `b` 0 for an input, else the
//! decision's own sequence) and its index among that entry's events. Each
//! is published live at once, and the events stream stores them in frames
//! (`qm.v1.events.frames`, many events a message, every 20 ms under load;
//! `log.rs`). A new leader finds the newest stored position and, while
//! replaying, republishes every event after it: the events a crashed leader
//! had stored in the log but not yet stored as events are not lost
//! (delivery is at least once across a failover; the position, or `jobId`,
//! `to` and `attempt`, identify a duplicate).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use qm_service::api;
use qm_service::nats::Storage;
use qm_service::now_ms;
use qm_tenancy::{authorize, Action};
use qm_wire::messages::Caller;
use qm_wire::messages::{ApiError, ErrorCode};
use qm_wire::subjects;
use qm_wire::system::{AttemptKey, ExecCommand, Heartbeat, LogEntry, SchedRequest};

use crate::state::{Cut, Effect, Positions, State};
use crate::Settings;

mod log;
mod read;
mod writes;

use crate::stream::log_error;
pub use crate::stream::LeadError;
use log::{publish_events, Outbound, SentCommand};

pub enum Outcome {
    Shutdown,
    LostLease,
    Failed(LeadError),
}

/// Most log entries applied before the loop runs a pass.
const BATCH: usize = 1024;

struct Runner<'a> {
    client: &'a async_nats::Client,
    metrics: &'a mut crate::observe::Metrics,
    role: &'a crate::observe::Role,
    traces: crate::observe::Traces,
    /// When the metrics' gauges were last refreshed from the state.
    refreshed: Option<Instant>,
    storage: &'a Storage,
    settings: &'a Settings,
    state: State,
    /// Sequence of the last non-decision entry applied (`Qm-After`).
    after: u64,
    /// Sequence of the last decision in the log (the fence).
    sched_seq: u64,
    /// Sequences of decisions this leader appended (and applied already).
    own: std::collections::HashSet<u64>,
    last_seen: HashMap<String, Instant>,
    /// Since when this scheduler has been cut off from NATS (seen at a
    /// check): heartbeats cannot reach it then, so that time does not count
    /// against executors.
    offline_since: Option<Instant>,
    /// When executors were last checked: a long gap means this loop was
    /// itself stalled (e.g. an append waiting out a NATS outage) and could
    /// not read heartbeats, so the gap does not count against executors.
    last_check: Option<Instant>,
    /// Since when a reported attempt has been missing from its executor's
    /// heartbeats.
    missing: HashMap<(String, AttemptKey), Instant>,
    /// When each command was last sent (resent only after `resendSeconds`).
    sent: HashMap<SentCommand, Instant>,
    /// Until when the lease is surely this leader's.
    tenure: crate::tenure::Tenure,
    /// Job and preemption events, in order, to the publisher task.
    events: tokio::sync::mpsc::UnboundedSender<Outbound>,
    /// Snapshots and the archive (see `upkeep.rs`).
    upkeep: crate::upkeep::Upkeep,
    /// What heartbeat acknowledgements say (see `acks.rs`).
    acks: Option<crate::acks::Shared>,
    /// Where the archive task says which jobs' records it stored.
    archived_tx: Option<tokio::sync::mpsc::UnboundedSender<Vec<String>>>,
    writes: VecDeque<(SchedRequest, Option<async_nats::Subject>)>,
    /// `DeleteJobQueue` requests waiting for their queue's finished jobs to
    /// be archived (retried after each archived batch).
    deleting: Vec<(SchedRequest, Option<async_nats::Subject>)>,
    /// Queues whose finished jobs are archived now, whatever their age,
    /// with the configuration revision their deletion was asked at (a
    /// queue changed since is retired no longer).
    retiring: std::collections::BTreeMap<String, u64>,
    dirty: bool,
    /// Numbers the events published (see the module comment).
    positions: Positions,
}

/// The lease this leader holds: its epoch, a signal that it was lost, and
/// until when it is surely held (see `tenure::Tenure`).
pub struct Lease {
    pub epoch: u64,
    /// Where the leader reports its role (readiness, metrics).
    pub role: std::sync::Arc<crate::observe::Role>,
    pub lost: tokio::sync::watch::Receiver<bool>,
    pub tenure: crate::tenure::Tenure,
}

pub async fn run(
    client: &async_nats::Client,
    storage: &Storage,
    settings: &Settings,
    lease: Lease,
    follower: Option<crate::follow::Follower>,
    metrics: &mut crate::observe::Metrics,
    shutdown: &mut Pin<&mut impl Future<Output = ()>>,
) -> Outcome {
    let Lease {
        epoch,
        role,
        mut lost,
        tenure,
    } = lease;
    let (events, queued) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(publish_events(client.clone(), storage.js.clone(), queued));
    let mut runner = Runner {
        metrics,
        role: &role,
        traces: Default::default(),
        refreshed: None,
        missing: HashMap::new(),
        events,
        tenure,
        client,
        storage,
        settings,
        state: State::default(),
        after: 0,
        sched_seq: 0,
        own: Default::default(),
        last_seen: HashMap::new(),
        offline_since: None,
        last_check: None,
        sent: HashMap::new(),
        writes: VecDeque::new(),
        deleting: Vec::new(),
        retiring: std::collections::BTreeMap::new(),
        dirty: true,
        positions: Positions::default(),
        upkeep: crate::upkeep::Upkeep::new(),
        acks: None,
        archived_tx: None,
    };
    let outcome = match runner.go(epoch, follower, &mut lost, shutdown).await {
        Ok(outcome) => outcome,
        Err(e) => Outcome::Failed(e),
    };
    role.stand_by();
    outcome
}

impl Runner<'_> {
    async fn go(
        &mut self,
        epoch: u64,
        follower: Option<crate::follow::Follower>,
        lost: &mut tokio::sync::watch::Receiver<bool>,
        shutdown: &mut Pin<&mut impl Future<Output = ()>>,
    ) -> Result<Outcome, LeadError> {
        let took = Instant::now();
        // A standby that followed the log only reads its last entries; one
        // that did not (or whose following failed) starts from the newest
        // snapshot now.
        let (mut follower, warm) = match follower {
            Some(f) => (f, true),
            None => (crate::follow::Follower::start(self.storage).await?, false),
        };
        let behind = follower.seq;
        follower.catch_up(self.storage).await?;
        let published = crate::follow::last_published(&self.storage.js).await?;
        tracing::info!(?published, "newest stored event position");
        let entries = follower.entries();
        let crate::follow::Follower {
            mut state,
            traces,
            after,
            sched_seq,
            mut messages,
            damaged,
            cut,
            from,
            seq,
            replay,
            started,
            ..
        } = follower;
        // Events were published the first time; those after the newest
        // stored one are republished.
        let (republish, _) = replay.finish_after(&mut state, published);
        self.state = state;
        self.traces = traces;
        self.after = after;
        self.sched_seq = sched_seq;
        self.upkeep.damaged = damaged;
        self.traces.retain_live(&self.state);
        // Reasons and settled types are not in the log: look at everything.
        self.state.reconsider();
        self.upkeep.applied(entries);
        self.state.epoch = epoch;
        self.role.lead(epoch);
        // The catch-up's buffers are free now: give them back.
        qm_service::memory::release_soon();
        tracing::info!(
            entries,
            from,
            caught_up = seq.saturating_sub(behind),
            jobs = self.state.jobs(),
            ms = took.elapsed().as_millis() as u64,
            following_ms = started.elapsed().as_millis() as u64,
            "{}",
            match (warm, cut == Cut::default()) {
                (true, _) => "took over from following the log",
                (false, true) => "state rebuilt from the log",
                (false, false) => "state rebuilt from the snapshot and the log after it",
            }
        );
        let mut requests = self.subscribe(subjects::SCHED_REQUEST.to_string()).await?;
        let acks = std::sync::Arc::new(std::sync::RwLock::new(crate::acks::View::of(&self.state)));
        self.acks = Some(acks.clone());
        let (beats, mut heartbeats) = tokio::sync::mpsc::unbounded_channel();
        let acknowledger = tokio::spawn(crate::acks::answer(
            self.client.clone(),
            self.subscribe(subjects::all_heartbeats()).await?,
            acks,
            self.tenure.clone(),
            beats,
        ));
        let _stop_acks = AbortOnDrop(acknowledger);
        if let Some(outcome) = self.announce_epoch(epoch, &mut messages).await? {
            return Ok(outcome);
        }
        if !republish.is_empty() {
            tracing::info!(
                events = republish.len(),
                "republishing events the previous leader had not published"
            );
        }
        for (position, effect) in republish {
            self.positions = Positions::at(position);
            self.send(effect, false).await;
        }
        // Every executor gets a full timeout to show up after a failover.
        let now = Instant::now();
        for id in self.state.executors.keys() {
            self.last_seen.insert(id.clone(), now);
        }
        let (archived_tx, mut archived) = tokio::sync::mpsc::unbounded_channel();
        self.archived_tx = Some(archived_tx);
        let tick_every = Duration::from_millis(self.settings.pass_interval_ms);
        let mut ticker = tokio::time::interval(tick_every);
        let mut last_tick = Instant::now();
        loop {
            tokio::select! {
                biased;
                _ = shutdown.as_mut() => return Ok(Outcome::Shutdown),
                _ = lost.changed() => return Ok(Outcome::LostLease),
                msg = messages.next() => {
                    let Some(msg) = msg else { return Err(LeadError::LogEnded("while leading")) };
                    if !self.apply_message(&msg.map_err(log_error)?, true).await {
                        return Ok(Outcome::LostLease);
                    }
                    for _ in 0..BATCH {
                        match messages.next().now_or_never() {
                            Some(Some(Ok(m))) => {
                                if !self.apply_message(&m, true).await {
                                    return Ok(Outcome::LostLease);
                                }
                            }
                            Some(Some(Err(e))) => return Err(log_error(e)),
                            Some(None) => return Err(LeadError::LogEnded("while leading")),
                            None => break,
                        }
                    }
                }
                req = requests.next() => {
                    if let Some(req) = req { self.request(req).await; }
                }
                hb = heartbeats.recv() => {
                    if let Some((hb, known)) = hb { self.heartbeat(hb, known).await; }
                }
                _ = ticker.tick() => {}
            }
            // The periodic work runs when due whatever woke the loop: the
            // select prefers the log, which under a sustained load is always
            // ready (the fleet benchmark's drain starved the ticker for 185 s:
            // no resends, no lost-executor checks, no snapshots).
            if last_tick.elapsed() >= tick_every {
                last_tick = Instant::now();
                self.periodic_work().await;
            }
            // The stored batch's decision first: the jobs it names leave the
            // state before the next batch is chosen (a finished task whose
            // batch is not yet decided would be chosen again).
            while let Ok(job_ids) = archived.try_recv() {
                self.archived(job_ids).await;
            }
            // Every 250 ms at most (see upkeep.rs): small steps.
            self.archive_if_due();
            // Heartbeats and requests are answered every turn however busy
            // the log is: the select prefers the log, and a leader that only
            // read the log under load would leave heartbeats unacknowledged
            // until its executors fenced themselves (found by the fleet
            // benchmark: 100 executors draining a 100,000-job backlog).
            for _ in 0..BATCH {
                match heartbeats.recv().now_or_never() {
                    Some(Some((hb, known))) => self.heartbeat(hb, known).await,
                    _ => break,
                }
            }
            for _ in 0..BATCH {
                match requests.next().now_or_never() {
                    Some(Some(req)) => self.request(req).await,
                    _ => break,
                }
            }
            self.do_writes().await;
            if self.dirty {
                self.passes().await;
            }
        }
    }

    /// Announces the epoch; until it is stored nothing else is decided (the
    /// log is applied meanwhile). Some outcome: the lease was lost.
    async fn announce_epoch(
        &mut self,
        epoch: u64,
        messages: &mut async_nats::jetstream::consumer::pull::Ordered,
    ) -> Result<Option<Outcome>, LeadError> {
        let leader_entry = LogEntry::Leader {
            epoch,
            holder: self.settings.holder.clone(),
        };
        loop {
            if self.append(&leader_entry).await.is_some() {
                break;
            }
            let msg = tokio::select! {
                m = messages.next() => m,
                _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
            };
            match msg {
                Some(m) => {
                    if !self.apply_message(&m.map_err(log_error)?, true).await {
                        return Ok(Some(Outcome::LostLease));
                    }
                }
                None => return Err(LeadError::LogEnded("while announcing the epoch")),
            }
        }
        Ok(None)
    }

    /// The work of every tick: metrics, lost executors, resends, snapshots;
    /// the state is marked for a pass.
    async fn periodic_work(&mut self) {
        self.refresh_metrics();
        self.check_executors().await;
        self.resend().await;
        self.snapshot_if_due();
        self.dirty = true;
    }

    async fn check_executors(&mut self) {
        let now = Instant::now();
        // Our own outage is not the executors' silence: while disconnected,
        // judge no one; once back, shift every last-seen time by the outage.
        if self.client.connection_state() != async_nats::connection::State::Connected {
            self.offline_since.get_or_insert(now);
            return;
        }
        let stalled = self
            .last_check
            .replace(now)
            .map(|prev| {
                now.duration_since(prev)
                    .saturating_sub(Duration::from_secs(1))
            })
            .filter(|gap| *gap > Duration::from_secs(1));
        let outage = self
            .offline_since
            .take()
            .map(|since| now.duration_since(since));
        if let Some(blind) = stalled.max(outage) {
            tracing::info!(ms = blind.as_millis() as u64, "heartbeats could not be read for a while (NATS outage or a stalled loop); not counted against executors");
            for seen in self.last_seen.values_mut() {
                *seen = (*seen + blind).min(now);
            }
        }
        let mut lost = Vec::new();
        for (id, e) in &self.state.executors {
            if !e.live {
                continue;
            }
            let seen = *self.last_seen.entry(id.clone()).or_insert(now);
            let allowed = self
                .state
                .silence_allowed(id, self.settings.executor_timeout_seconds);
            if now.duration_since(seen) > Duration::from_secs(allowed) {
                lost.push((id.clone(), e.registration.incarnation.clone()));
            }
        }
        for (executor_id, incarnation) in lost {
            tracing::warn!(executor = %executor_id, "executor missed its heartbeats; its attempts end HOST_LOST");
            if let Some(e) = self.state.executors.get(&executor_id) {
                self.metrics
                    .lost
                    .with_label_values(&[e.registration.environment()])
                    .inc();
            }
            self.missing.retain(|(e, _), _| e != &executor_id);
            let entry = LogEntry::ExecutorLost {
                executor_id,
                incarnation,
                at: now_ms(),
            };
            if self.append(&entry).await.is_some() {
                let fx = self.state.apply(entry, now_ms());
                self.refresh_acks();
                self.publish(fx).await;
            } else {
                return; // retried at the next tick, after reading the log
            }
        }
    }

    /// Attempts the executor reported running that its heartbeats no
    /// longer list: once missing for `SETTLE_MISSING_AFTER_SECS` they ended
    /// there and the end report was lost; a stop makes the executor report
    /// the end again, so their instances are freed.
    fn settle_missing(&mut self, hb: &Heartbeat) -> Vec<AttemptKey> {
        let reported = self.state.reported_on(&hb.executor_id);
        let now = Instant::now();
        let wait = Duration::from_secs(qm_core::SETTLE_MISSING_AFTER_SECS);
        let mut due = Vec::new();
        for key in &reported {
            if hb.attempts.contains(key) {
                continue;
            }
            let since = *self
                .missing
                .entry((hb.executor_id.clone(), key.clone()))
                .or_insert(now);
            if now.duration_since(since) >= wait {
                due.push(key.clone());
            }
        }
        self.missing.retain(|(executor, key), _| {
            executor != &hb.executor_id || (reported.contains(key) && !hb.attempts.contains(key))
        });
        due
    }

    /// A heartbeat (acknowledged already, see `acks.rs`): who was seen,
    /// and what each executor holds that it should not.
    async fn heartbeat(&mut self, hb: Heartbeat, known: bool) {
        self.metrics
            .heartbeats
            .with_label_values(&[if known { "true" } else { "false" }])
            .inc();
        if known {
            self.last_seen
                .insert(hb.executor_id.clone(), Instant::now());
            for key in self.settle_missing(&hb) {
                tracing::warn!(job = %key.job_id, attempt = key.attempt, executor = %hb.executor_id, "its executor no longer holds it and its end was not reported; asking it to settle");
                let cmd = ExecCommand::Stop {
                    epoch: self.state.epoch,
                    job_id: key.job_id,
                    attempt: key.attempt,
                    grace_seconds: qm_core::UNPLACED_STOP_GRACE_SECS,
                    reason: "its executor no longer holds it".into(),
                };
                self.send(Effect::Command(hb.executor_id.clone(), Box::new(cmd)), true)
                    .await;
            }
            // Attempts the executor holds that are not placed there: stop them.
            let expected = self.state.expected_on(&hb.executor_id);
            for held in &hb.attempts {
                if !expected.contains(held) {
                    let cmd = ExecCommand::Stop {
                        epoch: self.state.epoch,
                        job_id: held.job_id.clone(),
                        attempt: held.attempt,
                        grace_seconds: qm_core::UNPLACED_STOP_GRACE_SECS,
                        reason: "not placed on this executor".into(),
                    };
                    self.send(Effect::Command(hb.executor_id.clone(), Box::new(cmd)), true)
                        .await;
                }
            }
        }
    }

    /// Keeps the acknowledger's view of the registrations current.
    fn refresh_acks(&self) {
        if let Some(acks) = &self.acks {
            let view = crate::acks::View::of(&self.state);
            if let Ok(mut v) = acks.write() {
                if *v != view {
                    *v = view;
                }
            }
        }
    }

    /// Starts a snapshot when one is due (see `upkeep.rs`).
    fn snapshot_if_due(&mut self) {
        let every = self.settings.snapshot_every_entries;
        let interval = Duration::from_secs(self.settings.snapshot_interval_seconds);
        if !self.upkeep.snapshot_due(every, interval) {
            return;
        }
        let image = crate::snapshot::Image {
            state: self.state.clone(),
            traces: self.traces.export(),
        };
        let cut = Cut {
            after: self.after,
            sched: self.sched_seq,
        };
        let (done, flushed) = tokio::sync::oneshot::channel();
        let _ = self.events.send(Outbound::Flushed(done));
        self.upkeep.snapshot(
            self.storage.snapshots.clone(),
            self.storage.log.clone(),
            image,
            (cut, self.positions),
            self.settings.holder.clone(),
            self.settings.snapshots_kept,
            Duration::from_secs(self.settings.log_retention_hours * 3600),
            flushed,
        );
    }

    /// Archives the jobs finished `finishedRetentionSeconds` ago: their
    /// records are stored by a task beside the loop (one batch at a time);
    /// once it has stored them, [`Runner::archived`] appends the `Archive`
    /// decision that lets them go.
    fn archive_if_due(&mut self) {
        if !self.upkeep.archive_due() {
            return;
        }
        let now = self.state.clock.max(now_ms());
        let cutoff = now.saturating_sub(self.settings.finished_retention_seconds * 1000);
        // A queue being deleted first: all its finished jobs, at once.
        let queues = &self.state.queues;
        self.retiring
            .retain(|q, rev| queues.get(q).is_some_and(|qs| qs.config_revision == *rev));
        let mut due = Vec::new();
        for q in self.retiring.keys() {
            let left = crate::upkeep::ARCHIVE_BATCH.saturating_sub(due.len());
            due.extend(self.state.finished_of(q, now, left));
        }
        if due.is_empty() {
            due = self
                .state
                .due_for_archive(cutoff, crate::upkeep::ARCHIVE_BATCH);
        }
        if due.is_empty() {
            return;
        }
        self.upkeep
            .archive(self.storage.js.clone(), due, self.archived_tx.clone());
    }

    /// Records of these jobs are stored in the archive: the decision that
    /// lets them go.
    async fn archived(&mut self, job_ids: Vec<String>) {
        let now = self.state.clock.max(now_ms());
        let entry = LogEntry::Archive { job_ids, at: now };
        if self.append(&entry).await.is_some() {
            let LogEntry::Archive { job_ids, .. } = &entry else {
                unreachable!()
            };
            tracing::info!(jobs = job_ids.len(), "finished jobs archived");
            let fx = self.state.apply(entry, now);
            self.publish(fx).await;
            // Deletions waiting for this are looked at again.
            self.writes.extend(self.deleting.drain(..));
        }
    }

    async fn passes(&mut self) {
        // By priority within a service environment: a queue served first
        // takes what is free before the next (`qm_core::environment`).
        let queues = self.state.pass_order();
        let now = self.state.clock.max(now_ms());
        for q in queues {
            let (started, began) = (Instant::now(), std::time::SystemTime::now());
            let Some((record, plan)) = self.state.plan(&q, now) else {
                continue;
            };
            if record.decides_nothing() {
                let fx = self.state.apply_reasons(&q, &plan);
                self.publish(fx).await;
                self.metrics.pass_took(&q, started.elapsed());
                continue;
            }
            let entry = LogEntry::Pass(record);
            if self.append(&entry).await.is_none() {
                return; // stays dirty: decided again after the new entries
            }
            let LogEntry::Pass(record) = entry else {
                unreachable!()
            };
            self.metrics.decisions.inc();
            self.metrics.pass(&self.state, &record);
            self.traces.pass(&self.state, &record, began);
            let fx = self.state.apply_planned(&record, plan);
            self.publish(fx).await;
            self.metrics.pass_took(&q, started.elapsed());
        }
        self.dirty = false;
    }

    /// Refreshes the metrics' gauges from the state, at most once a second.
    fn refresh_metrics(&mut self) {
        if self
            .refreshed
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        self.refreshed = Some(Instant::now());
        let ages = self
            .last_seen
            .iter()
            .map(|(id, seen)| (id.clone(), seen.elapsed()))
            .collect();
        self.metrics.refresh(&self.state, &ages);
    }
}

/// The caller admission attached may do `action` (checked again here, on
/// the job's real share: admission cannot know it for job ids).
fn allowed(caller: &Caller, action: Action<'_>) -> Result<(), ApiError> {
    authorize(caller, action).map_err(|e| api::error(ErrorCode::AccessDenied, e.0))
}

/// [`qm_tenancy::authorize_read`], as an API error.
fn allowed_read(caller: &Caller, queue: &str, share: Option<&str>) -> Result<(), ApiError> {
    qm_tenancy::authorize_read(caller, queue, share)
        .map_err(|e| api::error(ErrorCode::AccessDenied, e.0))
}

/// Aborts a task when dropped (the acknowledger ends with its leader).
pub(crate) struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
