//! Workload classes end to end, through admission and the scheduler on a
//! real NATS: a job's class and band, what a class refuses, the resume
//! proof a class asks for before it borrows, and in-share preemption by
//! class.

use qm_integration_tests::stack::{running, Stack};
use qm_wire::messages::{ServiceJob, SubmitServiceJob};
use qm_wire::subjects::Operation;

/// The three-share example with workload classes in QS1: exploratory
/// work (the default), release work that must checkpoint and borrows only
/// once a resume drill passed, and urgent work.
const CLASSES_QUEUE: &str = include_str!("../../examples/queues/classes.yaml");

const LONG: [&str; 6] = [
    "--steps",
    "5000",
    "--checkpoint-every",
    "50",
    "--step-delay-ms",
    "20",
];

#[tokio::test(flavor = "multi_thread")]
async fn classes_set_the_band_refuse_what_they_forbid_and_gate_borrowing_on_a_resume_proof() {
    let (_nats, _s3, mut stack) = running("classes", CLASSES_QUEUE).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 2);
    let job = |name: &str, class: Option<&str>, priority: Option<u32>| {
        let mut j: SubmitServiceJob = stack.trainer_job(name, "training", "QS1", 0, &LONG);
        j.workload_class = class.map(String::from);
        j.scheduling_priority = priority;
        j
    };
    let refused = |j: SubmitServiceJob| {
        let c = stack.client.clone();
        async move {
            c.call::<_, serde_json::Value>(Operation::SubmitServiceJob, &j)
                .await
                .expect_err("refused")
                .to_string()
        }
    };

    // No class and no priority: the default class, at its band's lowest.
    let explore = stack.submit(&job("explore", None, None)).await;
    let j: ServiceJob = stack
        .wait_for(&explore, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    assert_eq!(j.workload_class.as_deref(), Some("exploratory"), "{j:#?}");
    assert_eq!(j.scheduling_priority, 0);

    // Outside the band, an unknown class, release work without a
    // checkpoint: each refused, naming the problem.
    let e = refused(job("high", Some("exploratory"), Some(150))).await;
    assert!(
        e.contains("schedulingPriority: must lie in class \"exploratory\"'s band 0..=99, got 150"),
        "{e}"
    );
    let e = refused(job("who", Some("research"), None)).await;
    assert!(e.contains("has no class \"research\""), "{e}");
    let mut no_ckpt = job("rc0", Some("release"), None);
    no_ckpt.checkpoint_config = None;
    let e = refused(no_ckpt).await;
    assert!(
        e.contains("checkpointConfig: is required: class \"release\""),
        "{e}"
    );

    // Release work with no resume proof never borrows: r1 takes the share's
    // own instance (the exploratory job becomes the borrowed one), r2
    // waits, saying why.
    let r1 = stack.submit(&job("r1", Some("release"), None)).await;
    let j = stack
        .wait_for(&r1, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    assert_eq!(j.scheduling_priority, 100);
    assert!(!j.on_borrowed_capacity, "{j:#?}");
    let j = stack
        .wait_for(&explore, 30, "borrowed", |j| j.on_borrowed_capacity)
        .await;
    assert_eq!(j.status, "RUNNING");
    let r2 = stack.submit(&job("r2", Some("release"), Some(150))).await;
    stack
        .wait_for(&r2, 30, "RESUME_NOT_VERIFIED", |j| {
            j.status_reason.starts_with("RESUME_NOT_VERIFIED")
        })
        .await;

    // Urgent work preempts the exploratory job in-share (release work may
    // only be preempted by urgent, and has the higher priority anyway).
    let urgent = stack.submit(&job("incident", Some("urgent"), None)).await;
    let j = stack
        .wait_for(&urgent, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    assert_eq!(j.scheduling_priority, 200);
    let j = stack
        .wait_for(&explore, 30, "preempted", |j| {
            j.attempts.first().is_some_and(|a| a.outcome.is_some())
        })
        .await;
    assert_eq!(
        j.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_IN_SHARE"),
        "{j:#?}"
    );
    let j = stack
        .wait_for(&r1, 5, "still running", |j| j.status == "RUNNING")
        .await;
    assert_eq!(j.attempts.len(), 1, "release work was not touched");

    // Another team can neither use QS1's classes nor claim them in its own
    // share.
    let bob = stack.auth.client(&stack.nats_url, "bob").await;
    let e = bob
        .call::<_, serde_json::Value>(
            Operation::SubmitServiceJob,
            &job("b1", Some("urgent"), None),
        )
        .await
        .expect_err("not bob's share");
    assert_eq!(
        e.code(),
        Some(qm_wire::messages::ErrorCode::AccessDenied),
        "{e}"
    );
    let mut in_qs2 = job("b2", Some("urgent"), None);
    in_qs2.quota_share_name = Some("QS2".into());
    let e = bob
        .call::<_, serde_json::Value>(Operation::SubmitServiceJob, &in_qs2)
        .await
        .expect_err("QS2 has no classes")
        .to_string();
    assert!(e.contains("declares no workload classes"), "{e}");

    for id in [&explore, &r1, &r2, &urgent] {
        stack
            .client
            .call::<_, serde_json::Value>(
                Operation::TerminateServiceJob,
                &serde_json::json!({"jobId": id, "reason": "test over"}),
            )
            .await
            .expect("terminated");
    }
    stack.stop_all();
}

/// A team whose release class borrows only once a drill passed, beside a
/// lender: two instances of its own, one to lend.
const DRILL_QUEUE: &str = "jobQueue: {jobQueueName: drills}
quotaShares:
  - quotaShareName: team
    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 2}]
    resourceSharingConfiguration: {strategy: LEND_AND_BORROW}
    workloadClasses:
      - name: release
        priorityBand: {min: 100, max: 199}
        requiresCheckpoint: true
        borrowRequiresResumeProof: true
  - quotaShareName: lender
    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 1}]
    resourceSharingConfiguration: {strategy: LEND}
