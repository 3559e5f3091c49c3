//! What the scheduler shows an operator: its metrics (see
//! `docs/metrics.md`), its readiness, and the spans it adds to each job's
//! trace. Nothing here decides anything; it reads the state and the
//! passes' records after the fact.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer,
};
use opentelemetry::{Context, KeyValue};
use prometheus::{GaugeVec, HistogramVec, IntCounter, IntCounterVec, IntGauge};
use qm_core::{AttemptOutcome, JobStatus};
use qm_service::observe::{counter, gauge, histogram, register, FAST_SECONDS, SLOW_SECONDS};
use qm_wire::messages::JobStateChange;
use qm_wire::system::{LogEntry, PassRecord};

use crate::state::State;

/// Whether this scheduler leads, and whether it has seen another that
/// does: what `/readyz` and `qm_scheduler_leader` report.
#[derive(Default)]
pub struct Role {
    leading: AtomicBool,
    epoch: AtomicU64,
    /// When (ms since the epoch) a standby last saw another holder's live
    /// lease.
    other_seen_ms: AtomicU64,
}

impl Role {
    pub fn lead(&self, epoch: u64) {
        self.epoch.store(epoch, Ordering::SeqCst);
        self.leading.store(true, Ordering::SeqCst);
    }

    pub fn stand_by(&self) {
        self.leading.store(false, Ordering::SeqCst);
    }

    /// A standby saw another scheduler's live lease.
    pub fn saw_leader(&self) {
        self.other_seen_ms
            .store(qm_service::now_ms(), Ordering::SeqCst);
    }

    /// Ready (besides connected): leading, or following a leader seen
    /// within two lease periods (a standby with no leader in sight is not
    /// ready: no one schedules).
    pub fn ready(&self, lease: Duration) -> Result<(), String> {
        if self.leading.load(Ordering::SeqCst) {
            return Ok(());
        }
        let seen = self.other_seen_ms.load(Ordering::SeqCst);
        let recent = lease.as_millis() as u64 * 2;
        if seen > 0 && qm_service::now_ms().saturating_sub(seen) <= recent {
            Ok(())
        } else {
            Err("no scheduler leader known".into())
        }
    }
}

/// A gauge family whose label sets are replaced wholesale at each refresh:
/// label sets that are no longer there are removed (a deleted share does
/// not linger at its last value).
struct GaugeSet {
    gauge: GaugeVec,
    previous: Vec<Vec<String>>,
}

impl GaugeSet {
    fn new(name: &str, help: &str, labels: &[&str]) -> GaugeSet {
        GaugeSet {
            gauge: gauge(name, help, labels),
            previous: Vec::new(),
        }
    }

    fn replace(&mut self, values: BTreeMap<Vec<String>, f64>) {
        for (labels, v) in &values {
            let l: Vec<&str> = labels.iter().map(String::as_str).collect();
            self.gauge.with_label_values(&l).set(*v);
        }
        for old in &self.previous {
            if !values.contains_key(old) {
                let l: Vec<&str> = old.iter().map(String::as_str).collect();
                let _ = self.gauge.remove_label_values(&l);
            }
        }
        self.previous = values.into_keys().collect();
    }
}

