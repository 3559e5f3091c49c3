//! The same workload under several sharing policies, on the simulator (the
//! scheduling core, unchanged), and the measures that decide between them,
//! per policy and per share.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use qm_sim::scenario::{Action, JobDefaults, QueueSpec, SubmitSpec};
use qm_sim::{Options, Scenario, Simulation};
use qm_wire::messages as wire;
use serde::Serialize;

use crate::workload::Workload;

/// How the shares share.
#[derive(Clone, Debug, PartialEq)]
pub enum Sharing {
    /// Every share RESERVE: hard partitions.
    Partitions,
    /// One share holding the whole fleet: one pool, first come first served.
    Pool,
    /// Every share LEND_AND_BORROW with this `borrowLimit` (percent of its
    /// entitlement; -1 unlimited).
    Borrow(i64),
}

/// One policy to compare.
#[derive(Clone, Debug)]
pub struct Policy {
    pub name: String,
    pub sharing: Sharing,
    pub min_runtime_seconds: Option<u64>,
    pub reborrow_cooldown_seconds: Option<u64>,
    pub borrow_requires_checkpoint: bool,
    /// Checkpoint-then-preempt: a checkpointing job is asked to checkpoint
    /// and given this long before it is stopped (it commits after
    /// `checkpoint_seconds`).
    pub checkpoint_before_preempt: Option<(u64, f64)>,
    /// Workload classes in every share ([`CLASSES`]), jobs drawn into them
    /// by [`class_of`], in-share preemption on.
    pub classes: bool,
    /// A borrowing budget in every share: this percent of its
    /// entitlement's instance-hours per window (every job declares its own
    /// length as its expected run).
    pub budget: Option<BudgetPolicy>,
    /// FAIR_SHARE instead of FIFO: idle capacity by weight (each share's
    /// proportional to its entitlement) and recent borrowing.
    pub fair_share: bool,
    /// With FAIR_SHARE: rebalancing preemption, each job at most once per
    /// this many seconds.
    pub rebalance_seconds: Option<u64>,
}

/// A borrowing budget proportional to each share's size.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BudgetPolicy {
    /// Percent of the entitlement's instance-hours over the window.
    pub percent: u32,
    pub window_hours: u64,
    /// CHECKPOINT_AND_STOP rather than FINISH.
    pub stop: bool,
}

/// Jain's fairness index of `x` (1: all equal; 1/n: one has everything);
/// None when nothing was had.
pub fn jain(x: &[f64]) -> Option<f64> {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    (sum > 0.0 && squares > 0.0).then(|| sum * sum / (x.len() as f64 * squares))
}

/// The workload classes the `classes` policy gives every share, with the
/// share of jobs drawn into each: exploratory work (60%, may borrow),
/// release work (30%, never on borrowed capacity, preempted in-share only
/// by urgent work) and urgent work (10%, the highest band, may borrow).
pub const CLASSES: [(&str, u32); 3] = [("exploratory", 60), ("release", 30), ("urgent", 10)];

/// The class a job is drawn into: a hash of its name and the workload's
/// seed, against [`CLASSES`]' proportions. Every policy reports the same
/// jobs under the same class, so "one policy per share" and "classes" are
/// compared class by class.
pub fn class_of(seed: u64, job_name: &str) -> &'static str {
    // FNV-1a, seeded.
    let h = job_name.bytes().fold(0xcbf2_9ce4_8422_2325 ^ seed, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    let mut draw = (h % 100) as u32;
    for (name, percent) in CLASSES {
        if draw < percent {
            return name;
        }
        draw -= percent;
    }
    CLASSES[0].0
}

fn class_documents() -> Vec<wire::WorkloadClass> {
    let band = |min, max| wire::PriorityBand { min, max };
    vec![
        wire::WorkloadClass {
            name: "exploratory".into(),
            priority_band: band(0, 99),
            ..Default::default()
        },
        wire::WorkloadClass {
            name: "release".into(),
            priority_band: band(100, 199),
            may_borrow: Some(false),
            preemptible_by: Some(vec!["urgent".into()]),
            ..Default::default()
        },
        wire::WorkloadClass {
            name: "urgent".into(),
            priority_band: band(200, 299),
            ..Default::default()
        },
    ]
}