";

/// A seed whose stop comes within 1.5 s of the first checkpoint.
fn quick_seed() -> u64 {
    (0..)
        .find(|s| qm_core::drill::delay_for(*s) < 1_500)
        .expect("a seed")
}

/// The drill's outcome once decided (a transient error is retried, as the
/// API tells clients to); panics after 120 s.
async fn drill_outcome(
    c: qm_service::client::Client,
    drill_id: String,
) -> qm_wire::messages::ResumeDrill {
    use qm_wire::messages::{ListResumeDrills, ListResumeDrillsResponse, ResumeDrill};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let listed: Result<ListResumeDrillsResponse, _> = c
            .call(
                Operation::ListResumeDrills,
                &ListResumeDrills {
                    job_queue: "drills".into(),
                    quota_share_name: None,
                },
            )
            .await;
        // A transient error (no leader for a moment on a loaded
        // machine) is retried, as the API tells clients to.
        let list = match listed {
            Err(qm_service::client::CallError::Api(e))
                if e.code == qm_wire::messages::ErrorCode::Transient
                    && std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            }
            other => other.expect("drills listed"),
        };
        let d: Option<ResumeDrill> = list.drills.into_iter().find(|d| d.drill_id == drill_id);
        if let Some(d) = d.as_ref().filter(|d| d.status != "RUNNING") {
            return d.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "drill {drill_id} undecided: {d:#?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
}