/// The scheduler's metrics.
pub struct Metrics {
    pass: HistogramVec,
    jobs: GaugeSet,
    instances: GaugeSet,
    executors: GaugeSet,
    executor_instances: GaugeSet,
    heartbeat_age: GaugeSet,
    budgets: GaugeSet,
    starts: IntCounterVec,
    preemptions: IntCounterVec,
    recomputed: prometheus::CounterVec,
    to_running: HistogramVec,
    pub heartbeats: IntCounterVec,
    pub lost: IntCounterVec,
    pub decisions: IntCounter,
    pub resent: IntCounter,
    leader: IntGauge,
    epoch: IntGauge,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics {
            pass: histogram(
                "qm_scheduling_pass_duration_seconds",
                "Time of one scheduling pass over a queue (planning, storing its decision, applying it).",
                &["queue"],
                FAST_SECONDS,
            ),
            jobs: GaugeSet::new(
                "qm_jobs",
                "Jobs the scheduler holds, by queue, share and status.",
                &["queue", "share", "status"],
            ),
            instances: GaugeSet::new(
                "qm_share_instances",
                "Instances of each share and type: state is entitled (owned), used (held by its jobs, including borrowed), borrowed, lent (its idle entitlement others use) or idle (entitled and not used by it).",
                &["queue", "share", "instance_type", "state"],
            ),
            executors: GaugeSet::new(
                "qm_executors",
                "Registered executors, by queue and state (live or lost).",
                &["queue", "state"],
            ),
            executor_instances: GaugeSet::new(
                "qm_executor_instances",
                "Instances offered by live executors, by queue and type.",
                &["queue", "instance_type"],
            ),
            budgets: GaugeSet::new(
                "qm_borrow_budget_instance_hours",
                "Shares' borrowing budgets, in instance-hours: state is budget (per window or half-life), used (what the window or the decayed sum holds), committed (what running borrowed jobs are still expected to use) or left (budget less used, at least 0).",
                &["queue", "share", "state"],
            ),
            heartbeat_age: GaugeSet::new(
                "qm_executor_heartbeat_age_seconds",
                "Seconds since each live executor's last heartbeat reached the leader.",
                &["executor"],
            ),
            starts: counter(
                "qm_starts_total",
                "Attempts started (placed), by queue, share and type; attempt is first or retry.",
                &["queue", "share", "instance_type", "attempt"],
            ),
            preemptions: counter(
                "qm_preemptions_total",
                "Preemptions decided, by kind (CROSS_SHARE, IN_SHARE, LIMIT_REDUCED, BUDGET_EXHAUSTED, REBALANCE) and by the share of the victim and of the job it made room for (none for a budget stop).",
                &["queue", "kind", "victim_share", "beneficiary_share"],
            ),
            recomputed: register(prometheus::CounterVec::new(
                prometheus::Opts::new(
                    "qm_recomputed_instance_seconds_total",
                    "Work lost to preemptions and lost hosts, in instance-seconds: the time from each stopped attempt's last committed checkpoint (or its start) to its stop, times its instances.",
                ),
                &["queue", "share", "instance_type", "cause"],
            )),
            to_running: histogram(
                "qm_submit_to_running_seconds",
                "Time from a job's submission to its first attempt RUNNING.",
                &["queue", "share"],
                SLOW_SECONDS,
            ),
            heartbeats: counter(
                "qm_heartbeats_total",
                "Executor heartbeats the leader handled; known is false for an executor it does not know (an old incarnation).",
                &["known"],
            ),
            lost: counter(
                "qm_executors_lost_total",
                "Executors declared lost after missing their heartbeats (their attempts end HOST_LOST).",
                &["queue"],
            ),
            decisions: register(IntCounter::new(
                "qm_scheduler_decisions_total",
                "Decisions (passes with starts, preemptions or timeouts) this leader stored in the log.",
            )),
            resent: register(IntCounter::new(
                "qm_scheduler_commands_resent_total",
                "Start, stop and checkpoint commands sent again because their executor had not yet reported what they asked for.",
            )),
            leader: register(IntGauge::new(
                "qm_scheduler_leader",
                "1 while this scheduler leads, 0 while it stands by.",
            )),
            epoch: register(IntGauge::new(
                "qm_scheduler_epoch",
                "The fencing epoch of the lease this scheduler last held (0: never led).",
            )),
        }
    }

    /// What sets the role's gauges at a scrape (the role changes between
    /// refreshes of the state's gauges, and on a standby too).
    pub fn role_gauges(&self) -> impl Fn(&Role) + Send + Sync + 'static {
        let (leader, epoch) = (self.leader.clone(), self.epoch.clone());
        move |role| {
            leader.set(i64::from(role.leading.load(Ordering::SeqCst)));
            epoch.set(role.epoch.load(Ordering::SeqCst) as i64);
        }
    }

    pub fn pass_took(&self, queue: &str, took: Duration) {
        self.pass
            .with_label_values(&[queue])
            .observe(took.as_secs_f64());
    }

    /// Counts a stored pass's starts and preemptions (before it is applied:
    /// the jobs' shares and attempts are read from the state).
    pub fn pass(&self, state: &State, record: &PassRecord) {
        let q = record.job_queue.as_str();
        let Some(qs) = state.queues.get(q) else {
            return;
        };
        let c = &qs.cluster;
        let job = |public: &str| qs.ids.get(public).and_then(|id| c.job(*id));
        let share_of = |public: &str| {
            job(public).map_or_else(String::new, |j| c.share_config(j.spec.share).name.clone())
        };
        for s in &record.starts {
            if let Some(j) = job(&s.job_id) {
                let attempt = if s.attempt <= 1 { "first" } else { "retry" };
                self.starts
                    .with_label_values(&[
                        q,
                        &c.share_config(j.spec.share).name,
                        c.type_name(j.spec.instance_type),
                        attempt,
                    ])
                    .inc();
            }
        }
        for p in &record.preemptions {
            self.preemptions
                .with_label_values(&[q, &p.kind, &share_of(&p.job_id), &share_of(&p.for_job_id)])
                .inc();
        }
        for id in &record.budget_stops {
            self.preemptions
                .with_label_values(&[q, "BUDGET_EXHAUSTED", &share_of(id), ""])
                .inc();
        }
    }

    /// What a published event says: a first attempt reaching RUNNING (the
    /// submit-to-running latency), an attempt that ended preempted or with
    /// its host lost (the work it lost).
    pub fn event(&self, state: &State, e: &JobStateChange) {
        let Some((q, id)) = state.locate(&e.job_id) else {
            return;
        };
        let Some(qs) = state.queues.get(&q) else {
            return;
        };
        let Some(j) = qs.cluster.job(id) else { return };
        if e.to == "RUNNING" && e.from != "RUNNING" && e.attempt == Some(1) {
            let secs = e.at.saturating_sub(j.submitted_at.0) as f64 / 1000.0;
            self.to_running
                .with_label_values(&[&q, &e.quota_share_name])
                .observe(secs);
        }
        // An attempt ended when the job stopped holding instances.
        let holds = |s: &str| JobStatus::from_name(s).is_some_and(JobStatus::holds_instances);
        if !holds(&e.from) || holds(&e.to) {
            return;
        }
        let Some(n) = e.attempt else { return };
        let outcome = j
            .attempts
            .iter()
            .find(|a| a.number == n)
            .and_then(|a| a.outcome);
        let cause = match outcome {
            Some(o) if o.is_preemption() => "preemption",
            Some(AttemptOutcome::HostLost) => "host_lost",
            _ => return,
        };
        if let Some(ms) = j.lost_work_ms(n) {
            let c = &qs.cluster;
            self.recomputed
                .with_label_values(&[
                    &q,
                    &c.share_config(j.spec.share).name,
                    c.type_name(j.spec.instance_type),
                    cause,
                ])
                .inc_by(ms as f64 / 1000.0 * f64::from(j.spec.count));
        }
    }

    /// Gauges from the state: jobs by status, share use, executors.
    pub fn refresh(&mut self, state: &State, heartbeat_age: &HashMap<String, Duration>) {
        let mut jobs = BTreeMap::new();
        let mut instances = BTreeMap::new();
        let mut budgets = BTreeMap::new();
        let now = qm_core::Time(qm_service::now_ms());
        for (q, qs) in &state.queues {
            // Counters every queue has from the start (0 until it happens).
            self.lost.with_label_values(&[q.as_str()]);
            let c = &qs.cluster;
            for s in c.share_indices() {
                let share = &c.share_config(s).name;
                if let Some(b) = c.budget_status(s, now) {
                    let hours = |ms: u64| ms as f64 / qm_core::budget::HOUR_MS as f64;
                    for (state, v) in [
                        ("budget", b.budget.budget_ms()),
                        ("used", b.used_ms),
                        ("committed", b.committed_ms),
                        ("left", b.left_ms()),
                    ] {
                        budgets.insert(vec![q.clone(), share.clone(), state.to_string()], hours(v));
                    }
                }
                // Every status of every share is reported (0 too), so that
                // a dashboard's series do not come and go.
                for status in JobStatus::ALL {
                    jobs.insert(
                        vec![q.clone(), share.clone(), status.as_str().to_string()],
                        0.0,
                    );
                }
                for t in 0..c.type_count() {
                    let t = qm_core::TypeIdx(t as u16);
                    let u = c.share_usage(s, t);
                    if u.entitlement == 0 && u.used == 0 {
                        continue;
                    }
                    let ty = c.type_name(t).to_string();
                    for (state, v) in [
                        ("entitled", u.entitlement),
                        ("used", u.used),
                        ("borrowed", u.borrowed),
                        ("lent", u.lent),
                        ("idle", u.idle),
                    ] {
                        instances.insert(
                            vec![q.clone(), share.clone(), ty.clone(), state.to_string()],
                            f64::from(v),
                        );
                    }
                }
            }
            // Counted by share and status first: a backlog of 100,000
            // jobs is 100,000 lookups of a small map, not as many labels
            // made and looked up.
            let mut counts: BTreeMap<(qm_core::ShareIdx, &'static str), f64> = BTreeMap::new();
            for j in c.jobs() {
                *counts
                    .entry((j.spec.share, j.status.as_str()))
                    .or_insert(0.0) += 1.0;
            }
            for ((s, status), n) in counts {
                let key = vec![
                    q.clone(),
                    c.share_config(s).name.clone(),
                    status.to_string(),
                ];
                *jobs.entry(key).or_insert(0.0) += n;
            }
        }
        self.jobs.replace(jobs);
        self.instances.replace(instances);
        self.budgets.replace(budgets);
        let mut executors = BTreeMap::new();
        let mut offered = BTreeMap::new();
        for e in state.executors.values() {
            let r = &e.registration;
            for st in ["live", "lost"] {
                executors
                    .entry(vec![r.environment().to_string(), st.to_string()])
                    .or_insert(0.0);
            }
            let st = if e.live { "live" } else { "lost" };
            *executors
                .entry(vec![r.environment().to_string(), st.to_string()])
                .or_insert(0.0) += 1.0;
            if e.live {
                for i in &r.instances {
                    *offered
                        .entry(vec![r.environment().to_string(), i.instance_type.clone()])
                        .or_insert(0.0) += f64::from(i.count);
                }
            }
        }
        self.executors.replace(executors);
        self.executor_instances.replace(offered);
        let ages = heartbeat_age
            .iter()
            .filter(|(id, _)| state.executors.get(*id).is_some_and(|e| e.live))
            .map(|(id, age)| (vec![id.clone()], age.as_secs_f64()))
            .collect();
        self.heartbeat_age.replace(ages);
    }
}

