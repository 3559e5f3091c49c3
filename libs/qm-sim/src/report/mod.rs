//! What a simulation reports: every transition and preemption, each job's
//! outcome, each share's instance-seconds, and the summary measures of the
//! contract's section 7. JSON for scripts, a table and timeline for people.

use std::collections::BTreeMap;

use qm_core::{Cluster, JobEvent, JobId, JobStatus, PreemptionKind, StatusReason, Time};
use serde::Serialize;

use crate::sim::Simulation;

mod table;

/// Accumulates measures while the simulation runs.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    record_timeline: bool,
    transitions: Vec<JobEvent>,
    preemptions: Vec<(Time, JobId, PreemptionKind, JobId)>,
    kinds: BTreeMap<PreemptionKind, u64>,
    submitted_at: Vec<Time>,
    first_started: Vec<Option<Time>>,
    stopped_at: Vec<Option<Time>>,
    pub finished: u64,
    pub rejected: u64,
    /// Scenario actions the scheduling core (or the API) refused, when not
    /// strict: when, which action, and the error a client would get.
    pub rejected_actions: Vec<RejectedOut>,
    policy_changes: u64,
    /// Starts, starts spread over several nodes, and their ranks in all.
    placements: [u64; 3],
    /// Per share slot and type: entitled, used, borrowed, lent instance-seconds.
    integrals: Vec<Vec<[f64; 4]>>,
    /// Per type: fleet and in-use instance-seconds.
    fleet_integrals: Vec<[f64; 2]>,
    /// Per job: another share's job was preempted (across shares) so that
    /// it could start: it was an owner taking its lent capacity back.
    reclaimed_for: Vec<bool>,
    /// Sample each share's instances in use every this often (None: never).
    sample_every: Option<u64>,
    /// The next sample's time (ms).
    next_sample: u64,
    /// The samples taken.
    samples: Vec<UsageSample>,
}

impl Recorder {
    pub fn new(record_timeline: bool) -> Recorder {
        Recorder {
            record_timeline,
            ..Recorder::default()
        }
    }

    pub fn submitted(&mut self, id: JobId, at: Time) {
        debug_assert_eq!(id.0 as usize, self.submitted_at.len() + 1);
        self.submitted_at.push(at);
        self.first_started.push(None);
        self.stopped_at.push(None);
        self.reclaimed_for.push(false);
    }

    /// Samples each share's use every `every` ms (None: never).
    pub fn sampling(mut self, every: Option<u64>) -> Recorder {
        self.sample_every = every;
        self
    }

    pub fn started(&mut self, id: JobId, at: Time) {
        self.first_started[(id.0 - 1) as usize].get_or_insert(at);
    }

    pub fn finished(&mut self, id: JobId, at: Time) {
        self.stopped_at[(id.0 - 1) as usize] = Some(at);
        self.finished += 1;
    }

    pub fn transition(&mut self, event: JobEvent) {
        if self.record_timeline {
            self.transitions.push(event);
        }
    }

    pub fn preemption(&mut self, at: Time, job: JobId, kind: PreemptionKind, for_job: JobId) {
        *self.kinds.entry(kind).or_default() += 1;
        if kind == PreemptionKind::CrossShare {
            if let Some(f) = self
                .reclaimed_for
                .get_mut((for_job.0 as usize).wrapping_sub(1))
            {
                *f = true;
            }
        }
        if self.record_timeline {
            self.preemptions.push((at, job, kind, for_job));
        }
    }

    /// A start placed on `ranks` nodes.
    pub fn placed(&mut self, ranks: usize) {
        self.placements[0] += 1;
        if ranks > 1 {
            self.placements[1] += 1;
            self.placements[2] += ranks as u64;
        }
    }

    pub fn policy_change(&mut self) {
        self.policy_changes += 1;
    }

    pub fn kind_counts(&self) -> BTreeMap<PreemptionKind, u64> {
        self.kinds.clone()
    }

