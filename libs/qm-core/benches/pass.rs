//! Scheduling-pass benchmarks at the size of issue 2: a queue of 20 shares x 5
//! instance types, 10,000 running and 100,000 RUNNABLE jobs.
//!
//! * `pass/after_single_event`: one job ends, then one pass (the common case).
//! * `pass/after_single_event_exhaustive`: the same, looking at every type
//!   (no skipping of settled types), for comparison.
//! * `pass/from_scratch`: 110,000 RUNNABLE jobs and nothing running (a fresh
//!   scheduler): the pass starts 10,000 of them.
//! * `console/*`: what the web console asks (a waiting job's outlook with
//!   its projected start, a share's reclaim exposure), against
//!   `console/clone_cluster`, the copy each starts from.
//! * `baseline/sort_runnable`: sorting the 100,000 waiting jobs once, the
//!   cost a design that re-sorts per event would pay. Pass times are reported
//!   as ratios against it in docs/benchmarks.md.

use std::cmp::Reverse;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use qm_core::index::QueueKey;
use qm_core::{
    schedule, schedule_exhaustive, Cluster, JobId, JobSpec, QueueConfig, QuotaShare, Strategy, Time,
};

const SHARES: usize = 20;
const TYPES: usize = 5;
const PER_SHARE_TYPE: i64 = 100; // fleet per type = 20 x 100 = 2,000

/// A tiny deterministic generator (no RNG crate needed for a benchmark).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn queue() -> QueueConfig {
    let types: Vec<String> = (0..TYPES).map(|t| format!("t{t}")).collect();
    let shares = (0..SHARES)
        .map(|i| {
            let limits: Vec<(&str, i64)> =
                types.iter().map(|t| (t.as_str(), PER_SHARE_TYPE)).collect();
            let mut s = QuotaShare::new(format!("S{i:02}"), &limits);
            s.strategy = [
                Strategy::LendAndBorrow,
                Strategy::Lend,
                Strategy::LendAndBorrow,
                Strategy::Reserve,
            ][i % 4];
            if s.strategy == Strategy::LendAndBorrow {
                s.borrow_limit = 200;
            }
            s.in_share_preemption = i % 2 == 0;
            s
        })
        .collect();
    QueueConfig::new("bench", shares)
}

fn fleet() -> Vec<(String, u32)> {
    (0..TYPES)
        .map(|t| (format!("t{t}"), (SHARES as u32) * PER_SHARE_TYPE as u32))
        .collect()
}

fn new_cluster() -> Cluster {
    let fleet = fleet();
    let refs: Vec<(&str, u32)> = fleet.iter().map(|(t, n)| (t.as_str(), *n)).collect();
    Cluster::new(queue(), &refs).expect("valid bench queue")
}

fn submit_waiting(c: &mut Cluster, n: usize, now: Time, rng: &mut Lcg) {
    let shares: Vec<_> = c.share_indices().collect();
    for i in 0..n {
        let s = shares[rng.next(SHARES as u64) as usize];
        let t = c
            .type_idx(&format!("t{}", rng.next(TYPES as u64)))
            .expect("type");
        let count = [1, 1, 2, 4, 8][rng.next(5) as usize];
        let mut spec = JobSpec::new(format!("w{i}"), s, t, count);
        spec.priority = rng.next(9) as u32;
        spec.checkpoints = true;
        c.submit(spec, now).expect("fits the configuration");
    }
}

/// 10,000 running (each share's entitlement of each type, full fleet) and
/// 100,000 waiting.
fn busy_cluster() -> Cluster {
    busy_cluster_with(None)
}

/// [`busy_cluster`], its running jobs expected to run `estimates` (from,
/// step) seconds: j-th job of a share and type runs from + j * step.
fn busy_cluster_with(estimates: Option<(u64, u64)>) -> Cluster {
    let mut c = new_cluster();
    let now = Time::from_secs(1);
    let shares: Vec<_> = c.share_indices().collect();
    for s in shares {
        for t in 0..TYPES {
            let t = c.type_idx(&format!("t{t}")).expect("type");
            for j in 0..PER_SHARE_TYPE {
                // Running work outranks the waiting jobs (priorities 0..=8),
                // so the state is steady: nothing to preempt, nothing fits.
                let mut spec = JobSpec::new(format!("r{j}"), s, t, 1);
                spec.priority = 9;
                spec.estimated_runtime_secs = estimates.map(|(from, step)| from + j as u64 * step);
                c.submit(spec, now).expect("valid");
            }
        }
    }
    let plan = c.step(now);
    assert_eq!(plan.starts.len(), 10_000);
    for start in &plan.starts {
        c.attempt_running(start.job, 1, now).expect("just started");
    }
    submit_waiting(&mut c, 100_000, Time::from_secs(2), &mut Lcg(7));
    // Passes until every waiting job has its reason; the queue is then steady.
    for i in 0..2_000 {
        let plan = c.step(Time::from_secs(2));
        assert!(
            plan.is_empty(),
            "the fleet is full and nothing is preemptible"
        );
        if i > 0 && plan.reasons.is_empty() {
            break;
        }
    }
    c
}

