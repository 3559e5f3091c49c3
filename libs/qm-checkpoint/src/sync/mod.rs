//! Committing a checkpoint directory to the store and restoring the latest
//! complete one.
//!
//! Files move streamed between disk and the store (see
//! [`crate::store::Transfer`]); walking and hashing run on tokio's blocking
//! threads, never on the async ones, so these futures need a tokio runtime.

use std::collections::BTreeSet;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use futures::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use crate::confined::Tree;
use crate::manifest::{self, FileEntry, Manifest};
use crate::store::{ObjectStore, StoreError};

mod restore;
mod retain;

pub use restore::{restore, restore_staged, restore_staging, Restored, Staged};
use retain::newest_restorable;
pub use retain::retain;

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
fn hash_open(file: &mut fs::File, path: &Path) -> Result<(u64, String), SyncError> {
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
    Ok((size, hex::encode(hasher.finalize())))
}

/// A file this service wrote (a restore's staging copy): size and SHA-256.
fn hash_file(path: &Path) -> Result<(u64, String), SyncError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(local(path))?;
    hash_open(&mut file, path)
}

/// The files of a checkpoint directory, sorted by path, each hashed. Hidden
/// files (a name starting with `.`, such as a trainer's `.state.tmp` before
/// its rename) are work in progress and left out; nothing is read through a
/// symbolic link ([`crate::confined`]).
pub fn scan(dir: &Path) -> Result<Vec<(FileEntry, PathBuf)>, SyncError> {
    let tree = Tree::open(dir).map_err(local(dir))?;
    tree.files()
        .map_err(local(dir))?
        .into_iter()
        .map(|v| {
            let path = dir.join(&v.rel);
            let mut file = tree.open_file(&v.rel).map_err(local(&path))?;
            let (size, sha256) = hash_open(&mut file, &path)?;
            Ok((
                FileEntry {
                    path: v.rel,
                    size,
                    sha256,
                },
                path,
            ))
        })
        .collect()
}

/// The blobs this writer knows are in the store, so unchanged files are not
/// sent (or checked) again: exactly those of one checkpoint, the last one
/// it committed or restored.
///
/// Retention deletes a blob only when no kept checkpoint references it and
/// no checkpoint retired within [`ORPHAN_GRACE`] does. A commit first checks
/// that the checkpoint the set came from still exists (if not, it starts
/// from the newest one that does): from then on its blobs stay for the
/// grace at least, longer than the commit takes. A set that only grew would
/// outlive retention: a file returning to an older content would be skipped
/// as uploaded while its blob was deleted, and the manifest would reference
/// a missing blob.
#[derive(Clone, Debug, Default)]
pub struct Uploaded {
    blobs: BTreeSet<String>,
    /// The checkpoint the blobs are those of.
    from: Option<u64>,
}

impl Uploaded {
    /// The blobs of a checkpoint just restored (or read).
    pub fn of(manifest: &Manifest) -> Uploaded {
        Uploaded {
            blobs: manifest.files.iter().map(|f| f.sha256.clone()).collect(),
            from: Some(manifest.seq),
        }
    }
}

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

/// How long retention leaves alone an unreferenced blob (it may belong to a
/// commit whose manifest is not written yet) and the blobs of a retired
/// checkpoint (a writer may be committing one that reuses them): longer
/// than any commit takes from its first blob to its manifest. Each
/// retention reads the checkpoints retired within it.
pub const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_secs(2 * 3600);

/// A file a workload may keep in its checkpoint directory, `{"step": N}`:
/// the step is recorded in the manifest (informational).
pub const STEP_FILE: &str = "qm-checkpoint.json";

/// The most of [`STEP_FILE`] that is read.
const STEP_FILE_MAX: u64 = 64 * 1024;

/// Each visible file's path, inode, size and modification time (s, ns).
pub type Fingerprint = Vec<(PathBuf, u64, u64, i64, i64)>;

/// What identifies each visible (non-dot) file's current version: a rename
/// over a file or a rewrite changes it. Cheap: no file is read (and no link
/// followed).
pub fn fingerprint(dir: &Path) -> Result<Fingerprint, SyncError> {
    let tree = Tree::open(dir).map_err(local(dir))?;
    fingerprint_of(&tree)
}

