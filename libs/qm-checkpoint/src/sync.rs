//! Committing a checkpoint directory to the store and restoring the latest
//! complete one.
//!
//! Files move streamed between disk and the store (see
//! [`crate::store::Transfer`]); walking and hashing run on tokio's blocking
//! threads, never on the async ones, so these futures need a tokio runtime.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::manifest::{self, FileEntry, Manifest};
use crate::store::{ObjectStore, StoreError};

/// Why a sync or restore failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{path}: {error}")]
    Local {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("manifest {key} is not valid: {why}")]
    BadManifest { key: String, why: String },
    #[error("restore target {0} is not empty; restore into a fresh directory")]
    TargetNotEmpty(PathBuf),
    /// The workload rewrote a file while it was being uploaded: nothing was
    /// committed; commit again (soon).
    #[error("{0}: file changed while the checkpoint was being committed; commit again")]
    Changed(PathBuf),
    /// A later attempt of the job has committed: this attempt is a stale
    /// copy and may not commit (its work would overwrite newer work).
    #[error("attempt {attempt} may not commit: attempt {by} of the job has committed since (this copy is superseded)")]
    Superseded { attempt: u32, by: u32 },
    /// Another writer committed checkpoint `seq` first: list again and
    /// commit under the next number.
    #[error("checkpoint {seq} was committed by another writer first; commit again")]
    Taken { seq: u64 },
}

impl SyncError {
    /// Whether trying again may succeed: the store was unreachable, a file
    /// changed mid-commit, or a local I/O hiccup. A refusal (the store's
    /// permissions, a damaged manifest, a non-empty restore target, a path
    /// the service may not read) will fail the same way again.
    pub fn is_transient(&self) -> bool {
        match self {
            SyncError::Store(StoreError::Transient(_))
            | SyncError::Changed(_)
            | SyncError::Taken { .. } => true,
            SyncError::Store(StoreError::File(_, kind)) => !matches!(
                kind,
                std::io::ErrorKind::PermissionDenied
                    | std::io::ErrorKind::InvalidInput
                    | std::io::ErrorKind::InvalidData
            ),
            SyncError::Superseded { .. }
            | SyncError::Store(StoreError::Refused(_))
            | SyncError::BadManifest { .. }
            | SyncError::TargetNotEmpty(_) => false,
            SyncError::Local { error, .. } => !matches!(
                error.kind(),
                std::io::ErrorKind::PermissionDenied
                    | std::io::ErrorKind::NotFound
                    | std::io::ErrorKind::InvalidInput
                    | std::io::ErrorKind::InvalidData
            ),
        }
    }
}

fn local(path: &Path) -> impl Fn(std::io::Error) -> SyncError + '_ {
    move |error| SyncError::Local {
        path: path.to_path_buf(),
        error,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs local file work (walking, hashing) on tokio's blocking threads.
async fn blocking<T: Send + 'static>(
    what: PathBuf,
    work: impl FnOnce() -> Result<T, SyncError> + Send + 'static,
) -> Result<T, SyncError> {
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| {
        Err(SyncError::Local {
            path: what,
            error: std::io::Error::other(e.to_string()),
        })
    })
}

/// A file's size and SHA-256, read in 1 MiB blocks.
fn hash_file(path: &Path) -> Result<(u64, String), SyncError> {
    let mut file = fs::File::open(path).map_err(local(path))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut size = 0u64;
    loop {
        let n = file.read(&mut buf).map_err(local(path))?;
        if n == 0 {
            break;
        }
        size += n as u64;
        hasher.update(&buf[..n]);
    }
    Ok((size, hex(&hasher.finalize())))
}

/// The files of a checkpoint directory, sorted by path. Hidden files (a name
/// starting with `.`, such as a trainer's `.state.tmp` before its rename) are
/// work in progress and left out.
pub fn scan(dir: &Path) -> Result<Vec<(FileEntry, PathBuf)>, SyncError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in fs::read_dir(&current).map_err(local(&current))? {
            let entry = entry.map_err(local(&current))?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let kind = entry.file_type().map_err(local(&path))?;
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let rel = path
                    .strip_prefix(dir)
                    .expect("walked below dir")
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join("/");
                let (size, sha256) = hash_file(&path)?;
                out.push((
                    FileEntry {
                        path: rel,
                        size,
                        sha256,
                    },
                    path,
                ));
            }
        }
    }
    out.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    Ok(out)
}

