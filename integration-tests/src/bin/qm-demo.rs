//! `make demo`: the three-share story of the contract on a real
//! Quartermaster. Starts NATS and Garage in containers and the four services
//! as processes, applies `examples/queues/three-shares.yaml`, runs QS1's
//! three jobs, a QS2 job that reclaims, and raises QS1's low job to the top
//! priority, printing a live timeline; ends with a summary and stops
//! everything it started.

use std::time::{Duration, Instant};

use qm_integration_tests::browser::{secret_of, Console};
use qm_integration_tests::gateway::GatewayProc;
use qm_integration_tests::observe::{Metrics, OtlpReceiver};
use qm_integration_tests::stack::{digest_in, reference_digest, start_nats, trainer_job, Stack};
use qm_integration_tests::start_s3;
use qm_wire::messages::{
    JobQueueSnapshot, ListAuditEvents, ListAuditEventsResponse, QueueRef, ServiceJob,
    SubmitServiceJob, TerminateServiceJob,
};
use qm_wire::subjects::Operation;

const QUEUE_YAML: &str = include_str!("../../../examples/queues/three-shares.yaml");
/// The example trainer, checkpointing every 100 steps (2.5 s) and, like
/// many scripts, not on SIGTERM: a job stopped at once loses what it
/// computed since its last checkpoint; asked first (checkpoint-then-preempt)
/// it saves on SIGUSR1 and loses (nearly) nothing.
const ARGS: [&str; 7] = [
    "--steps",
    "400",
    "--checkpoint-every",
    "100",
    "--step-delay-ms",
    "25",
    "--no-save-on-stop",
];

struct Timeline {
    start: Instant,
    shown: usize,
}

impl Timeline {
    fn say(&self, line: &str) {
        println!("{:>6.1}s  {line}", self.start.elapsed().as_secs_f64());
    }

    /// Prints the events that arrived since the last call.
    fn catch_up(&mut self, stack: &Stack, names: &[(String, String)]) {
        let events = stack.events.snapshot();
        let name = |id: &str| {
            names
                .iter()
                .find(|(_, i)| i == id)
                .map_or(id.to_string(), |(n, _)| n.clone())
        };
        for (subject, v) in &events[self.shown..] {
            let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
            if subject.starts_with("qm.v1.events.preemption.") {
                self.say(&format!(
                    "  ** preemption {} {} of {} to run {}",
                    s("phase"),
                    s("kind"),
                    name(&s("jobId")),
                    name(&s("forJobId"))
                ));
            } else if subject.starts_with("qm.v1.events.job.")
                && (s("from") != s("to") || s("to") == "RUNNABLE")
            {
                self.say(&format!(
                    "  {:<8} {:<9} -> {:<9} {}",
                    name(&s("jobId")),
                    s("from"),
                    s("to"),
                    s("statusReason")
                ));
            }
        }
        self.shown = events.len();
    }
}

