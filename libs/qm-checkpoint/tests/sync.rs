//! Commit and restore against an in-memory object store (the far side of the
//! `ObjectStore` trait); the S3 implementation is tested end to end with the
//! checkpoint service.

use std::fs;
use std::path::PathBuf;

use qm_checkpoint::manifest::{blob_key, manifest_key};
use qm_checkpoint::{
    commit, restore, retain, CommitInfo, MemoryStore, ObjectStore, Progress, SyncError, Uploaded,
};

const PREFIX: &str = "checkpoints/training/job-1";

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qm-ckpt-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).expect("temp dir");
    d
}

fn info(seq: u64) -> CommitInfo {
    CommitInfo {
        seq,
        attempt: 1,
        job_id: None,
        epoch: None,
        step: Some(seq * 100),
        created_at_ms: 1_700_000_000_000 + seq,
    }
}

#[tokio::test]
async fn a_committed_checkpoint_restores_byte_for_byte() {
    let store = MemoryStore::new();
    let src = dir("src");
    fs::write(src.join("model.bin"), b"weights").expect("write");
    fs::create_dir_all(src.join("opt")).expect("mkdir");
    fs::write(src.join("opt/state.bin"), b"momentum").expect("write");
    fs::write(src.join(".model.bin.tmp"), b"half written").expect("write");
    let m = commit(&store, PREFIX, &src, info(1), &mut Uploaded::default())
        .await
        .expect("commit");
    assert_eq!(
        m.files.iter().map(|f| f.path.as_str()).collect::<Vec<_>>(),
        vec!["model.bin", "opt/state.bin"],
        "hidden work files are left out"
    );
    let dst = dir("dst");
    let restored = restore(&store, PREFIX, &dst.join("ck"), &Progress::default())
        .await
        .expect("restore");
    assert_eq!(restored.manifest.map(|m| m.seq), Some(1));
    assert_eq!(
        fs::read(dst.join("ck/model.bin")).expect("restored"),
        b"weights"
    );
    assert_eq!(
        fs::read(dst.join("ck/opt/state.bin")).expect("restored"),
        b"momentum"
    );
    assert!(!dst.join("ck/.model.bin.tmp").exists());
}

#[tokio::test]
async fn unchanged_files_are_not_sent_again() {
    let store = MemoryStore::new();
    let src = dir("incr");
    fs::write(src.join("big.bin"), vec![7u8; 100_000]).expect("write");
    fs::write(src.join("step.txt"), b"1").expect("write");
    let mut uploaded = Uploaded::default();
    commit(&store, PREFIX, &src, info(1), &mut uploaded)
        .await
        .expect("commit");
    assert_eq!(store.puts(), 3, "two blobs and a manifest");
    fs::write(src.join("step.txt"), b"2").expect("write");
    commit(&store, PREFIX, &src, info(2), &mut uploaded)
        .await
        .expect("commit");
    assert_eq!(
        store.puts(),
        5,
        "only the changed file's blob and the manifest"
    );
    // A fresh process (nothing remembered) checks the store instead of re-sending.
    commit(&store, PREFIX, &src, info(3), &mut Uploaded::default())
        .await
        .expect("commit");
    assert_eq!(store.puts(), 6);
}

#[tokio::test]
async fn a_failed_upload_writes_no_manifest_and_the_previous_checkpoint_stays_latest() {
    let store = MemoryStore::new();
    let src = dir("fail");
    fs::write(src.join("a"), b"one").expect("write");
    commit(&store, PREFIX, &src, info(1), &mut Uploaded::default())
        .await
        .expect("commit");
    fs::write(src.join("a"), b"two").expect("write");
    fs::write(src.join("b"), b"three").expect("write");
    store.fail_puts_after(1);
    let err = commit(&store, PREFIX, &src, info(2), &mut Uploaded::default())
        .await
        .expect_err("store fails");
    assert!(matches!(err, SyncError::Store(_)), "{err}");
    assert!(
        !store
            .exists(&manifest_key(PREFIX, 2))
            .await
            .expect("memory"),
        "manifest is written last"
    );
    let dst = dir("fail-dst");
    let restored = restore(&store, PREFIX, &dst, &Progress::default())
        .await
        .expect("restore");
    assert_eq!(restored.manifest.map(|m| m.seq), Some(1));
    assert_eq!(fs::read(dst.join("a")).expect("restored"), b"one");
}

