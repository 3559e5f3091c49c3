//! From a trace to a workload Quartermaster can run: which share each job
//! belongs to, how many instances its GPUs are, whether and how often it
//! checkpoints, and how big the fleet and each share are. Every choice is
//! a parameter with a documented default, recorded in the report with the
//! seed, so a rerun with the same inputs is identical.

use std::collections::BTreeMap;

use qm_sim::rng::SplitMix64;
use serde::Serialize;

use crate::trace::TraceJob;

/// The most quota shares a queue holds (the core's rule).
const MAX_SHARES: usize = qm_core::config::MAX_SHARES_PER_QUEUE;

/// How jobs are grouped into quota shares.
#[derive(Clone, Debug)]
pub enum Grouping {
    /// Each cluster of the trace is a share of one common fleet, sized by
    /// its mean GPU demand.
    Clusters,
    /// Synthetic teams, one per virtual cluster of the quota table, sized by
    /// its mean quota; each job goes to a team drawn in proportion to the
    /// sizes (seeded).
    Teams { quota: Vec<(String, f64)> },
}

/// The mapping's parameters.
#[derive(Clone, Debug)]
pub struct Mapping {
    pub grouping: Grouping,
    pub seed: u64,
    /// GPUs per instance: a job of `g` GPUs needs `ceil(g / this)`
    /// instances.
    pub gpus_per_instance: u32,
    pub instance_type: String,
    /// The fleet is sized so that the trace's mean GPU demand is this
    /// fraction of it (contention comes from the bursts).
    pub load: f64,
    /// The fraction of jobs that checkpoint (drawn per job, seeded).
    pub checkpointing_fraction: f64,
    /// A checkpointing job's interval, log-uniform in this range (seconds).
    pub checkpoint_interval: (f64, f64),
    /// Restore and launch time of every attempt (seconds).
    pub startup_seconds: f64,
    /// Time from the stop request to the end of an attempt (seconds).
    pub stop_seconds: f64,
    /// Only the first this many jobs by submission time (None: all).
    pub max_jobs: Option<usize>,
}

impl Default for Mapping {
    fn default() -> Self {
        Mapping {
            grouping: Grouping::Clusters,
            seed: 2021,
            gpus_per_instance: 1,
            instance_type: "gpu".into(),
            load: 0.9,
            checkpointing_fraction: 0.8,
            checkpoint_interval: (600.0, 3600.0),
            startup_seconds: 30.0,
            stop_seconds: 10.0,
            max_jobs: None,
        }
    }
}

/// One job to run.
#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    pub share: String,
    /// Seconds from the first submission.
    pub submitted: f64,
    pub duration: f64,
    pub instances: u32,
    pub gpus: u32,
    pub checkpoint_interval: Option<f64>,
}

/// The workload and what it was made from.
#[derive(Clone, Debug)]
pub struct Workload {
    pub instance_type: String,
    /// Instances in the fleet.
    pub fleet: u32,
    /// Share -> its entitlement (instances); they add up to the fleet.
    pub shares: Vec<(String, u32)>,
    pub jobs: Vec<Job>,
    pub mapping: MappingOut,
}

/// The mapping as the report states it.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MappingOut {
    pub grouping: String,
    pub seed: u64,
    pub gpus_per_instance: u32,
    pub instance_type: String,
    pub load: f64,
    pub checkpointing_fraction: f64,
    pub checkpoint_interval_seconds: (f64, f64),
    pub startup_seconds: f64,
    pub stop_seconds: f64,
    pub jobs: usize,
    pub gpu_hours: f64,
    pub span_days: f64,
    pub mean_gpu_demand: f64,
    pub fleet_instances: u32,
    pub shares: BTreeMap<String, u32>,
    /// In words, for the report.
    pub description: String,
}

