//! Service environments (`qm_core::environment`): what sharing one fleet
//! between queues costs the scheduler per log entry. An environment of 250
//! executors x 8 instances (2,000), three queues holding 1,000, 600 and 400
//! of them, 2,000 more jobs waiting in each.
//!
//! * `environment/share_out_steady`: `share_out` when nothing changed (what
//!   every entry touching the environment pays at least).
//! * `environment/share_out_after_end`: one job of the last queue ended: its
//!   slot is given back to the other two.
//! * `environment/pass_one_queue`: one scheduling pass of the first queue,
//!   the baseline the two are compared to in docs/benchmarks.md.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use qm_core::environment::share_out;
use qm_core::{schedule, Cluster, JobSpec, QueueConfig, QuotaShare, Strategy, Time};

const NODES: usize = 250;
const PER_NODE: u32 = 8;
const HOLDS: [(&str, u32, usize); 3] = [("a", 10, 1_000), ("b", 5, 600), ("c", 0, 400)];

fn queue(name: &str, priority: u32) -> QueueConfig {
    let mut s = QuotaShare::new("S", &[("gpu", (NODES as u32 * PER_NODE) as i64)]);
    s.strategy = Strategy::Reserve;
    let mut q = QueueConfig::new(name, vec![s]);
    q.service_environment = Some("fleet".into());
    q.priority = priority;
    q
}

fn share(clusters: &mut [Cluster], now: Time) {
    let mut named: Vec<(&str, &mut Cluster)> = HOLDS
        .iter()
        .map(|(n, _, _)| *n)
        .zip(clusters.iter_mut())
        .collect();
    share_out(&mut named, now).expect("shared");
}

/// The three queues, each having placed its jobs in turn.
fn environment() -> Vec<Cluster> {
    let now = Time::from_secs(1);
    let mut clusters: Vec<Cluster> = HOLDS
        .iter()
        .map(|(name, priority, _)| {
            let mut c = Cluster::new(queue(name, *priority), &[]).expect("valid");
            for n in 0..NODES {
                c.register_node(
                    &format!("node-{n:03}"),
                    "1",
                    &[("gpu", PER_NODE)],
                    Default::default(),
                    Time::ZERO,
                );
            }
            c
        })
        .collect();
    let submit = |c: &mut Cluster, from: usize, n: usize, priority: u32| {
        let s = c.share_idx("S").expect("share");
        let t = c.type_idx("gpu").expect("type");
        for j in from..from + n {
            let mut spec = JobSpec::new(format!("j{j}"), s, t, 1);
            spec.priority = priority;
            c.submit(spec, now).expect("valid");
        }
    };
    for i in 0..clusters.len() {
        submit(&mut clusters[i], 0, HOLDS[i].2, 9);
        share(&mut clusters, now);
        let plan = clusters[i].step(now);
        assert_eq!(plan.starts.len(), HOLDS[i].2, "queue {i} starts its jobs");
    }
    // The fleet is full; 2,000 more wait in each queue.
    for i in 0..clusters.len() {
        submit(&mut clusters[i], HOLDS[i].2, 2_000, 0);
        share(&mut clusters, now);
        assert!(clusters[i].step(now).starts.is_empty());
    }
    share(&mut clusters, now);
    clusters
}

fn benches(crit: &mut Criterion) {
    let env = environment();
    let now = Time::from_secs(2);
    let mut group = crit.benchmark_group("environment");
    group.sample_size(20);
    group.bench_function("share_out_steady", |b| {
        let mut clusters = env.clone();
        b.iter(|| share(black_box(&mut clusters), now))
    });
    let running = env[2]
        .jobs()
        .find(|j| j.status == qm_core::JobStatus::Scheduled)
        .map(|j| j.id);
    group.bench_function("share_out_after_end", |b| {
        b.iter_batched(
            || {
                let mut clusters = env.clone();
                if let Some(id) = running {
                    clusters[2]
                        .attempt_ended(id, 1, Some(0), now)
                        .expect("ends");
                }
                clusters
            },
            |mut clusters| share(&mut clusters, now),
            BatchSize::LargeInput,
        )
    });
    group.bench_function("pass_one_queue", |b| {
        b.iter(|| schedule(black_box(&env[0]), now))
    });
    group.finish();
}

criterion_group!(environment_benches, benches);
criterion_main!(environment_benches);