impl Policy {
    fn plain(name: &str, sharing: Sharing) -> Policy {
        Policy {
            name: name.into(),
            sharing,
            min_runtime_seconds: None,
            reborrow_cooldown_seconds: None,
            borrow_requires_checkpoint: false,
            checkpoint_before_preempt: None,
            classes: false,
            budget: None,
            fair_share: false,
            rebalance_seconds: None,
        }
    }

    /// In words, for the report.
    pub fn describe(&self) -> String {
        let mut s = match self.sharing {
            Sharing::Partitions => "hard partitions: every share RESERVE".to_string(),
            Sharing::Pool => "one pool: a single share with the whole fleet".to_string(),
            Sharing::Borrow(-1) => "quota shares, LEND_AND_BORROW, unlimited borrowing".to_string(),
            Sharing::Borrow(l) => format!("quota shares, LEND_AND_BORROW, borrowLimit {l}%"),
        };
        if let Some(m) = self.min_runtime_seconds {
            s.push_str(&format!("; minRuntimeBeforePreemptionSeconds {m}"));
        }
        if let Some(c) = self.reborrow_cooldown_seconds {
            s.push_str(&format!("; reborrowCooldownSeconds {c}"));
        }
        if self.borrow_requires_checkpoint {
            s.push_str("; borrowRequiresCheckpoint");
        }
        if let Some((w, c)) = self.checkpoint_before_preempt {
            s.push_str(&format!(
                "; checkpoint-then-preempt ({w} s window, jobs commit {c:.0} s after the signal)"
            ));
        }
        if self.fair_share {
            s.push_str("; FAIR_SHARE: idle capacity by weight (proportional to each share's entitlement) and borrowing over a 24 h half-life");
        }
        if let Some(r) = self.rebalance_seconds {
            s.push_str(&format!(
                "; rebalancing between borrowers, a job at most once per {r} s"
            ));
        }
        if let Some(b) = self.budget {
            s.push_str(&format!(
                "; borrowBudget {}% of each share's entitlement per {} h, {} (jobs declare their length)",
                b.percent,
                b.window_hours,
                if b.stop { "CHECKPOINT_AND_STOP" } else { "FINISH" }
            ));
        }
        if self.classes {
            s.push_str("; workload classes: exploratory (60% of jobs, may borrow), release (30%, never borrows, preempted in-share only by urgent), urgent (10%, highest band), in-share preemption on");
        }
        s
    }
}

/// The default comparison: partitions, one pool, three borrow limits, and
/// each protection on its own at borrowLimit 100.
pub fn default_policies() -> Vec<Policy> {
    let b = |name: &str| Policy::plain(name, Sharing::Borrow(100));
    vec![
        Policy::plain("partitions", Sharing::Partitions),
        Policy::plain("pool", Sharing::Pool),
        Policy::plain("borrow-50", Sharing::Borrow(50)),
        b("borrow-100"),
        Policy::plain("borrow-unlimited", Sharing::Borrow(-1)),
        Policy {
            min_runtime_seconds: Some(1800),
            ..b("borrow-100+min-runtime")
        },
        Policy {
            reborrow_cooldown_seconds: Some(1800),
            ..b("borrow-100+cooldown")
        },
        Policy {
            borrow_requires_checkpoint: true,
            ..b("borrow-100+checkpointing-only")
        },
        Policy {
            checkpoint_before_preempt: Some((300, 60.0)),
            ..b("borrow-100+checkpoint-then-preempt")
        },
        Policy {
            classes: true,
            ..b("borrow-100+classes")
        },
        Policy {
            fair_share: true,
            ..b("borrow-100+fair-share")
        },
        Policy {
            fair_share: true,
            rebalance_seconds: Some(1800),
            ..b("borrow-100+fair-share+rebalance")
        },
        Policy {
            budget: Some(BudgetPolicy {
                percent: 25,
                window_hours: 168,
                stop: false,
            }),
            ..b("borrow-100+budget-finish")
        },
        Policy {
            budget: Some(BudgetPolicy {
                percent: 25,
                window_hours: 168,
                stop: true,
            }),
            ..b("borrow-100+budget-stop")
        },
    ]
}

