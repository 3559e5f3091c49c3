//! Borrowing budgets end to end, through admission and the scheduler on a
//! real NATS, with the example trainer on a real executor: a budget that
//! runs out under CHECKPOINT_AND_STOP stops the borrower, which waits and
//! then resumes from its checkpoint; a standby that takes over in the
//! middle of a budget window counts nothing twice.

use std::time::Duration;

use qm_integration_tests::stack::running;
use qm_wire::messages::{BudgetBurnDown, GetUsage, ServiceJob, UsageReport};
use qm_wire::subjects::Operation;

/// QS1 borrows QS2's instance under a budget of `budget` (instance-hours
/// per 2 h), with `on` at exhaustion.
fn queue(budget: &str, on: &str) -> String {
    format!(
        "jobQueue: {{jobQueueName: training}}
quotaShares:
  - quotaShareName: QS1
    capacityLimits: [{{capacityUnit: ml.g5.xlarge, maxCapacity: 1}}]
    resourceSharingConfiguration: {{strategy: LEND_AND_BORROW}}
    borrowBudget: {{instanceHours: {budget}, windowHours: 2}}
    onBudgetExhausted: {on}
  - quotaShareName: QS2
    capacityLimits: [{{capacityUnit: ml.g5.xlarge, maxCapacity: 1}}]
    resourceSharingConfiguration: {{strategy: LEND}}
"
    )
}

async fn usage(client: &qm_service::client::Client) -> UsageReport {
    client
        .call::<_, UsageReport>(
            Operation::GetUsage,
            &GetUsage {
                job_queue: "training".into(),
                ..Default::default()
            },
        )
        .await
        .expect("the usage report")
}

fn qs1_budget(r: &UsageReport) -> BudgetBurnDown {
    r.budgets
        .iter()
        .find(|b| b.quota_share_name == "QS1")
        .cloned()
        .unwrap_or_else(|| panic!("QS1's budget in {r:#?}"))
}

