//! The three-share story of the contract, end to end: real NATS (JetStream)
//! and S3 in containers, the four services as processes (and again with
//! every service in its own container, from the images `make images`
//! builds), the example trainer as the workload. The services send their
//! spans to an OTLP receiver inside the test, and their metrics are scraped afterwards:
//! each job is one trace across `qm`, admission, the scheduler, the
//! executor and the checkpoint service, and the metrics tell the story's
//! numbers.

use std::collections::{BTreeMap, BTreeSet};

use qm_integration_tests::observe::{OtlpReceiver, Span};
use qm_integration_tests::stack::{bin, running_in_containers, running_with, start_nats, Stack};
use qm_integration_tests::story::{metrics_until, three_shares, StoryJobs, QUEUE_YAML};
use qm_wire::messages::SubmitServiceJob;

/// Submits with the `qm` command line, sending its spans to `otlp`: the
/// job's trace starts at `qm submit`.
fn qm_submit(stack: &Stack, otlp: &OtlpReceiver, job: &SubmitServiceJob) -> String {
    let file = stack.path().join(format!("{}.json", job.job_name));
    std::fs::write(&file, serde_json::to_vec(job).expect("json")).expect("job file");
    let out = std::process::Command::new(bin("qm"))
        .args(["--nats", &stack.nats_url, "--nkey"])
        .arg(stack.auth.key("platform"))
        .args(["--output", "json", "submit", "-f"])
        .arg(&file)
        .envs(otlp.env())
        .output()
        .expect("qm runs");
    assert!(out.status.success(), "qm submit: {out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON reply");
    v["jobId"].as_str().expect("jobId").to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn three_share_story_reclaims_preempts_in_share_and_every_job_resumes_to_the_same_digest() {
    let otlp = OtlpReceiver::start().await;
    let (_nats, _s3, mut stack) =
        running_with(start_nats().await, "story", QUEUE_YAML, otlp.env()).await;
    story(&mut stack, &otlp).await;
}

/// The same story, the same assertions, with every service in its own
/// container from its image (`make images`), on a Docker network with
/// NATS and S3: the images, their user, their settings from the
/// environment and their published metrics work as deployed.
#[tokio::test(flavor = "multi_thread")]
async fn three_share_story_with_every_service_in_its_own_container() {
    let otlp = OtlpReceiver::start_for_containers().await;
    let (_nats, _s3, mut stack) =
        running_in_containers("story-containers", QUEUE_YAML, otlp.env()).await;
    assert!(stack.in_containers());
    story(&mut stack, &otlp).await;
}

async fn story(stack: &mut Stack, otlp: &OtlpReceiver) {
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    let shared: &Stack = stack;
    let submit_p2 = |job: &SubmitServiceJob| qm_submit(shared, otlp, job);
    let StoryJobs { p1, p2, p3, q2 } =
        three_shares(shared, Some(&submit_p2), Some("scheduler-1")).await;
    let jobs = [("p1", &p1), ("p2", &p2), ("p3", &p3), ("qs2_job", &q2)];
    observed_metrics(stack).await;
    observed_traces(stack, otlp, &jobs, (&p2, &q2)).await;
    stack.stop_all();
}

/// After the story, each service's metrics tell its numbers.
async fn observed_metrics(stack: &Stack) {
    let m = metrics_until(stack, "scheduler-1", "four SUCCEEDED jobs", |m| {
        m.value("qm_jobs", &[("status", "SUCCEEDED")]) == 4.0
    })
    .await;
    let preemptions = |kind: &str, victim: &str, beneficiary: &str| {
        m.value(
            "qm_preemptions_total",
            &[
                ("kind", kind),
                ("victim_share", victim),
                ("beneficiary_share", beneficiary),
            ],
        )
    };
    assert_eq!(preemptions("CROSS_SHARE", "QS1", "QS2"), 1.0);
    assert_eq!(preemptions("IN_SHARE", "QS1", "QS1"), 1.0);
    assert_eq!(m.value("qm_preemptions_total", &[]), 2.0);
    assert_eq!(m.value("qm_starts_total", &[("attempt", "first")]), 4.0);
    assert_eq!(m.value("qm_starts_total", &[]), 6.0, "six attempts in all");
    assert_eq!(m.value("qm_submit_to_running_seconds", &[]), 4.0);
    // p2 and p3 each lost the work since their last checkpoint.
    let lost = m.value(
        "qm_recomputed_instance_seconds_total",
        &[("share", "QS1"), ("cause", "preemption")],
    );
    assert!(lost > 0.0 && lost < 60.0, "lost work {lost}");
    assert_eq!(m.value("qm_scheduler_leader", &[]), 1.0);
    assert!(m.value("qm_scheduler_epoch", &[]) >= 1.0);
    assert_eq!(m.value("qm_executors", &[("state", "live")]), 1.0);
    assert_eq!(
        m.value(
            "qm_executor_instances",
            &[("instance_type", "ml.g5.xlarge")]
        ),
        3.0
    );
    assert_eq!(m.value("qm_share_instances", &[("state", "used")]), 0.0);
    assert!(m.value("qm_scheduling_pass_duration_seconds", &[]) > 0.0);

    let a = stack.scrape("admission").await;
    assert_eq!(
        a.value(
            "qm_api_requests_total",
            &[("operation", "SubmitServiceJob")]
        ),
        4.0
    );
    assert_eq!(
        a.value("qm_log_append_duration_seconds", &[("entry", "submit")]),
        4.0
    );
    assert_eq!(a.value("qm_jobs_submitted_total", &[("share", "QS1")]), 3.0);

    let e = stack.scrape("node-1").await;
    assert_eq!(e.value("qm_executor_attempts_ended_total", &[]), 6.0);
    assert_eq!(e.value("qm_executor_attempts", &[]), 0.0);
    assert_eq!(e.value("qm_executor_stop_duration_seconds", &[]), 2.0);
    assert!(
        e.value(
            "qm_executor_heartbeats_total",
            &[("result", "acknowledged")]
        ) > 0.0
    );

    let c = stack.scrape("checkpoint-node-1").await;
    assert!(c.value("qm_checkpoint_commits_total", &[("result", "committed")]) >= 6.0);
    assert_eq!(
        c.value("qm_checkpoint_commits_total", &[("result", "failed")]),
        0.0
    );
    assert_eq!(
        c.value(
            "qm_checkpoint_restore_duration_seconds",
            &[("result", "restored")]
        ),
        2.0,
        "p2 and p3 resumed"
    );
    assert!(c.value("qm_checkpoint_bytes_total", &[("direction", "committed")]) > 0.0);
    assert!(c.value("qm_checkpoint_bytes_total", &[("direction", "restored")]) > 0.0);
    assert_eq!(c.value("qm_checkpoint_s3_up", &[]), 1.0);

    // Every metric the dashboard queries exists in a scrape: the dashboard
    // cannot drift from the code.
    let mut served = BTreeSet::new();
    for m in [&m, &a, &e, &c] {
        served.extend(m.names());
    }
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../deploy/grafana/quartermaster.json"))
            .expect("dashboard JSON");
    let mut queried = BTreeSet::new();
    collect_exprs(&dashboard, &mut queried);
    assert!(queried.len() >= 20, "{queried:?}");
    let missing: Vec<_> = queried.difference(&served).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics no service serves: {missing:?}"
    );
}