// ----- traces ----------------------------------------------------------------

/// Each live job's place in its trace: the context the next span of the
/// job continues from (the submit's log append at first, then the
/// scheduler's own spans). Rebuilt from the log's headers on a takeover,
/// so a job keeps one trace across leaders; forgotten when the job ends.
///
/// Kept packed, as a waiting backlog holds one per job: the job's public id
/// shared with the state's index, and the trace and span ids and flags
/// (the W3C `tracestate` of a submit is not carried on).
#[derive(Default)]
pub struct Traces {
    jobs: HashMap<Arc<str>, Place>,
}

/// A span context without its trace state: 25 bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    trace: [u8; 16],
    span: [u8; 8],
    flags: u8,
}

impl Place {
    fn of(cx: &SpanContext) -> Place {
        Place {
            trace: cx.trace_id().to_bytes(),
            span: cx.span_id().to_bytes(),
            flags: cx.trace_flags().to_u8(),
        }
    }

    fn context(self) -> SpanContext {
        SpanContext::new(
            TraceId::from_bytes(self.trace),
            SpanId::from_bytes(self.span),
            TraceFlags::new(self.flags),
            true,
            TraceState::default(),
        )
    }
}

/// A submit's place in its trace, read before the state applies it.
pub struct Submitted(String, Place);

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

