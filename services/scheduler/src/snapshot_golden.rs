//! The snapshot format's golden fixture: a snapshot this format wrote, kept
//! in `tests/fixtures/`, must read back as the same state and encode, field
//! for field, as the scheduler encodes that state today. Renaming a field
//! of the state (here or in qm-core), changing its type or its serde form,
//! fails this test instead of silently changing what a new leader reads:
//! such a change bumps `FORMAT`, keeps this fixture (the new scheduler must
//! still read it, see `a_format_1_snapshot_still_reads`) and adds the new
//! format's fixture beside it.
//!
//! `QM_BLESS_SNAPSHOT=1` writes the fixture of the current format when it
//! does not exist yet; it never overwrites one.

use std::path::PathBuf;

use qm_wire::messages::{ExecutorInstances, RegisterExecutor, SubmitServiceJob};
use qm_wire::system::{LogEntry, QueueDocument, Report, ReportPhase};

use crate::snapshot::{decode, encode, Image, FORMAT};
use crate::state::{Cut, Positions, State};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/snapshot-format-{FORMAT}.bin"))
}

fn submit(name: &str, share: &str, priority: u32, instances: u32) -> SubmitServiceJob {
    SubmitServiceJob {
        job_name: name.into(),
        job_queue: "training".into(),
        quota_share_name: Some(share.into()),
        instance_type: "ml.g5.xlarge".into(),
        instance_count: Some(instances),
        scheduling_priority: Some(priority),
        checkpoint_config: Some(Default::default()),
        command: vec!["train".into(), "--steps".into(), "100".into()],
        ..Default::default()
    }
}

fn report(job: &str, phase: ReportPhase, exit: Option<i32>) -> LogEntry {
    LogEntry::Report(Report {
        exit_code: exit,
        ..Report::new("node-1", job, 1, phase)
    })
}

/// A state with something of everything a snapshot holds: a queue's
/// configuration, an executor, jobs waiting, running, succeeded and
/// preempted, their attempts, and a trace.
fn sample() -> Image {
    let queue: QueueDocument =
        serde_yaml_ng::from_str(include_str!("../../../examples/queues/three-shares.yaml"))
            .expect("queue document");
    let mut entries = vec![
        LogEntry::Config {
            queue,
            revision: 1,
            principal: None,
            operation: None,
        },
        LogEntry::Register(RegisterExecutor {
            executor_id: "node-1".into(),
            job_queue: "training".into(),
            instances: vec![ExecutorInstances {
                instance_type: "ml.g5.xlarge".into(),
                count: 3,
                gpus: vec![],
            }],
            incarnation: "a".into(),
            checkpoint_node: Some("node-1".into()),
            address: Some("node-1.example".into()),
            fence_after_seconds: Some(30),
            runtimes: Vec::new(),
            service_environment: None,
        }),
    ];
    for (id, share, priority, instances) in [
        ("j1", "QS1", 1, 1),
        ("j2", "QS2", 2, 1),
        ("j3", "QS2", 5, 1),
        ("j4", "QS3", 1, 2),
    ] {
        entries.push(LogEntry::Submit {
            job_id: id.into(),
            job: submit(id, share, priority, instances),
            principal: Some("alice".into()),
        });
    }
    entries.push(report("j1", ReportPhase::Running, None));
    // j2 fell back to an older checkpoint when it started.
    entries.push(LogEntry::Report(Report {
        restore_skipped: vec!["manifest 3: a blob's checksum differs".into()],
        restored_bytes: Some(4096),
        ..Report::new("node-1", "j2", 1, ReportPhase::Starting)
    }));
    entries.push(report("j2", ReportPhase::Running, None));
    entries.push(report("j1", ReportPhase::Ended, Some(0)));
    let mut state = State::default();
    let mut t = 1_000;
    for entry in entries {
        t += 1_000;
        state.apply(entry, t);
        let queues: Vec<String> = state.queues.keys().cloned().collect();
        for q in queues {
            if let Some((record, plan)) = state.plan(&q, t) {
                if !record.decides_nothing() {
                    state.apply_planned(&record, plan);
                }
            }
        }
    }
    // What only some states hold (each left out of the body when empty,
    // so a sample without it would not see it renamed).
    let qs = state.queues.get_mut("training").expect("the queue");
    qs.non_root_shares.insert("QS2".into());
    let j2 = qs.ids["j2"];
    qs.cluster
        .checkpoint_lagging(j2, 1, qm_core::Time(8_500), "S3 unreachable".into())
        .expect("j2 runs");
    let meta = qs.meta.get_mut(&j2).expect("j2");
    meta.notes_mut()
        .attempt_reasons
        .insert(1, "CUDA out of memory on rank 0".into());
    meta.notes_mut().start_progress =
        Some((1, "pulling quartermaster/pytorch-trainer:local".into()));
    let mut image = Image {
        state,
        ..Image::default()
    };
    image.traces.insert(
        "j2".into(),
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
    );
    image
}