/// The scenario of `workload` under `policy`.
pub fn scenario(workload: &Workload, policy: &Policy) -> Scenario {
    let ty = &workload.instance_type;
    let limit = |n: u32| {
        Some(vec![wire::CapacityLimit {
            capacity_unit: ty.clone(),
            max_capacity: i64::from(n),
        }])
    };
    let share = |name: &str, n: u32| {
        let (strategy, borrow_limit) = match policy.sharing {
            Sharing::Partitions | Sharing::Pool => ("RESERVE", None),
            Sharing::Borrow(l) => ("LEND_AND_BORROW", Some(l)),
        };
        let protections = wire::Protections {
            min_runtime_before_preemption_seconds: policy.min_runtime_seconds,
            reborrow_cooldown_seconds: policy.reborrow_cooldown_seconds,
            borrow_requires_checkpoint: policy.borrow_requires_checkpoint.then_some(true),
        };
        wire::QuotaShare {
            quota_share_name: name.into(),
            capacity_limits: limit(n),
            resource_sharing_configuration: Some(wire::ResourceSharingConfiguration {
                strategy: strategy.into(),
                borrow_limit,
            }),
            preemption_configuration: Some(wire::SharePreemptionConfiguration {
                in_share_preemption: if policy.classes {
                    "ENABLED"
                } else {
                    "DISABLED"
                }
                .into(),
            }),
            protections: Some(protections),
            workload_classes: policy.classes.then(class_documents),
            borrow_budget: policy.budget.map(|b| {
                Some(wire::BorrowBudget {
                    instance_hours: f64::from(n) * b.window_hours as f64 * f64::from(b.percent)
                        / 100.0,
                    window_hours: Some(b.window_hours),
                    half_life_hours: None,
                })
            }),
            on_budget_exhausted: policy.budget.map(|b| {
                if b.stop {
                    "CHECKPOINT_AND_STOP"
                } else {
                    "FINISH"
                }
                .into()
            }),
            fair_share_weight: policy.fair_share.then(|| {
                let largest = workload
                    .shares
                    .iter()
                    .map(|(_, n)| *n)
                    .max()
                    .unwrap_or(1)
                    .max(1);
                (100 * n).div_ceil(largest).clamp(1, 100)
            }),
            ..Default::default()
        }
    };
    let quota_shares = match policy.sharing {
        Sharing::Pool => vec![share("pool", workload.fleet)],
        _ => workload
            .shares
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| share(name, *n))
            .collect(),
    };
    let actions = workload
        .jobs
        .iter()
        .map(|j| Action {
            at: j.submitted,
            submit: Some(SubmitSpec {
                job_name: j.name.clone(),
                quota_share_name: if policy.sharing == Sharing::Pool {
                    "pool".into()
                } else {
                    j.share.clone()
                },
                instance_type: ty.clone(),
                instance_count: j.instances,
                // With classes, the lowest of its class's band.
                scheduling_priority: (!policy.classes).then_some(0),
                workload_class: policy
                    .classes
                    .then(|| class_of(workload.mapping.seed, &j.name).to_string()),
                preemption_retries_before_termination: None,
                retry_strategy: None,
                timeout_config: None,
                // Budgets hold back what each job declares: its own length.
                estimated_runtime_seconds: Some(j.duration.ceil().max(1.0) as u64),
                termination_grace_period_seconds: None,
                duration_seconds: j.duration,
                checkpoint_interval_seconds: j.checkpoint_interval,
                startup_seconds: None,
                stop_seconds: None,
                checkpoint_on_stop: None,
                checkpoint_before_preempt_seconds: policy
                    .checkpoint_before_preempt
                    .filter(|_| j.checkpoint_interval.is_some())
                    .map(|(w, _)| w),
                checkpoint_seconds: policy
                    .checkpoint_before_preempt
                    .filter(|_| j.checkpoint_interval.is_some())
                    .map(|(_, c)| c),
                failures: Vec::new(),
                container_image: None,
            }),
            update_service_job: None,
            terminate_service_job: None,
            create_quota_share: None,
            update_quota_share: None,
            delete_quota_share: None,
            set_fleet: None,
            add_nodes: None,
            lose_node: None,
        })
        .collect();
    Scenario {
        fleet: [(ty.clone(), workload.fleet)].into(),
        nodes: Vec::new(),
        queue: QueueSpec {
            job_queue_name: "whatif".into(),
            state: None,
            queueing_strategy: None,
            capacity_limits: Vec::new(),
            checkpoint_before_preempt_seconds: None,
            idle_resource_assignment_strategy: policy.fair_share.then(|| "FAIR_SHARE".into()),
            fair_share_half_life_hours: None,
            fair_share_rebalance_seconds: policy.rebalance_seconds,
            share_groups: Vec::new(),
            priority: None,
            quota_shares,
        },
        defaults: JobDefaults {
            startup_seconds: Some(workload.mapping.startup_seconds),
            stop_seconds: Some(workload.mapping.stop_seconds),
            checkpoint_interval_seconds: None,
            checkpoint_on_stop: Some(false),
            checkpoint_seconds: None,
        },
        actions,
        generate: None,
    }
}