fn fingerprint_of(tree: &Tree) -> Result<Fingerprint, SyncError> {
    Ok(tree
        .files()
        .map_err(local(tree.path()))?
        .into_iter()
        .map(|v| {
            (
                tree.path().join(&v.rel),
                v.ino,
                v.size,
                v.mtime,
                v.mtime_nsec,
            )
        })
        .collect())
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
    // The directory is the job's: it is opened once, without following a
    // link, and every file is opened below that handle the same way
    // (`confined.rs`), so swapping a directory or a file for a link between
    // the listing and the read uploads nothing it should not.
    let (tree, before) = {
        let dir = dir.to_path_buf();
        blocking(dir.clone(), move || {
            let tree = Tree::open(&dir).map_err(local(&dir))?;
            let before = fingerprint_of(&tree)?;
            Ok((std::sync::Arc::new(tree), before))
        })
        .await?
    };
    let listed: Vec<String> = before
        .iter()
        .filter_map(|(path, ..)| path.strip_prefix(dir).ok())
        .map(|rel| {
            rel.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/")
        })
        .collect();
    // Known blobs count only while the checkpoint they are those of exists
    // (see [`Uploaded`]); a writer that knows none (a restarted service, or
    // its checkpoint was retired by another writer) starts from the newest
    // checkpoint a restore would use.
    if let Some(from) = uploaded.from {
        if !store.exists(&manifest::manifest_key(prefix, from)).await? {
            *uploaded = Uploaded::default();
        }
    }
    if uploaded.from.is_none() {
        if let Some(m) = newest_restorable(store, prefix).await? {
            *uploaded = Uploaded::of(&m);
        }
    }
    // Every other blob is sent, even if an object of its name exists: an
    // object no kept checkpoint references may be deleted by retention at
    // any moment once it is older than the orphan grace (see [`retain`]),
    // and sending it again makes it young. What this commit sent counts as
    // uploaded only once its manifest references it.
    //
    // Each file is hashed and, if its blob is to be sent, sent at once,
    // several files at a time (the store bounds the requests in flight):
    // hashing one file overlaps sending another. Files are hashed in order,
    // no more at once than there are cores: hashing them all together would
    // finish none until all were nearly done, and the first request would
    // wait for the whole checkpoint's hashing. Each is sent from the file
    // as it is now: a file changed since it was hashed changes its
    // fingerprint, and the commit fails below. (Owned items: a stream over
    // borrowed ones is not Send for every lifetime, which the services'
    // spawned tasks need.)
    let known = &uploaded.blobs;
    let sent = std::sync::Mutex::new(BTreeSet::new());
    let sent = &sent;
    let hashers = tokio::sync::Semaphore::new(
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
            .min(store.concurrency().max(1)),
    );
    let hashers = &hashers;
    let tree = &tree;
    let mut files: Vec<(FileEntry, PathBuf)> = futures::stream::iter(listed)
        .map(|rel| async move {
            let path = dir.join(&rel);
            let (size, sha256, file) = {
                // Fair: permits go in the order the files were listed.
                let _hasher = hashers
                    .acquire()
                    .await
                    .expect("the commit's own semaphore is never closed");
                let (tree, rel, at) = (std::sync::Arc::clone(tree), rel.clone(), path.clone());
                blocking(path.clone(), move || {
                    let mut file = tree.open_file(&rel).map_err(local(&at))?;
                    let (size, sha256) = hash_open(&mut file, &at)?;
                    Ok((size, sha256, file))
                })
                .await?
            };
            let first = !known.contains(&sha256)
                && sent
                    .lock()
                    .map_err(|_| {
                        SyncError::Store(StoreError::Transient(
                            "a commit's state was poisoned".into(),
                        ))
                    })?
                    .insert(sha256.clone());
            if first {
                // Sent from the file opened above (whatever its path is
                // now), which stays open until it is sent.
                store
                    .put_file(
                        &manifest::blob_key(prefix, &sha256),
                        &crate::confined::path_of(&file),
                        size,
                    )
                    .await?;
            }
            drop(file);
            Ok::<_, SyncError>((
                FileEntry {
                    path: rel,
                    size,
                    sha256,
                },
                path,
            ))
        })
        .buffer_unordered(store.concurrency().max(1))
        .try_collect()
        .await?;
    files.sort_by(|a, b| a.0.path.cmp(&b.0.path));
    let step = match step {
        Some(s) => Some(s),
        // A regular file, not through a link, and at most 64 KiB of it.
        None => tree.open_file(STEP_FILE).ok().and_then(|f| {
            let mut text = String::new();
            f.take(STEP_FILE_MAX).read_to_string(&mut text).ok()?;
            serde_json::from_str::<serde_json::Value>(&text)
                .ok()?
                .get("step")
                .and_then(serde_json::Value::as_u64)
        }),
    };
    let after = {
        let tree = std::sync::Arc::clone(tree);
        blocking(dir.to_path_buf(), move || fingerprint_of(&tree)).await?
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
    *uploaded = Uploaded::of(&manifest);
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
