//! The import on excerpts of the real traces shipped with the tests.

use qm_eval::trace::{read_itp, read_quota, OnBadLine};
use qm_eval::workload::{build, Grouping, Mapping};

fn data(path: &str) -> (String, String) {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(path);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    (p.display().to_string(), text)
}

fn all_excerpts() -> Vec<qm_eval::trace::TraceJob> {
    let mut jobs = Vec::new();
    for c in 1..=10 {
        let (name, text) = data(&format!("itp-2021/cluster{c:02}.csv"));
        let (j, bad) = read_itp(&name, &text, OnBadLine::Fail).expect("an excerpt reads");
        assert_eq!(j.len(), 20, "{name}");
        assert!(bad.is_empty());
        jobs.extend(j);
    }
    jobs
}

#[test]
fn every_clusters_excerpt_reads_into_the_expected_jobs() {
    let jobs = all_excerpts();
    assert_eq!(jobs.len(), 200);
    let first = &jobs[0];
    assert_eq!(first.cluster, "cluster01");
    assert_eq!(first.job_id, "965d744f-0445-c1a8-12af-97e4c536c66e");
    assert_eq!(
        (first.submitted, first.duration, first.gpus),
        (1932025.0, 2429.0, 64)
    );
    let clusters: std::collections::BTreeSet<&str> =
        jobs.iter().map(|j| j.cluster.as_str()).collect();
    assert_eq!(clusters.len(), 10);
}

#[test]
fn both_mappings_are_reproducible_from_their_seed() {
    let (qname, qtext) = data("helios-venus-quota/cluster_gpu_number.csv");
    let quota = read_quota(&qname, &qtext).expect("the quota table reads");
    assert!(quota.len() >= 15, "{quota:?}");
    assert!(quota.iter().all(|(n, q)| n.starts_with("vc") && *q > 0.0));
    for grouping in [
        Grouping::Clusters,
        Grouping::Teams {
            quota: quota.clone(),
        },
    ] {
        let m = Mapping {
            grouping: grouping.clone(),
            gpus_per_instance: 8,
            ..Mapping::default()
        };
        let a = build(all_excerpts(), &m).expect("builds");
        let b = build(all_excerpts(), &m).expect("builds");
        let key = |w: &qm_eval::workload::Workload| {
            w.jobs
                .iter()
                .map(|j| {
                    format!(
                        "{} {} {} {:?}",
                        j.name, j.share, j.instances, j.checkpoint_interval
                    )
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(key(&a), key(&b), "{grouping:?}");
        assert_eq!(a.mapping.seed, 2021);
        assert_eq!(a.shares.iter().map(|s| s.1).sum::<u32>(), a.fleet);
        // 64 GPUs at 8 per instance: 8 instances.
        assert!(a.jobs.iter().any(|j| j.gpus == 64 && j.instances == 8));
        let other = build(
            all_excerpts(),
            &Mapping {
                seed: 7,
                ..m.clone()
            },
        )
        .expect("builds");
        assert_ne!(key(&a), key(&other), "another seed, another draw");
    }
}
