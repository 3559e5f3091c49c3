//! The comparison's outcomes on small workloads built to show them, each
//! explainable from the contract: one pool is work-conserving, hard
//! partitions never preempt, and lending lets a busy team finish sooner
//! than its partition would.

use qm_eval::compare::{self, default_policies, Policy, Sharing};
use qm_eval::workload::{Job, MappingOut, Workload};

fn workload(jobs: Vec<Job>, shares: &[(&str, u32)]) -> Workload {
    let fleet = shares.iter().map(|s| s.1).sum();
    Workload {
        instance_type: "gpu".into(),
        fleet,
        shares: shares.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
        jobs,
        mapping: MappingOut {
            gpus_per_instance: 1,
            startup_seconds: 0.0,
            stop_seconds: 10.0,
            ..MappingOut::default()
        },
    }
}

fn job(name: &str, share: &str, at: f64, dur: f64, n: u32, ckpt: Option<f64>) -> Job {
    Job {
        name: name.into(),
        share: share.into(),
        submitted: at,
        duration: dur,
        instances: n,
        gpus: n,
        checkpoint_interval: ckpt,
    }
}

fn policy(name: &str) -> Policy {
    default_policies()
        .into_iter()
        .find(|p| p.name == name)
        .expect("a default policy")
}

/// A busy team with a burst, a quiet one that comes back later.
fn burst() -> Workload {
    let mut jobs = Vec::new();
    for i in 0..20 {
        jobs.push(job(
            &format!("busy-{i}"),
            "busy",
            f64::from(i),
            3600.0,
            1,
            Some(600.0),
        ));
    }
    for i in 0..4 {
        jobs.push(job(
            &format!("quiet-{i}"),
            "quiet",
            5400.0 + f64::from(i),
            1800.0,
            1,
            Some(600.0),
        ));
    }
    workload(jobs, &[("busy", 4), ("quiet", 4)])
}

#[test]
fn lending_finishes_the_busy_teams_jobs_sooner_than_its_partition() {
    let w = burst();
    let part = compare::run(&w, &policy("partitions"), &|_| {}).expect("runs");
    let borrow = compare::run(&w, &policy("borrow-100"), &|_| {}).expect("runs");
    let busy = |r: &compare::PolicyResult| r.measures["busy"].completion_seconds.clone();
    // Partitions: 20 one-hour jobs on 4 instances, five waves. Borrowing
    // the quiet team's 4 idle instances: fewer waves.
    assert!(
        busy(&borrow).max.expect("done") < busy(&part).max.expect("done"),
        "borrow {:?} vs partitions {:?}",
        busy(&borrow),
        busy(&part)
    );
    assert!(busy(&borrow).p50 < busy(&part).p50);
    // Hard partitions never preempt and never lend.
    assert_eq!(part.preemptions, 0);
    assert!(part
        .measures
        .values()
        .all(|m| m.preemptions_per_hour == 0.0));
    assert!(borrow.measures["busy"].preemptions_per_hour > 0.0);
    assert_eq!(part.measures["*"].reclaim_wait_seconds.n, 0);
    assert_eq!(part.measures["*"].recomputed_gpu_hours, 0.0);
    // The quiet team came back while its capacity was lent: it waited only
    // for the borrowers to stop (10 s each), never for their jobs to end.
    let quiet = &borrow.measures["quiet"];
    assert_eq!(quiet.reclaim_wait_seconds.n, 4, "{quiet:?}");
    assert!(
        quiet.reclaim_wait_seconds.max.expect("waits") <= 60.0,
        "{quiet:?}"
    );
    assert!(borrow.preemptions >= 4);
    // Preempted borrowers lost at most the work since their last
    // checkpoint (600 s) each.
    assert!(borrow.measures["*"].recomputed_gpu_hours <= 4.0 * 600.0 / 3600.0 + 1e-9);
    assert_eq!(borrow.measures["*"].succeeded, 24);
    // A partition never uses more than its entitlement; the busy team,
    // borrowing, does.
    let used = |r: &compare::PolicyResult, s: &str| {
        r.measures[s].utilisation_of_entitlement.expect("a share")
    };
    assert!(used(&part, "busy") <= 1.0 + 1e-9, "{}", used(&part, "busy"));
    assert!(used(&borrow, "busy") > 1.0, "{}", used(&borrow, "busy"));
    assert!(used(&borrow, "quiet") < used(&part, "busy"));
}

#[test]
fn one_pool_never_leaves_an_instance_idle_while_a_job_waits() {
    let w = burst();
    let pool = Policy {
        name: "pool".into(),
        ..policy("pool")
    };
    assert_eq!(pool.sharing, Sharing::Pool);
    // Replay the pool's run and sweep its timeline: whenever a job waits,
    // every instance is in use.
    let scenario = compare::scenario(&w, &pool);
    let report = qm_sim::Simulation::new(scenario, qm_sim::Options::default())
        .expect("valid")
        .run(&mut |_| {})
        .expect("runs");
    let mut events: Vec<(f64, i32, i32)> = Vec::new(); // (t, waiting delta, running delta)
    for j in &report.jobs {
        let start = j.first_started_at.expect("started");
        let stop = j.stopped_at.expect("stopped");
        assert_eq!(j.preempted_attempt_count, 0, "nothing preempts in one pool");
        events.push((j.submitted_at, 1, 0));
        events.push((start, -1, j.instance_count as i32));
        events.push((stop, 0, -(j.instance_count as i32)));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut waiting, mut running) = (0, 0);
    let mut i = 0;
    while i < events.len() {
        let t = events[i].0;
        while i < events.len() && events[i].0 == t {
            waiting += events[i].1;
            running += events[i].2;
            i += 1;
        }
        assert!(
            waiting == 0 || running == w.fleet as i32,
            "at {t}s {waiting} job(s) wait with {running} of {} instances in use",
            w.fleet
        );
    }
    let r = compare::run(&w, &pool, &|_| {}).expect("runs");
    let part = compare::run(&w, &policy("partitions"), &|_| {}).expect("runs");
    assert!(r.fleet_utilisation >= part.fleet_utilisation);
}

