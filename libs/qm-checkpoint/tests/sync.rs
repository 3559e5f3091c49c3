//! Commit and restore against an in-memory object store (the far side of the
//! `ObjectStore` trait); the S3 implementation is tested end to end with the
//! checkpoint service.

use std::fs;
use std::path::PathBuf;

use qm_checkpoint::manifest::{blob_key, manifest_key};
use qm_checkpoint::{
    commit, restore, retain, CommitInfo, MemoryStore, ObjectStore, SyncError, Uploaded,
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
    let restored = restore(&store, PREFIX, &dst.join("ck"))
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
    let restored = restore(&store, PREFIX, &dst).await.expect("restore");
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
    let restored = restore(&store, PREFIX, &dst).await.expect("restore");
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
    let restored = restore(&store, PREFIX, &dst.join("ck"))
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
    let err = restore(&store, PREFIX, &dst).await.expect_err("not empty");
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
    let (manifests, blobs) = retain(&store, PREFIX, 2).await.expect("retain");
    assert_eq!((manifests, blobs), (3, 3));
    let dst = dir("gc-dst");
    let restored = restore(&store, PREFIX, &dst).await.expect("restore");
    assert_eq!(restored.manifest.map(|m| m.seq), Some(5));
    assert_eq!(fs::read(dst.join("a")).expect("restored"), b"version 5");
}