impl Traces {
    /// The context to send with a command for `job_id`.
    pub fn of(&self, job_id: &str) -> Option<SpanContext> {
        self.jobs.get(job_id).map(|p| p.context())
    }

    /// Sets a job's place: under the key it has, else under the state's
    /// own copy of its public id.
    fn set(&mut self, job_id: &str, cx: &SpanContext, state: Option<&State>) {
        let place = Place::of(cx);
        if let Some(p) = self.jobs.get_mut(job_id) {
            *p = place;
            return;
        }
        let key = state
            .and_then(|s| {
                s.queues
                    .values()
                    .find_map(|qs| qs.ids.get_key_value(job_id))
                    .map(|(k, _)| Arc::clone(k))
            })
            .unwrap_or_else(|| job_id.into());
        self.jobs.insert(key, place);
    }

    /// A job's event: a job that ended is forgotten.
    pub fn event(&mut self, e: &JobStateChange) {
        if JobStatus::from_name(&e.to).is_some_and(JobStatus::is_final) {
            self.jobs.remove(e.job_id.as_str());
        }
    }

    /// Keeps only the jobs that have not ended: after a replay, which
    /// read the submit of every job the log still holds.
    /// Each kept place is then under the state's own copy of its job's id
    /// (a follower notes a submit before its replay applies it).
    pub fn retain_live(&mut self, state: &State) {
        let places = std::mem::take(&mut self.jobs);
        for (id, place) in places {
            let live = state.queues.values().find_map(|qs| {
                let (key, job) = qs.ids.get_key_value(&*id)?;
                let job = qs.cluster.job(*job)?;
                (!job.status.is_final()).then(|| Arc::clone(key))
            });
            if let Some(key) = live {
                self.jobs.insert(key, place);
            }
        }
    }

