//! The checkpoint library against a real S3-compatible server (Garage in a
//! container by default; MinIO with `QM_S3_FLAVOUR=minio`).

use std::fs;
use std::path::PathBuf;

use qm_checkpoint::manifest::blob_key;
use qm_checkpoint::{commit, restore, retain, CommitInfo, ObjectStore, Progress, Uploaded};
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
    let restored = restore(&store, prefix, &dst, &Progress::default())
        .await
        .expect("restore");
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
    let restored = restore(&store, prefix, &dst, &Progress::default())
        .await
        .expect("restore");
    assert_eq!(restored.manifest.map(|m| m.seq), Some(1));
    assert_eq!(fs::read(dst.join("step.txt")).expect("restored"), b"1");
    assert_eq!(restored.skipped.len(), 1);

    // Retention keeps the newest manifest and the blobs it needs.
    let (manifests, blobs) = retain(&store, prefix, 1, u64::MAX).await.expect("retain");
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

/// This process's peak resident memory (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmHWM")
        * 1024
}

/// A file of `size` bytes that does not repeat (no block is like another).
fn generate(path: &std::path::Path, size: usize, seed: u64) {
    use std::io::Write;
    let mut out = std::io::BufWriter::new(fs::File::create(path).expect("create"));
    let mut x = seed | 1;
    let mut block = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        for chunk in block.chunks_mut(8) {
            // xorshift64*: cheap, and no two blocks alike.
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
        let n = left.min(block.len());
        out.write_all(&block[..n]).expect("write");
        left -= n;
    }
    out.flush().expect("flush");
}