/// Remembers which blobs are known to be in the store, so unchanged files are
/// not sent (or checked) again.
#[derive(Clone, Debug, Default)]
pub struct Uploaded(BTreeSet<String>);

/// Which checkpoint a commit makes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitInfo {
    /// Must increase with every commit of the job.
    pub seq: u64,
    pub attempt: u32,
    /// Recorded in the manifest when known.
    pub job_id: Option<String>,
    pub epoch: Option<u64>,
    /// The training step; None: read from [`STEP_FILE`] in the directory,
    /// if the workload writes one.
    pub step: Option<u64>,
    pub created_at_ms: u64,
}

/// A file a workload may keep in its checkpoint directory, `{"step": N}`:
/// the step is recorded in the manifest (informational).
pub const STEP_FILE: &str = "qm-checkpoint.json";

/// Each visible file's path, inode, size and modification time (s, ns).
pub type Fingerprint = Vec<(PathBuf, u64, u64, i64, i64)>;

/// What identifies each visible (non-dot) file's current version: a rename
/// over a file or a rewrite changes it. Cheap: no file is read.
pub fn fingerprint(dir: &Path) -> Result<Fingerprint, SyncError> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in fs::read_dir(&current).map_err(local(&current))? {
            let entry = entry.map_err(local(&current))?;
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let path = entry.path();
            let meta = entry.metadata().map_err(local(&path))?;
            if meta.is_dir() {
                stack.push(path);
            } else if meta.is_file() {
                out.push((
                    path,
                    meta.ino(),
                    meta.len(),
                    meta.mtime(),
                    meta.mtime_nsec(),
                ));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Commits the directory as checkpoint `info.seq`: uploads every blob the
/// store lacks, then writes the manifest last. If anything fails, no manifest
/// is written and the previous checkpoint stays the latest complete one. The
/// manifest is a consistent snapshot: if any file was replaced or rewritten
/// while the commit ran, it fails with [`SyncError::Changed`] (commit again).
pub async fn commit<S: ObjectStore>(
    store: &S,
    prefix: &str,
    dir: &Path,
    info: CommitInfo,
    uploaded: &mut Uploaded,
) -> Result<Manifest, SyncError> {
    let CommitInfo {
        seq,
        attempt,
        job_id,
        epoch,
        step,
        created_at_ms,
    } = info;
    let (before, files) = {
        let dir = dir.to_path_buf();
        blocking(dir.clone(), move || Ok((fingerprint(&dir)?, scan(&dir)?))).await?
    };
    for (entry, path) in &files {
        if uploaded.0.contains(&entry.sha256) {
            continue;
        }
        let key = manifest::blob_key(prefix, &entry.sha256);
        if !store.exists(&key).await? {
            // Sent from the file as it is now: a file changed since it was
            // hashed changes its fingerprint, and the commit fails below.
            store.put_file(&key, path, entry.size).await?;
        }
        uploaded.0.insert(entry.sha256.clone());
    }
    let step = match step {
        Some(s) => Some(s),
        None => fs::read_to_string(dir.join(STEP_FILE))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v.get("step").and_then(serde_json::Value::as_u64)),
    };
    let after = {
        let dir = dir.to_path_buf();
        blocking(dir.clone(), move || fingerprint(&dir)).await?
    };
    if after != before {
        return Err(SyncError::Changed(dir.to_path_buf()));
    }
    // Fenced by attempt: a later attempt's commit means this one is stale.
    if let Some(newest) = manifest_seqs(store, prefix).await?.first() {
        if let Ok(Some(m)) = read_manifest(store, &manifest::manifest_key(prefix, *newest)).await {
            if m.attempt > attempt {
                return Err(SyncError::Superseded {
                    attempt,
                    by: m.attempt,
                });
            }
        }
    }
    let manifest = Manifest {
        format: manifest::FORMAT,
        seq,
        attempt,
        job_id,
        epoch,
        step,
        created_at_ms,
        files: files.into_iter().map(|(entry, _)| entry).collect(),
    };
    let body = serde_json::to_vec_pretty(&manifest).expect("manifests serialise");
    // Never overwrites: two writers choosing the same number cannot
    // replace each other's checkpoint.
    if !store
        .put_new(&manifest::manifest_key(prefix, seq), body)
        .await?
    {
        return Err(SyncError::Taken { seq });
    }
    Ok(manifest)
}

async fn read_manifest<S: ObjectStore>(
    store: &S,
    key: &str,
) -> Result<Option<Manifest>, SyncError> {
    let Some(body) = store.get(key).await? else {
        return Ok(None);
    };
    let bad = |why: String| SyncError::BadManifest {
        key: key.to_string(),
        why,
    };
    let manifest: Manifest = serde_json::from_slice(&body).map_err(|e| bad(e.to_string()))?;
    if let Some(f) = manifest
        .files
        .iter()
        .find(|f| !qm_wire::paths::safe_relative_path(&f.path))
    {
        return Err(bad(format!(
            "path {:?} would leave the checkpoint directory",
            f.path
        )));
    }
    if let Some(f) = manifest
        .files
        .iter()
        .find(|f| !manifest::is_hex_sha256(&f.sha256))
    {
        return Err(bad(format!("{:?} has no valid sha256", f.path)));
    }
    Ok(Some(manifest))
}

/// Sequence numbers of the job's manifests, newest first.
pub async fn manifest_seqs<S: ObjectStore>(store: &S, prefix: &str) -> Result<Vec<u64>, SyncError> {
    let mut seqs: Vec<u64> = store
        .list(&manifest::manifests_prefix(prefix))
        .await?
        .iter()
        .filter_map(|k| manifest::seq_of(k))
        .collect();
    seqs.sort_unstable_by(|a, b| b.cmp(a));
    Ok(seqs)
}

/// Downloads one manifest's files into `staging`, verifying each size and
/// SHA-256. Returns why it cannot, if it cannot.
async fn fetch_verified<S: ObjectStore>(
    store: &S,
    prefix: &str,
    manifest: &Manifest,
    staging: &Path,
) -> Result<Result<(), String>, SyncError> {
    for f in &manifest.files {
        let target = staging.join(&f.path);
        if let Some(parent) = target.parent() {
            fs::create_dir_all(parent).map_err(local(parent))?;
        }
        let key = manifest::blob_key(prefix, &f.sha256);
        if !store.get_file(&key, &target, f.size).await? {
            return Ok(Err(format!("blob of {:?} is missing", f.path)));
        }
        let written = target.clone();
        let (size, sha) = blocking(target.clone(), move || hash_file(&written)).await?;
        if size != f.size || sha != f.sha256 {
            return Ok(Err(format!(
                "blob of {:?} does not match its checksum",
                f.path
            )));
        }
    }
    Ok(Ok(()))
}

/// What a restore did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    /// The checkpoint restored, if any was complete and verified.
    pub manifest: Option<Manifest>,
    /// Newer checkpoints skipped, with why (missing or damaged blobs, bad manifests).
    pub skipped: Vec<(u64, String)>,
}