    /// Integrates usage over `[from, to)`, during which the state is constant.
    pub fn advance(&mut self, cluster: &Cluster, from: Time, to: Time) {
        if to <= from {
            return;
        }
        let dt = to.millis_since(from) as f64 / 1000.0;
        if let Some(every) = self.sample_every {
            while self.next_sample < to.as_millis() {
                if self.next_sample >= from.as_millis() {
                    let mut used: BTreeMap<String, u32> = BTreeMap::new();
                    for t in 0..cluster.type_count() {
                        let t = qm_core::TypeIdx(t as u16);
                        let acc = cluster.accounting(t);
                        for (s, u) in cluster.share_usages(t, acc) {
                            if u.used > 0 {
                                *used
                                    .entry(cluster.share_config(s).name.clone())
                                    .or_default() += u.used;
                            }
                        }
                    }
                    self.samples.push(UsageSample {
                        t: self.next_sample as f64 / 1000.0,
                        used,
                    });
                }
                self.next_sample += every.max(1);
            }
        }
        for t in 0..cluster.type_count() {
            let t = qm_core::TypeIdx(t as u16);
            let acc = cluster.accounting(t);
            if self.fleet_integrals.len() <= t.index() {
                self.fleet_integrals.resize(t.index() + 1, [0.0; 2]);
            }
            let fleet = &mut self.fleet_integrals[t.index()];
            fleet[0] += f64::from(acc.fleet) * dt;
            fleet[1] += f64::from(acc.in_use) * dt;
            let lender_idle = f64::from(acc.lendable - acc.unassigned);
            let to_back = f64::from(acc.borrowed.saturating_sub(acc.unassigned)).min(lender_idle);
            for (s, usage) in cluster.share_usages(t, acc) {
                let lends = cluster.share_config(s).strategy.lends();
                let lent = if lends && lender_idle > 0.0 {
                    f64::from(usage.idle) * to_back / lender_idle
                } else {
                    0.0
                };
                if usage.entitlement == 0 && usage.used == 0 {
                    continue;
                }
                if self.integrals.len() <= s.index() {
                    self.integrals.resize(s.index() + 1, Vec::new());
                }
                let per_type = &mut self.integrals[s.index()];
                if per_type.len() <= t.index() {
                    per_type.resize(t.index() + 1, [0.0; 4]);
                }
                let acc = &mut per_type[t.index()];
                acc[0] += f64::from(usage.entitlement) * dt;
                acc[1] += f64::from(usage.used) * dt;
                acc[2] += f64::from(usage.borrowed) * dt;
                acc[3] += lent * dt;
            }
        }
    }
}

/// Each share's instances in use at one instant (`Options::sample_every`).
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageSample {
    pub t: f64,
    /// Share -> instances in use (shares using none left out).
    pub used: BTreeMap<String, u32>,
}

/// One status change.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TransitionOut {
    pub t: f64,
    pub job_name: String,
    pub from: String,
    pub to: String,
    pub status_reason: String,
}

/// One preemption decision.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionOut {
    pub t: f64,
    pub job_name: String,
    pub kind: String,
    pub for_job_name: String,
}

/// One job's outcome.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobOut {
    pub job_name: String,
    pub quota_share_name: String,
    pub instance_type: String,
    pub instance_count: u32,
    pub scheduling_priority: u32,
    /// Its workload class, where its share declares classes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload_class: Option<String>,
    pub status: String,
    pub status_reason: String,
    pub submitted_at: f64,
    pub first_started_at: Option<f64>,
    pub stopped_at: Option<f64>,
    pub wait_seconds: Option<f64>,
    pub completion_seconds: Option<f64>,
    pub attempts: usize,
    pub attempt_outcomes: Vec<String>,
    pub preempted_attempt_count: u32,
    pub recomputed_seconds: f64,
    /// Another share's job was preempted so that it could start: its wait
    /// is an owner's wait to get lent capacity back.
    pub started_by_reclaim: bool,
}

/// Instance-seconds of one share and type.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShareOut {
    pub quota_share_name: String,
    pub instance_type: String,
    pub entitlement: u32,
    pub entitled_instance_seconds: f64,
    pub used_instance_seconds: f64,
    pub borrowed_instance_seconds: f64,
    pub lent_instance_seconds: f64,
    pub useful_instance_seconds: f64,
    pub recomputed_instance_seconds: f64,
}

/// The usage ledger's totals over the run (`qm_core::usage`), per share,
/// type and workload class: what `qm usage` shows of a live queue.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageOut {
    pub quota_share_name: String,
    pub instance_type: String,
    pub workload_class: String,
    pub own_instance_seconds: f64,
    pub borrowed_instance_seconds: f64,
    pub waiting_instance_seconds: f64,
    pub recomputed_instance_seconds: f64,
}

/// Percentiles (nearest rank) of a set of seconds.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Percentiles {
    pub count: usize,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Percentiles {
    fn of(mut values: Vec<f64>) -> Percentiles {
        values.sort_by(f64::total_cmp);
        let rank = |q: f64| qm_core::stats::nearest_rank(&values, q);
        Percentiles {
            count: values.len(),
            p50: rank(0.50),
            p90: rank(0.90),
            p99: rank(0.99),
            max: values.last().copied(),
        }
    }
}

