//! `make bench-runtimes`: what the container runtime adds to an attempt's
//! start, against the process runtime, in the same run on the same stack.
//!
//! One executor offers both runtimes (one instance, so jobs start one at a
//! time and never queue behind each other). `QM_BENCH_RUNTIME_JOBS`
//! (default 20) jobs of each runtime run alternately: a host process
//! `sleep 0.2`, and the PyTorch image (`QM_TORCH_IMAGE`, present locally)
//! running `sleep 0.2` in place of its entrypoint. For each, submit ->
//! RUNNING as the job events tell it (stored times), split at STARTING
//! (placed and the executor told) and RUNNING (process spawned, or
//! container created and started with its guard). Prints p50/p99 of each
//! runtime and the difference of the p50s (target: at most 0.5 s).

use std::time::Duration;

use qm_integration_tests::bench::{at, env_or, finished, percentile, record, span, submit};
use qm_integration_tests::stack::running;
use qm_wire::messages::SubmitServiceJob;

const QUEUE: &str = "jobQueue: {jobQueueName: bench}
quotaShares:
  - quotaShareName: team
    capacityLimits: [{capacityUnit: cpu.small, maxCapacity: 1}]
    resourceSharingConfiguration: {strategy: RESERVE}
    imagePrefixes: [IMAGE]
";

fn job(name: &str, image: Option<&str>) -> SubmitServiceJob {
    SubmitServiceJob {
        job_name: name.into(),
        job_queue: "bench".into(),
        quota_share_name: Some("team".into()),
        instance_type: "cpu.small".into(),
        command: vec!["sleep".into(), "0.2".into()],
        container_image: image.map(str::to_string),
        ..Default::default()
    }
}

#[tokio::main]
async fn main() {
    let per_runtime = env_or("QM_BENCH_RUNTIME_JOBS", 20);
    let image = std::env::var("QM_TORCH_IMAGE")
        .unwrap_or_else(|_| "quartermaster/pytorch-trainer:local".into());
    let repository = image.rsplit_once(':').map_or(image.as_str(), |(r, _)| r);
    eprintln!("bench: starting NATS, S3 and the services");
    let queue = QUEUE.replace("IMAGE", &format!("\"{repository}\""));
    let (_nats, _s3, mut stack) = running("bench-runtimes", &queue).await;
    stack.executor_env = vec![(
        "QM_EXECUTOR_RUNTIMES".into(),
        r#"["process","container"]"#.into(),
    )];
    stack.executor_alone("node-1", "bench", "cpu.small", 1);
    let client = stack.client.clone();
    let timelines = qm_integration_tests::bench::Timelines::default();
    let mut done = record(&client, "bench", timelines.clone()).await;
    // Alternately a host process and a container, one at a time; the
    // first of each is a warm-up (registration, the image's first look).
    for i in 0..(per_runtime + 1) * 2 {
        let container = i % 2 == 1;
        let name = format!("{}-{i}", if container { "container" } else { "process" });
        submit(
            &client,
            &job(&name, container.then_some(image.as_str())),
            &timelines,
        )
        .await;
        if tokio::time::timeout(Duration::from_secs(120), done.recv())
            .await
            .ok()
            .flatten()
            .is_none()
        {
            panic!("job {name} did not finish; logs:\n{}", stack.logs());
        }
    }
    let lines = finished(&timelines);
    let runtimes = [("process", false), ("container", true)];
    let mut p50s = Vec::new();
    println!("== submit -> RUNNING by runtime, {per_runtime} jobs each, one at a time");
    for (label, container) in runtimes {
        let mut total = Vec::new();
        let mut launch = Vec::new();
        // Timelines are keyed by job id: the kinds alternate in submit
        // order, process first.
        let mut sorted: Vec<_> = lines.iter().filter(|l| l.sent > 0).collect();
        sorted.sort_by_key(|l| l.sent);
        for (i, l) in sorted.iter().enumerate().skip(2) {
            if (i % 2 == 1) != container {
                continue;
            }
            if let Some(v) = span(Some(l.sent), at(l, "RUNNING")) {
                total.push(v);
            }
            if let Some(v) = span(at(l, "STARTING"), at(l, "RUNNING")) {
                launch.push(v);
            }
        }
        total.sort_unstable();
        launch.sort_unstable();
        println!(
            "{label:<10} submit -> RUNNING p50 {:>5} ms  p99 {:>5} ms   STARTING -> RUNNING p50 {:>5} ms  p99 {:>5} ms  ({} jobs)",
            percentile(&total, 0.5),
            percentile(&total, 0.99),
            percentile(&launch, 0.5),
            percentile(&launch, 0.99),
            total.len()
        );
        p50s.push(percentile(&total, 0.5));
    }
    let extra = p50s[1] as i64 - p50s[0] as i64;
    println!(
        "container start overhead (p50 difference): {extra} ms ({:.2}x the process runtime's p50; target: at most 500 ms more)",
        p50s[1] as f64 / p50s[0].max(1) as f64
    );
    stack.stop_all();
}