/// Restores the newest checkpoint whose blobs all verify into `dir` (created
/// if needed; it must be empty). Damaged or incomplete checkpoints are
/// skipped and reported; with none usable, `dir` is left empty.
pub async fn restore<S: ObjectStore>(
    store: &S,
    prefix: &str,
    dir: &Path,
) -> Result<Restored, SyncError> {
    fs::create_dir_all(dir).map_err(local(dir))?;
    if fs::read_dir(dir).map_err(local(dir))?.next().is_some() {
        return Err(SyncError::TargetNotEmpty(dir.to_path_buf()));
    }
    let mut skipped = Vec::new();
    let mut manifests = Vec::new();
    for seq in manifest_seqs(store, prefix).await? {
        let key = manifest::manifest_key(prefix, seq);
        match read_manifest(store, &key).await {
            Ok(Some(m)) => manifests.push(m),
            Ok(None) => continue,
            Err(SyncError::BadManifest { why, .. }) => skipped.push((seq, why)),
            Err(e) => return Err(e),
        }
    }
    // A checkpoint committed by an attempt older than one that committed
    // before it was written by a stale copy of the job: never restored.
    let mut newest_attempt_below = BTreeMap::new();
    let mut highest = 0;
    for m in manifests.iter().rev() {
        newest_attempt_below.insert(m.seq, highest);
        highest = highest.max(m.attempt);
    }
    for manifest in manifests {
        let seq = manifest.seq;
        let before = newest_attempt_below.get(&seq).copied().unwrap_or(0);
        if manifest.attempt < before {
            skipped.push((
                seq,
                format!(
                    "committed by attempt {} after attempt {before} had committed (a superseded copy)",
                    manifest.attempt
                ),
            ));
            continue;
        }
        let staging = dir.join(format!(".restore-{seq}"));
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir_all(&staging).map_err(local(&staging))?;
        match fetch_verified(store, prefix, &manifest, &staging).await? {
            Ok(()) => {
                for entry in fs::read_dir(&staging).map_err(local(&staging))? {
                    let entry = entry.map_err(local(&staging))?;
                    let to = dir.join(entry.file_name());
                    fs::rename(entry.path(), &to).map_err(local(&to))?;
                }
                fs::remove_dir_all(&staging).map_err(local(&staging))?;
                return Ok(Restored {
                    manifest: Some(manifest),
                    skipped,
                });
            }
            Err(why) => {
                fs::remove_dir_all(&staging).map_err(local(&staging))?;
                skipped.push((seq, why));
            }
        }
    }
    Ok(Restored {
        manifest: None,
        skipped,
    })
}