#[tokio::test]
async fn a_damaged_blob_falls_back_to_the_previous_checkpoint() {
    let store = MemoryStore::new();
    let src = dir("rot");
    fs::write(src.join("a"), b"old").expect("write");
    commit(&store, PREFIX, &src, info(1), &mut Uploaded::default())
        .await
        .expect("commit");
    fs::write(src.join("a"), b"new").expect("write");
    let m2 = commit(&store, PREFIX, &src, info(2), &mut Uploaded::default())
        .await
        .expect("commit");
    store.corrupt(&blob_key(PREFIX, &m2.files[0].sha256));
    let dst = dir("rot-dst");
    let restored = restore(&store, PREFIX, &dst, &Progress::default())
        .await
        .expect("restore");
    assert_eq!(restored.manifest.map(|m| m.seq), Some(1));
    assert_eq!(restored.skipped.len(), 1);
    assert!(
        restored.skipped[0]
            .1
            .contains("does not match its checksum"),
        "{:?}",
        restored.skipped
    );
    assert_eq!(fs::read(dst.join("a")).expect("restored"), b"old");
    assert_eq!(
        fs::read_dir(&dst).expect("dir").count(),
        1,
        "no staging left behind"
    );
}

#[tokio::test]
async fn a_manifest_whose_paths_leave_the_directory_is_refused() {
    let store = MemoryStore::new();
    let evil = r#"{"format":1,"seq":5,"attempt":1,"createdAtMs":0,
        "files":[{"path":"../../etc/cron.d/x","size":3,"sha256":"ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}]}"#;
    store
        .put(
            &blob_key(
                PREFIX,
                "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            ),
            b"abc".to_vec(),
        )
        .await
        .expect("put");
    store
        .put(&manifest_key(PREFIX, 5), evil.as_bytes().to_vec())
        .await
        .expect("put");
    let dst = dir("evil");
    let restored = restore(&store, PREFIX, &dst.join("ck"), &Progress::default())
        .await
        .expect("restore runs");
    assert_eq!(restored.manifest, None);
    assert!(
        restored.skipped[0]
            .1
            .contains("would leave the checkpoint directory"),
        "{:?}",
        restored.skipped
    );
    assert!(!dst.join("etc").exists());
}

#[tokio::test]
async fn restore_into_a_non_empty_directory_is_refused() {
    let store = MemoryStore::new();
    let dst = dir("busy");
    fs::write(dst.join("keep.txt"), b"mine").expect("write");
    let err = restore(&store, PREFIX, &dst, &Progress::default())
        .await
        .expect_err("not empty");
    assert!(err.to_string().contains("is not empty"), "{err}");
    assert!(
        !err.is_transient(),
        "a refusal: retrying fails the same way"
    );
    assert_eq!(fs::read(dst.join("keep.txt")).expect("untouched"), b"mine");
}

#[test]
fn only_failures_that_may_pass_on_a_retry_are_transient() {
    use qm_checkpoint::store::StoreError;
    use qm_checkpoint::sync::SyncError;
    let io = |kind| SyncError::Local {
        path: "x".into(),
        error: std::io::Error::from(kind),
    };
    assert!(SyncError::Store(StoreError::Transient("timeout".into())).is_transient());
    assert!(SyncError::Changed("a".into()).is_transient());
    assert!(io(std::io::ErrorKind::Interrupted).is_transient());
    assert!(!SyncError::Store(StoreError::Refused("403".into())).is_transient());
    assert!(!io(std::io::ErrorKind::PermissionDenied).is_transient());
    assert!(!SyncError::BadManifest {
        key: "m".into(),
        why: "bad".into()
    }
    .is_transient());
}

#[tokio::test]
async fn retention_keeps_the_newest_manifests_and_their_blobs() {
    let store = MemoryStore::new();
    let src = dir("gc");
    let mut uploaded = Uploaded::default();
    for seq in 1..=5u64 {
        fs::write(src.join("a"), format!("version {seq}")).expect("write");
        commit(&store, PREFIX, &src, info(seq), &mut uploaded)
            .await
            .expect("commit");
    }
    let (manifests, blobs) = retain(&store, PREFIX, 2, u64::MAX).await.expect("retain");
    assert_eq!((manifests, blobs), (3, 3));
    let dst = dir("gc-dst");
    let restored = restore(&store, PREFIX, &dst, &Progress::default())
        .await
        .expect("restore");
    assert_eq!(restored.manifest.map(|m| m.seq), Some(5));
    assert_eq!(fs::read(dst.join("a")).expect("restored"), b"version 5");
}

fn by(seq: u64, attempt: u32) -> CommitInfo {
    CommitInfo {
        attempt,
        job_id: Some("job-1".into()),
        epoch: Some(7),
        ..info(seq)
    }
}

#[tokio::test]
async fn an_attempt_superseded_by_a_later_ones_commit_may_not_commit() {
    let store = MemoryStore::new();
    let new = dir("fence-new");
    fs::write(new.join("model.bin"), b"attempt 2").expect("write");
    let m = commit(&store, PREFIX, &new, by(1, 2), &mut Uploaded::default())
        .await
        .expect("the live attempt commits");
    assert_eq!((m.job_id.as_deref(), m.epoch), (Some("job-1"), Some(7)));
    // A stale copy (attempt 1, still running somewhere) tries to commit.
    let old = dir("fence-old");
    fs::write(old.join("model.bin"), b"attempt 1, stale").expect("write");
    let refused = commit(&store, PREFIX, &old, by(2, 1), &mut Uploaded::default()).await;
    assert!(
        matches!(refused, Err(SyncError::Superseded { attempt: 1, by: 2 })),
        "{refused:?}"
    );
    assert!(!refused.expect_err("refused").is_transient());
    let restored = restore(
        &store,
        PREFIX,
        &dir("fence-dst").join("ck"),
        &Progress::default(),
    )
    .await
    .expect("restore");
    assert_eq!(restored.manifest.map(|m| (m.seq, m.attempt)), Some((1, 2)));
}

#[tokio::test]
async fn two_writers_of_one_checkpoint_number_never_overwrite_each_other() {
    let store = MemoryStore::new();
    let a = dir("race-a");
    fs::write(a.join("model.bin"), b"first").expect("write");
    commit(&store, PREFIX, &a, by(1, 1), &mut Uploaded::default())
        .await
        .expect("first");
    let b = dir("race-b");
    fs::write(b.join("model.bin"), b"second").expect("write");
    let taken = commit(&store, PREFIX, &b, by(1, 1), &mut Uploaded::default()).await;
    assert!(
        matches!(taken, Err(SyncError::Taken { seq: 1 })),
        "{taken:?}"
    );
    assert!(
        taken.expect_err("taken").is_transient(),
        "commit again, next number"
    );
    let dst = dir("race-dst");
    restore(&store, PREFIX, &dst.join("ck"), &Progress::default())
        .await
        .expect("restore");
    assert_eq!(
        fs::read(dst.join("ck/model.bin")).expect("restored"),
        b"first"
    );
}

/// Writes a manifest as a stale copy would have before fencing existed
/// (attempt 1 after attempt 2), bypassing `commit`'s checks.
async fn force_manifest(store: &MemoryStore, seq: u64, attempt: u32, body: &[u8]) {
    let src = dir(&format!("force-{seq}"));
    fs::write(src.join("model.bin"), body).expect("write");
    let other = MemoryStore::new();
    let m = commit(
        &other,
        PREFIX,
        &src,
        by(seq, attempt),
        &mut Uploaded::default(),
    )
    .await
    .expect("commit elsewhere");
    for key in other.keys() {
        let bytes = other.get(&key).await.expect("get").expect("there");
        store.put(&key, bytes).await.expect("copy");
    }
    assert_eq!(m.seq, seq);
}

#[tokio::test]
async fn a_checkpoint_a_stale_copy_wrote_is_never_restored_nor_kept_by_retention() {
    let store = MemoryStore::new();
    force_manifest(&store, 1, 2, b"live attempt 2").await;
    force_manifest(&store, 2, 1, b"stale attempt 1").await;
    let dst = dir("stale-dst");
    let restored = restore(&store, PREFIX, &dst.join("ck"), &Progress::default())
        .await
        .expect("restore");
    assert_eq!(restored.manifest.map(|m| (m.seq, m.attempt)), Some((1, 2)));
    assert!(
        restored
            .skipped
            .iter()
            .any(|(seq, why)| *seq == 2 && why.contains("superseded")),
        "{:?}",
        restored.skipped
    );
    assert_eq!(
        fs::read(dst.join("ck/model.bin")).expect("restored"),
        b"live attempt 2"
    );
    // Keeping one checkpoint keeps the live one, not the newer stale one.
    let (manifests, blobs) = retain(&store, PREFIX, 1, u64::MAX).await.expect("retain");
    assert_eq!(
        (manifests, blobs),
        (1, 1),
        "the stale manifest and its blob"
    );
    let again = restore(
        &store,
        PREFIX,
        &dir("stale-dst2").join("ck"),
        &Progress::default(),
    )
    .await
    .expect("restore");
    assert_eq!(again.manifest.map(|m| m.seq), Some(1));
}

#[tokio::test]
async fn a_restore_moves_the_whole_checkpoint_into_place_at_once_and_reports_progress() {
    use std::os::unix::fs::PermissionsExt;
    let store = MemoryStore::new();
    let src = dir("whole-src");
    fs::write(src.join("a.bin"), vec![7u8; 3000]).expect("write");
    fs::create_dir_all(src.join("sub")).expect("mkdir");
    fs::write(src.join("sub/b.bin"), vec![9u8; 1000]).expect("write");
    commit(&store, PREFIX, &src, info(1), &mut Uploaded::default())
        .await
        .expect("commit");
    let dst = dir("whole-dst").join("ck");
    fs::create_dir_all(&dst).expect("mkdir");
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o750)).expect("chmod");
    // An earlier try was killed half-way: its staging directory is left.
    let staging = qm_checkpoint::restore_staging(&dst);
    fs::create_dir_all(&staging).expect("mkdir");
    fs::write(staging.join("a.bin"), b"half").expect("write");
    fs::write(staging.join("junk"), b"from the killed try").expect("write");
    let progress = Progress::default();
    let restored = restore(&store, PREFIX, &dst, &progress)
        .await
        .expect("restore");
    assert_eq!(restored.manifest.map(|m| m.seq), Some(1));
    assert_eq!((progress.total(), progress.moved()), (4000, 4000));
    assert_eq!(
        fs::read(dst.join("a.bin")).expect("restored"),
        vec![7u8; 3000]
    );
    assert_eq!(
        fs::read(dst.join("sub/b.bin")).expect("restored"),
        vec![9u8; 1000]
    );
    assert!(!dst.join("junk").exists(), "nothing of the killed try");
    assert!(!staging.exists(), "the staging directory is gone");
    let mode = fs::metadata(&dst).expect("dir").permissions().mode();
    assert_eq!(mode & 0o777, 0o750, "the directory keeps its mode");
}

#[tokio::test]
async fn a_file_that_returns_to_an_older_content_after_retention_is_sent_again() {
    let store = MemoryStore::new();
    let src = dir("revert");
    let mut uploaded = Uploaded::default();
    for (seq, content) in [(1, "a"), (2, "b"), (3, "a")] {
        fs::write(src.join("w"), content).expect("write");
        commit(&store, PREFIX, &src, info(seq), &mut uploaded)
            .await
            .expect("commit");
        // Keep one: after seq 2, content "a"'s blob is unreferenced and goes.
        retain(&store, PREFIX, 1, u64::MAX).await.expect("retain");
    }
    let dst = dir("revert-dst").join("ck");
    let restored = restore(&store, PREFIX, &dst, &Progress::default())
        .await
        .expect("restore");
    assert!(restored.skipped.is_empty(), "{:?}", restored.skipped);
    assert_eq!(restored.manifest.map(|m| m.seq), Some(3));
    assert_eq!(fs::read(dst.join("w")).expect("restored"), b"a");
}

#[tokio::test]
async fn retention_leaves_young_unreferenced_blobs_to_the_commit_that_sent_them() {
    let store = MemoryStore::new();
    store.set_clock(1_000);
    let src = dir("young");
    fs::write(src.join("w"), "a").expect("write");
    commit(&store, PREFIX, &src, info(1), &mut Uploaded::default())
        .await
        .expect("commit");
    // A blob another writer sent for a commit whose manifest is not yet
    // written.
    let in_flight = blob_key(PREFIX, "in-flight");
    store.put(&in_flight, b"x".to_vec()).await.expect("put");
    assert_eq!(
        retain(&store, PREFIX, 1, 1_000).await.expect("retain"),
        (0, 0)
    );
    assert!(store.exists(&in_flight).await.expect("exists"));
    // Once older than the cut-off nobody is going to reference it.
    assert_eq!(
        retain(&store, PREFIX, 1, 1_001).await.expect("retain"),
        (0, 1)
    );
    assert!(!store.exists(&in_flight).await.expect("exists"));
}