/// The metric names in every `expr` of a dashboard.
fn collect_exprs(v: &serde_json::Value, out: &mut BTreeSet<String>) {
    match v {
        serde_json::Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str(), v) {
                    ("expr", serde_json::Value::String(e)) => {
                        for word in e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                            if word.starts_with("qm_") {
                                let base = ["_bucket", "_sum", "_count"]
                                    .iter()
                                    .find_map(|s| word.strip_suffix(s))
                                    .unwrap_or(word);
                                out.insert(base.to_string());
                            }
                        }
                    }
                    _ => collect_exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|i| collect_exprs(i, out)),
        _ => {}
    }
}

/// After the story, each job is one trace across the services, and the
/// reclaim's preemption links the victim's trace and the beneficiary's.
async fn observed_traces(
    stack: &Stack,
    otlp: &OtlpReceiver,
    jobs: &[(&str, &String)],
    (victim, beneficiary): (&String, &String),
) {
    let services = [
        "qm-admission",
        "qm-scheduler",
        "qm-executor",
        "qm-checkpoint",
    ];
    let of = |spans: &[Span], id: &str| -> Vec<Span> {
        spans
            .iter()
            .filter(|s| s.attr("qm.job_id") == Some(id))
            .cloned()
            .collect()
    };
    // How many attempts each job ran: each one's run span must have
    // ended and been exported before the traces are judged (the victim's
    // second may arrive a batch after its first).
    let mut attempts = BTreeMap::new();
    for (_, id) in jobs {
        let ran = stack.describe(id).await.map_or(1, |j| j.attempts.len());
        attempts.insert(id.to_string(), ran);
    }
    let spans = otlp
        .wait_for(30, "every job's spans from the four services", |spans| {
            jobs.iter().all(|(_, id)| {
                let mine = of(spans, id);
                services
                    .iter()
                    .all(|s| mine.iter().any(|x| x.service == *s))
                    && mine.iter().filter(|x| x.name == "run attempt").count()
                        >= attempts[id.as_str()]
            })
        })
        .await;
    let mut traces = BTreeMap::new();
    for (name, id) in jobs {
        let mine = of(&spans, id);
        let ids: BTreeSet<&str> = mine.iter().map(|s| s.trace_id.as_str()).collect();
        assert_eq!(
            ids.len(),
            1,
            "{name}: one trace, but spans in {ids:?}:
{}
{}",
            describe(&mine),
            stack.logs()
        );
        traces.insert(
            id.as_str(),
            ids.into_iter().next().unwrap_or_default().to_string(),
        );
        for service in services {
            assert!(
                mine.iter().any(|s| s.service == service),
                "{name}: no {service} span"
            );
        }
        for span in [
            "schedule",
            "wait for capacity",
            "run attempt",
            "commit checkpoint",
        ] {
            assert!(
                mine.iter().any(|s| s.name == span),
                "{name}: no {span:?} span:
{}",
                describe(&mine)
            );
        }
    }
    let (v, b) = (&traces[victim.as_str()], &traces[beneficiary.as_str()]);
    // p2 came from `qm submit`: the root of its trace.
    let root: Vec<&Span> = spans
        .iter()
        .filter(|s| &s.trace_id == v && s.parent_span_id.is_empty())
        .collect();
    assert!(
        root.len() == 1 && root[0].service == "qm" && root[0].name == "qm submit",
        "p2's trace starts at qm submit: {root:?}"
    );
    // Two attempts, a stop between them.
    let victim_spans = of(&spans, victim);
    assert_eq!(
        victim_spans
            .iter()
            .filter(|s| s.name == "run attempt")
            .count(),
        2
    );
    assert!(victim_spans
        .iter()
        .any(|s| s.name == "stop attempt" && s.service == "qm-executor"));
    // The reclaim: in the beneficiary's trace, linked to the victim's.
    let preempt = spans
        .iter()
        .find(|s| s.name == "preempt" && s.attr("qm.preemption.kind") == Some("CROSS_SHARE"))
        .expect("a preempt span for the reclaim");
    assert_eq!(&preempt.trace_id, b, "{preempt:?}");
    assert_eq!(preempt.attr("qm.victim.job_id"), Some(victim.as_str()));
    assert!(preempt.links.iter().any(|(t, _)| t == v), "{preempt:?}");
    let preempted = spans
        .iter()
        .find(|s| s.name == "preempted" && &s.trace_id == v)
        .expect("a preempted span in the victim's trace");
    assert!(preempted.links.iter().any(|(t, _)| t == b), "{preempted:?}");
    // Messaging spans follow the semantic conventions.
    let submit = spans
        .iter()
        .find(|s| &s.trace_id == v && s.service == "qm-admission" && s.name.starts_with("process "))
        .expect("admission's span");
    assert_eq!(
        submit.name,
        "process qm.v1.api.{principal}.SubmitServiceJob"
    );
    assert_eq!(submit.attr("messaging.system"), Some("nats"));
    assert_eq!(submit.attr("messaging.operation.type"), Some("process"));
    println!(
        "p2's trace ({v}):
{}",
        describe(
            &spans
                .iter()
                .filter(|s| &s.trace_id == v)
                .cloned()
                .collect::<Vec<_>>()
        )
    );
}

fn describe(spans: &[Span]) -> String {
    let mut sorted = spans.to_vec();
    sorted.sort_by_key(|s| s.start_ns);
    sorted
        .iter()
        .map(|s| {
            format!(
                "  {} {:>9.1} ms  {:<14} {}",
                &s.trace_id[..8],
                s.millis(),
                s.service,
                s.name
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}