/// Percentiles (nearest rank), in seconds.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Pct {
    pub n: usize,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Pct {
    fn of(mut v: Vec<f64>) -> Pct {
        v.sort_by(f64::total_cmp);
        let at = |p: f64| qm_core::stats::nearest_rank(&v, p);
        Pct {
            n: v.len(),
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            max: v.last().copied(),
        }
    }
}

/// The measures of one share (or of all, `*`) under one policy.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Measures {
    pub jobs: usize,
    pub succeeded: usize,
    /// Submissions the configuration refused (a job larger than its share
    /// may ever hold).
    pub rejected: usize,
    /// Submit to SUCCEEDED.
    pub completion_seconds: Pct,
    /// Submit to first start (queueing delay).
    pub wait_seconds: Pct,
    /// The wait of jobs another share's job was preempted for (across
    /// shares): an owner waiting to get its lent capacity back.
    pub reclaim_wait_seconds: Pct,
    pub useful_gpu_hours: f64,
    pub recomputed_gpu_hours: f64,
    /// Recomputed over all work done.
    pub recomputed_fraction: f64,
    /// Jobs by how many of their attempts were preempted (`0`, `1`, `2`,
    /// `3+`).
    pub preempted_attempts: BTreeMap<String, usize>,
    /// Jobs preempted more than twice.
    pub preempted_more_than_twice: usize,
    /// Preemptions of this share's jobs per hour of the run.
    pub preemptions_per_hour: f64,
    /// A share's instance-seconds in use over its entitlement's (above 1:
    /// it borrowed more than it lent); None for `*` and the pool.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub utilisation_of_entitlement: Option<f64>,
}