/// Splits `total` into whole parts proportional to `weights` (largest
/// remainder), each at least 1 when its weight is positive (`total` must
/// be at least the number of positive weights).
fn apportion(total: u32, weights: &[f64]) -> Vec<u32> {
    let sum: f64 = weights.iter().filter(|w| **w > 0.0).sum();
    let positive = weights.iter().filter(|w| **w > 0.0).count() as u32;
    if sum <= 0.0 || total < positive {
        return vec![0; weights.len()];
    }
    let rest = total - positive;
    let exact: Vec<f64> = weights
        .iter()
        .map(|w| {
            if *w > 0.0 {
                w / sum * f64::from(rest)
            } else {
                0.0
            }
        })
        .collect();
    let mut parts: Vec<u32> = exact
        .iter()
        .zip(weights)
        .map(|(e, w)| if *w > 0.0 { 1 + e.floor() as u32 } else { 0 })
        .collect();
    let mut order: Vec<usize> = (0..weights.len()).filter(|i| weights[*i] > 0.0).collect();
    order.sort_by(|a, b| {
        let ra = exact[*a] - exact[*a].floor();
        let rb = exact[*b] - exact[*b].floor();
        rb.total_cmp(&ra).then(a.cmp(b))
    });
    let given: u32 = parts.iter().sum();
    for i in order.into_iter().take(total.saturating_sub(given) as usize) {
        parts[i] += 1;
    }
    parts
}

