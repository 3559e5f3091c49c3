//! A model test of commits and retention interleaved: two writers of one
//! job's checkpoints (the live attempt and a stale copy of an older one,
//! as a partition leaves behind) commit and apply retention concurrently,
//! each store call a point where the other may run. Whatever the order,
//! the checkpoint a restore picks is the live attempt's newest commit,
//! whole, and no checkpoint of the live attempt is ever skipped for a
//! missing blob (retention, the writers' upload caches and the blob store
//! stay consistent).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use proptest::prelude::*;
use qm_checkpoint::store::{ObjectStore, StoreError};
use qm_checkpoint::sync::{manifest_seqs, SyncError};
use qm_checkpoint::{commit, restore, retain, CommitInfo, MemoryStore, Progress, Uploaded};
use tokio::sync::oneshot;

const PREFIX: &str = "q/job";
/// Store-clock units an unreferenced blob is left alone (a commit runs
/// within one round, when the clock stands still).
const GRACE: u64 = 10;

/// A memory store that, before every call, lets the other writer run a
/// few steps (how many: a seeded sequence), so each case is one
/// interleaving, reproducible.
struct Interleaved {
    inner: MemoryStore,
    rng: Mutex<u64>,
    /// Set: the first file upload tells the sender, then waits for the
    /// receiver (a test holds a commit at that point).
    gate: Mutex<Option<(oneshot::Sender<()>, oneshot::Receiver<()>)>>,
}

impl Interleaved {
    async fn pause(&self) {
        let n = {
            let mut x = self.rng.lock().unwrap_or_else(|p| p.into_inner());
            *x ^= *x << 13;
            *x ^= *x >> 7;
            *x ^= *x << 17;
            // Mostly a step or two; now and then long enough for the
            // other writer to run a whole commit and retention.
            if *x % 8 == 0 {
                60
            } else {
                *x % 3
            }
        };
        for _ in 0..n {
            tokio::task::yield_now().await;
        }
    }
}

impl ObjectStore for Interleaved {
    async fn put(&self, key: &str, body: Vec<u8>) -> Result<(), StoreError> {
        self.pause().await;
        self.inner.put(key, body).await
    }
    async fn put_new(&self, key: &str, body: Vec<u8>) -> Result<bool, StoreError> {
        self.pause().await;
        self.inner.put_new(key, body).await
    }
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        self.pause().await;
        self.inner.get(key).await
    }
    async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        self.pause().await;
        self.inner.exists(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        self.pause().await;
        self.inner.list(prefix).await
    }
    async fn list_modified(&self, prefix: &str) -> Result<Vec<(String, u64)>, StoreError> {
        self.pause().await;
        self.inner.list_modified(prefix).await
    }
    async fn list_sizes(&self, prefix: &str) -> Result<Vec<(String, u64)>, StoreError> {
        self.pause().await;
        self.inner.list_sizes(prefix).await
    }
    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.pause().await;
        self.inner.delete(key).await
    }
    async fn put_file(&self, key: &str, path: &Path, size: u64) -> Result<(), StoreError> {
        self.pause().await;
        let gate = self.gate.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some((reached, go)) = gate {
            let _ = reached.send(());
            let _ = go.await;
        }
        self.inner.put_file(key, path, size).await
    }
    async fn get_file(
        &self,
        key: &str,
        path: &Path,
        size: u64,
        progress: &Progress,
    ) -> Result<bool, StoreError> {
        self.pause().await;
        self.inner.get_file(key, path, size, progress).await
    }
}

/// One writer: an attempt's directory and its upload cache.
struct Writer {
    attempt: u32,
    dir: PathBuf,
    uploaded: Uploaded,
}

/// What a successful commit held: its attempt and its files' contents.
type Committed = BTreeMap<u64, (u32, BTreeMap<String, String>)>;

#[derive(Clone, Debug)]
struct Round {
    /// (writer, file, content) written before the round's commits.
    writes: Vec<(usize, usize, u8)>,
    /// Which writers commit (concurrently) in this round.
    commits: [bool; 2],
    /// Whether the store's clock then moves past the orphan grace.
    later: bool,
    /// Whether the live attempt first starts again from a restore (its
    /// directory and upload cache from the newest checkpoint), as a
    /// requeued job does.
    restart: bool,
}

fn round() -> impl Strategy<Value = Round> {
    (
        prop::collection::vec((0..2usize, 0..2usize, 0..3u8), 0..4),
        any::<[bool; 2]>(),
        any::<bool>(),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(writes, commits, later, restart)| Round {
            writes,
            commits,
            later,
            restart,
        })
}

