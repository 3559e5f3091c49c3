//! Chaos: a seeded, bounded run of checkpointing jobs across three shares
//! (reclaim and in-share preemption happen), while the harness kills
//! (SIGKILL) and restarts, at times drawn from the seed: the scheduler
//! leader or its standby, admission, an executor, a checkpoint service, and
//! one server of the three-server NATS cluster; and freezes (SIGSTOP, then
//! SIGCONT after up to 20 s: longer than an executor's fencing deadline and
//! the scheduler's wait) any one of those services, executors included.
//! Afterwards every job has succeeded once per attempt, no two attempts of a
//! job overlapped (checked for every attempt whose process was launched, by
//! the records of its supervisor and executor), every job's digest equals
//! the uninterrupted run's, no instance is held, and the events stream
//! holds every job's transitions in order.
//!
//! `QM_CHAOS_SEED` replays a run (the seed is printed); `QM_CHAOS_JOBS`
//! (default 24) and `QM_CHAOS_FAULTS` (default 8) make a longer soak.

use std::time::{Duration, Instant};

use qm_integration_tests::stack::{
    digest_in, reference_digest, start_nats_cluster, trainer_job, Stack,
};
use qm_integration_tests::start_s3;
use qm_wire::messages::{JobQueueSnapshot, QueueRef};
use qm_wire::subjects::Operation;

const QUEUE_YAML: &str = "jobQueue: {jobQueueName: training, queueingStrategy: BEST_EFFORT_FIFO}
quotaShares:
  - quotaShareName: QS1
    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 2}]
    resourceSharingConfiguration: {strategy: LEND_AND_BORROW, borrowLimit: 4}
    preemptionConfiguration: {inSharePreemption: ENABLED}
  - quotaShareName: QS2
    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 2}]
    resourceSharingConfiguration: {strategy: LEND}
    preemptionConfiguration: {inSharePreemption: ENABLED}
  - quotaShareName: QS3
    capacityLimits: [{capacityUnit: ml.g5.xlarge, maxCapacity: 2}]
    resourceSharingConfiguration: {strategy: RESERVE}
";

const ARGS: [&str; 6] = [
    "--steps",
    "120",
    "--checkpoint-every",
    "10",
    "--step-delay-ms",
    "25",
];

/// A small deterministic generator: the whole run follows from the seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n.max(1)
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];