/// One policy's results.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyResult {
    pub name: String,
    pub description: String,
    /// Over all jobs (`*`) and per share of the workload (the pool's jobs
    /// are counted in the share the mapping gave them).
    pub measures: BTreeMap<String, Measures>,
    /// In-use over available instance-seconds.
    pub fleet_utilisation: f64,
    pub preemptions: u64,
    pub preemptions_per_hour: f64,
    /// Virtual seconds the run covered.
    pub end_seconds: f64,
    /// Completion times (hours), sorted, at most 400 points: the CDF.
    pub completion_cdf_hours: Vec<f64>,
    /// Owners' reclaim waits (seconds), sorted, at most 400 points.
    pub reclaim_wait_cdf_seconds: Vec<f64>,
    /// Per workload class ([`class_of`]), the same jobs under every policy.
    pub by_class: BTreeMap<String, Measures>,
    /// GPU-hours on borrowed capacity, every share together.
    pub borrowed_gpu_hours: f64,
    /// Jain's fairness index of the shares' borrowed GPU-hours per entitled
    /// GPU, over the shares that borrowed (1: each borrowed in proportion
    /// to its size); None when none borrowed.
    pub jain_borrowed: Option<f64>,
    /// The largest share of all borrowing one share took.
    pub top_borrower_fraction: f64,
    /// Jobs stopped because their share's budget was spent.
    pub budget_stops: u64,
    /// Share -> instances in use, sampled over time (days, instances).
    pub usage: BTreeMap<String, Vec<(f64, u32)>>,
    /// The first refused submissions, with the error a client would get.
    pub rejected_examples: Vec<String>,
    pub wall_seconds: f64,
}

fn downsample(v: &[f64], points: usize) -> Vec<f64> {
    if v.len() <= points {
        return v.to_vec();
    }
    (0..points)
        .map(|i| v[i * (v.len() - 1) / (points - 1)])
        .collect()
}