/// Keeps the newest `keep` manifests that a restore would use (checkpoints
/// of superseded copies of the job do not count, and are deleted), deletes
/// older ones, then deletes blobs no kept manifest references. Returns
/// (manifests, blobs) deleted.
pub async fn retain<S: ObjectStore>(
    store: &S,
    prefix: &str,
    keep: usize,
) -> Result<(usize, usize), SyncError> {
    let seqs = manifest_seqs(store, prefix).await?;
    let mut manifests = Vec::new();
    for seq in &seqs {
        // A manifest that cannot be read is kept as it is (and protects
        // nothing): retention never deletes what it does not understand.
        if let Ok(Some(m)) = read_manifest(store, &manifest::manifest_key(prefix, *seq)).await {
            manifests.push(m);
        }
    }
    // Newest first; stale: an attempt older than one committed before it.
    let mut stale = BTreeSet::new();
    let mut highest = 0;
    for m in manifests.iter().rev() {
        if m.attempt < highest {
            stale.insert(m.seq);
        }
        highest = highest.max(m.attempt);
    }
    let mut referenced = BTreeSet::new();
    let mut doomed = Vec::new();
    let mut kept = 0;
    for m in manifests {
        if !stale.contains(&m.seq) && kept < keep.max(1) {
            kept += 1;
            referenced.extend(m.files.into_iter().map(|f| f.sha256));
        } else {
            doomed.push(m.seq);
        }
    }
    let mut deleted_manifests = 0;
    for seq in doomed {
        store.delete(&manifest::manifest_key(prefix, seq)).await?;
        deleted_manifests += 1;
    }
    let blob_prefix = manifest::blob_key(prefix, "");
    let mut deleted_blobs = 0;
    for key in store.list(&blob_prefix).await? {
        let sha = key.trim_start_matches(&blob_prefix);
        if !referenced.contains(sha) {
            store.delete(&key).await?;
            deleted_blobs += 1;
        }
    }
    Ok((deleted_manifests, deleted_blobs))
}