/// Files up to the multipart threshold go up in one PUT, larger ones as a
/// multipart upload: S3 gives a multipart object an ETag ending in `-<parts>`.
#[tokio::test(flavor = "multi_thread")]
async fn files_up_to_the_threshold_go_up_in_one_request_larger_ones_in_parts() {
    let s3 = start_s3().await;
    let config = qm_checkpoint::s3::S3Config {
        transfer: qm_checkpoint::store::Transfer {
            part_size: 5 << 20,
            multipart_threshold: 12 << 20,
            ..Default::default()
        },
        ..s3.config.clone()
    };
    let store = qm_checkpoint::s3::S3Store::new(&config);
    let src = dir("s3-threshold-src");
    generate(&src.join("at-threshold.bin"), 12 << 20, 3);
    generate(&src.join("above.bin"), (12 << 20) + 1, 4);
    let prefix = "training/threshold-job";
    let m = commit(&store, prefix, &src, info(1), &mut Uploaded::default())
        .await
        .expect("committed");
    let client = {
        let c = &s3.config;
        let mut b = aws_sdk_s3::config::Builder::new()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new(c.region.clone()))
            .force_path_style(true)
            .credentials_provider(aws_sdk_s3::config::Credentials::new(
                &c.access_key_id,
                &c.secret_access_key,
                None,
                None,
                "test",
            ));
        if let Some(e) = &c.endpoint {
            b = b.endpoint_url(e);
        }
        aws_sdk_s3::Client::from_conf(b.build())
    };
    let mut etags = std::collections::BTreeMap::new();
    for f in &m.files {
        let head = client
            .head_object()
            .bucket(&s3.config.bucket)
            .key(blob_key(prefix, &f.sha256))
            .send()
            .await
            .expect("the blob is there");
        assert_eq!(head.content_length(), Some(f.size as i64), "{}", f.path);
        let etag = head
            .e_tag()
            .unwrap_or_default()
            .trim_matches('"')
            .to_string();
        etags.insert(f.path.clone(), etag);
    }
    assert!(
        !etags["at-threshold.bin"].contains('-'),
        "12 MiB, at the threshold: one PUT ({etags:?})"
    );
    assert!(
        etags["above.bin"].ends_with("-3"),
        "one byte over: three parts of 5 MiB ({etags:?})"
    );
    let dst = dir("s3-threshold-dst");
    restore(&store, prefix, &dst, &Progress::default())
        .await
        .expect("restored");
    for name in ["at-threshold.bin", "above.bin"] {
        assert!(
            fs::read(src.join(name)).expect("source")
                == fs::read(dst.join(name)).expect("restored"),
            "{name} restored byte for byte"
        );
    }
    let _ = fs::remove_dir_all(src);
    let _ = fs::remove_dir_all(dst);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_large_checkpoint_moves_in_parts_streamed_and_a_crash_mid_upload_leaves_no_part() {
    let s3 = start_s3().await;
    // 8 MiB parts, 4 at a time: the 160 MiB file below is 20 parts each way.
    let journal = dir("s3-journal");
    let config = qm_checkpoint::s3::S3Config {
        transfer: qm_checkpoint::store::Transfer {
            part_size: 8 << 20,
            multipart_threshold: 8 << 20,
            parallel: 4,
            ..Default::default()
        },
        journal: Some(journal.clone()),
        ..s3.config.clone()
    };
    let store = qm_checkpoint::s3::S3Store::new(&config);
    let prefix = "training/big-job";
    let src = dir("s3-big-src");
    let size = 160 << 20;
    generate(&src.join("weights.bin"), size, 7);
    fs::write(src.join("step.txt"), b"42").expect("write");
    let before = peak_rss();
    let mut uploaded = Uploaded::default();
    let m = commit(&store, prefix, &src, info(1), &mut uploaded)
        .await
        .expect("a multipart commit");
    assert_eq!(m.files.len(), 2);
    let dst = dir("s3-big-dst");
    let restored = restore(&store, prefix, &dst, &Progress::default())
        .await
        .expect("restore");
    assert_eq!(restored.manifest.map(|m| m.seq), Some(1));
    let grew = peak_rss().saturating_sub(before);
    // Byte for byte (compared in 1 MiB blocks, not read whole).
    {
        use std::io::Read;
        let (mut a, mut b) = (
            fs::File::open(src.join("weights.bin")).expect("source"),
            fs::File::open(dst.join("weights.bin")).expect("restored"),
        );
        let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
        let mut total = 0;
        loop {
            let n = a.read(&mut x).expect("read");
            b.read_exact(&mut y[..n]).expect("as long");
            assert!(x[..n] == y[..n], "differs near byte {total}");
            total += n;
            if n == 0 {
                break;
            }
        }
        assert_eq!(total, size);
        assert_eq!(b.read(&mut y).expect("read"), 0, "no longer either");
    }
    assert_eq!(fs::read(dst.join("step.txt")).expect("restored"), b"42");
    // Streamed: the file never sat in memory (it is 160 MiB; a few
    // buffers a part are allowed for).
    assert!(
        grew < 64 << 20,
        "peak memory grew {} MiB moving a 160 MiB file",
        grew >> 20
    );
    // Nothing in flight is left behind.
    assert!(store.uploads(prefix).await.expect("list").is_empty());

    // A crash mid-upload (the future dropped, as a killed process drops
    // it): the upload stays in flight, its journal names it, and the next
    // start aborts it; no part survives.
    fs::write(src.join("step.txt"), b"43").expect("write");
    generate(&src.join("weights.bin"), size, 8);
    let sha = {
        let entries = qm_checkpoint::sync::scan(&src).expect("scan");
        entries
            .into_iter()
            .find(|(e, _)| e.path == "weights.bin")
            .expect("listed")
            .0
            .sha256
    };
    let key = blob_key(prefix, &sha);
    let path = src.join("weights.bin");
    let mut upload = Box::pin(store.put_file(&key, &path, size as u64));
    // In flight: started on the server and named in the journal (which is
    // written the moment the server answers with the upload's id).
    let seen = async {
        loop {
            let journaled = fs::read_dir(&journal).is_ok_and(|mut d| d.next().is_some());
            if journaled && !store.uploads(prefix).await.expect("list").is_empty() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    };
    tokio::select! {
        done = &mut upload => panic!("the upload ended before it was seen in flight: {done:?}"),
        () = seen => {}
    }
    drop(upload); // cut short, as a killed process is
    let left = store.uploads(prefix).await.expect("list");
    assert_eq!(left.len(), 1, "the cut-short upload is in flight: {left:?}");
    let restarted = qm_checkpoint::s3::S3Store::new(&config);
    assert_eq!(restarted.abort_journaled().await.expect("aborted"), 1);
    assert!(restarted.uploads(prefix).await.expect("list").is_empty());
    assert!(!store.exists(&key).await.expect("head"), "no partial blob");
    // The last complete checkpoint is still the one restored.
    let again = dir("s3-big-dst2");
    let restored = restore(&store, prefix, &again, &Progress::default())
        .await
        .expect("restore");
    assert_eq!(restored.manifest.map(|m| m.seq), Some(1));
    for d in [src, dst, again, journal] {
        let _ = fs::remove_dir_all(d);
    }
}
