//! The example scenarios run with every invariant checked after every pass,
//! and their outcomes asserted.

use qm_sim::report::{JobOut, Report};
use qm_sim::{simulate, Options};

fn run(file: &str) -> Report {
    let path = format!(
        "{}/../../examples/scenarios/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("example scenario exists");
    let options = Options {
        check_invariants: true,
        ..Options::default()
    };
    simulate(&text, options).unwrap_or_else(|e| panic!("{file}: {e}"))
}

fn job<'a>(r: &'a Report, name: &str) -> &'a JobOut {
    r.jobs
        .iter()
        .find(|j| j.job_name == name)
        .unwrap_or_else(|| panic!("job {name}"))
}

fn preemptions(r: &Report) -> Vec<(f64, &str, &str, &str)> {
    r.preemptions
        .iter()
        .map(|p| {
            (
                p.t,
                p.job_name.as_str(),
                p.kind.as_str(),
                p.for_job_name.as_str(),
            )
        })
        .collect()
}

fn outcomes(r: &Report, name: &str) -> Vec<String> {
    job(r, name).attempt_outcomes.clone()
}

/// (t, from, to) of one job's status changes (reason-only updates left out).
fn states(r: &Report, name: &str) -> Vec<(f64, String, String)> {
    r.transitions
        .iter()
        .filter(|t| t.job_name == name && t.from != t.to)
        .map(|t| (t.t, t.from.clone(), t.to.clone()))
        .collect()
}

#[test]
fn three_share_story_of_the_contract() {
    let r = run("three-shares.yaml");
    assert_eq!(
        preemptions(&r),
        vec![
            (130.0, "p2", "CROSS_SHARE", "qs2_job"),
            (250.0, "p3", "IN_SHARE", "p1")
        ]
    );
    for name in ["p1", "p2", "p3", "qs2_job"] {
        assert_eq!(job(&r, name).status, "SUCCEEDED", "{name}");
    }
    assert_eq!(
        outcomes(&r, "p2"),
        vec!["PREEMPTED_CROSS_SHARE", "SUCCEEDED"]
    );
    assert_eq!(outcomes(&r, "p3"), vec!["PREEMPTED_IN_SHARE", "SUCCEEDED"]);
    // p1 waits (QS3's instance is reserved) until its priority is raised.
    assert_eq!(
        job(&r, "p1").first_started_at,
        Some(260.0),
        "starts once p3 has stopped (10 s grace)"
    );
    // The owner's job starts when the borrower has stopped, not before.
    assert_eq!(job(&r, "qs2_job").first_started_at, Some(140.0));
    let p1_wait = r
        .transitions
        .iter()
        .find(|t| {
            t.job_name == "p1" && t.t == 2.0 && t.status_reason.starts_with("NO_LENDABLE_CAPACITY")
        })
        .is_some();
    assert!(p1_wait, "p1 explains that no lendable capacity is left");
    assert_eq!(
        states(&r, "p2"),
        vec![
            (1.0, "SUBMITTED".into(), "RUNNABLE".into()),
            (1.0, "RUNNABLE".into(), "SCHEDULED".into()),
            (1.0, "SCHEDULED".into(), "STARTING".into()),
            (6.0, "STARTING".into(), "RUNNING".into()),
            (140.0, "RUNNING".into(), "RUNNABLE".into()),
            (810.0, "RUNNABLE".into(), "SCHEDULED".into()),
            (810.0, "SCHEDULED".into(), "STARTING".into()),
            (815.0, "STARTING".into(), "RUNNING".into()),
            (1295.0, "RUNNING".into(), "SUCCEEDED".into()),
        ]
    );
    // Work since the last checkpoint (every 60 s) is recomputed.
    assert_eq!(
        job(&r, "p2").recomputed_seconds,
        4.0,
        "ran 6..130 s: 124 s of work, checkpoint at 120"
    );
    assert_eq!(
        job(&r, "p3").recomputed_seconds,
        5.0,
        "ran 5..250 s: 245 s of work, checkpoint at 240"
    );
    assert_eq!(r.summary.preemptions["total"], 2);
    assert_eq!(r.summary.policy_changes, 1);
    let qs3 = r
        .shares
        .iter()
        .find(|s| s.quota_share_name == "QS3")
        .expect("QS3");
    assert_eq!(
        qs3.used_instance_seconds, 0.0,
        "RESERVE capacity is never used by others"
    );
    assert_eq!(qs3.lent_instance_seconds, 0.0);
}