fn benches(crit: &mut Criterion) {
    let busy = busy_cluster();
    // The event: one running job of type t0 ends.
    let mut after_event = busy.clone();
    let now = Time::from_secs(3);
    let first_running = JobId(1);
    after_event
        .attempt_ended(first_running, 1, Some(0), now)
        .expect("running");
    let plan = schedule(&after_event, now);
    assert!(!plan.starts.is_empty(), "the freed instance is used");

    let mut group = crit.benchmark_group("pass");
    group.sample_size(30);
    group.bench_function("after_single_event", |b| {
        b.iter(|| schedule(black_box(&after_event), now))
    });
    group.bench_function("after_single_event_exhaustive", |b| {
        b.iter(|| schedule_exhaustive(black_box(&after_event), now))
    });
    let mut scratch = new_cluster();
    submit_waiting(&mut scratch, 110_000, Time::from_secs(1), &mut Lcg(11));
    let plan = schedule(&scratch, Time::from_secs(1));
    assert!(plan.starts.len() > 1_000, "a fresh pass fills the fleet");
    group.sample_size(10);
    group.bench_function("from_scratch", |b| {
        b.iter(|| schedule(black_box(&scratch), Time::from_secs(1)))
    });
    group.finish();

    // What the console asks of a 100,000-job queue (docs/console.md): a
    // waiting job's outlook with its projected start (at the front of its
    // line, and at the back), and a share's reclaim exposure; against a
    // clone of the cluster, which each of them starts from.
    let estimated = busy_cluster_with(Some((600, 7)));
    let later = Time::from_secs(3);
    let waiting: Vec<JobId> = estimated
        .jobs()
        .filter(|j| j.status == qm_core::JobStatus::Runnable)
        .map(|j| j.id)
        .collect();
    let first = waiting
        .iter()
        .copied()
        .min_by_key(|id| {
            let j = estimated.job(*id).expect("job");
            (Reverse(j.spec.priority), j.runnable_since, *id)
        })
        .expect("a waiting job");
    let last = waiting
        .iter()
        .copied()
        .max_by_key(|id| {
            let j = estimated.job(*id).expect("job");
            (Reverse(j.spec.priority), j.runnable_since, *id)
        })
        .expect("a waiting job");
    // Exposure is asked of a share that borrows: a lender's (S01, LEND)
    // jobs of t0 end, borrowers take its instances.
    let mut lent = estimated.clone();
    let lender = lent.share_idx("S01").expect("share");
    let t0 = lent.type_idx("t0").expect("type");
    let ending: Vec<JobId> = lent
        .jobs()
        .filter(|j| {
            j.spec.share == lender && j.spec.instance_type == t0 && j.status.holds_instances()
        })
        .map(|j| j.id)
        .collect();
    for id in ending {
        lent.attempt_ended(id, 1, Some(0), later).expect("running");
    }
    // ...and it has no waiting work of t0 of its own to take them back.
    let own_waiting: Vec<JobId> = lent
        .jobs()
        .filter(|j| j.spec.share == lender && j.spec.instance_type == t0 && !j.status.is_final())
        .map(|j| j.id)
        .collect();
    for id in own_waiting {
        lent.terminate(id, later).expect("waiting");
    }
    let plan = lent.step(later);
    for start in &plan.starts {
        lent.attempt_running(start.job, 1, later)
            .expect("just started");
    }
    let borrower = lent
        .share_indices()
        .max_by_key(|s| lent.borrowed_jobs(*s, t0).len())
        .expect("a share");
    assert!(
        !lent.borrowed_jobs(borrower, t0).is_empty(),
        "someone borrows S01's instances"
    );
    assert!(!lent.reclaim_exposure(borrower, later).is_empty());
    let mut group = crit.benchmark_group("console");
    group.sample_size(10);
    group.bench_function("clone_cluster", |b| b.iter(|| black_box(estimated.clone())));
    group.bench_function("outlook_front_of_line", |b| {
        b.iter(|| estimated.outlook(black_box(first), later))
    });
    group.bench_function("outlook_back_of_line", |b| {
        b.iter(|| estimated.outlook(black_box(last), later))
    });
    group.bench_function("reclaim_exposure", |b| {
        b.iter(|| lent.reclaim_exposure(black_box(borrower), later))
    });
    group.finish();

    let mut rng = Lcg(3);
    let keys: Vec<QueueKey> = (0..100_000u64)
        .map(|i| QueueKey {
            priority: Reverse(rng.next(10) as u32),
            runnable_since: Time(rng.next(1_000_000)),
            job: JobId(i),
        })
        .collect();
    let mut group = crit.benchmark_group("baseline");
    group.sample_size(30);
    group.bench_function("sort_runnable", |b| {
        b.iter(|| {
            let mut k = keys.clone();
            k.sort_unstable();
            black_box(k)
        })
    });
    group.finish();
}

criterion_group!(pass, benches);
criterion_main!(pass);