/// An action the run refused and went on without (`--strict` stops at it
/// instead): what a client of the API would have been answered.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RejectedOut {
    pub t: f64,
    /// The action's position in the scenario's `actions` (from 0).
    pub action: usize,
    /// `submit`, `updateServiceJob`, ...
    pub verb: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_name: Option<String>,
    /// As AWS Batch answers a refused request: `ClientException`.
    pub error_code: String,
    pub message: String,
}

/// The run's headline measures.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub end_time: f64,
    pub passes: u64,
    pub jobs_by_status: BTreeMap<String, u64>,
    /// Submissions the configuration rejected (generated workloads only).
    pub rejected_submissions: u64,
    /// Scenario actions refused (see `rejected`).
    pub rejected_actions: u64,
    /// Submit to SUCCEEDED, per share and over all jobs.
    pub completion_seconds: BTreeMap<String, Percentiles>,
    /// Submit to first start, per share and over all jobs.
    pub wait_seconds: BTreeMap<String, Percentiles>,
    pub preemptions: BTreeMap<String, u64>,
    pub useful_instance_seconds: f64,
    pub recomputed_instance_seconds: f64,
    /// Recomputed work over all work done.
    pub recomputed_fraction: f64,
    /// In-use over available instance-seconds of the fleet.
    pub fleet_utilisation: f64,
    /// Limit and priority changes made during the run.
    pub policy_changes: u64,
    /// Where starts were placed: how many were spread over several nodes
    /// (the fleet's fragmentation shows here).
    pub placement: PlacementOut,
}

/// Starts by how they were placed.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementOut {
    pub starts: u64,
    /// Starts spread over several nodes (no single node had room).
    pub spread_starts: u64,
    /// Mean nodes per spread start.
    pub mean_nodes_per_spread_start: f64,
}

/// Everything a run reports.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub job_queue_name: String,
    pub transitions: Vec<TransitionOut>,
    pub preemptions: Vec<PreemptionOut>,
    pub jobs: Vec<JobOut>,
    pub shares: Vec<ShareOut>,
    /// The lost-work ledger's totals, from the scheduling core as the
    /// services show them (`qm snapshot`): per share that lost work or
    /// was the beneficiary of others'.
    pub lost_work: Vec<LostWorkOut>,
    /// The usage ledger's totals over the run.
    pub usage: Vec<UsageOut>,
    /// Actions refused, in order (the run went on without them).
    pub rejected: Vec<RejectedOut>,
    /// Each share's instances in use over time (`Options::sample_every`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub usage_samples: Vec<UsageSample>,
    pub summary: Summary,
}

/// Attempts that threw work away and the instance-seconds recomputed.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LostOut {
    pub attempts: u64,
    pub recomputed_instance_seconds: f64,
}

impl From<qm_core::LostWork> for LostOut {
    fn from(w: qm_core::LostWork) -> LostOut {
        LostOut {
            attempts: w.attempts,
            recomputed_instance_seconds: w.recomputed_instance_ms as f64 / 1000.0,
        }
    }
}

/// One share's lost-work totals: its attempts by cause, and other jobs'
/// attempts preempted for its jobs.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LostWorkOut {
    pub quota_share_name: String,
    pub by_cause: BTreeMap<String, LostOut>,
    pub lost_for_this_share: LostOut,
}

fn secs(t: Time) -> f64 {
    t.as_secs_f64()
}

/// A job's name in the scenario (its id where it has none).
fn job_name(sim: &Simulation, id: JobId) -> String {
    sim.jobs
        .get((id.0 as usize).wrapping_sub(1))
        .map_or_else(|| id.to_string(), |j| j.name.clone())
}

/// Every recorded transition and preemption, its jobs named.
fn timeline_rows(sim: &Simulation) -> (Vec<TransitionOut>, Vec<PreemptionOut>) {
    let r = &sim.recorder;
    let name = |id: JobId| job_name(sim, id);
    let render = |reason: &StatusReason| reason.render(&name);
    let transitions = r
        .transitions
        .iter()
        .map(|e| TransitionOut {
            t: secs(e.at),
            job_name: name(e.job),
            from: e.from.as_str().into(),
            to: e.to.as_str().into(),
            status_reason: render(&e.reason),
        })
        .collect();
    let preemptions = r
        .preemptions
        .iter()
        .map(|(t, job, kind, for_job)| PreemptionOut {
            t: secs(*t),
            job_name: name(*job),
            kind: kind.as_str().into(),
            for_job_name: name(*for_job),
        })
        .collect();
    (transitions, preemptions)
}

