use super::*;
use qm_core::Cluster;

#[test]
fn container_jobs_keep_their_checkpoints_and_channels_apart_from_the_contract() {
    let doc = doc();
    let mut cluster = Cluster::new(queue(&doc).expect("valid"), &[]).expect("cluster");
    let base = wire::SubmitServiceJob {
        job_name: "j".into(),
        job_queue: "training".into(),
        quota_share_name: Some("QS1".into()),
        instance_type: "ml.g5.xlarge".into(),
        container_image: Some("team/trainer:1".into()),
        ..Default::default()
    };
    let problems = |job: &wire::SubmitServiceJob, c: &mut Cluster| {
        job_spec(job, c)
            .err()
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; ")
    };
    for (local, ok) in [
        ("opt/ml/checkpoints", true),
        ("opt/ml/model", false),
        ("opt/ml", false),
        ("opt/ml/input/data/x", false),
        ("ckpt", true),
    ] {
        let mut job = base.clone();
        job.checkpoint_config = Some(wire::CheckpointConfig {
            local_path: Some(local.into()),
            ..Default::default()
        });
        let p = problems(&job, &mut cluster);
        assert_eq!(p.is_empty(), ok, "{local}: {p}");
    }
    let channel = |name: &str| wire::InputChannel {
        channel_name: name.into(),
        s3_uri: "s3://data-bucket/p".into(),
        s3_data_distribution_type: None,
    };
    let mut job = base.clone();
    job.input_data_config = vec![channel("train.a"), channel("TRAIN-A")];
    assert!(problems(&job, &mut cluster).contains("given twice"));
    job.input_data_config = vec![channel("train"), channel("test")];
    let p = problems(&job, &mut cluster);
    assert!(p.is_empty(), "{p}");
}

fn doc() -> QueueDocument {
    serde_json::from_value(serde_json::json!({
        "jobQueue": {"jobQueueName": "training"},
        "quotaShares": [
            {"jobQueue": "training", "quotaShareName": "QS1",
             "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 1}],
             "resourceSharingConfiguration": {"strategy": "LEND_AND_BORROW", "borrowLimit": 200},
             "preemptionConfiguration": {"inSharePreemption": "ENABLED"}},
            {"jobQueue": "training", "quotaShareName": "QS2",
             "capacityLimits": [{"capacityUnit": "ml.g5.xlarge", "maxCapacity": 1}],
             "resourceSharingConfiguration": {"strategy": "LEND"}}
        ]
    }))
    .expect("document")
}

#[test]
fn a_queue_document_converts_with_its_strategies() {
    let q = queue(&doc()).expect("valid");
    assert_eq!(q.shares.len(), 2);
    assert_eq!(q.shares[0].strategy, Strategy::LendAndBorrow);
    assert_eq!(q.shares[0].borrow_limit, 200);
    assert!(q.shares[0].in_share_preemption);
    assert_eq!(q.shares[1].strategy, Strategy::Lend);
}

#[test]
fn every_problem_of_a_queue_document_is_named() {
    let mut d = doc();
    d.quota_shares[0].resource_sharing_configuration = Some(wire::ResourceSharingConfiguration {
        strategy: "SHARE".into(),
        borrow_limit: None,
    });
    d.quota_shares[1].capacity_limits = None;
    let problems = queue(&d).expect_err("invalid");
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert!(
        fields.contains(&"quotaShares[0].resourceSharingConfiguration.strategy"),
        "{fields:?}"
    );
    assert!(
        fields.contains(&"quotaShares[1].capacityLimits"),
        "{fields:?}"
    );
}

#[test]
fn a_submit_names_its_problems() {
    let q = queue(&doc()).expect("valid");
    let mut cluster = Cluster::new(q, &[]).expect("cluster");
    let job = wire::SubmitServiceJob {
        job_name: "j".into(),
        job_queue: "training".into(),
        quota_share_name: Some("QS9".into()),
        instance_type: "ml.g5.xlarge".into(),
        command: vec![],
        checkpoint_config: Some(wire::CheckpointConfig {
            s3_uri: Some("s3://bucket".into()),
            local_path: Some("/abs".into()),
            checkpoint_before_preempt_seconds: Some(3601),
            checkpoint_signal: Some("SIGKILL".into()),
        }),
        ..Default::default()
    };
    let problems = job_spec(&job, &mut cluster).expect_err("invalid");
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "command",
            "checkpointConfig.s3Uri",
            "checkpointConfig.localPath",
            "checkpointConfig.checkpointBeforePreemptSeconds",
            "checkpointConfig.checkpointSignal",
            "quotaShareName"
        ]
    );
}

fn classes_doc() -> QueueDocument {
    serde_yaml_ng::from_str(include_str!("../../../../examples/queues/classes.yaml"))
        .expect("examples/queues/classes.yaml parses")
}

#[test]
fn every_example_queue_converts() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/queues");
    let mut seen = 0;
    for entry in std::fs::read_dir(dir).expect("examples/queues") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            // A file may hold several queues (`---`), as `qm apply -f`
            // takes them.
            use serde::Deserialize;
            let text = std::fs::read_to_string(&path).expect("readable");
            for d in serde_yaml_ng::Deserializer::from_str(&text) {
                let doc = QueueDocument::deserialize(d)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                queue(&doc).unwrap_or_else(|p| panic!("{}: {p:?}", path.display()));
                seen += 1;
            }
        }
    }
    assert!(seen >= 2, "the examples are there");
}