/// QS1's borrowed instance-seconds in the ledger's rows.
fn borrowed_seconds(r: &UsageReport) -> f64 {
    r.rows
        .iter()
        .filter(|r| r.quota_share_name == "QS1")
        .map(|r| r.borrowed_instance_seconds)
        .sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_spent_budget_checkpoints_and_stops_the_borrower_which_resumes_when_it_refills() {
    // 18 instance-seconds of borrowing: the borrowed half of a 2-instance
    // job spends it in 18 s.
    let (_nats, _s3, mut stack) =
        running("budget-stop", &queue("0.005", "CHECKPOINT_AND_STOP")).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 2);
    let mut j = stack.trainer_job(
        "greedy",
        "training",
        "QS1",
        0,
        &[
            "--steps",
            "2500",
            "--checkpoint-every",
            "50",
            "--step-delay-ms",
            "20",
        ],
    );
    j.instance_count = Some(2);
    let id = stack.submit(&j).await;
    stack
        .wait_for(&id, 60, "RUNNING on borrowed capacity", |j| {
            j.status == "RUNNING" && j.on_borrowed_capacity
        })
        .await;
    // Spent: checkpointed (every 50 steps), stopped, requeued, waiting for
    // the budget, saying so.
    let waiting: ServiceJob = stack
        .wait_for(&id, 90, "waiting for its budget", |j| {
            j.status_reason.starts_with("BORROW_BUDGET")
        })
        .await;
    assert_eq!(waiting.status, "RUNNABLE", "{waiting:#?}");
    assert_eq!(
        waiting.attempts[0].outcome.as_deref(),
        Some("PREEMPTED_BUDGET"),
        "{waiting:#?}"
    );
    assert_eq!(waiting.attempts[0].preempted_for_job_id, None);
    assert!(
        waiting
            .status_reason
            .contains("instance-hours of its share's borrowing budget are left"),
        "{}",
        waiting.status_reason
    );
    let r = usage(&stack.client).await;
    let b = qs1_budget(&r);
    assert!(b.used_instance_hours >= 0.005, "{b:#?}");
    assert_eq!(b.left_instance_hours, 0.0, "{b:#?}");
    assert_eq!(b.on_budget_exhausted, "CHECKPOINT_AND_STOP");
    // The budget counts exactly what the ledger counts as borrowed.
    assert!(
        (b.used_instance_hours * 3600.0 - borrowed_seconds(&r)).abs() < 0.01,
        "{b:#?} vs {}",
        borrowed_seconds(&r)
    );
    // The lost work is the budget's in the ledger.
    let recomputed: f64 = r
        .rows
        .iter()
        .flat_map(|r| &r.recomputed)
        .filter(|c| c.cause == "PREEMPTED_BUDGET")
        .map(|c| c.instance_seconds)
        .sum();
    assert!(
        recomputed < 2.0 * 2.0,
        "at most a checkpoint interval of 2 instances lost: {recomputed}"
    );
    // Another team sees neither QS1's budget nor its rows.
    let bob = stack.auth.client(&stack.nats_url, "bob").await;
    let theirs = usage(&bob).await;
    assert!(theirs.budgets.is_empty(), "{theirs:#?}");
    // The platform raises the budget: it borrows again, from its checkpoint.
    stack.apply(&queue("1", "CHECKPOINT_AND_STOP")).await;
    let done = stack.wait_final(&id, 120).await;
    assert_eq!(done.status, "SUCCEEDED", "{done:#?}");
    assert_eq!(done.attempts.len(), 2, "{done:#?}");
    let restored = done.attempts[1].restored_checkpoint_step.unwrap_or(0);
    assert!(restored >= 50, "resumed from its checkpoint: {done:#?}");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_takeover_in_the_middle_of_a_budget_window_counts_nothing_twice() {
    // 36 instance-seconds; FINISH: jobs borrow only with an expected run.
    let (_nats, _s3, mut stack) = running("budget-takeover", &queue("0.01", "FINISH")).await;
    stack.scheduler("scheduler-2");
    stack.executor("node-1", "training", "ml.g5.xlarge", 2);
    let trainer = stack.trainer();
    let job = |name: &str, steps: &str, estimate: Option<u64>| {
        let mut j = qm_integration_tests::stack::trainer_job(
            name,
            "training",
            "QS1",
            0,
            &["--steps", steps, "--step-delay-ms", "20"],
        );
        j.command[0].clone_from(&trainer);
        j.instance_count = Some(2);
        j.estimated_runtime_seconds = estimate;
        j
    };
    // Without an expected run it may not borrow under FINISH.
    let unbounded = stack.submit(&job("unbounded", "10", None)).await;
    stack
        .wait_for(&unbounded, 30, "refused to borrow", |j| {
            j.status_reason.contains("declares no expected run")
        })
        .await;
    stack
        .client
        .call::<_, serde_json::Value>(
            Operation::TerminateServiceJob,
            &serde_json::json!({"jobId": unbounded, "reason": "test"}),
        )
        .await
        .expect("terminated");
    // 25 s expected, about 12 s of borrowing.
    let first = stack.submit(&job("first", "600", Some(25))).await;
    stack
        .wait_for(&first, 60, "RUNNING", |j| j.status == "RUNNING")
        .await;
    stack.wait_standing_by("scheduler-2").await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    stack.signal("scheduler-1", "KILL");
    let done = stack.wait_final(&first, 120).await;
    assert_eq!(done.status, "SUCCEEDED", "{done:#?}\n{}", stack.logs());
    assert_eq!(done.attempts.len(), 1, "ran once: {done:#?}");
    // The new leader's budget holds exactly the ledger's borrowing, which
    // is the attempt's own: one borrowed instance for its whole run.
    let r = usage(&stack.client).await;
    let b = qs1_budget(&r);
    let a = &done.attempts[0];
    let held = (a.stopped_at.expect("ended") - a.scheduled_at.expect("scheduled")) as f64 / 1000.0;
    assert!(
        (b.used_instance_hours * 3600.0 - borrowed_seconds(&r)).abs() < 0.01,
        "{b:#?} vs {}",
        borrowed_seconds(&r)
    );
    assert!(
        (borrowed_seconds(&r) - held).abs() < 0.01,
        "ledger {} vs the attempt {held}",
        borrowed_seconds(&r)
    );
    // What is left decides: 30 s does not fit, 2 s does (and starts,
    // although it came later).
    let big = stack.submit(&job("big", "100", Some(30))).await;
    let small = stack.submit(&job("small", "50", Some(2))).await;
    let w = stack
        .wait_for(&big, 30, "waiting for its budget", |j| {
            j.status_reason.starts_with("BORROW_BUDGET")
        })
        .await;
    // "BORROW_BUDGET: L instance-hours ... are left; it needs N (...)":
    // it needs at least 30 s of one borrowed instance, more than is left.
    let number_after = |text: &str, marker: &str| -> f64 {
        let at = text.find(marker).expect("marker") + marker.len();
        text[at..]
            .split_whitespace()
            .next()
            .and_then(|n| n.trim_end_matches(';').parse().ok())
            .unwrap_or_else(|| panic!("a number after {marker:?} in {text}"))
    };
    let left = number_after(&w.status_reason, "BORROW_BUDGET: ");
    let need = number_after(&w.status_reason, "it needs ");
    assert!(need >= 0.008 && need > left, "{}", w.status_reason);
    let s = stack.wait_final(&small, 60).await;
    assert_eq!(s.status, "SUCCEEDED", "{s:#?}");
    let b = stack.describe(&big).await.expect("big");
    assert_eq!(b.status, "RUNNABLE", "{b:#?}");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_share_group_is_applied_described_and_its_borrow_limit_holds_a_borrower() {
    // QS1 and QS3 form `research`, which may not borrow at all; QS2 lends.
    let doc = "jobQueue:
  jobQueueName: training
  shareGroups: [{shareGroupName: research, borrowLimit: 0}]
quotaShares:
  - quotaShareName: QS1
    shareGroup: research
    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 1}]
    resourceSharingConfiguration: {strategy: LEND_AND_BORROW}
  - quotaShareName: QS2
    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 1}]
    resourceSharingConfiguration: {strategy: LEND}
  - quotaShareName: QS3
    shareGroup: research
    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 1}]
    resourceSharingConfiguration: {strategy: LEND_AND_BORROW}