#[test]
fn reclaim_takes_least_work_at_risk_then_lowest_priority() {
    let r = run("reclaim-order.yaml");
    assert_eq!(
        preemptions(&r),
        vec![
            (1100.0, "fresh_ckpt", "CROSS_SHARE", "lender_a"),
            (1200.0, "stale_ckpt", "CROSS_SHARE", "lender_b")
        ]
    );
    assert_eq!(job(&r, "important").preempted_attempt_count, 0);
    assert_eq!(job(&r, "fresh_ckpt").recomputed_seconds, 10.0);
    assert_eq!(job(&r, "stale_ckpt").recomputed_seconds, 200.0);
}

#[test]
fn in_share_preemption_only_where_enabled_and_only_for_higher_priority() {
    let r = run("in-share.yaml");
    assert_eq!(
        preemptions(&r),
        vec![(600.0, "v_sweep", "IN_SHARE", "v_deadline")]
    );
    assert_eq!(job(&r, "v_deadline").first_started_at, Some(620.0));
    assert_eq!(
        job(&r, "s_deadline").first_started_at,
        Some(1810.0),
        "speech has in-share preemption DISABLED"
    );
    assert!(
        job(&r, "v_peer").first_started_at.expect("ran") > 1200.0,
        "equal priority waits"
    );
}

#[test]
fn limit_reduction_reclaims_only_when_needed() {
    let r = run("limit-reduced.yaml");
    assert_eq!(preemptions(&r), vec![(1000.0, "a3", "LIMIT_REDUCED", "b2")]);
    assert_eq!(
        outcomes(&r, "a3"),
        vec!["PREEMPTED_LIMIT_REDUCED", "SUCCEEDED"]
    );
    assert_eq!(
        job(&r, "b1").first_started_at,
        Some(900.0),
        "the idle instance needs no preemption"
    );
}

#[test]
fn protections_delay_reclaim_block_reborrowing_and_gate_on_checkpoints() {
    let r = run("protections.yaml");
    assert_eq!(
        preemptions(&r),
        vec![(600.0, "e_borrow", "CROSS_SHARE", "o_big")],
        "protected for 600 s"
    );
    assert_eq!(job(&r, "o_big").first_started_at, Some(600.0));
    assert_eq!(
        job(&r, "e_later").first_started_at,
        Some(2400.0),
        "reborrow cool-down of 1800 s after the reclaim"
    );
    assert_eq!(
        job(&r, "e_no_ckpt").first_started_at,
        Some(0.0),
        "takes the share's own instance"
    );
    let waited = r.transitions.iter().any(|t| {
        t.job_name == "e_no_ckpt2" && t.status_reason.starts_with("BORROW_REQUIRES_CHECKPOINT")
    });
    assert!(
        waited,
        "a second job without checkpoints could only borrow, so it waits"
    );
    assert_eq!(
        job(&r, "e_no_ckpt2").first_started_at,
        Some(2400.0),
        "own instance free at 600, cool-down until 2400"
    );
}

#[test]
fn strict_fifo_keeps_small_jobs_behind_the_head() {
    let r = run("strict-fifo.yaml");
    assert_eq!(job(&r, "big").first_started_at, Some(300.0));
    assert_eq!(job(&r, "small").first_started_at, Some(900.0));
    assert!(job(&r, "small").status_reason.starts_with("SUCCEEDED"));
}

#[test]
fn budgets_for_preemptions_failures_timeouts_cancellation_and_host_loss() {
    let r = run("failures.yaml");
    assert_eq!(outcomes(&r, "flaky"), vec!["FAILED", "SUCCEEDED"]);
    assert_eq!(job(&r, "fragile").status, "FAILED");
    assert!(job(&r, "fragile")
        .status_reason
        .starts_with("PREEMPTION_RETRIES_EXHAUSTED"));
    assert_eq!(outcomes(&r, "slow"), vec!["TIMED_OUT"]);
    assert_eq!(job(&r, "slow").status, "FAILED");
    assert_eq!(outcomes(&r, "unwanted"), vec!["CANCELLED"]);
    assert_eq!(
        job(&r, "unwanted").recomputed_seconds,
        0.0,
        "cancelled work is not recomputed"
    );
    assert_eq!(outcomes(&r, "survivor"), vec!["HOST_LOST", "SUCCEEDED"]);
    assert_eq!(
        job(&r, "survivor").recomputed_seconds,
        40.0,
        "ran 1000..1100 s, checkpoint at 60 s of work"
    );
    assert_eq!(
        job(&r, "survivor").preempted_attempt_count,
        0,
        "host loss is no preemption"
    );
}