/// Every attempt whose process was launched (its supervisor recorded the
/// launch) has a known run: the executor's record, else the supervisor's,
/// else it ended when its executor was killed (`killed`); no two overlap.
fn assert_attempts_never_overlapped(
    stack: &Stack,
    seed: u64,
    id: &str,
    j: &qm_wire::messages::ServiceJob,
    killed: &[(String, u64)],
) {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for a in &j.attempts {
        let Some(node) = a.executor_id.as_deref() else {
            continue;
        };
        let Some((launched, ended)) = stack.attempt_watch(node, id, a.attempt) else {
            continue; // never launched (stopped while it was prepared)
        };
        let run = stack.attempt_run(node, id, a.attempt).or_else(|| {
            let end = ended.or_else(|| {
                killed
                    .iter()
                    .filter(|(n, at)| n == node && *at >= launched)
                    .map(|(_, at)| *at)
                    .min()
            })?;
            Some((launched, end))
        });
        let run = run.unwrap_or_else(|| {
                panic!(
                    "seed {seed}: attempt {} of {id} on {node} was launched at {launched} ms and its end is unknown",
                    a.attempt
                )
            });
        runs.push(run);
    }
    runs.sort_unstable();
    for pair in runs.windows(2) {
        assert!(
            pair[0].1 < pair[1].0,
            "seed {seed}: attempts of {id} overlapped: {runs:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn seeded_chaos_loses_no_job_runs_none_twice_and_keeps_every_event() {
    let seed = env_or(
        "QM_CHAOS_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs()),
    );
    let jobs_wanted = env_or("QM_CHAOS_JOBS", 24) as usize;
    let faults_wanted = env_or("QM_CHAOS_FAULTS", 8) as usize;
    println!(
        "chaos: QM_CHAOS_SEED={seed} QM_CHAOS_JOBS={jobs_wanted} QM_CHAOS_FAULTS={faults_wanted}"
    );
    let mut rng = Rng(seed);

    let cluster = start_nats_cluster().await;
    let s3 = start_s3().await;
    let replicated = vec![("QM_ADMISSION_STREAM_REPLICAS".to_string(), "3".to_string())];
    let mut stack = Stack::new_with(&cluster.nats, &s3, "chaos", replicated).await;
    stack.scheduler_env = vec![
        ("QM_SCHEDULER_LEASE_SECONDS".into(), "2".into()),
        ("QM_SCHEDULER_EXECUTOR_TIMEOUT_SECONDS".into(), "3".into()),
    ];
    stack.executor_env = vec![("QM_EXECUTOR_FENCE_AFTER_SECONDS".into(), "5".into())];
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(QUEUE_YAML).await;
    stack.wait_leader("scheduler-1").await;
    stack.scheduler("scheduler-2");
    for node in NODES {
        stack.executor(node, "training", "ml.g5.xlarge", 2);
    }

    // Jobs arrive over the run; faults are drawn at times from the seed.
    let shares = ["QS1", "QS1", "QS2", "QS3"];
    let expected = reference_digest(&ARGS[..4]);
    let mut jobs = Vec::new();
    let mut faults = Vec::new();
    // When each executor was killed (ms since the Unix epoch): its jobs'
    // processes died then (the kernel kills them with it).
    let mut killed: Vec<(String, u64)> = Vec::new();
    let started = Instant::now();
    let mut next_fault = Duration::from_secs(3 + rng.below(4));
    let mut submitted = 0;
    while submitted < jobs_wanted || faults.len() < faults_wanted {
        if submitted < jobs_wanted {
            let share = shares[rng.below(shares.len() as u64) as usize];
            let priority = rng.below(10) as u32;
            let mut job = trainer_job(
                &format!("chaos-{submitted}"),
                "training",
                share,
                priority,
                &ARGS,
            );
            job.termination_grace_period_seconds = Some(5);
            job.client_token = Some(format!("chaos-{seed}-{submitted}"));
            jobs.push(stack.submit(&job).await);
            submitted += 1;
        }
        if faults.len() < faults_wanted && started.elapsed() >= next_fault {
            let fault = inject(&mut stack, &cluster, &mut rng, &mut killed).await;
            println!("chaos: t={:>5.1}s {fault}", started.elapsed().as_secs_f64());
            faults.push(fault);
            next_fault = started.elapsed() + Duration::from_secs(3 + rng.below(5));
        }
        tokio::time::sleep(Duration::from_millis(300 + rng.below(500))).await;
    }

    // Afterwards: every job's final state, attempts and output.
    let mut recomputed_attempts = 0;
    let mut recomputed_steps = 0;
    for id in &jobs {
        let j = stack.wait_final(id, 600).await;
        assert_eq!(
            j.status,
            "SUCCEEDED",
            "seed {seed}: {j:#?}\n{}",
            stack.logs()
        );
        recomputed_attempts += j.attempts.len() - 1;
        // Work done again: what an attempt had saved past the checkpoint the
        // next one restored (steps since its last save are not printed:
        // at most `--checkpoint-every` more per restart).
        for pair in j.attempts.windows(2) {
            let Some(before) = pair[0].executor_id.as_deref() else {
                continue;
            };
            let saved = last_saved_step(&stack.attempt_stdout(before, id, pair[0].attempt));
            let restored = pair[1].restored_checkpoint_step.unwrap_or(0);
            recomputed_steps += saved.saturating_sub(restored);
        }
        assert_attempts_never_overlapped(&stack, seed, id, &j, &killed);
        let last = j.attempts.last().expect("an attempt");
        let out = stack.attempt_stdout(
            last.executor_id.as_deref().expect("placed"),
            id,
            last.attempt,
        );
        assert_eq!(
            digest_in(&out).as_deref(),
            Some(expected.as_str()),
            "seed {seed}: {id}\n{out}"
        );
        stack.assert_stored_events(id, "SUCCEEDED").await;
    }
    // No instance is held by a finished job.
    let snapshot: JobQueueSnapshot = stack
        .client
        .call(
            Operation::GetJobQueueSnapshot,
            &QueueRef {
                job_queue: "training".into(),
            },
        )
        .await
        .expect("snapshot");
    assert!(
        snapshot.shares.iter().all(|s| s.used == 0),
        "seed {seed}: instances still held: {snapshot:#?}"
    );
    // The usage ledger, counted through every fault and takeover, holds
    // exactly what the attempts record they held.
    let (ledger, attempts) = stack.usage_against_attempts("training", &jobs).await;
    assert!(
        (ledger - attempts).abs() < 0.001,
        "seed {seed}: the ledger holds {ledger} instance-seconds, the attempts {attempts}"
    );
    let step_secs = 0.025; // --step-delay-ms 25
    println!(
        "chaos: seed {seed}: {} jobs, {} faults, lost 0, double runs 0, {recomputed_attempts} attempts restarted, recomputed {recomputed_steps} saved steps ({:.1} s; at most {:.1} s more unsaved), {:.0} s",
        jobs.len(),
        faults.len(),
        recomputed_steps as f64 * step_secs,
        (recomputed_attempts * 10) as f64 * step_secs,
        started.elapsed().as_secs_f64()
    );
    stack.stop_all();
}

/// The last step the trainer saved a checkpoint at, from its output.
fn last_saved_step(stdout: &str) -> u64 {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("checkpoint step="))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .next_back()
        .unwrap_or(0)
}

/// Kills (SIGKILL) one service or stops one NATS server, drawn from the
/// seed, and brings it back. Returns what it did.
async fn inject(
    stack: &mut Stack,
    cluster: &qm_integration_tests::stack::NatsCluster,
    rng: &mut Rng,
    killed: &mut Vec<(String, u64)>,
) -> String {
    match rng.below(8) {
        6 | 7 => {
            // A frozen process (a stuck runtime, a blocking call, a frozen
            // cgroup): SIGSTOP now, SIGCONT later, while the run goes on.
            let node = NODES[rng.below(3) as usize];
            let checkpoint = format!("checkpoint-{node}");
            let candidates = [
                "scheduler-1",
                "scheduler-2",
                "admission",
                node,
                node,
                checkpoint.as_str(),
            ];
            let name = candidates[rng.below(candidates.len() as u64) as usize].to_string();
            let frozen_for = Duration::from_secs(2 + rng.below(19));
            let Some(pid) = stack.pid(&name) else {
                return format!("{name} not running: not frozen");
            };
            stack.send_signal(&name, "STOP");
            tokio::spawn(async move {
                tokio::time::sleep(frozen_for).await;
                // (Killed by another fault meanwhile: nothing to resume.)
                let _ = std::process::Command::new("kill")
                    .args(["-CONT", &pid.to_string()])
                    .stderr(std::process::Stdio::null())
                    .status();
            });
            format!("froze {name} (SIGSTOP) for {} s", frozen_for.as_secs())
        }
        0 | 1 => {
            // Either scheduler: the leader (a standby takes over) or the standby.
            let name = ["scheduler-1", "scheduler-2"][rng.below(2) as usize];
            stack.signal(name, "KILL");
            tokio::time::sleep(Duration::from_millis(500)).await;
            stack.scheduler(name);
            format!("killed and restarted {name}")
        }
        2 => {
            stack.signal("admission", "KILL");
            tokio::time::sleep(Duration::from_millis(300)).await;
            stack.admission();
            "killed and restarted admission".into()
        }
        3 => {
            let node = NODES[rng.below(3) as usize];
            stack.signal(node, "KILL");
            killed.push((node.to_string(), qm_service::now_ms()));
            tokio::time::sleep(Duration::from_millis(500)).await;
            stack.executor(node, "training", "ml.g5.xlarge", 2);
            format!("killed and restarted executor {node}")
        }
        4 => {
            let node = NODES[rng.below(3) as usize];
            let name = format!("checkpoint-{node}");
            stack.signal(&name, "KILL");
            tokio::time::sleep(Duration::from_millis(300)).await;
            stack.checkpoint(node);
            format!("killed and restarted {name}")
        }
        _ => {
            let server = rng.below(cluster.others.len() as u64) as usize;
            cluster.others[server]
                .stop()
                .await
                .expect("NATS server stops");
            tokio::time::sleep(Duration::from_secs(2)).await;
            cluster.others[server]
                .start()
                .await
                .expect("NATS server starts again");
            format!("stopped and restarted NATS server {}", server + 2)
        }
    }
}