    /// Each job's place as a W3C `traceparent` (for a snapshot).
    pub fn export(&self) -> std::collections::BTreeMap<String, String> {
        self.jobs
            .iter()
            .filter_map(|(id, p)| {
                let mut headers = async_nats::HeaderMap::new();
                qm_service::trace::inject_span(&p.context(), &mut headers);
                let parent = headers.get("traceparent")?.as_str().to_string();
                Some((id.to_string(), parent))
            })
            .collect()
    }

    /// Places read back from a snapshot (see [`Traces::export`]), keyed by
    /// the state's own copies of the jobs' ids.
    pub fn import(&mut self, places: &std::collections::BTreeMap<String, String>, state: &State) {
        for (id, parent) in places {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("traceparent", parent.as_str());
            if let Some(cx) = qm_service::trace::extract_span(Some(&headers)) {
                self.set(id, &cx, Some(state));
            }
        }
    }

    /// The trace a log entry carries (a submit's), read before the state
    /// applies the entry; [`Traces::keep`] it after.
    pub fn submitted(
        entry: &LogEntry,
        headers: Option<&async_nats::HeaderMap>,
    ) -> Option<Submitted> {
        let LogEntry::Submit { job_id, .. } = entry else {
            return None;
        };
        let cx = qm_service::trace::extract_span(headers)?;
        Some(Submitted(job_id.clone(), Place::of(&cx)))
    }

    /// Notes a submit's trace, live or replayed, once the state holds the
    /// job (so that its id is held once).
    pub fn keep(&mut self, submitted: Option<Submitted>, state: &State) {
        if let Some(Submitted(job_id, place)) = submitted {
            self.set(&job_id, &place.context(), Some(state));
        }
    }

    /// How many jobs it holds a place for.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Whether a job's place is kept under the state's own copy of its id.
    #[cfg(test)]
    pub fn holds_the_states_id(&self, job_id: &str, state: &State) -> bool {
        let ours = self.jobs.get_key_value(job_id).map(|(k, _)| k);
        let theirs = state
            .queues
            .values()
            .find_map(|qs| qs.ids.get_key_value(job_id))
            .map(|(k, _)| k);
        matches!((ours, theirs), (Some(a), Some(b)) if Arc::ptr_eq(a, b))
    }

    fn parent(&self, job_id: &str) -> Option<Context> {
        self.jobs
            .get(job_id)
            .map(|p| Context::new().with_remote_span_context(p.context()))
    }