";
    let (_nats, _s3, mut stack) = running("share-group", doc).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let described: qm_wire::system::QueueDocument = stack
        .client
        .call(
            Operation::DescribeJobQueue,
            &qm_wire::messages::QueueRef {
                job_queue: "training".into(),
            },
        )
        .await
        .expect("described");
    assert_eq!(described.job_queue.share_groups.len(), 1, "{described:#?}");
    assert_eq!(
        described.quota_shares[0].share_group,
        Some(Some("research".to_string()))
    );
    let mut j = stack.trainer_job("wide", "training", "QS1", 0, &["--steps", "5"]);
    j.instance_count = Some(2);
    let id = stack.submit(&j).await;
    let w = stack
        .wait_for(&id, 30, "held by its group", |j| {
            j.status_reason.starts_with("GROUP_BORROW_LIMIT_REACHED")
        })
        .await;
    assert_eq!(w.status, "RUNNABLE");
    // A share naming a group the queue lacks: refused, by field.
    let bad = doc.replace("shareGroup: research\n    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 1}]\n    resourceSharingConfiguration: {strategy: LEND_AND_BORROW}\n", "shareGroup: nowhere\n    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 1}]\n    resourceSharingConfiguration: {strategy: LEND_AND_BORROW}\n");
    let bad: qm_wire::system::QueueDocument = serde_yaml_ng::from_str(&bad).expect("yaml");
    let e = stack
        .client
        .call::<_, serde_json::Value>(Operation::ApplyJobQueue, &bad)
        .await
        .expect_err("refused")
        .to_string();
    assert!(e.contains("quotaShares[0].shareGroup"), "{e}");
    // The group's limit raised: it borrows.
    stack
        .apply(&doc.replace("borrowLimit: 0", "borrowLimit: 100"))
        .await;
    let done = stack.wait_final(&id, 60).await;
    assert_eq!(done.status, "SUCCEEDED", "{done:#?}");
    stack.stop_all();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_update_merges_protections_by_field_and_null_removes_a_setting() {
    // Admission merges with the one merge the simulator also calls
    // (qm_wire::updates). An update naming only the cooldown keeps the
    // share's minimum runtime; `null` removes one setting; a value of the
    // wrong type is refused and nothing stored changes.
    let doc = "jobQueue: {jobQueueName: training}
quotaShares:
  - quotaShareName: QS1
    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 1}]
    resourceSharingConfiguration: {strategy: LEND_AND_BORROW, borrowLimit: 100}
    protections: {minRuntimeBeforePreemptionSeconds: 120, borrowRequiresCheckpoint: true}
    fairShareWeight: 3
";
    let (_nats, _s3, stack) = running("share-update", doc).await;
    let update = |body: serde_json::Value| {
        let client = stack.client.clone();
        async move {
            client
                .call::<_, qm_wire::messages::QuotaShare>(Operation::UpdateQuotaShare, &body)
                .await
        }
    };
    let qs1 = serde_json::json!({"jobQueue": "training", "quotaShareName": "QS1"});
    let with = |fields: serde_json::Value| {
        let mut body = qs1.clone();
        for (k, v) in fields.as_object().expect("fields").clone() {
            body[k] = v;
        }
        body
    };
    let updated = update(with(
        serde_json::json!({"protections": {"reborrowCooldownSeconds": 60}}),
    ))
    .await
    .expect("updated");
    let p = updated.protections.clone().expect("protections kept");
    assert_eq!(p.min_runtime_before_preemption_seconds, Some(120));
    assert_eq!(p.reborrow_cooldown_seconds, Some(60));
    assert_eq!(p.borrow_requires_checkpoint, Some(true));
    assert_eq!(updated.fair_share_weight, Some(3), "not named: kept");
    let describe = || {
        let client = stack.client.clone();
        async move {
            client
                .call::<_, qm_wire::messages::QuotaShare>(
                    Operation::DescribeQuotaShare,
                    &qm_wire::messages::ShareRef {
                        job_queue: "training".into(),
                        quota_share_name: "QS1".into(),
                    },
                )
                .await
                .expect("described")
        }
    };
    assert_eq!(
        describe().await,
        updated,
        "what is stored is what was answered"
    );

    let updated = update(with(serde_json::json!({
        "protections": {"minRuntimeBeforePreemptionSeconds": null},
        "fairShareWeight": null
    })))
    .await
    .expect("updated");
    let p = updated.protections.clone().expect("protections kept");
    assert_eq!(
        p.min_runtime_before_preemption_seconds, None,
        "null removes"
    );
    assert_eq!(p.reborrow_cooldown_seconds, Some(60));
    assert_eq!(updated.fair_share_weight, None, "null removes");

    let e = update(with(serde_json::json!({"fairShareWeight": "heavy"})))
        .await
        .expect_err("a string weight")
        .to_string();
    assert!(e.contains("invalid type"), "{e}");
    assert_eq!(describe().await, updated, "a refused update stores nothing");
}