/// Builds the workload from `jobs` (from every file of the trace).
pub fn build(mut trace: Vec<TraceJob>, m: &Mapping) -> Result<Workload, String> {
    if trace.is_empty() {
        return Err("the trace has no jobs".into());
    }
    check_mapping(m)?;
    let (lo, hi) = m.checkpoint_interval;
    trace.sort_by(|a, b| {
        a.submitted
            .total_cmp(&b.submitted)
            .then_with(|| a.cluster.cmp(&b.cluster))
            .then_with(|| a.job_id.cmp(&b.job_id))
    });
    if let Some(n) = m.max_jobs {
        trace.truncate(n);
    }
    let t0 = trace[0].submitted;
    let end = trace.iter().map(|j| j.submitted).fold(t0, f64::max);
    let span = (end - t0).max(3600.0);
    let instances = |gpus: u32| gpus.div_ceil(m.gpus_per_instance);
    let mut rng = SplitMix64::new(m.seed);
    // The groups and their weights.
    let (names, weights, grouping_words): (Vec<String>, Vec<f64>, String) = match &m.grouping {
        Grouping::Clusters => {
            let mut demand: BTreeMap<String, f64> = BTreeMap::new();
            for j in &trace {
                *demand.entry(j.cluster.clone()).or_default() +=
                    j.duration * f64::from(instances(j.gpus));
            }
            (
                demand.keys().cloned().collect(),
                demand.values().map(|d| d / span).collect(),
                "each cluster of the trace is a quota share of one common fleet, its entitlement in proportion to its mean demand (instance-seconds over the trace's span)".into(),
            )
        }
        Grouping::Teams { quota } => {
            if quota.is_empty() {
                return Err("the quota table has no cluster with a quota".into());
            }
            // A queue holds at most MAX_SHARES quota shares: the smallest
            // teams beyond that are merged into one.
            let mut quota = quota.clone();
            if quota.len() > MAX_SHARES {
                quota.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                let rest: f64 = quota[MAX_SHARES - 1..].iter().map(|q| q.1).sum();
                let merged = quota.len() - (MAX_SHARES - 1);
                quota.truncate(MAX_SHARES - 1);
                quota.push((format!("other-{merged}-teams"), rest));
            }
            let quota = &quota;
            (
                quota.iter().map(|(n, _)| n.clone()).collect(),
                quota.iter().map(|(_, q)| *q).collect(),
                format!(
                    "{} synthetic teams, one per virtual cluster of the Helios quota table with a quota (beyond {MAX_SHARES}, the smallest merged into one: a queue holds at most {MAX_SHARES} shares), entitlements in proportion to their mean daily quota; each job is assigned to a team drawn in proportion to those sizes (seed {})",
                    quota.len(),
                    m.seed
                ),
            )
        }
    };
    let total_weight: f64 = weights.iter().sum();
    let mut jobs = Vec::with_capacity(trace.len());
    let mut demand = 0.0;
    let mut gpu_seconds = 0.0;
    for (n, j) in trace.iter().enumerate() {
        let share = match &m.grouping {
            Grouping::Clusters => j.cluster.clone(),
            Grouping::Teams { .. } => {
                let mut pick = rng.unit() * total_weight;
                let mut chosen = names.len() - 1;
                for (i, w) in weights.iter().enumerate() {
                    if pick < *w {
                        chosen = i;
                        break;
                    }
                    pick -= w;
                }
                names[chosen].clone()
            }
        };
        let checkpoints = rng.unit() < m.checkpointing_fraction;
        let u = rng.unit();
        let interval = checkpoints.then(|| (lo.ln() + u * (hi.ln() - lo.ln())).exp().round());
        let count = instances(j.gpus);
        demand += j.duration * f64::from(count);
        gpu_seconds += j.duration * f64::from(j.gpus);
        jobs.push(Job {
            name: format!("{}-{}", j.cluster, n),
            share,
            submitted: j.submitted - t0,
            duration: j.duration.round().max(1.0),
            instances: count,
            gpus: j.gpus,
            checkpoint_interval: interval,
        });
    }
    let mean_demand = demand / span;
    // At least one instance per share.
    let shares_needed = weights.iter().filter(|w| **w > 0.0).count() as u32;
    let fleet = ((mean_demand / m.load).ceil() as u32)
        .max(shares_needed)
        .max(1);
    let parts = apportion(fleet, &weights);
    let shares: Vec<(String, u32)> = names.into_iter().zip(parts).collect();
    let mapping = MappingOut {
        grouping: match m.grouping {
            Grouping::Clusters => "clusters".into(),
            Grouping::Teams { .. } => "teams".into(),
        },
        seed: m.seed,
        gpus_per_instance: m.gpus_per_instance,
        instance_type: m.instance_type.clone(),
        load: m.load,
        checkpointing_fraction: m.checkpointing_fraction,
        checkpoint_interval_seconds: m.checkpoint_interval,
        startup_seconds: m.startup_seconds,
        stop_seconds: m.stop_seconds,
        jobs: jobs.len(),
        gpu_hours: gpu_seconds / 3600.0,
        span_days: span / 86400.0,
        mean_gpu_demand: mean_demand * f64::from(m.gpus_per_instance),
        fleet_instances: fleet,
        shares: shares.iter().cloned().collect(),
        description: format!(
            "{grouping_words}. A job of g GPUs needs ceil(g/{gpi}) instances of type {ty} ({gpi} GPU(s) each). The fleet is {fleet} instances, so that the trace's mean demand ({mean:.0} instances) is {load:.0}% of it. {cf:.0}% of jobs (drawn per job) checkpoint, every {lo:.0}-{hi:.0} s (log-uniform); the others lose all progress when stopped. Every attempt takes {st:.0} s to start and {sp:.0} s to stop. Priorities are all 0 (the trace has none): within a share, jobs start in submission order.",
            gpi = m.gpus_per_instance,
            ty = m.instance_type,
            mean = mean_demand,
            load = m.load * 100.0,
            cf = m.checkpointing_fraction * 100.0,
            st = m.startup_seconds,
            sp = m.stop_seconds,
        ),
    };
    Ok(Workload {
        instance_type: m.instance_type.clone(),
        fleet,
        shares,
        jobs,
        mapping,
    })
}