#[test]
fn fairness_settings_convert_and_their_mistakes_are_named() {
    let doc: QueueDocument =
        serde_yaml_ng::from_str(include_str!("../../../../examples/queues/fairness.yaml"))
            .expect("parses");
    let q = queue(&doc).expect("valid");
    assert_eq!(
        q.idle_assignment,
        qm_core::config::IdleAssignment::FairShare
    );
    assert_eq!(q.groups.len(), 1);
    let qs1 = &q.shares[0];
    assert_eq!(qs1.group.as_deref(), Some("research"));
    assert_eq!(qs1.fair_share_weight, 2);
    assert_eq!(
        qs1.borrow_budget,
        Some(BorrowBudget {
            instance_seconds: 24 * 3600,
            window: BudgetWindow::Rolling { hours: 168 }
        })
    );
    assert_eq!(
        qs1.on_budget_exhausted,
        OnBudgetExhausted::CheckpointAndStop
    );
    let mut bad = doc.clone();
    bad.quota_shares[0].borrow_budget = Some(Some(wire::BorrowBudget {
        instance_hours: 1.0,
        window_hours: Some(24),
        half_life_hours: Some(24),
    }));
    bad.quota_shares[0].on_budget_exhausted = Some("LATER".into());
    bad.job_queue.idle_resource_assignment_strategy = Some("ROUND_ROBIN".into());
    let problems = queue(&bad).expect_err("three problems");
    let fields: Vec<&str> = problems.iter().map(|p| p.field.as_str()).collect();
    assert_eq!(
        fields,
        vec![
            "quotaShares[0].borrowBudget",
            "quotaShares[0].onBudgetExhausted",
            "jobQueue.idleResourceAssignmentStrategy",
        ],
        "{problems:?}"
    );
    let mut tiny = doc;
    tiny.quota_shares[0].borrow_budget = Some(Some(wire::BorrowBudget {
        instance_hours: 0.0001,
        window_hours: Some(24),
        half_life_hours: None,
    }));
    let problems = queue(&tiny).expect_err("under a second");
    assert_eq!(
        problems[0].field,
        "quotaShares[0].borrowBudget.instanceHours"
    );
}

#[test]
fn workload_classes_convert_with_their_defaults_and_a_job_gets_its_band() {
    let q = queue(&classes_doc()).expect("valid");
    let qs1 = &q.shares[0];
    assert_eq!(qs1.default_class.as_deref(), Some("exploratory"));
    let names: Vec<&str> = qs1.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["exploratory", "release", "urgent"]);
    let release = &qs1.classes[1];
    assert!(
        release.may_borrow && release.borrow_requires_resume_proof && release.requires_checkpoint
    );
    assert_eq!(
        release.preemptible_by.as_deref(),
        Some(&["urgent".to_string()][..])
    );
    assert_eq!(release.checkpoint_before_preempt_secs, Some(60));
    assert_eq!(release.result_tolerance_ppm, 1_000);
    assert_eq!(qs1.classes[2].min_runtime_before_preemption_secs, Some(300));
    assert!(qs1.classes[0].preemptible_by.is_none());

    let mut cluster = Cluster::new(q, &[]).expect("cluster");
    let job = wire::SubmitServiceJob {
        job_name: "j".into(),
        job_queue: "training".into(),
        quota_share_name: Some("QS1".into()),
        instance_type: "ml.g5.xlarge".into(),
        workload_class: Some("urgent".into()),
        command: vec!["train".into()],
        ..Default::default()
    };
    let spec = job_spec(&job, &mut cluster).expect("valid");
    assert_eq!(
        (spec.class.as_deref(), spec.priority),
        (Some("urgent"), 200)
    );
    let artifact = spec.artifact.expect("an artifact");
    assert!(
        artifact.starts_with("command:") && artifact.len() == 8 + 64,
        "{artifact}"
    );
    // The same argv, the same artifact; another, another.
    assert_eq!(
        job_spec(&job, &mut cluster)
            .expect("valid")
            .artifact
            .as_deref(),
        Some(artifact.as_str())
    );
    let other = wire::SubmitServiceJob {
        command: vec!["train".into(), "--x".into()],
        ..job.clone()
    };
    assert_ne!(
        job_spec(&other, &mut cluster)
            .expect("valid")
            .artifact
            .as_deref(),
        Some(artifact.as_str())
    );
}

#[test]
fn a_class_that_needs_a_resume_proof_needs_an_image_pinned_by_digest() {
    let mut cluster = Cluster::new(queue(&classes_doc()).expect("valid"), &[]).expect("cluster");
    let mut job = wire::SubmitServiceJob {
        job_name: "j".into(),
        job_queue: "training".into(),
        quota_share_name: Some("QS1".into()),
        instance_type: "ml.g5.xlarge".into(),
        workload_class: Some("release".into()),
        container_image: Some("registry.local/team/trainer:rc1".into()),
        checkpoint_config: Some(Default::default()),
        ..Default::default()
    };
    let problems = job_spec(&job, &mut cluster).expect_err("a tag moves");
    assert_eq!(problems[0].field, "containerImage");
    assert!(
        problems[0]
            .message
            .contains("pin it as name@sha256:<digest>"),
        "{problems:?}"
    );
    let digest = format!("registry.local/team/trainer@sha256:{}", "a".repeat(64));
    job.container_image = Some(digest.clone());
    let spec = job_spec(&job, &mut cluster).expect("pinned");
    assert_eq!(spec.artifact, Some(format!("image:{digest}")));
}

#[test]
fn a_class_document_with_an_unknown_field_is_refused() {
    let text = include_str!("../../../../examples/queues/classes.yaml")
        .replace("requiresCheckpoint: true", "requireCheckpoint: true");
    let e = serde_yaml_ng::from_str::<QueueDocument>(&text).expect_err("a typo");
    assert!(e.to_string().contains("requireCheckpoint"), "{e}");
}