/// The body's CBOR tree, maps sorted by key: what a reader sees, whatever
/// order a map happened to be written in.
fn tree(snapshot: &[u8]) -> ciborium::Value {
    let end = snapshot.iter().position(|&b| b == b'\n').expect("header");
    let decoder = zstd::stream::Decoder::new(&snapshot[end + 1..]).expect("zstd");
    let value: ciborium::Value = ciborium::from_reader(decoder).expect("cbor");
    canonical(value)
}

fn canonical(v: ciborium::Value) -> ciborium::Value {
    use ciborium::Value;
    match v {
        Value::Map(entries) => {
            let mut entries: Vec<(Value, Value)> = entries
                .into_iter()
                .map(|(k, v)| (canonical(k), canonical(v)))
                .collect();
            entries.sort_by_key(|(k, _)| format!("{k:?}"));
            Value::Map(entries)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(canonical).collect()),
        Value::Tag(t, inner) => Value::Tag(t, Box::new(canonical(*inner))),
        other => other,
    }
}

/// The first difference between two trees, as a path.
fn first_difference(path: &str, a: &ciborium::Value, b: &ciborium::Value) -> Option<String> {
    use ciborium::Value;
    match (a, b) {
        (Value::Map(x), Value::Map(y)) => {
            let keys = |m: &Vec<(Value, Value)>| -> Vec<String> {
                m.iter().map(|(k, _)| format!("{k:?}")).collect()
            };
            if keys(x) != keys(y) {
                return Some(format!(
                    "{path}: keys {:?} in the fixture, {:?} now",
                    keys(x),
                    keys(y)
                ));
            }
            x.iter().zip(y).find_map(|((k, v), (_, w))| {
                let key = match k {
                    Value::Text(t) => t.clone(),
                    other => format!("{other:?}"),
                };
                first_difference(&format!("{path}.{key}"), v, w)
            })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (v, w))| first_difference(&format!("{path}[{i}]"), v, w)),
        _ if a == b => None,
        _ => Some(format!("{path}: {a:?} in the fixture, {b:?} now")),
    }
}

#[test]
fn a_snapshot_this_format_wrote_reads_back_as_the_same_state_in_the_same_form() {
    let image = sample();
    let jobs = image.state.queues["training"].meta.len();
    assert_eq!(
        (jobs, image.state.rejected.len()),
        (3, 1),
        "the sample holds three jobs and one rejected (QS3 reserves one instance, j4 asks for two)"
    );
    let now = encode(
        &image,
        Cut {
            after: 11,
            sched: 14,
        },
        Positions::at((11, 14, 20)),
        42_000,
        "s1",
    );
    let shown = format!("{:?}", tree(&now));
    for key in [
        "restore_skipped",
        "checkpoint_lag",
        "attempt_reasons",
        "start_progress",
        "non_root_shares",
        "own_ms",
        "lending",
    ] {
        assert!(
            shown.contains(key),
            "the sample holds {key} (left out of a snapshot when empty)"
        );
    }
    let path = fixture();
    if !path.exists() {
        if std::env::var("QM_BLESS_SNAPSHOT").is_ok_and(|v| v == "1") {
            std::fs::create_dir_all(path.parent().expect("a folder")).expect("fixtures folder");
            std::fs::write(&path, &now).expect("write the fixture");
            panic!(
                "{} written: commit it and run the test again",
                path.display()
            );
        }
        panic!(
            "{} is missing: this format's fixture must be committed (QM_BLESS_SNAPSHOT=1 writes it once, for a new format)",
            path.display()
        );
    }
    // Every older format's fixture still reads (a scheduler reads the
    // formats before its own).
    let dir = path.parent().expect("a folder");
    for entry in std::fs::read_dir(dir)
        .expect("the fixtures folder")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().to_string();
        if name.starts_with("snapshot-format-") && entry.path() != path {
            let bytes = std::fs::read(entry.path()).expect("read an older fixture");
            let (header, _) =
                decode(&bytes).unwrap_or_else(|e| panic!("{name} no longer reads: {e}"));
            assert!(header.format < FORMAT, "{name}: format {}", header.format);
        }
    }
    let stored = std::fs::read(&path).expect("read the fixture");
    let (header, back) = decode(&stored).expect("the fixture reads");
    assert_eq!(header.format, FORMAT);
    assert!(
        back.state == image.state,
        "the fixture reads back as another state: a field of the state changed its meaning"
    );
    assert_eq!(back.traces, image.traces);
    if let Some(diff) = first_difference("body", &tree(&stored), &tree(&now)) {
        panic!(
            "what a snapshot holds changed ({diff}): a new leader would read old snapshots differently. \
             Bump FORMAT in snapshot.rs, keep {} (the new scheduler must still read it) and bless the new format's fixture",
            path.display()
        );
    }
}