pub(crate) fn build(sim: &Simulation, end: Time) -> Report {
    let c = &sim.cluster;
    let r = &sim.recorder;
    let name = |id: JobId| job_name(sim, id);
    let render = |reason: &StatusReason| reason.render(&name);
    let (transitions, preemptions) = timeline_rows(sim);
    let mut jobs = Vec::with_capacity(sim.jobs.len());
    let mut completion: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut wait: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let mut by_status: BTreeMap<String, u64> = BTreeMap::new();
    let mut useful: BTreeMap<(u16, u16), f64> = BTreeMap::new();
    let mut recomputed: BTreeMap<(u16, u16), f64> = BTreeMap::new();
    for (i, sj) in sim.jobs.iter().enumerate() {
        let id = JobId(i as u64 + 1);
        let job = c.job(id).expect("every simulated job is in the cluster");
        let share = c.share_config(job.spec.share).name.clone();
        let submitted = r.submitted_at[i];
        let first = r.first_started[i];
        let stopped = r.stopped_at[i];
        let reason = match job.status {
            JobStatus::Runnable => c.explain(id, end).map_or_else(
                || render(&job.status_reason),
                |w| render(&StatusReason::Waiting(w)),
            ),
            _ => render(&job.status_reason),
        };
        let wait_s = first.map(|f| f.millis_since(submitted) as f64 / 1000.0);
        let completion_s = (job.status == JobStatus::Succeeded)
            .then(|| stopped.map(|s| s.millis_since(submitted) as f64 / 1000.0))
            .flatten();
        if let Some(w) = wait_s {
            wait.entry(share.clone()).or_default().push(w);
            wait.entry("*".into()).or_default().push(w);
        }
        if let Some(cs) = completion_s {
            completion.entry(share.clone()).or_default().push(cs);
            completion.entry("*".into()).or_default().push(cs);
        }
        *by_status.entry(job.status.as_str().into()).or_default() += 1;
        let key = (job.spec.share.0, job.spec.instance_type.0);
        let count = f64::from(job.spec.count);
        *useful.entry(key).or_default() += sj.committed.min(sj.duration) as f64 / 1000.0 * count;
        *recomputed.entry(key).or_default() += sj.recomputed as f64 / 1000.0 * count;
        if !r.record_timeline && sim.jobs.len() > 100_000 {
            continue; // huge runs report the summary only
        }
        jobs.push(JobOut {
            job_name: sj.name.clone(),
            quota_share_name: share,
            instance_type: c.type_name(job.spec.instance_type).into(),
            instance_count: job.spec.count,
            scheduling_priority: job.spec.priority,
            workload_class: {
                let config = c.share_config(job.spec.share);
                (!config.classes.is_empty())
                    .then(|| config.class_name(job.spec.class.as_deref()).to_string())
            },
            status: job.status.as_str().into(),
            status_reason: reason,
            submitted_at: secs(submitted),
            first_started_at: first.map(secs),
            stopped_at: stopped.map(secs),
            wait_seconds: wait_s,
            completion_seconds: completion_s,
            attempts: job.attempts.len(),
            attempt_outcomes: job
                .attempts
                .iter()
                .map(|a| a.outcome.map_or("IN_PROGRESS", |o| o.as_str()).to_string())
                .collect(),
            preempted_attempt_count: job.preempted_attempts,
            recomputed_seconds: sj.recomputed as f64 / 1000.0,
            started_by_reclaim: r.reclaimed_for[i],
        });
    }
    let shares = share_rows(sim, &useful, &recomputed);
    let lost_work = lost_work_rows(c);
    let useful_total: f64 = useful.values().sum();
    let recomputed_total: f64 = recomputed.values().sum();
    let (fleet_is, in_use_is) = r
        .fleet_integrals
        .iter()
        .fold((0.0, 0.0), |(f, u), v| (f + v[0], u + v[1]));
    let preemption_counts = preemption_counts(sim);
    let usage = usage_rows(c, end);
    Report {
        job_queue_name: c.queue_name().into(),
        transitions,
        preemptions,
        jobs,
        shares,
        lost_work,
        usage,
        rejected: r.rejected_actions.clone(),
        usage_samples: r.samples.clone(),
        summary: Summary {
            end_time: secs(end),
            passes: sim.passes(),
            jobs_by_status: by_status,
            rejected_submissions: r.rejected,
            rejected_actions: r.rejected_actions.len() as u64,
            completion_seconds: completion
                .into_iter()
                .map(|(k, v)| (k, Percentiles::of(v)))
                .collect(),
            wait_seconds: wait
                .into_iter()
                .map(|(k, v)| (k, Percentiles::of(v)))
                .collect(),
            preemptions: preemption_counts,
            useful_instance_seconds: useful_total,
            recomputed_instance_seconds: recomputed_total,
            recomputed_fraction: if useful_total + recomputed_total > 0.0 {
                recomputed_total / (useful_total + recomputed_total)
            } else {
                0.0
            },
            fleet_utilisation: if fleet_is > 0.0 {
                in_use_is / fleet_is
            } else {
                0.0
            },
            policy_changes: r.policy_changes,
            placement: PlacementOut {
                starts: r.placements[0],
                spread_starts: r.placements[1],
                mean_nodes_per_spread_start: if r.placements[1] > 0 {
                    r.placements[2] as f64 / r.placements[1] as f64
                } else {
                    0.0
                },
            },
        },
    }
}