async fn wait(
    stack: &Stack,
    t: &mut Timeline,
    names: &[(String, String)],
    id: &str,
    done: impl Fn(&ServiceJob) -> bool,
) -> ServiceJob {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        t.catch_up(stack, names);
        if let Some(j) = stack.describe(id).await {
            if done(&j) {
                t.catch_up(stack, names);
                return j;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the demo stalled; logs:\n{}",
            stack.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The last step an attempt's trainer reached (its final save, or the last
/// checkpoint line it printed).
fn last_step(output: &str) -> Option<u64> {
    output.lines().rev().find_map(|l| {
        l.strip_prefix("stopping at step ")
            .and_then(|r| r.split(':').next())
            .or_else(|| {
                l.strip_prefix("checkpoint step=")
                    .and_then(|r| r.split(' ').next())
            })
            .or_else(|| {
                l.strip_prefix("done steps=")
                    .and_then(|r| r.split(' ').next())
            })
            .and_then(|n| n.parse().ok())
    })
}

/// A story job: the example trainer, asked to checkpoint before it is
/// preempted (`window` seconds at most; 0: stopped at once).
fn demo_job(name: &str, share: &str, priority: u32, window: u64) -> SubmitServiceJob {
    let mut job = trainer_job(name, "training", share, priority, &ARGS);
    if window > 0 {
        job.checkpoint_config = Some(qm_wire::messages::CheckpointConfig {
            checkpoint_before_preempt_seconds: Some(window),
            ..Default::default()
        });
    }
    job
}

#[tokio::main]
async fn main() {
    // Checkpoint-then-preempt (on unless QM_DEMO_CHECKPOINT_BEFORE_PREEMPT_SECONDS=0).
    let window: u64 = std::env::var("QM_DEMO_CHECKPOINT_BEFORE_PREEMPT_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    println!("== Quartermaster demo: the three-share story, live");
    println!("   starting NATS (JetStream) and Garage (S3) in containers ...");
    let nats = start_nats().await;
    let s3 = start_s3().await;
    // Traces go to the collector the environment names, or else to a
    // receiver inside the demo, which prints one job's trace at the end.
    let own_collector = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").is_ok_and(|v| !v.is_empty());
    let otlp = OtlpReceiver::start().await;
    let service_env = if own_collector {
        Vec::new()
    } else {
        otlp.env()
    };
    let mut stack = Stack::new_with(&nats, &s3, "demo", service_env).await;
    println!(
        "   starting qm-admission, qm-scheduler, qm-executor (3 x ml.g5.xlarge), qm-checkpoint"
    );
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 3);
    println!("   queue 'training': QS1 LEND_AND_BORROW (in-share preemption), QS2 LEND, QS3 RESERVE; one instance each");
    println!(
        "   authentication on: tenancy deploy/tenancy.dev.yaml, one nkey per principal in {}",
        stack.auth.dir.display()
    );
    println!("   alice (team vision) owns QS1, bob (team speech) owns QS2; platform is the admin");
    println!("   metrics (Prometheus text; health at /healthz and /readyz on the same ports):");
    for name in ["admission", "scheduler-1", "node-1", "checkpoint-node-1"] {
        println!(
            "     {name:<18} http://127.0.0.1:{}/metrics",
            stack.metrics_port(name)
        );
    }
    let console = Console::start(&mut stack, "console", &[]).await;
    print_console(&console);
    // The AWS Batch API, with the same keys and the same CA's certificate.
    let gateway = GatewayProc::start(
        &mut stack,
        "gateway",
        &console.keys,
        Some(&console.certs),
        "us-east-1",
        &[],
    )
    .await;
    print_gateway(&gateway, &console, own_collector);
    let alice = stack.auth.client(&stack.nats_url, "alice").await;
    let bob = stack.auth.client(&stack.nats_url, "bob").await;
    println!("   every job trains the example MLP: {}", ARGS.join(" "));
    if window > 0 {
        println!("   checkpoint-then-preempt: on, a {window} s window (QM_DEMO_CHECKPOINT_BEFORE_PREEMPT_SECONDS=0 turns it off)\n");
    } else {
        println!("   checkpoint-then-preempt: off (preempted jobs are stopped at once)\n");
    }
    let pause: u64 = std::env::var("QM_DEMO_PAUSE_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    if pause > 0 {
        println!("   (waiting {pause} s before the story: sign in to the console now)\n");
        tokio::time::sleep(Duration::from_secs(pause)).await;
    }
    let expected = reference_digest(&ARGS[..4]);
    let mut t = Timeline {
        start: Instant::now(),
        shown: 0,
    };
    let mut names: Vec<(String, String)> = Vec::new();
    t.say("submit p3 (QS1, priority 3)");
    let p3 = stack
        .submit_as(&alice, &demo_job("p3", "QS1", 3, window))
        .await;
    names.push(("p3".into(), p3.clone()));
    wait(&stack, &mut t, &names, &p3, |j| j.status == "RUNNING").await;
    t.say("submit p2 (QS1, priority 2): QS1 borrows QS2's idle instance");
    let p2 = stack
        .submit_as(&alice, &demo_job("p2", "QS1", 2, window))
        .await;
    names.push(("p2".into(), p2.clone()));
    wait(&stack, &mut t, &names, &p2, |j| j.status == "RUNNING").await;
    t.say("submit p1 (QS1, priority 1): waits, QS3 keeps its instance (RESERVE)");
    let p1 = stack
        .submit_as(&alice, &demo_job("p1", "QS1", 1, window))
        .await;
    names.push(("p1".into(), p1.clone()));
    wait(&stack, &mut t, &names, &p1, |j| {
        !j.status_reason.starts_with("QUEUED")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    t.say("bob tries to terminate alice's p2 (he has no right to QS1):");
    match bob
        .call::<_, serde_json::Value>(
            Operation::TerminateServiceJob,
            &TerminateServiceJob {
                job_id: p2.clone(),
                reason: "need the GPU".into(),
            },
        )
        .await
    {
        Err(e) => t.say(&format!("  refused: {e}")),
        Ok(_) => {
            eprintln!("qm-demo: bob terminated alice's job; the tenancy is broken");
            std::process::exit(1);
        }
    }
    t.say("bob submits qs2_job (QS2): QS2 reclaims its instance from p2");
    let q2 = stack
        .submit_as(&bob, &demo_job("qs2_job", "QS2", 1, window))
        .await;
    names.push(("qs2_job".into(), q2.clone()));
    wait(&stack, &mut t, &names, &q2, |j| j.status == "RUNNING").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    t.say("alice raises p1 to priority 4: in-share preemption of p3");
    stack.update_priority_as(&alice, &p1, 4).await;
    for (_, id) in names.clone() {
        wait(&stack, &mut t, &names, &id, |j| {
            j.status == "SUCCEEDED" || j.status == "FAILED"
        })
        .await;
    }
    t.say("all jobs finished\n");

    let all_equal = print_summary(&stack, &names, &expected).await;
    print_ledger(&stack).await;
    print_audit(&stack, &names).await;
    print_observed(&stack, &otlp, &p2, own_collector).await;
    println!("(service logs: {})", stack.path().display());
    if std::env::var("QM_DEMO_KEEP").is_ok_and(|v| v == "1") {
        println!(
            "\neverything keeps running (QM_DEMO_KEEP=1): the console is at {}, the AWS Batch API at {}; Ctrl-C stops it",
            console.url("/queues/training"),
            gateway.endpoint
        );
        let _ = tokio::signal::ctrl_c().await;
    }
    stack.stop_all();
    drop(stack);
    drop(s3);
    drop(nats);
    if !all_equal {
        std::process::exit(1);
    }
}

/// Where the web console is, and how to sign in to it.
fn print_console(console: &Console) {
    println!(
        "   web console: {} (watch alice's share live; the certificate is signed by the demo's CA {})",
        console.url("/queues/training/shares/QS1"),
        console.certs.ca.display()
    );
    println!(
        "     sign in as alice: access key AKIAQMALICE00000001, secret {} (bob: AKIAQMBOB0000000001, {})",
        secret_of("alice"),
        secret_of("bob")
    );
}

/// Where the AWS Batch API is, how to call it, and where traces go.
fn print_gateway(gateway: &GatewayProc, console: &Console, own_collector: bool) {
    println!(
        "   AWS Batch API (qm-gateway): {} (same CA); as alice, with the AWS CLI (pip install awscli), while the demo runs:",
        gateway.endpoint
    );
    println!(
        "     {}",
        gateway.aws_command(
            "AKIAQMALICE00000001",
            &secret_of("alice"),
            Some(&console.certs.ca),
            "get-job-queue-snapshot --job-queue training"
        )
    );
    println!("     QM_DEMO_PAUSE_SECONDS=30 waits before the story (time to sign in); QM_DEMO_KEEP=1 keeps it all running at the end until Ctrl-C");
    if own_collector {
        println!("   traces: sent to OTEL_EXPORTER_OTLP_ENDPOINT");
    } else {
        println!("   traces: received by the demo (set OTEL_EXPORTER_OTLP_ENDPOINT to send them to your collector)");
    }
}

/// Each job's status, attempts, outcomes, recomputed steps and digest, and
/// the preemptions by kind; whether every final digest equals `expected`,
/// the uninterrupted run's.
async fn print_summary(stack: &Stack, names: &[(String, String)], expected: &str) -> bool {
    println!("== Summary (uninterrupted digest {}...)", &expected[..16]);
    println!(
        "{:<8} {:<10} {:>8}  {:<44} {:>10}  DIGEST",
        "JOB", "STATUS", "ATTEMPTS", "OUTCOMES", "RECOMPUTED"
    );
    let mut all_equal = true;
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for (name, id) in names {
        let j = stack.describe(id).await.expect("job");
        let mut recomputed = 0;
        for w in j.attempts.windows(2) {
            let before = last_step(&stack.attempt_stdout("node-1", id, w[0].attempt)).unwrap_or(0);
            let restored = w[1].restored_checkpoint_step.unwrap_or(0);
            recomputed += before.saturating_sub(restored);
        }
        for a in &j.attempts {
            if let Some(o) = a.outcome.as_deref().filter(|o| o.starts_with("PREEMPTED")) {
                *kinds.entry(o.to_string()).or_default() += 1;
            }
        }
        let last = j.attempts.last().map_or(0, |a| a.attempt);
        let digest = digest_in(&stack.attempt_stdout("node-1", id, last)).unwrap_or_default();
        let same = digest == expected;
        all_equal &= same;
        let outcomes: Vec<&str> = j
            .attempts
            .iter()
            .filter_map(|a| a.outcome.as_deref())
            .collect();
        println!(
            "{:<8} {:<10} {:>8}  {:<44} {:>10}  {}",
            name,
            j.status,
            j.attempts.len(),
            outcomes.join(","),
            format!("{recomputed} steps"),
            if same { "= uninterrupted" } else { "DIFFERENT" }
        );
    }
    let kinds: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} x{n}")).collect();
    println!(
        "\npreemptions: {}",
        if kinds.is_empty() {
            "none".into()
        } else {
            kinds.join(", ")
        }
    );
    println!(
        "every preempted job's final digest equals the uninterrupted digest: {}",
        if all_equal { "yes" } else { "NO" }
    );
    all_equal
}

/// The audit trail: every accepted write and who made it.
async fn print_audit(stack: &Stack, names: &[(String, String)]) {
    let audit: ListAuditEventsResponse = stack
        .client
        .call(Operation::ListAuditEvents, &ListAuditEvents::default())
        .await
        .expect("audit");
    println!("\naudit (qm audit): every accepted write and who made it");
    for e in &audit.audit_events {
        let job = names
            .iter()
            .find(|(_, id)| Some(id) == e.job_id.as_ref())
            .map_or("-", |(n, _)| n.as_str());
        println!(
            "  {:<9} {:<20} {:<8} {}",
            e.principal, e.operation, job, e.detail
        );
    }
}

/// The lost-work ledger's totals, as `qm snapshot` shows them.
async fn print_ledger(stack: &Stack) {
    let snapshot: Result<JobQueueSnapshot, _> = stack
        .client
        .call(
            Operation::GetJobQueueSnapshot,
            &QueueRef {
                job_queue: "training".into(),
            },
        )
        .await;
    let Ok(snapshot) = snapshot else {
        println!("\n(the lost-work ledger could not be read)");
        return;
    };
    println!("\nlost-work ledger (qm snapshot): instance-seconds recomputed, per share and cause");
    for share in &snapshot.lost_work {
        for (cause, w) in &share.by_cause {
            println!(
                "  {:<6} {:<24} {} attempt(s), {:.1} s",
                share.quota_share_name,
                cause,
                w.attempts,
                w.recomputed_instance_ms as f64 / 1000.0
            );
        }
        let w = &share.lost_for_this_share;
        if w.attempts > 0 {
            println!(
                "  {:<6} {:<24} {} attempt(s), {:.1} s",
                share.quota_share_name,
                "(others', for it)",
                w.attempts,
                w.recomputed_instance_ms as f64 / 1000.0
            );
        }
    }
}

/// What the scheduler's metrics say of the story, and p2's trace.
async fn print_observed(stack: &Stack, otlp: &OtlpReceiver, p2: &str, own_collector: bool) {
    let m = Metrics::scrape(stack.metrics_port("scheduler-1"), None).await;
    println!(
        "\nmetrics (scheduler-1): {} attempts started ({} first), {} preemptions, {:.1} instance-seconds of work lost, {} jobs submitted to RUNNING",
        m.value("qm_starts_total", &[]),
        m.value("qm_starts_total", &[("attempt", "first")]),
        m.value("qm_preemptions_total", &[]),
        m.value("qm_recomputed_instance_seconds_total", &[]),
        m.value("qm_submit_to_running_seconds", &[]),
    );
    if own_collector {
        return;
    }
    // The last spans are exported within a fraction of a second.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let spans = otlp.spans();
    let Some(trace) = spans
        .iter()
        .find(|s| s.attr("qm.job_id") == Some(p2))
        .map(|s| s.trace_id.clone())
    else {
        println!("(no spans received)");
        return;
    };
    let mut mine: Vec<_> = spans.iter().filter(|s| s.trace_id == trace).collect();
    mine.sort_by_key(|s| s.start_ns);
    let t0 = mine.first().map_or(0, |s| s.start_ns);
    println!(
        "\np2's trace {trace} ({} spans; start offset, duration, service, span):",
        mine.len()
    );
    for s in mine {
        println!(
            "  {:>8.3}s {:>10.1} ms  {:<14} {}",
            s.start_ns.saturating_sub(t0) as f64 / 1e9,
            s.millis(),
            s.service,
            s.name
        );
    }
}