/// Runs `workload` under `policy`; `progress` gets the fraction of the
/// workload's span simulated.
pub fn run(
    workload: &Workload,
    policy: &Policy,
    progress: &dyn Fn(f64),
) -> Result<PolicyResult, String> {
    let started = std::time::Instant::now();
    let scenario = scenario(workload, policy);
    let span = workload.jobs.last().map_or(1.0, |j| j.submitted).max(1.0);
    let options = Options {
        record_timeline: false,
        // About 400 samples over the run, at least an hour apart.
        sample_every: Some(qm_sim::sim::Time::from_secs(
            ((span / 400.0 / 3600.0).ceil().max(1.0) * 3600.0) as u64,
        )),
        ..Options::default()
    };
    let report = Simulation::new(scenario, options)
        .map_err(|e| format!("{}: {e}", policy.name))?
        .run(&mut |p| progress((p.now.as_secs_f64() / span).min(1.0)))
        .map_err(|e| format!("{}: {e}", policy.name))?;
    let gpi = f64::from(workload.mapping.gpus_per_instance);
    let info: BTreeMap<&str, (&str, f64)> = workload
        .jobs
        .iter()
        .map(|j| (j.name.as_str(), (j.share.as_str(), j.duration)))
        .collect();
    let acc = accumulate(&report, &info, gpi, workload.mapping.seed);
    let run_hours = report.summary.end_time.max(1.0) / 3600.0;
    let mut measures = BTreeMap::new();
    let mut by_class = BTreeMap::new();
    let mut completion_all = Vec::new();
    let mut reclaim_all = Vec::new();
    for (k, a) in acc {
        let mut m = a.m;
        m.preemptions_per_hour /= run_hours;
        let done = m.useful_gpu_hours + m.recomputed_gpu_hours;
        m.recomputed_fraction = if done > 0.0 {
            m.recomputed_gpu_hours / done
        } else {
            0.0
        };
        if k == "*" {
            completion_all = a.completion.clone();
            reclaim_all = a.reclaim.clone();
        }
        m.completion_seconds = Pct::of(a.completion);
        m.wait_seconds = Pct::of(a.wait);
        m.reclaim_wait_seconds = Pct::of(a.reclaim);
        match k.strip_prefix("class:") {
            Some(class) => by_class.insert(class.to_string(), m),
            None => measures.insert(k, m),
        };
    }
    if policy.sharing != Sharing::Pool {
        for s in &report.shares {
            if let Some(m) = measures.get_mut(&s.quota_share_name) {
                if s.entitled_instance_seconds > 0.0 {
                    m.utilisation_of_entitlement =
                        Some(s.used_instance_seconds / s.entitled_instance_seconds);
                }
            }
        }
    }
    completion_all.sort_by(f64::total_cmp);
    reclaim_all.sort_by(f64::total_cmp);
    let round = |x: f64, unit: f64| (x / unit).round() * unit;
    let hours = |v: Vec<f64>| {
        downsample(
            &v.iter()
                .map(|x| round(x / 3600.0, 1e-4))
                .collect::<Vec<_>>(),
            400,
        )
    };
    let usage = usage_by_share(&report, policy, workload);
    let preemptions = report
        .summary
        .preemptions
        .get("total")
        .copied()
        .unwrap_or(0);
    let end = report.summary.end_time.max(1.0);
    // Borrowed per share, per entitled instance (the pool borrows nothing).
    let borrowed: Vec<(f64, f64)> = report
        .shares
        .iter()
        .filter(|s| s.entitlement > 0 && s.borrowed_instance_seconds > 0.0)
        .map(|s| {
            (
                s.borrowed_instance_seconds * gpi / 3600.0,
                f64::from(s.entitlement),
            )
        })
        .collect();
    let borrowed_gpu_hours: f64 = borrowed.iter().map(|(b, _)| b).sum();
    let per_entitled: Vec<f64> = borrowed.iter().map(|(b, e)| b / e).collect();
    let budget_stops = report
        .summary
        .preemptions
        .get("BUDGET_EXHAUSTED")
        .copied()
        .unwrap_or(0);
    Ok(PolicyResult {
        borrowed_gpu_hours,
        jain_borrowed: jain(&per_entitled),
        top_borrower_fraction: if borrowed_gpu_hours > 0.0 {
            borrowed.iter().map(|(b, _)| *b).fold(0.0, f64::max) / borrowed_gpu_hours
        } else {
            0.0
        },
        budget_stops,
        name: policy.name.clone(),
        description: policy.describe(),
        measures,
        fleet_utilisation: report.summary.fleet_utilisation,
        preemptions,
        preemptions_per_hour: preemptions as f64 / (end / 3600.0),
        end_seconds: end,
        completion_cdf_hours: hours(completion_all),
        by_class,
        reclaim_wait_cdf_seconds: downsample(
            &reclaim_all
                .iter()
                .map(|x| round(*x, 0.1))
                .collect::<Vec<_>>(),
            400,
        ),
        usage,
        rejected_examples: report
            .rejected
            .iter()
            .take(5)
            .map(|r| {
                format!(
                    "{} at {:.0}s: {}: {}",
                    r.job_name.as_deref().unwrap_or("?"),
                    r.t,
                    r.error_code,
                    r.message
                )
            })
            .collect(),
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

/// One share's (or class's) measures while the jobs are counted, with the
/// times their percentiles are taken from.
#[derive(Default)]
struct Acc {
    m: Measures,
    completion: Vec<f64>,
    wait: Vec<f64>,
    reclaim: Vec<f64>,
}

/// Counts each job of `report` (and each refused submission) for its share,
/// for all (`*`) and for its class (`class:<name>`).
fn accumulate(
    report: &qm_sim::Report,
    info: &BTreeMap<&str, (&str, f64)>,
    gpi: f64,
    seed: u64,
) -> BTreeMap<String, Acc> {
    let mut acc: BTreeMap<String, Acc> = BTreeMap::new();
    for j in &report.jobs {
        let (share, duration) = info.get(j.job_name.as_str()).copied().unwrap_or(("?", 0.0));
        let count = f64::from(j.instance_count) * gpi;
        let class = format!("class:{}", class_of(seed, &j.job_name));
        for key in [share, "*", class.as_str()] {
            let a = acc.entry(key.to_string()).or_default();
            a.m.jobs += 1;
            if j.status == "SUCCEEDED" {
                a.m.succeeded += 1;
            }
            if let Some(c) = j.completion_seconds {
                a.completion.push(c);
            }
            if let Some(w) = j.wait_seconds {
                a.wait.push(w);
                if j.started_by_reclaim {
                    a.reclaim.push(w);
                }
            }
            let useful = j.completion_seconds.map_or(0.0, |_| duration);
            a.m.useful_gpu_hours += useful * count / 3600.0;
            a.m.recomputed_gpu_hours += j.recomputed_seconds * count / 3600.0;
            let bucket = match j.preempted_attempt_count {
                0 => "0",
                1 => "1",
                2 => "2",
                _ => "3+",
            };
            *a.m.preempted_attempts.entry(bucket.into()).or_default() += 1;
            if j.preempted_attempt_count > 2 {
                a.m.preempted_more_than_twice += 1;
            }
            a.m.preemptions_per_hour += f64::from(j.preempted_attempt_count);
        }
    }
    for r in &report.rejected {
        let share = r
            .job_name
            .as_deref()
            .and_then(|n| info.get(n).map(|i| i.0))
            .unwrap_or("?");
        for key in [share, "*"] {
            acc.entry(key.to_string()).or_default().m.rejected += 1;
        }
    }
    acc
}

/// Instances in use per share (the pool's, without shares), sampled over
/// time (days, instances).
fn usage_by_share(
    report: &qm_sim::Report,
    policy: &Policy,
    workload: &Workload,
) -> BTreeMap<String, Vec<(f64, u32)>> {
    let round = |x: f64, unit: f64| (x / unit).round() * unit;
    let mut usage: BTreeMap<String, Vec<(f64, u32)>> = BTreeMap::new();
    let names: Vec<String> = match policy.sharing {
        Sharing::Pool => vec!["pool".into()],
        _ => workload.shares.iter().map(|(n, _)| n.clone()).collect(),
    };
    for s in &report.usage_samples {
        for n in &names {
            usage.entry(n.clone()).or_default().push((
                round(s.t / 86400.0, 1e-3),
                s.used.get(n).copied().unwrap_or(0),
            ));
        }
    }
    usage
}

/// Runs every policy, `threads` at a time; `progress(policy, fraction)`
/// as each advances. The results come back in `policies`' order.
pub fn run_all(
    workload: &Workload,
    policies: &[Policy],
    threads: usize,
    progress: &(dyn Fn(&str, f64) + Sync),
) -> Result<Vec<PolicyResult>, String> {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<PolicyResult, String>>>> =
        Mutex::new(vec![None; policies.len()]);
    std::thread::scope(|s| {
        for _ in 0..threads.clamp(1, policies.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(policy) = policies.get(i) else {
                    return;
                };
                let r = run(workload, policy, &|f| progress(&policy.name, f));
                progress(&policy.name, 1.0);
                if let Ok(mut all) = results.lock() {
                    all[i] = Some(r);
                }
            });
        }
    });
    results
        .into_inner()
        .map_err(|_| "a policy's run panicked".to_string())?
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err("a policy did not run".into())))
        .collect()
}

#[cfg(test)]
mod class_tests {
    use super::*;

    #[test]
    fn jobs_are_drawn_into_classes_by_seed_in_the_stated_proportions() {
        assert_eq!(class_of(2021, "job-17"), class_of(2021, "job-17"));
        let mut counts: BTreeMap<&str, u32> = BTreeMap::new();
        for i in 0..10_000 {
            *counts
                .entry(class_of(2021, &format!("job-{i}")))
                .or_default() += 1;
        }
        for (name, percent) in CLASSES {
            let got = f64::from(counts[name]) / 100.0;
            assert!(
                (got - f64::from(percent)).abs() < 2.0,
                "{name}: {got}% for {percent}%"
            );
        }
        let other: Vec<&str> = (0..50).map(|i| class_of(7, &format!("job-{i}"))).collect();
        let same: Vec<&str> = (0..50)
            .map(|i| class_of(2021, &format!("job-{i}")))
            .collect();
        assert_ne!(other, same, "another seed, another draw");
    }
}