    /// The spans of a stored pass, in each job's own trace: for a start,
    /// the job's wait for capacity and the pass that placed it; for a
    /// preemption, a `preempt` span in the beneficiary's trace linked to
    /// the victim's, and a `preempted` span in the victim's trace linked
    /// back (the stop command continues from it).
    pub fn pass(&mut self, state: &State, record: &PassRecord, began: SystemTime) {
        let tracer = opentelemetry::global::tracer("qm-scheduler");
        let q = record.job_queue.as_str();
        let Some(qs) = state.queues.get(q) else {
            return;
        };
        let c = &qs.cluster;
        let now = SystemTime::now();
        for s in &record.starts {
            // A job whose submit carried no context (sent without tracing)
            // starts its trace here.
            let parent = self.parent(&s.job_id).unwrap_or_default();
            let Some(j) = qs.ids.get(s.job_id.as_str()).and_then(|id| c.job(*id)) else {
                continue;
            };
            let attrs = vec![
                KeyValue::new("qm.job_id", s.job_id.clone()),
                KeyValue::new("qm.queue", q.to_string()),
                KeyValue::new("qm.share", c.share_config(j.spec.share).name.clone()),
                KeyValue::new("qm.attempt", i64::from(s.attempt)),
            ];
            let mut wait_attrs = attrs.clone();
            wait_attrs.push(KeyValue::new(
                "qm.status_reason",
                j.status_reason.render(&|id| qs.public_id(id)),
            ));
            let wait = tracer
                .span_builder("wait for capacity")
                .with_kind(SpanKind::Internal)
                .with_start_time(at(j.runnable_since.0))
                .with_attributes(wait_attrs)
                .start_with_context(&tracer, &parent);
            drop_at(wait, began);
            let mut place = attrs;
            place.push(KeyValue::new(
                "qm.borrowed_instances",
                i64::from(s.borrowed),
            ));
            place.push(KeyValue::new(
                "qm.executors",
                s.placement
                    .iter()
                    .map(|p| p.executor_id.clone())
                    .collect::<Vec<_>>()
                    .join(","),
            ));
            let span = tracer
                .span_builder("schedule")
                .with_kind(SpanKind::Internal)
                .with_start_time(began)
                .with_attributes(place)
                .start_with_context(&tracer, &parent);
            let cx = span.span_context().clone();
            drop_at(span, now);
            if cx.is_valid() {
                self.set(&s.job_id, &cx, Some(state));
            }
        }
        for p in &record.preemptions {
            let share_of = |id: &str| {
                qs.ids
                    .get(id)
                    .and_then(|j| c.job(*j))
                    .map_or_else(String::new, |j| c.share_config(j.spec.share).name.clone())
            };
            let attrs = vec![
                KeyValue::new("qm.queue", q.to_string()),
                KeyValue::new("qm.preemption.kind", p.kind.clone()),
                KeyValue::new("qm.victim.job_id", p.job_id.clone()),
                KeyValue::new("qm.victim.share", share_of(&p.job_id)),
                KeyValue::new("qm.beneficiary.job_id", p.for_job_id.clone()),
                KeyValue::new("qm.beneficiary.share", share_of(&p.for_job_id)),
            ];
            // (A job whose submit carried no context starts its trace here.)
            let victim = self.parent(&p.job_id).unwrap_or_default();
            let beneficiary = self.parent(&p.for_job_id).unwrap_or_default();
            let link = |cx: SpanContext| {
                if cx.is_valid() {
                    vec![Link::with_context(cx)]
                } else {
                    Vec::new()
                }
            };
            let mut a = attrs.clone();
            a.push(KeyValue::new("qm.job_id", p.job_id.clone()));
            let span = tracer
                .span_builder("preempted")
                .with_kind(SpanKind::Internal)
                .with_start_time(began)
                .with_attributes(a)
                .with_links(link(beneficiary.span().span_context().clone()))
                .start_with_context(&tracer, &victim);
            let preempted = span.span_context().clone();
            drop_at(span, now);
            let mut a = attrs;
            a.push(KeyValue::new("qm.job_id", p.for_job_id.clone()));
            let span = tracer
                .span_builder("preempt")
                .with_kind(SpanKind::Internal)
                .with_start_time(began)
                .with_attributes(a)
                .with_links(link(preempted.clone()))
                .start_with_context(&tracer, &beneficiary);
            let preempt = span.span_context().clone();
            drop_at(span, now);
            // The stop command continues the victim's trace from here.
            if preempted.is_valid() {
                self.set(&p.job_id, &preempted, Some(state));
            }
            if preempt.is_valid() && !self.jobs.contains_key(p.for_job_id.as_str()) {
                self.set(&p.for_job_id, &preempt, Some(state));
            }
        }
    }
}

fn drop_at(mut span: impl opentelemetry::trace::Span, end: SystemTime) {
    span.end_with_timestamp(end);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_label_set_that_is_gone_is_removed_not_left_at_its_last_value() {
        let mut set = GaugeSet::new("qm_test_share_gauge", "test", &["share"]);
        set.replace(BTreeMap::from([
            (labels(&["QS1"]), 2.0),
            (labels(&["QS2"]), 1.0),
        ]));
        set.replace(BTreeMap::from([(labels(&["QS1"]), 3.0)]));
        let families = prometheus::gather();
        let family = families
            .iter()
            .find(|f| f.name() == "qm_test_share_gauge")
            .expect("registered");
        let values: Vec<(String, f64)> = family
            .get_metric()
            .iter()
            .map(|m| {
                (
                    m.get_label()[0].value().to_string(),
                    m.get_gauge().get_value(),
                )
            })
            .collect();
        assert_eq!(values, [("QS1".to_string(), 3.0)]);
    }
}
