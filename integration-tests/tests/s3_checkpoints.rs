//! The checkpoint library against a real S3-compatible server (Garage in a
//! container by default; MinIO with `QM_S3_FLAVOUR=minio`).

use std::fs;
use std::path::PathBuf;

use qm_checkpoint::manifest::blob_key;
use qm_checkpoint::{commit, restore, retain, CommitInfo, ObjectStore, Uploaded};
use qm_integration_tests::start_s3;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("qm-it-{name}-{}", std::process::id()));
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
        step: Some(seq),
        created_at_ms: seq,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn checkpoints_commit_restore_fall_back_and_retain_on_real_s3() {
    let s3 = start_s3().await;
    let store = s3.store();

    // A manifest is never overwritten: the second conditional write of a
    // key is refused and leaves the first.
    let key = "conditional/manifests/00000000000000000001.json";
    assert!(store
        .put_new(key, b"first".to_vec())
        .await
        .expect("written"));
    assert!(!store
        .put_new(key, b"second".to_vec())
        .await
        .expect("answered"));
    assert_eq!(
        store.get(key).await.expect("get").as_deref(),
        Some(&b"first"[..])
    );
    let prefix = "training/job-1";
    let src = dir("s3-src");
    fs::write(src.join("weights.bin"), vec![3u8; 300_000]).expect("write");
    fs::write(src.join("step.txt"), b"1").expect("write");
    let mut uploaded = Uploaded::default();
    commit(&store, prefix, &src, info(1), &mut uploaded)
        .await
        .expect("commit 1");
    fs::write(src.join("step.txt"), b"2").expect("write");
    let m2 = commit(&store, prefix, &src, info(2), &mut uploaded)
        .await
        .expect("commit 2");

    // Restore takes the newest complete checkpoint, byte for byte.
    let dst = dir("s3-dst");
    let restored = restore(&store, prefix, &dst).await.expect("restore");
    assert_eq!(restored.manifest.as_ref().map(|m| m.seq), Some(2));
    assert_eq!(
        fs::read(dst.join("weights.bin")).expect("restored"),
        vec![3u8; 300_000]
    );
    assert_eq!(fs::read(dst.join("step.txt")).expect("restored"), b"2");

    // A damaged blob in the newest checkpoint: restore falls back to the previous one.
    let step_blob = m2
        .files
        .iter()
        .find(|f| f.path == "step.txt")
        .expect("listed");
    store
        .put(&blob_key(prefix, &step_blob.sha256), b"X".to_vec())
        .await
        .expect("overwrite");
    let dst = dir("s3-dst2");
    let restored = restore(&store, prefix, &dst).await.expect("restore");
    assert_eq!(restored.manifest.map(|m| m.seq), Some(1));
    assert_eq!(fs::read(dst.join("step.txt")).expect("restored"), b"1");
    assert_eq!(restored.skipped.len(), 1);

    // Retention keeps the newest manifest and the blobs it needs.
    let (manifests, blobs) = retain(&store, prefix, 1).await.expect("retain");
    assert_eq!(manifests, 1);
    assert_eq!(
        blobs, 1,
        "only checkpoint 1's step.txt blob is unreferenced"
    );
    assert_eq!(
        store
            .list(&format!("{prefix}/manifests/"))
            .await
            .expect("list")
            .len(),
        1
    );
}