fn contents(dir: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for entry in fs::read_dir(dir).expect("listed") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') {
            out.insert(name, fs::read_to_string(entry.path()).expect("read"));
        }
    }
    out
}

/// Commits like the checkpoint service: the next free number, again if
/// another writer took it; then retention. Returns the seq committed.
async fn commit_and_retain(
    store: &Interleaved,
    w: &mut Writer,
    keep: usize,
    now: u64,
) -> Option<u64> {
    for _ in 0..10 {
        let seqs = manifest_seqs(store, PREFIX).await.expect("listed");
        let seq = seqs.iter().max().map_or(1, |s| s + 1);
        let info = CommitInfo {
            seq,
            attempt: w.attempt,
            job_id: None,
            epoch: None,
            step: Some(seq),
            created_at_ms: seq,
        };
        match commit(store, PREFIX, &w.dir, info, &mut w.uploaded).await {
            Ok(m) => {
                retain(store, PREFIX, keep, now.saturating_sub(GRACE))
                    .await
                    .expect("retention");
                return Some(m.seq);
            }
            Err(SyncError::Taken { .. }) => continue,
            Err(SyncError::Superseded { .. }) => return None,
            Err(e) => panic!("commit failed: {e}"),
        }
    }
    None
}

fn run(rounds: Vec<Round>, keep: usize, seed: u64, case: &Path) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let store = Interleaved {
            inner: MemoryStore::new(),
            rng: Mutex::new(seed | 1),
            gate: Mutex::new(None),
        };
        let mut now = 1_000;
        store.inner.set_clock(now);
        let mut writers: Vec<Writer> = (0..2)
            .map(|i| {
                let dir = case.join(format!("w{i}"));
                fs::create_dir_all(&dir).expect("dir");
                fs::write(dir.join("f0"), "v0").expect("write");
                Writer {
                    // Writer 0 is a stale copy of attempt 1; writer 1 the
                    // live attempt 2.
                    attempt: i as u32 + 1,
                    dir,
                    uploaded: Uploaded::default(),
                }
            })
            .collect();
        let mut committed = Committed::new();
        for (n, r) in rounds.into_iter().enumerate() {
            if r.restart {
                let live = &mut writers[1];
                let fresh = case.join(format!("w1-{n}"));
                let restored = restore(&store, PREFIX, &fresh, &Progress::default())
                    .await
                    .expect("restore");
                if let Some(m) = restored.manifest {
                    live.dir = fresh;
                    live.uploaded = Uploaded::of(&m);
                }
            }
            for (w, file, v) in &r.writes {
                fs::write(writers[*w].dir.join(format!("f{file}")), format!("v{v}"))
                    .expect("write");
            }
            let before = [contents(&writers[0].dir), contents(&writers[1].dir)];
            let (w0, w1) = writers.split_at_mut(1);
            let (a, b) = futures::join!(
                async {
                    if r.commits[0] {
                        commit_and_retain(&store, &mut w0[0], keep, now).await
                    } else {
                        None
                    }
                },
                async {
                    if r.commits[1] {
                        commit_and_retain(&store, &mut w1[0], keep, now).await
                    } else {
                        None
                    }
                }
            );
            for (i, seq) in [(0, a), (1, b)] {
                if let Some(seq) = seq {
                    committed.insert(seq, (i as u32 + 1, before[i].clone()));
                }
            }
            if r.later {
                now += 100;
                store.inner.set_clock(now);
            }
            // What a restore now finds.
            let Some(best) = committed.values().map(|(a, _)| *a).max() else {
                continue;
            };
            let (&want, (_, files)) = committed
                .iter()
                .rev()
                .find(|(_, (a, _))| *a == best)
                .expect("the live attempt's newest commit");
            let into = case.join(format!("restore-{n}"));
            let restored = restore(&store, PREFIX, &into, &Progress::default())
                .await
                .expect("restore");
            let skipped_live: Vec<_> = restored
                .skipped
                .iter()
                .filter(|(seq, _)| committed.get(seq).is_none_or(|(a, _)| *a >= best))
                .collect();
            assert!(
                skipped_live.is_empty(),
                "round {n}: a checkpoint of the live attempt was skipped: {skipped_live:?}"
            );
            assert_eq!(
                restored.manifest.as_ref().map(|m| m.seq),
                Some(want),
                "round {n}: restore must pick the live attempt's newest commit"
            );
            assert_eq!(&contents(&into), files, "round {n}: restored whole");
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn commits_and_retention_interleaved_keep_the_newest_checkpoint_whole(
        rounds in prop::collection::vec(round(), 1..12),
        keep in 1..3usize,
        seed in any::<u64>(),
    ) {
        let case = std::env::temp_dir().join(format!(
            "qm-retention-model-{}-{seed}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&case);
        run(rounds, keep, seed, &case);
        let _ = fs::remove_dir_all(&case);
    }
}

/// The interleaving the model finds only now and then, made certain: the
/// live attempt restored a checkpoint and commits one that reuses its
/// blobs; while its upload runs, a stale copy commits and retention
/// retires the restored checkpoint. Its blobs stay for the grace, so the
/// live commit is whole.
#[test]
fn a_checkpoint_retired_while_a_commit_reuses_its_blobs_keeps_them() {
    let case = std::env::temp_dir().join(format!("qm-retired-{}", std::process::id()));
    let _ = fs::remove_dir_all(&case);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let (reached_tx, reached) = oneshot::channel();
        let (go, go_rx) = oneshot::channel();
        let store = Interleaved {
            inner: MemoryStore::new(),
            rng: Mutex::new(1),
            gate: Mutex::new(None),
        };
        store.inner.set_clock(1_000);
        let mut stale = Writer {
            attempt: 1,
            dir: case.join("stale"),
            uploaded: Uploaded::default(),
        };
        fs::create_dir_all(&stale.dir).expect("dir");
        fs::write(stale.dir.join("f0"), "v0").expect("write");
        fs::write(stale.dir.join("f1"), "v0").expect("write");
        assert_eq!(
            commit_and_retain(&store, &mut stale, 1, 1_000).await,
            Some(1)
        );
        store.inner.set_clock(2_000);
        // The live attempt starts from checkpoint 1 and changes one file.
        let live_dir = case.join("live");
        let restored = restore(&store, PREFIX, &live_dir, &Progress::default())
            .await
            .expect("restore");
        let mut live = Writer {
            attempt: 2,
            dir: live_dir,
            uploaded: Uploaded::of(&restored.manifest.expect("checkpoint 1")),
        };
        fs::write(live.dir.join("f1"), "v1").expect("write");
        *store.gate.lock().expect("gate") = Some((reached_tx, go_rx));
        let live_commit = commit_and_retain(&store, &mut live, 1, 2_000);
        let meanwhile = async {
            reached.await.expect("the live commit uploads");
            // Two commits: the first takes the number the live commit
            // chose, the second's retention frees it again.
            for (v, want) in [("v2", 2), ("v3", 3)] {
                fs::write(stale.dir.join("f0"), v).expect("write");
                fs::write(stale.dir.join("f1"), v).expect("write");
                let seq = commit_and_retain(&store, &mut stale, 1, 2_000).await;
                assert_eq!(
                    seq,
                    Some(want),
                    "the stale copy commits (the live one has not yet)"
                );
            }
            let retired = |seq| qm_checkpoint::manifest::manifest_key(PREFIX, seq);
            assert!(
                !store.inner.exists(&retired(1)).await.expect("exists"),
                "checkpoint 1 is retired"
            );
            assert!(
                !store.inner.exists(&retired(2)).await.expect("exists"),
                "checkpoint 2 is retired"
            );
            let _ = go.send(());
        };
        let (seq, ()) = futures::join!(live_commit, meanwhile);
        assert_eq!(seq, Some(2), "the live commit takes the number it chose");
        let restored = restore(&store, PREFIX, &case.join("check"), &Progress::default())
            .await
            .expect("restore");
        assert!(restored.skipped.is_empty(), "{:?}", restored.skipped);
        assert_eq!(
            restored.manifest.map(|m| m.seq),
            Some(2),
            "the stale copy's 3 is superseded"
        );
        assert_eq!(
            contents(&case.join("check")),
            BTreeMap::from([
                ("f0".to_string(), "v0".to_string()),
                ("f1".to_string(), "v1".to_string())
            ])
        );
        // After the grace the retired checkpoint and what only it held go.
        store.inner.set_clock(3_000);
        fs::write(live.dir.join("f1"), "v3").expect("write");
        assert_eq!(
            commit_and_retain(&store, &mut live, 1, 3_000).await,
            Some(3),
            "the stale copy's 3 was deleted by the live commit's retention"
        );
        assert!(store
            .inner
            .list(&qm_checkpoint::manifest::retired_prefix(PREFIX))
            .await
            .expect("listed")
            .iter()
            .all(|k| !k.ends_with(&format!("{:020}.json", 1))));
    });
    let _ = fs::remove_dir_all(&case);
}