/// Refuses a mapping whose numbers are out of range.
fn check_mapping(m: &Mapping) -> Result<(), String> {
    if m.gpus_per_instance == 0 {
        return Err("gpus per instance must be >= 1".into());
    }
    if !(m.load > 0.0 && m.load <= 1.0) {
        return Err(format!("load {} is not in (0, 1]", m.load));
    }
    if !(0.0..=1.0).contains(&m.checkpointing_fraction) {
        return Err(format!(
            "checkpointing fraction {} is not in [0, 1]",
            m.checkpointing_fraction
        ));
    }
    let (lo, hi) = m.checkpoint_interval;
    if !(lo > 0.0 && hi >= lo) {
        return Err(format!(
            "checkpoint interval range {lo}..{hi} is not 0 < min <= max"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(cluster: &str, id: &str, at: f64, dur: f64, gpus: u32) -> TraceJob {
        TraceJob {
            cluster: cluster.into(),
            job_id: id.into(),
            submitted: at,
            duration: dur,
            gpus,
        }
    }

    #[test]
    fn shares_are_sized_by_demand_and_reruns_are_identical() {
        let trace = vec![
            job("c1", "a", 100.0, 7200.0, 8),
            job("c2", "b", 200.0, 3600.0, 2),
            job("c1", "c", 3700.0, 3600.0, 1),
            job("c2", "d", 7300.0, 1800.0, 16),
        ];
        let m = Mapping {
            gpus_per_instance: 8,
            ..Mapping::default()
        };
        let w = build(trace.clone(), &m).expect("built");
        assert_eq!(
            w.jobs[0].submitted, 0.0,
            "time starts at the first submission"
        );
        assert_eq!(
            w.jobs.iter().map(|j| j.instances).collect::<Vec<_>>(),
            [1, 1, 1, 2],
            "ceil(gpus / 8)"
        );
        let total: u32 = w.shares.iter().map(|s| s.1).sum();
        assert_eq!(total, w.fleet);
        // c1: 7200 + 3600 instance-seconds; c2: 3600 + 3600.
        assert!(w.shares[0].1 >= w.shares[1].1, "{:?}", w.shares);
        let again = build(trace, &m).expect("built");
        let key = |w: &Workload| {
            w.jobs
                .iter()
                .map(|j| {
                    (
                        j.name.clone(),
                        j.share.clone(),
                        j.checkpoint_interval.map(|i| i as u64),
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(key(&w), key(&again), "the same seed, the same workload");
        assert!(w.mapping.description.contains("ceil(g/8)"));
    }

    #[test]
    fn teams_are_drawn_in_proportion_to_their_quota() {
        let trace: Vec<TraceJob> = (0..4000)
            .map(|i| job("c1", &i.to_string(), f64::from(i) * 10.0, 600.0, 1))
            .collect();
        let m = Mapping {
            grouping: Grouping::Teams {
                quota: vec![("big".into(), 300.0), ("small".into(), 100.0)],
            },
            ..Mapping::default()
        };
        let w = build(trace, &m).expect("built");
        let big = w.jobs.iter().filter(|j| j.share == "big").count() as f64;
        assert!((big / 4000.0 - 0.75).abs() < 0.03, "{big}");
        let sizes: BTreeMap<_, _> = w.shares.iter().cloned().collect();
        assert!(sizes["big"] >= 2 * sizes["small"], "{sizes:?}");
    }

    #[test]
    fn beyond_twenty_teams_the_smallest_are_merged() {
        let trace: Vec<TraceJob> = (0..100)
            .map(|i| job("c1", &i.to_string(), f64::from(i), 600.0, 1))
            .collect();
        let quota: Vec<(String, f64)> = (0..24)
            .map(|i| (format!("vc{i:02}"), f64::from(100 - i)))
            .collect();
        let m = Mapping {
            grouping: Grouping::Teams { quota },
            ..Mapping::default()
        };
        let w = build(trace, &m).expect("built");
        assert_eq!(w.shares.len(), 20);
        assert_eq!(w.shares[19].0, "other-5-teams");
        assert!(w.shares.iter().all(|(n, _)| n != "vc23"));
        assert!(w.mapping.description.contains("smallest merged"));
    }

    #[test]
    fn apportioning_adds_up() {
        assert_eq!(apportion(10, &[1.0, 1.0, 1.0]).iter().sum::<u32>(), 10);
        assert_eq!(apportion(3, &[5.0, 0.0, 0.001]), vec![2, 0, 1]);
        let small = [
            100.0, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001, 0.001,
        ];
        assert_eq!(apportion(10, &small), vec![1; 10], "one each first");
        let p = apportion(12, &small);
        assert_eq!(p.iter().sum::<u32>(), 12);
        assert_eq!(p[0], 3, "{p:?}");
    }
}