#[test]
fn a_job_larger_than_its_share_may_hold_is_rejected_not_fatal() {
    let jobs = vec![
        job("ok", "a", 0.0, 600.0, 1, None),
        job("huge", "a", 10.0, 600.0, 6, None),
        job("b1", "b", 20.0, 600.0, 1, None),
    ];
    let w = workload(jobs, &[("a", 2), ("b", 2)]);
    let part = compare::run(&w, &policy("partitions"), &|_| {}).expect("runs");
    assert_eq!(part.measures["a"].rejected, 1);
    assert_eq!(part.measures["*"].succeeded, 2);
    assert!(
        part.rejected_examples[0].starts_with("huge at 10s: ClientException"),
        "{:?}",
        part.rejected_examples
    );
    // One pool of 4 cannot hold it either; unlimited borrowing can't (6 > 4).
    let pool = compare::run(&w, &policy("pool"), &|_| {}).expect("runs");
    assert_eq!(pool.measures["*"].rejected, 1);
}

#[test]
fn the_report_states_the_mapping_and_renders_every_plot() {
    let w = burst();
    let results = compare::run_all(&w, &default_policies(), 2, &|_, _| {}).expect("runs");
    assert_eq!(results.len(), default_policies().len());
    let e = qm_eval::render::Evaluation {
        citation: qm_eval::CITATION.into(),
        trace_files: vec!["synthetic".into()],
        mapping: w.mapping.clone(),
        bad_lines: Vec::new(),
        policies: results,
        wall_seconds: 0.0,
    };
    let html = qm_eval::render::html(&e);
    for id in [
        "completion",
        "reclaim",
        "recomputed",
        "usage-partitions",
        "usage-borrow-100",
    ] {
        assert!(html.contains(&format!("<figure id=\"{id}\"><svg")), "{id}");
    }
    assert!(!html.contains("plot failed"));
    assert!(html.contains("microsoft/elasticflow-traces"));
    let md = qm_eval::render::markdown(&e);
    let summary_rows = md.lines().take_while(|l| l.starts_with('|')).count();
    assert_eq!(summary_rows, 2 + default_policies().len());
    // Per class: the same jobs under every policy, each in one class.
    for p in &e.policies {
        let classes: Vec<&str> = p.by_class.keys().map(String::as_str).collect();
        assert_eq!(classes, ["exploratory", "release", "urgent"], "{}", p.name);
        let jobs: usize = p.by_class.values().map(|m| m.jobs).sum();
        assert_eq!(jobs, p.measures["*"].jobs, "{}", p.name);
    }
    assert_eq!(
        md.lines()
            .filter(|l| l.starts_with("| borrow-100+classes | "))
            .count(),
        1 + 1 + 3,
        "a summary row, a fairness row and one row per class"
    );
    assert!(md.contains("Jain's index"), "{md}");
    assert!(html.contains("<h2>Fairness over time</h2>"));
    assert!(html.contains("<h2>Per workload class</h2>"));
    let json: serde_json::Value = serde_json::to_value(&e).expect("json");
    assert_eq!(
        json["policies"].as_array().map(Vec::len),
        Some(default_policies().len())
    );
}

#[test]
fn jains_index_is_one_for_equals_and_falls_as_one_takes_more() {
    assert_eq!(compare::jain(&[2.0, 2.0, 2.0]), Some(1.0));
    let skewed = compare::jain(&[9.0, 1.0]).expect("some");
    assert!((skewed - 100.0 / 164.0).abs() < 1e-12, "{skewed}");
    assert_eq!(compare::jain(&[5.0]), Some(1.0));
    assert_eq!(compare::jain(&[]), None);
    assert_eq!(compare::jain(&[0.0, 0.0]), None);
}

#[test]
fn a_budget_bounds_what_the_busy_team_borrows_and_stop_stops_it() {
    let w = burst();
    let free = compare::run(&w, &policy("borrow-100"), &|_| {}).expect("runs");
    // 5% of 4 instances' day: 4.8 instance-hours, less than the busy
    // team borrows without one (the default 25% a week would not bind in
    // this short burst).
    let budget = |stop| compare::Policy {
        budget: Some(compare::BudgetPolicy {
            percent: 5,
            window_hours: 24,
            stop,
        }),
        ..policy("borrow-100+budget-finish")
    };
    let finish = compare::run(&w, &budget(false), &|_| {}).expect("runs");
    let stop = compare::run(&w, &budget(true), &|_| {}).expect("runs");
    assert!(
        finish.borrowed_gpu_hours <= 4.8 + 1e-6,
        "{}",
        finish.borrowed_gpu_hours
    );
    assert!(free.borrowed_gpu_hours > 0.0);
    for r in [&finish, &stop] {
        assert!(
            r.borrowed_gpu_hours < free.borrowed_gpu_hours,
            "{}: {} vs {}",
            r.name,
            r.borrowed_gpu_hours,
            free.borrowed_gpu_hours
        );
        assert_eq!(
            r.measures["*"].succeeded, free.measures["*"].succeeded,
            "{}",
            r.name
        );
    }
    assert_eq!(finish.budget_stops, 0, "FINISH stops nothing");
}