/// Each share's instance-seconds per type it is entitled to or used, with
/// the useful and recomputed work of its jobs (keyed by share and type).
fn share_rows(
    sim: &Simulation,
    useful: &BTreeMap<(u16, u16), f64>,
    recomputed: &BTreeMap<(u16, u16), f64>,
) -> Vec<ShareOut> {
    let c = &sim.cluster;
    let r = &sim.recorder;
    let mut shares = Vec::new();
    for s in c.share_indices() {
        let config = c.share_config(s);
        for t in sim.type_indices() {
            let key = (s.0, t.0);
            let integral = r
                .integrals
                .get(s.index())
                .and_then(|per_type| per_type.get(t.index()))
                .copied()
                .unwrap_or_default();
            let entitlement = config.entitlement(c.type_name(t));
            if entitlement == 0 && integral[1] == 0.0 {
                continue;
            }
            shares.push(ShareOut {
                quota_share_name: config.name.clone(),
                instance_type: c.type_name(t).into(),
                entitlement,
                entitled_instance_seconds: integral[0],
                used_instance_seconds: integral[1],
                borrowed_instance_seconds: integral[2],
                lent_instance_seconds: integral[3],
                useful_instance_seconds: useful.get(&key).copied().unwrap_or(0.0),
                recomputed_instance_seconds: recomputed.get(&key).copied().unwrap_or(0.0),
            });
        }
    }
    shares
}

/// The lost-work totals of every share that lost any.
fn lost_work_rows(c: &Cluster) -> Vec<LostWorkOut> {
    c.share_indices()
        .filter_map(|s| {
            let ledger = c.lost_work(s);
            (!ledger.is_empty()).then(|| LostWorkOut {
                quota_share_name: c.share_config(s).name.clone(),
                by_cause: ledger
                    .lost_by_cause()
                    .map(|(cause, w)| (cause.as_str().to_string(), w.into()))
                    .collect(),
                lost_for_this_share: ledger.lost_for_this_share.into(),
            })
        })
        .collect()
}

/// Preemptions by kind, and their total.
fn preemption_counts(sim: &Simulation) -> BTreeMap<String, u64> {
    let mut preemption_counts: BTreeMap<String, u64> = sim
        .preemption_kind_counts()
        .into_iter()
        .map(|(k, n)| (k.as_str().to_string(), n))
        .collect();
    let total: u64 = preemption_counts.values().sum();
    preemption_counts.insert("total".into(), total);
    preemption_counts
}

/// The usage ledger up to `end`, by share, type and class.
fn usage_rows(c: &Cluster, end: Time) -> Vec<UsageOut> {
    let mut ledger: BTreeMap<(String, String, String), qm_core::Usage> = BTreeMap::new();
    for r in c.usage_report(0, u32::MAX - 1, end).rows {
        ledger
            .entry((r.share, r.instance_type, r.class))
            .or_default()
            .add(&r.usage);
    }
    ledger
        .into_iter()
        .map(|((share, instance_type, class), u)| UsageOut {
            quota_share_name: share,
            instance_type,
            workload_class: class,
            own_instance_seconds: u.own_ms as f64 / 1000.0,
            borrowed_instance_seconds: u.borrowed_ms as f64 / 1000.0,
            waiting_instance_seconds: u.waiting_ms as f64 / 1000.0,
            recomputed_instance_seconds: u.recomputed_ms() as f64 / 1000.0,
        })
        .collect()
}