/// Terminates the jobs, each waited for until final.
async fn terminate_and_wait(stack: &Stack, ids: &[String]) {
    for id in ids {
        stack
            .client
            .call::<_, serde_json::Value>(
                Operation::TerminateServiceJob,
                &serde_json::json!({"jobId": id, "reason": "next part"}),
            )
            .await
            .expect("terminated");
        stack.wait_final(id, 60).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drill_that_passes_lets_the_class_borrow_and_one_that_forgets_the_optimizer_fails() {
    use qm_wire::messages::{
        ListResumeDrills, ListResumeDrillsResponse, StartResumeDrill, StartResumeDrillResponse,
    };
    let (_nats, _s3, mut stack) = running("drills", DRILL_QUEUE).await;
    stack.executor("node-1", "drills", "ml.g5.xlarge", 3);
    let args = [
        "--steps",
        "300",
        "--checkpoint-every",
        "10",
        "--step-delay-ms",
        "20",
    ];
    let release = |name: &str, extra: &[&str]| {
        let all: Vec<&str> = args.iter().chain(extra).copied().collect();
        let mut j = stack.trainer_job(name, "drills", "team", 100, &all);
        j.workload_class = Some("release".into());
        j
    };
    let start = |job: SubmitServiceJob| {
        let c = stack.client.clone();
        async move {
            c.call::<_, StartResumeDrillResponse>(
                Operation::StartResumeDrill,
                &StartResumeDrill {
                    job,
                    seed: Some(quick_seed()),
                },
            )
            .await
            .expect("the drill starts")
        }
    };
    let outcome = |drill_id: String| drill_outcome(stack.client.clone(), drill_id);

    // A drill of the example trainer: the resumed copy ends with the
    // uninterrupted copy's digest.
    let r = start(release("rc", &[])).await;
    let d = outcome(r.drill_id.clone()).await;
    assert_eq!(d.status, "PASSED", "{d:#?}");
    assert_eq!(d.workload_class, "release");
    assert!(d.artifact.starts_with("command:"), "{d:#?}");
    assert!(
        d.stopped_at.is_some() && d.recomputed_ms.is_some(),
        "{d:#?}"
    );
    assert!(
        d.restored_step.is_some_and(|s| s >= 10),
        "resumed from a checkpoint: {d:#?}"
    );
    let resumed = stack.describe(&r.resumed_job_id).await.expect("described");
    assert_eq!(
        resumed.attempts.first().and_then(|a| a.outcome.as_deref()),
        Some("PREEMPTED_DRILL"),
        "{resumed:#?}"
    );

    // Now the class borrows for that command: three jobs, the third on
    // the lender's instance.
    let mut ids = Vec::new();
    for name in ["b1", "b2", "b3"] {
        ids.push(stack.submit(&release(name, &[])).await);
    }
    let mut borrowed = 0;
    for id in &ids {
        let j = stack
            .wait_for(id, 60, "RUNNING", |j| j.status == "RUNNING")
            .await;
        borrowed += usize::from(j.on_borrowed_capacity);
    }
    assert_eq!(borrowed, 1, "one of the three borrows");
    terminate_and_wait(&stack, &ids).await;
    // Another command has no proof: its jobs run on the share's own two
    // instances, and the third may not borrow the lender's idle one.
    let mut others = Vec::new();
    for name in ["o1", "o2", "o3"] {
        others.push(stack.submit(&release(name, &["--seed", "9"])).await);
    }
    stack
        .wait_for(&others[2], 30, "RESUME_NOT_VERIFIED", |j| {
            j.status_reason.starts_with("RESUME_NOT_VERIFIED")
        })
        .await;
    terminate_and_wait(&stack, &others).await;

    // A trainer that does not restore its optimizer: the drill fails and
    // says what differed.
    let r = start(release("faulty", &["--forget-optimizer-on-resume"])).await;
    let d = outcome(r.drill_id).await;
    assert_eq!(d.status, "FAILED", "{d:#?}");
    assert!(d.status_reason.contains("the results differ"), "{d:#?}");

    // As an attacker: another team may neither drill in this share nor
    // list its drills, and nobody may write the log a drill's outcome is
    // decided from.
    let bob = stack.auth.client(&stack.nats_url, "bob").await;
    let e = bob
        .call::<_, serde_json::Value>(
            Operation::StartResumeDrill,
            &StartResumeDrill {
                job: release("mine", &[]),
                seed: None,
            },
        )
        .await
        .expect_err("not bob's share");
    assert_eq!(
        e.code(),
        Some(qm_wire::messages::ErrorCode::AccessDenied),
        "{e}"
    );
    let e = bob
        .call::<_, serde_json::Value>(
            Operation::ListResumeDrills,
            &ListResumeDrills {
                job_queue: "drills".into(),
                quota_share_name: Some("team".into()),
            },
        )
        .await
        .expect_err("not bob's share");
    assert_eq!(
        e.code(),
        Some(qm_wire::messages::ErrorCode::AccessDenied),
        "{e}"
    );
    let forged = qm_wire::system::LogEntry::Drill {
        drill_id: "d-forged".into(),
        resumed_job_id: "j-forged-a".into(),
        uninterrupted_job_id: "j-forged-b".into(),
        job: release("forged", &[]),
        seed: 1,
        principal: Some("bob".into()),
    };
    let published = bob
        .nats
        .publish(
            qm_wire::subjects::log_submit("drills").expect("subject"),
            serde_json::to_vec(&forged).expect("json").into(),
        )
        .await;
    // The server refuses the publish (a permissions violation closes
    // nothing but drops the message); the drill never exists.
    let _ = published;
    let _ = bob.nats.flush().await;
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let list: ListResumeDrillsResponse = stack
        .client
        .call(
            Operation::ListResumeDrills,
            &ListResumeDrills {
                job_queue: "drills".into(),
                quota_share_name: None,
            },
        )
        .await
        .expect("listed");
    assert!(
        list.drills.iter().all(|d| d.drill_id != "d-forged"),
        "{list:#?}"
    );
    assert_eq!(list.drills.len(), 2);
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_policy_stability_record_counts_the_three_share_story_and_is_scoped() {
    use qm_integration_tests::story::QUEUE_YAML;
    use qm_wire::messages::{GetPolicyStabilityRecord, PolicyStabilityRecord};
    let (_nats, _s3, mut stack) = running("governance", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let alice = stack.auth.client(&stack.nats_url, "alice").await;
    let bob = stack.auth.client(&stack.nats_url, "bob").await;
    let job = |name: &str, share: &str, priority: u32| {
        stack.trainer_job(name, "training", share, priority, &LONG)
    };
    // The story: p3 runs, p2 borrows QS2's idle instance, QS2's own job
    // reclaims it, alice raises p1 above p3, which preempts p3 in-share.
    let p3 = stack.submit_as(&alice, &job("p3", "QS1", 3)).await;
    stack
        .wait_for(&p3, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let p2 = stack.submit_as(&alice, &job("p2", "QS1", 2)).await;
    stack
        .wait_for(&p2, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    let p1 = stack.submit_as(&alice, &job("p1", "QS1", 1)).await;
    let q2 = stack.submit_as(&bob, &job("q2", "QS2", 0)).await;
    stack
        .wait_for(&q2, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    stack.update_priority_as(&alice, &p1, 4).await;
    stack
        .wait_for(&p1, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    stack
        .wait_for(&p3, 30, "preempted in-share", |j| {
            j.attempts.first().and_then(|a| a.outcome.as_deref()) == Some("PREEMPTED_IN_SHARE")
        })
        .await;
    // The platform team changes QS1 (classes), and alice stops her jobs.
    stack
        .apply(include_str!("../../examples/queues/classes.yaml"))
        .await;
    for id in [&p1, &p2, &p3] {
        alice
            .call::<_, serde_json::Value>(
                Operation::TerminateServiceJob,
                &serde_json::json!({"jobId": id, "reason": "story over"}),
            )
            .await
            .expect("terminated");
    }
    let record = |client: qm_service::client::Client| async move {
        client
            .call::<_, PolicyStabilityRecord>(
                Operation::GetPolicyStabilityRecord,
                &GetPolicyStabilityRecord {
                    job_queue: "training".into(),
                    quota_share_name: None,
                    since: None,
                },
            )
            .await
            .expect("the record")
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let r = loop {
        let r = record(stack.client.clone()).await;
        let qs1 = r.weeks.iter().find(|w| w.quota_share_name == "QS1");
        if qs1.is_some_and(|w| w.terminations.iter().map(|t| t.count).sum::<u32>() == 3) {
            break r;
        }
        assert!(std::time::Instant::now() < deadline, "{r:#?}");
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    };
    let qs1 = r
        .weeks
        .iter()
        .find(|w| w.quota_share_name == "QS1")
        .expect("QS1");
    assert_eq!(
        (
            qs1.priority_changes.len(),
            qs1.priority_changes[0].principal.as_str(),
            qs1.priority_changes[0].count
        ),
        (1, "alice", 1),
        "{qs1:#?}"
    );
    assert_eq!(qs1.terminations[0].principal, "alice");
    let kinds: Vec<(&str, &str, u32)> = qs1
        .preemptions
        .iter()
        .map(|p| (p.kind.as_str(), p.workload_class.as_str(), p.count))
        .collect();
    assert_eq!(
        kinds,
        vec![("CROSS_SHARE", "default", 1), ("IN_SHARE", "default", 1)]
    );
    assert_eq!(
        qs1.configuration_changes[0].principal, "platform",
        "{qs1:#?}"
    );
    let qs2 = r
        .weeks
        .iter()
        .find(|w| w.quota_share_name == "QS2")
        .expect("QS2");
    let waits = qs2
        .reclaim_wait_seconds
        .as_ref()
        .expect("QS2 waited for its instance");
    assert_eq!(waits.count, 1, "{qs2:#?}");
    // Scoped like every read: bob sees his team's share only.
    let bobs = record(bob.clone()).await;
    assert!(
        !bobs.weeks.is_empty() && bobs.weeks.iter().all(|w| w.quota_share_name == "QS2"),
        "{bobs:#?}"
    );
    let e = bob
        .call::<_, PolicyStabilityRecord>(
            Operation::GetPolicyStabilityRecord,
            &GetPolicyStabilityRecord {
                job_queue: "training".into(),
                quota_share_name: Some("QS1".into()),
                since: None,
            },
        )
        .await
        .expect_err("not bob's share");
    assert_eq!(
        e.code(),
        Some(qm_wire::messages::ErrorCode::AccessDenied),
        "{e}"
    );
    bob.call::<_, serde_json::Value>(
        Operation::TerminateServiceJob,
        &serde_json::json!({"jobId": q2, "reason": "story over"}),
    )
    .await
    .expect("terminated");
    // The usage ledger of the same story (issue 32).
    let jobs = [p1, p2, p3, q2];
    let mut finals = Vec::new();
    for id in &jobs {
        finals.push(stack.wait_final(id, 120).await);
    }
    usage_of_the_story(&stack, &finals, &bob).await;
    stack.stop_all();
}

/// The story's usage: it adds up to the attempts' own records, QS1's
/// borrowing is QS2's lending, the reclaimed attempt's lost work is QS1's
/// recomputed work, and the report is scoped and checked like every read.
async fn usage_of_the_story(
    stack: &qm_integration_tests::stack::Stack,
    finals: &[ServiceJob],
    bob: &qm_service::client::Client,
) {
    use qm_wire::messages::{GetUsage, UsageReport};
    let ids: Vec<String> = finals.iter().map(|j| j.job_id.clone()).collect();
    let (ledger, attempts) = stack.usage_against_attempts("training", &ids).await;
    assert!(
        (ledger - attempts).abs() < 0.001,
        "the ledger holds {ledger} instance-seconds, the attempts {attempts}"
    );
    let get = |client: qm_service::client::Client, share: Option<&str>, from: Option<&str>| {
        let request = GetUsage {
            job_queue: "training".into(),
            quota_share_name: share.map(String::from),
            from: from.map(String::from),
            by: Some("WEEK".into()),
            ..Default::default()
        };
        async move {
            client
                .call::<_, UsageReport>(Operation::GetUsage, &request)
                .await
        }
    };
    let all = get(stack.client.clone(), None, None)
        .await
        .expect("the report");
    let of = |share: &str| {
        let mut u = (0.0, 0.0, 0.0);
        for r in all.rows.iter().filter(|r| r.quota_share_name == share) {
            u.0 += r.own_instance_seconds;
            u.1 += r.borrowed_instance_seconds;
            u.2 += r
                .recomputed
                .iter()
                .filter(|c| c.cause == "PREEMPTED_CROSS_SHARE")
                .map(|c| c.instance_seconds)
                .sum::<f64>();
        }
        u
    };
    let (qs1, qs2) = (of("QS1"), of("QS2"));
    assert!(
        qs1.0 > 0.0 && qs1.1 > 0.0,
        "QS1 held own and borrowed capacity: {all:#?}"
    );
    assert!(
        qs2.0 > 0.0 && qs2.1 == 0.0,
        "QS2 held only its own: {all:#?}"
    );
    let from_qs2: f64 = all
        .lending
        .iter()
        .filter(|l| l.borrower == "QS1" && l.lender.as_deref() == Some("QS2"))
        .map(|l| l.instance_seconds)
        .sum();
    assert!(from_qs2 > 0.0, "QS1 borrowed QS2's idle instance: {all:#?}");
    // p2's reclaimed attempt: the work it lost is QS1's recomputed work.
    let lost: u64 = finals
        .iter()
        .flat_map(|j| j.attempts.iter())
        .filter(|a| a.outcome.as_deref() == Some("PREEMPTED_CROSS_SHARE"))
        .filter_map(|a| a.recomputed_ms)
        .sum();
    assert!(
        (qs1.2 - lost as f64 / 1000.0).abs() < 0.001,
        "QS1 recomputed {} s, the reclaimed attempt lost {lost} ms",
        qs1.2
    );
    // Scoped: bob sees QS2's rows, and the lending where QS2 lent.
    let bobs = get(bob.clone(), None, None).await.expect("bob's report");
    assert!(
        !bobs.rows.is_empty() && bobs.rows.iter().all(|r| r.quota_share_name == "QS2"),
        "{bobs:#?}"
    );
    assert!(
        bobs.lending
            .iter()
            .all(|l| l.borrower == "QS2" || l.lender.as_deref() == Some("QS2")),
        "{bobs:#?}"
    );
    let e = get(bob.clone(), Some("QS1"), None)
        .await
        .expect_err("not bob's share");
    assert_eq!(
        e.code(),
        Some(qm_wire::messages::ErrorCode::AccessDenied),
        "{e}"
    );
    // A day the calendar lacks is refused by name.
    let e = get(stack.client.clone(), None, Some("2026-02-30"))
        .await
        .expect_err("no such day");
    assert_eq!(e.code(), Some(qm_wire::messages::ErrorCode::Invalid), "{e}");
    assert!(e.to_string().contains("from"), "{e}");
}