#[test]
fn generated_contention_is_reproducible_and_completes() {
    let path = format!(
        "{}/../../examples/scenarios/contention.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).expect("exists");
    let a = simulate(&text, Options::default()).expect("runs");
    let b = simulate(&text, Options::default()).expect("runs");
    let json = |r: &Report| serde_json::to_string(r).expect("serialises");
    assert_eq!(json(&a), json(&b), "same scenario and seed, same report");
    assert_eq!(a.jobs.len(), 3000);
    assert_eq!(a.summary.jobs_by_status.get("SUCCEEDED"), Some(&3000));
    assert!(a.summary.preemptions["total"] > 0, "the workload contends");
    assert!(a.summary.fleet_utilisation > 0.5 && a.summary.fleet_utilisation <= 1.0);
    let prod = a
        .shares
        .iter()
        .find(|s| s.quota_share_name == "prod")
        .expect("prod");
    assert!(
        prod.used_instance_seconds <= prod.entitled_instance_seconds,
        "RESERVE never borrows"
    );
    assert_eq!(prod.lent_instance_seconds, 0.0, "RESERVE never lends");
}

#[test]
fn a_small_generated_workload_keeps_every_invariant() {
    let text = r#"
fleet: {a: 6, b: 3}
queue:
  jobQueueName: mixed
  quotaShares:
    - {quotaShareName: x, capacityLimits: [{capacityUnit: a, maxCapacity: 2}, {capacityUnit: b, maxCapacity: 1}],
       resourceSharingConfiguration: {strategy: LEND_AND_BORROW, borrowLimit: 100}, preemptionConfiguration: {inSharePreemption: ENABLED}}
    - {quotaShareName: y, capacityLimits: [{capacityUnit: a, maxCapacity: 2}],
       resourceSharingConfiguration: {strategy: LEND_AND_BORROW}, protections: {minRuntimeBeforePreemptionSeconds: 100, reborrowCooldownSeconds: 200, borrowRequiresCheckpoint: true}}
    - {quotaShareName: z, capacityLimits: [{capacityUnit: a, maxCapacity: 1}, {capacityUnit: b, maxCapacity: 2}],
       resourceSharingConfiguration: {strategy: LEND}}
defaults: {startupSeconds: 3, stopSeconds: 7}
generate: {jobs: 300, seed: 7, meanInterarrivalSeconds: 20, minDurationSeconds: 30, maxDurationSeconds: 1200,
           instanceCounts: [1, 1, 2, 3], maxPriority: 4, checkpointingFraction: 0.7, checkpointIntervalSeconds: 60}
"#;
    let r = simulate(
        text,
        Options {
            check_invariants: true,
            ..Options::default()
        },
    )
    .expect("invariants hold");
    let done = r
        .summary
        .jobs_by_status
        .get("SUCCEEDED")
        .copied()
        .unwrap_or(0)
        + r.summary.jobs_by_status.get("FAILED").copied().unwrap_or(0);
    // Every job ends, except those that can never fit the fleet (accepted,
    // since executors may still come), which wait and say why.
    let never_fit: Vec<_> = r.jobs.iter().filter(|j| j.status == "RUNNABLE").collect();
    assert!(
        never_fit
            .iter()
            .all(|j| j.status_reason.starts_with("MISCONFIGURATION:")),
        "{never_fit:?}"
    );
    assert_eq!(
        done as u64 + never_fit.len() as u64 + r.summary.rejected_submissions,
        300
    );
    assert!(r.summary.preemptions["total"] > 0);
}

#[test]
fn until_stops_the_clock_and_reports_the_state_then() {
    let path = format!(
        "{}/../../examples/scenarios/three-shares.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).expect("exists");
    let r = simulate(
        &text,
        Options {
            until: Some(qm_sim::sim::Time::from_secs(200)),
            ..Options::default()
        },
    )
    .expect("runs");
    assert_eq!(r.summary.end_time, 200.0);
    assert_eq!(job(&r, "p1").status, "RUNNABLE");
    assert!(
        job(&r, "p1")
            .status_reason
            .starts_with("NO_LENDABLE_CAPACITY"),
        "{}",
        job(&r, "p1").status_reason
    );
    assert_eq!(job(&r, "qs2_job").status, "RUNNING");
}

#[test]
fn json_report_has_the_documented_shape() {
    let r = run("three-shares.yaml");
    let v = serde_json::to_value(&r).expect("serialises");
    for key in ["transitions", "preemptions", "jobs", "shares", "summary"] {
        assert!(v.get(key).is_some(), "{key}");
    }
    let t = &v["transitions"][0];
    for key in ["t", "jobName", "from", "to", "statusReason"] {
        assert!(t.get(key).is_some(), "transition.{key}");
    }
    let j = &v["jobs"][0];
    for key in [
        "jobName",
        "quotaShareName",
        "status",
        "statusReason",
        "submittedAt",
        "firstStartedAt",
        "stoppedAt",
        "attempts",
        "preemptedAttemptCount",
        "recomputedSeconds",
    ] {
        assert!(j.get(key).is_some(), "job.{key}");
    }
    assert_eq!(v["preemptions"][0]["kind"], "CROSS_SHARE");
    assert_eq!(v["preemptions"][0]["forJobName"], "qs2_job");
    for key in [
        "completionSeconds",
        "recomputedFraction",
        "fleetUtilisation",
    ] {
        assert!(v["summary"].get(key).is_some(), "summary.{key}");
    }
}

#[test]
fn refused_actions_are_results_and_the_run_goes_on() {
    let text = "fleet: {t: 1}\nqueue:\n  jobQueueName: q\n  quotaShares:\n    - {quotaShareName: s, capacityLimits: [{capacityUnit: t, maxCapacity: 1}]}\nactions:\n  - {at: 0, submit: {jobName: ok1, quotaShareName: s, instanceType: t, durationSeconds: 50}}\n  - {at: 10, submit: {jobName: huge, quotaShareName: s, instanceType: t, instanceCount: 2, durationSeconds: 5}}\n  - {at: 20, updateServiceJob: {jobName: huge, schedulingPriority: 3}}\n  - {at: 30, submit: {jobName: ok2, quotaShareName: s, instanceType: t, durationSeconds: 50}}\n";
    let r = simulate(text, Options::default()).expect("the run goes on");
    let rejected: Vec<(f64, usize, &str, Option<&str>)> = r
        .rejected
        .iter()
        .map(|x| (x.t, x.action, x.verb.as_str(), x.job_name.as_deref()))
        .collect();
    assert_eq!(
        rejected,
        [
            (10.0, 1, "submit", Some("huge")),
            (20.0, 2, "updateServiceJob", Some("huge"))
        ]
    );
    assert!(r.rejected.iter().all(|x| x.error_code == "ClientException"));
    assert!(
        r.rejected[0].message.contains("MISCONFIGURATION"),
        "{:?}",
        r.rejected
    );
    assert!(
        r.rejected[1].message.contains("no job named \"huge\""),
        "{:?}",
        r.rejected
    );
    assert_eq!(r.summary.rejected_actions, 2);
    assert_eq!(r.summary.jobs_by_status.get("SUCCEEDED"), Some(&2));
    let table = r.to_table();
    assert!(
        table.contains("rejected action 1 (at 10s, submit huge): ClientException"),
        "{table}"
    );
    // Strict: the first refusal stops the run, naming it.
    let e = simulate(
        text,
        Options {
            strict: true,
            ..Options::default()
        },
    )
    .expect_err("strict");
    assert!(e.to_string().starts_with("action 1 (at 10s)"), "{e}");
}

#[test]
fn bad_scenarios_get_errors_that_name_the_problem() {
    let base = "fleet: {t: 1}\nqueue:\n  jobQueueName: q\n  quotaShares:\n    - {quotaShareName: s, capacityLimits: [{capacityUnit: t, maxCapacity: 1}]}\n";
    let strict = Options {
        strict: true,
        ..Options::default()
    };
    let err = |extra: &str| {
        simulate(&format!("{base}{extra}"), strict)
            .expect_err("invalid")
            .to_string()
    };
    let e = err("actions:\n  - {at: 0, submit: {jobName: j, quotaShareName: s, instanceType: t, durationSeconds: 5, colour: red}}\n");
    assert!(e.contains("unknown field `colour`"), "{e}");
    let e =
        err("actions:\n  - {at: 0, updateServiceJob: {jobName: nobody, schedulingPriority: 1}}\n");
    assert!(e.contains("no job named \"nobody\""), "{e}");
    let e = err("actions:\n  - {at: 0, setFleet: {t: 2}, terminateServiceJob: {jobName: j}}\n");
    assert!(e.contains("exactly one of"), "{e}");
    let e = err("actions:\n  - {at: 0, submit: {jobName: j, quotaShareName: s, instanceType: t, instanceCount: 2, durationSeconds: 5}}\n");
    assert!(
        e.contains("MISCONFIGURATION") && e.contains("share limit"),
        "{e}"
    );
    let e = err("actions:\n  - {at: 5, updateQuotaShare: {quotaShareName: s, resourceSharingConfiguration: {strategy: LENDING}}}\n");
    assert!(
        e.contains("\"LENDING\" is not one of RESERVE, LEND, LEND_AND_BORROW"),
        "{e}"
    );
    let bad_queue = "fleet: {t: 1}\nqueue:\n  jobQueueName: q\n  quotaShares:\n    - {quotaShareName: 'bad name', capacityLimits: [{capacityUnit: t, maxCapacity: -1}]}\n";
    let e = simulate(bad_queue, Options::default())
        .expect_err("invalid")
        .to_string();
    assert!(
        e.contains("2 problems") && e.contains("maxCapacity: must be >= 0"),
        "{e}"
    );
}

#[test]
fn in_share_preemption_stops_one_victim_where_one_is_enough() {
    // Issue 9's first example: before, three jobs were preempted (a4, a3,
    // a2) and two restarted at once on the capacity they had freed.
    let r = run("minimal-preemption.yaml");
    assert_eq!(preemptions(&r), vec![(50.0, "a4", "IN_SHARE", "urgent")]);
    assert_eq!(job(&r, "urgent").first_started_at, Some(55.0));
    for name in ["a1", "a2", "a3"] {
        assert_eq!(outcomes(&r, name), vec!["SUCCEEDED"], "{name}");
    }
    assert_eq!(
        job(&r, "a4").recomputed_seconds,
        47.0,
        "a4 had 47 s at risk"
    );
    assert_eq!(r.summary.recomputed_instance_seconds, 47.0);
}

#[test]
fn a_higher_priority_job_takes_a_borrowed_place_of_its_own_share() {
    // Issue 9's second example: high2 used to wait ~990 s with "no
    // lendable capacity" while the priority-1 job of its share kept B's
    // instance.
    let r = run("in-share-borrowed.yaml");
    assert_eq!(preemptions(&r), vec![(10.0, "low", "IN_SHARE", "high2")]);
    assert_eq!(job(&r, "high2").first_started_at, Some(15.0));
    assert_eq!(outcomes(&r, "low"), vec!["PREEMPTED_IN_SHARE", "SUCCEEDED"]);
}

#[test]
fn nodes_show_packing_spreading_and_node_loss() {
    let r = run("fragmentation.yaml");
    // Packed: the two 8-slot nodes and the 4-slot one hold five jobs with
    // no spreading; only the 10-instance gang is spread (over two nodes).
    assert_eq!(r.summary.placement.spread_starts, 1);
    assert_eq!(r.summary.placement.mean_nodes_per_spread_start, 2.0);
    assert_eq!(outcomes(&r, "eight"), vec!["HOST_LOST", "SUCCEEDED"]);
    assert_eq!(job(&r, "gang").status, "SUCCEEDED");
    assert!(r.jobs.iter().all(|j| j.status == "SUCCEEDED"));
}

#[test]
fn random_workloads_never_preempt_more_than_a_beneficiary_needs() {
    // The minimal-preemption invariant (and every other one) is checked
    // after every pass of a hundred random contended workloads with
    // in-share preemption, borrowing and gangs.
    for seed in 1..=100 {
        let text = format!(
            r#"
nodes:
  - {{count: 3, instanceType: a, instances: 4}}
queue:
  jobQueueName: random
  quotaShares:
    - {{quotaShareName: x, capacityLimits: [{{capacityUnit: a, maxCapacity: 4}}],
       resourceSharingConfiguration: {{strategy: LEND_AND_BORROW}}, preemptionConfiguration: {{inSharePreemption: ENABLED}}}}
    - {{quotaShareName: y, capacityLimits: [{{capacityUnit: a, maxCapacity: 4}}],
       resourceSharingConfiguration: {{strategy: LEND_AND_BORROW, borrowLimit: 50}}, preemptionConfiguration: {{inSharePreemption: ENABLED}}}}
    - {{quotaShareName: z, capacityLimits: [{{capacityUnit: a, maxCapacity: 4}}],
       resourceSharingConfiguration: {{strategy: LEND}}}}
defaults: {{startupSeconds: 2, stopSeconds: 5}}
generate: {{jobs: 60, seed: {seed}, meanInterarrivalSeconds: 15, minDurationSeconds: 30, maxDurationSeconds: 600,
           instanceCounts: [1, 1, 2, 3, 5], maxPriority: 9, checkpointingFraction: 0.8, checkpointIntervalSeconds: 100}}
"#
        );
        let options = Options {
            check_invariants: true,
            ..Options::default()
        };
        let r = simulate(&text, options).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(
            !r.summary.jobs_by_status.contains_key("RUNNABLE"),
            "seed {seed}"
        );
    }
}

#[test]
fn a_typo_inside_a_quota_share_is_an_error_naming_its_path() {
    // Shares are the API's own type (`qm_wire::messages::QuotaShare`); the
    // scenario still refuses fields it does not know, wherever they are.
    let text = r#"
fleet: {a: 1}
queue:
  jobQueueName: q
  quotaShares:
    - {quotaShareName: x, capacityLimits: [{capacityUnit: a, maxCapacity: 1}],
       resourceSharingConfiguration: {strategy: LEND, borowLimit: 5}}
"#;
    let e = simulate(text, Options::default()).expect_err("typo");
    let message = e.to_string();
    assert!(
        message.contains("quotaShares") && message.contains("borowLimit"),
        "{message}"
    );
}

#[test]
fn checkpoint_then_preempt_trades_the_owners_wait_for_the_victims_work() {
    let r = run("checkpoint-then-preempt.yaml");
    // (owner started, victim's recomputed seconds)
    let seen = |t: &str| {
        (
            job(&r, &format!("{t}_owner")).first_started_at,
            job(&r, &format!("{t}_victim")).recomputed_seconds,
        )
    };
    assert_eq!(
        seen("x"),
        (Some(525.0), 0.0),
        "asked at 500, committed at 520, stopped by 525: nothing lost"
    );
    assert_eq!(
        seen("y"),
        (Some(505.0), 500.0),
        "stopped at once: the 500 s since the start are lost"
    );
    assert_eq!(
        seen("z"),
        (Some(625.0), 620.0),
        "no answer: stopped when the 120 s window ends, and all of it is lost"
    );
    for t in ["x", "y", "z"] {
        assert_eq!(
            outcomes(&r, &format!("{t}_victim"))[0],
            "PREEMPTED_CROSS_SHARE",
            "{t}"
        );
    }
    // The core's lost-work ledger (what `qm snapshot` shows) counts the
    // instance time from each victim's last commit to its stop, the stop's
    // 5 s included: 5 + 505 + 625 s, all of A's, all for B's owners. The
    // simulator's own model (above) stops the work at the stop request.
    let ledger: Vec<_> = r
        .lost_work
        .iter()
        .map(|l| {
            let cross = l.by_cause.get("PREEMPTED_CROSS_SHARE");
            (
                l.quota_share_name.as_str(),
                cross.map(|w| (w.attempts, w.recomputed_instance_seconds)),
                l.by_cause.len(),
                (
                    l.lost_for_this_share.attempts,
                    l.lost_for_this_share.recomputed_instance_seconds,
                ),
            )
        })
        .collect();
    assert_eq!(
        ledger,
        vec![
            ("A", Some((3, 1135.0)), 1, (0, 0.0)),
            ("B", None, 0, (3, 1135.0)),
        ]
    );
    assert_eq!(r.summary.recomputed_instance_seconds, 1120.0);
    assert!(
        r.to_table().contains("(others', for this share)"),
        "{}",
        r.to_table()
    );
}

#[test]
fn image_jobs_run_only_where_images_run_and_wait_for_it_without_preempting() {
    let r = run("runtimes.yaml");
    assert!(
        r.jobs.iter().all(|j| j.status == "SUCCEEDED"),
        "{:#?}",
        r.jobs
    );
    assert!(r.jobs.iter().all(|j| j.preempted_attempt_count == 0));
    let started = |name: &str| job(&r, name).first_started_at.expect("started");
    assert_eq!(started("host-1"), 0.0);
    assert_eq!(
        started("image-1"),
        0.0,
        "the host job left the image node free"
    );
    // image-2 waits for image-1's node although a host-only node is idle.
    let image_1_ended = job(&r, "image-1").stopped_at.expect("ended");
    assert!(started("image-2") >= image_1_ended, "{:#?}", r.jobs);
    // Two instances of nodes that run images exist only after t=1000.
    assert!(started("image-wide") >= 1000.0, "{:#?}", r.jobs);
}

// The five contract points decided in issue 29, one scenario each.

#[test]
fn borrowed_is_a_prefix_so_the_newest_lowest_priority_job_is_reclaimed() {
    let r = run("borrowed-prefix.yaml");
    assert_eq!(
        preemptions(&r),
        vec![(600.0, "small", "CROSS_SHARE", "own")]
    );
    assert_eq!(job(&r, "mid").preempted_attempt_count, 0);
    let borrowed = |name: &str| {
        r.transitions
            .iter()
            .any(|t| t.job_name == name && t.status_reason.contains("on borrowed capacity"))
    };
    assert!(!borrowed("big") && borrowed("mid") && borrowed("small"));
}

#[test]
fn reclaim_measures_again_after_each_victim_and_ties_go_to_the_next_key() {
    let r = run("reclaim-ties.yaml");
    assert_eq!(
        preemptions(&r),
        vec![
            (600.0, "b1c", "CROSS_SHARE", "own"),
            (600.0, "b2low", "CROSS_SHARE", "own")
        ]
    );
}

#[test]
fn full_ties_take_the_smallest_victim() {
    let r = run("smallest-victim.yaml");
    assert_eq!(preemptions(&r), vec![(600.0, "one", "IN_SHARE", "urgent")]);
    assert_eq!(job(&r, "two").preempted_attempt_count, 0);
}

#[test]
fn the_room_a_preemption_frees_goes_to_within_quota_work_first() {
    let r = run("freed-room.yaml");
    assert_eq!(
        preemptions(&r),
        vec![
            (800.0, "lo", "IN_SHARE", "j1"),
            (800.0, "lo3", "IN_SHARE", "j2")
        ]
    );
    assert_eq!(job(&r, "own").first_started_at, Some(800.0));
    assert_eq!(job(&r, "b").preempted_attempt_count, 0, "protected");
}

#[test]
fn only_a_preemptions_beneficiary_is_told_it_waits_for_reclaim() {
    let r = run("reclaim-reasons.yaml");
    assert_eq!(
        preemptions(&r),
        vec![(600.0, "borrower", "CROSS_SHARE", "own")]
    );
    let told = |name: &str| {
        r.transitions
            .iter()
            .filter(|t| t.job_name == name)
            .any(|t| t.status_reason.contains("WAITING_FOR_RECLAIM"))
    };
    assert!(told("own"));
    assert!(!told("late"), "late holds no claim");
    assert_eq!(job(&r, "late").first_started_at, Some(600.0));
}

#[test]
fn workload_classes_decide_the_same_in_the_simulator() {
    let r = run("classes.yaml");
    // The incident preempts the exploratory sweep, never release work.
    assert_eq!(
        preemptions(&r),
        vec![(600.0, "sweep_a", "IN_SHARE", "incident")]
    );
    assert_eq!(job(&r, "incident").scheduling_priority, 200);
    assert_eq!(
        job(&r, "incident").workload_class.as_deref(),
        Some("urgent")
    );
    assert_eq!(
        job(&r, "sweep_a").workload_class.as_deref(),
        Some("exploratory")
    );
    assert_eq!(job(&r, "rc2").scheduling_priority, 150);
    // Exploratory work never borrowed: sweep_b waited for vision's own
    // capacity though speech lent two instances.
    assert_eq!(job(&r, "rc1").first_started_at, Some(60.0));
    assert_eq!(job(&r, "rc2").first_started_at, Some(60.0));
    let b = job(&r, "sweep_b").first_started_at.expect("sweep_b ran");
    let incident_done = job(&r, "incident").stopped_at.expect("incident ended");
    assert!(
        b >= incident_done,
        "sweep_b started at {b}, before vision's capacity was free"
    );
    for name in ["sweep_a", "sweep_b", "rc1", "rc2", "incident"] {
        assert_eq!(job(&r, name).status, "SUCCEEDED", "{name}");
    }
}

/// The core's usage ledger and the simulator's own integrals of the same
/// run (sampled from the accounting at every event) agree: held and
/// borrowed instance-seconds per share and type, and the ledger's
/// recomputed work is the lost-work ledger's.
#[test]
fn the_usage_ledger_agrees_with_the_simulators_own_integrals() {
    for file in ["three-shares.yaml", "classes.yaml", "protections.yaml"] {
        let r = run(file);
        assert!(!r.usage.is_empty(), "{file}: nothing counted");
        for s in &r.shares {
            let of = |f: fn(&qm_sim::report::UsageOut) -> f64| -> f64 {
                r.usage
                    .iter()
                    .filter(|u| {
                        u.quota_share_name == s.quota_share_name
                            && u.instance_type == s.instance_type
                    })
                    .map(f)
                    .sum()
            };
            let used = of(|u| u.own_instance_seconds + u.borrowed_instance_seconds);
            let borrowed = of(|u| u.borrowed_instance_seconds);
            assert!(
                (used - s.used_instance_seconds).abs() < 0.01,
                "{file} {}: the ledger says {used} held, the simulator {}",
                s.quota_share_name,
                s.used_instance_seconds
            );
            assert!(
                (borrowed - s.borrowed_instance_seconds).abs() < 0.01,
                "{file} {}: the ledger says {borrowed} borrowed, the simulator {}",
                s.quota_share_name,
                s.borrowed_instance_seconds
            );
        }
        let recomputed: f64 = r.usage.iter().map(|u| u.recomputed_instance_seconds).sum();
        let lost: f64 = r
            .lost_work
            .iter()
            .flat_map(|l| l.by_cause.values())
            .map(|w| w.recomputed_instance_seconds)
            .sum();
        assert!(
            (recomputed - lost).abs() < 0.01,
            "{file}: {recomputed} vs {lost}"
        );
    }
}

#[test]
fn two_queues_share_a_fleet_by_priority_and_neither_preempts_the_other() {
    let path = format!(
        "{}/../../examples/scenarios/shared-fleet.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).expect("example scenario exists");
    assert!(qm_sim::is_environment(&text));
    let scenario = qm_sim::parse_environment(&text).expect("parsed");
    let options = Options {
        check_invariants: true,
        ..Options::default()
    };
    let env = qm_sim::Environment::new(scenario, options)
        .expect("valid")
        .run(&mut |_| {})
        .expect("ran");
    assert_eq!(env.service_environment, "gpu-fleet");
    let names: Vec<&str> = env
        .queues
        .iter()
        .map(|q| q.job_queue_name.as_str())
        .collect();
    assert_eq!(names, ["research", "batch"], "served by priority");
    let (research, batch) = (&env.queues[0].report, &env.queues[1].report);
    // r1 waited on batch's instances, nothing was preempted for it, and it
    // took the first one to free (b1's), ahead of batch's own b3.
    let waited = research.transitions.iter().any(|t| {
        t.job_name == "r1"
            && t.to == "RUNNABLE"
            && t.status_reason.starts_with(
                "WAITING_FOR_ENVIRONMENT_CAPACITY: other queues of its service environment hold 2",
            )
    });
    assert!(waited, "{:#?}", research.transitions);
    assert!(research.preemptions.is_empty() && batch.preemptions.is_empty());
    let scheduled = |r: &Report, name: &str| {
        r.transitions
            .iter()
            .find(|t| t.job_name == name && t.to == "SCHEDULED")
            .map(|t| t.t)
    };
    assert_eq!(scheduled(research, "r1"), Some(205.0), "when b1 ended");
    assert_eq!(scheduled(batch, "b3"), Some(510.0), "when r1 ended");
    for name in ["b1", "b2", "b3"] {
        assert_eq!(job(batch, name).status, "SUCCEEDED", "{name}");
    }
    assert_eq!(job(research, "r1").status, "SUCCEEDED");

    // A queue given twice is refused by name.
    let twice = text.replace("jobQueueName: batch", "jobQueueName: research");
    let err = qm_sim::Environment::new(qm_sim::parse_environment(&twice).expect("parsed"), options)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("\"research\" is given twice"), "{err}");
}
