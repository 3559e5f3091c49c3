//! Restores: the newest checkpoint whose blobs all verify, fetched into a
//! staging directory beside the attempt's, then moved into place.

use std::fs;
use std::path::{Path, PathBuf};

use futures::{StreamExt, TryStreamExt};

use crate::manifest::{self, Manifest};
use crate::store::{ObjectStore, Progress};

use super::retain::stale_seqs;
use super::{blocking, hash_file, local, manifest_seqs, read_manifest, SyncError};

/// Downloads one manifest's files into `staging`, verifying each size and
/// SHA-256. Returns why it cannot, if it cannot.
async fn fetch_verified<S: ObjectStore>(
    store: &S,
    prefix: &str,
    manifest: &Manifest,
    staging: &Path,
    progress: &Progress,
) -> Result<Result<(), String>, SyncError> {
    progress.set_total(manifest.files.iter().map(|f| f.size).sum());
    for f in &manifest.files {
        if let Some(parent) = staging.join(&f.path).parent() {
            fs::create_dir_all(parent).map_err(local(parent))?;
        }
    }
    /// Why a file could not be fetched: the store failed, or the blob is
    /// missing or damaged (the checkpoint is skipped).
    enum Unfit {
        Failed(SyncError),
        Damaged(String),
    }
    // Several files at once (the store bounds the requests in flight); the
    // first failure stops the rest.
    let fetched = futures::stream::iter(manifest.files.clone())
        .map(|f| async move {
            let target = staging.join(&f.path);
            let key = manifest::blob_key(prefix, &f.sha256);
            let found = store
                .get_file(&key, &target, f.size, progress)
                .await
                .map_err(|e| Unfit::Failed(e.into()))?;
            if !found {
                return Err(Unfit::Damaged(format!("blob of {:?} is missing", f.path)));
            }
            let written = target.clone();
            let (size, sha) = blocking(target, move || hash_file(&written))
                .await
                .map_err(Unfit::Failed)?;
            if size != f.size || sha != f.sha256 {
                return Err(Unfit::Damaged(format!(
                    "blob of {:?} does not match its checksum",
                    f.path
                )));
            }
            Ok(())
        })
        .buffer_unordered(store.concurrency().max(1))
        .try_collect::<Vec<()>>()
        .await;
    match fetched {
        Ok(_) => Ok(Ok(())),
        Err(Unfit::Damaged(why)) => Ok(Err(why)),
        Err(Unfit::Failed(e)) => Err(e),
    }
}

/// What a restore did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Restored {
    /// The checkpoint restored, if any was complete and verified.
    pub manifest: Option<Manifest>,
    /// Newer checkpoints skipped, with why (missing or damaged blobs, bad manifests).
    pub skipped: Vec<(u64, String)>,
}

/// Where a restore into `dir` builds the checkpoint before it moves it into
/// place: a hidden sibling of `dir` (so `dir` itself stays empty until the
/// checkpoint is complete, and a retry after a crash finds it empty).
pub fn restore_staging(dir: &Path) -> PathBuf {
    let name = dir
        .file_name()
        .map_or_else(|| "checkpoint".into(), |n| n.to_string_lossy().into_owned());
    dir.with_file_name(format!(".{name}.qm-restoring"))
}

/// Restores the newest checkpoint whose blobs all verify into `dir` (created
/// if needed; it must be empty). Damaged or incomplete checkpoints are
/// skipped and reported; with none usable, `dir` is left empty.
///
/// The checkpoint is written into [`restore_staging`], verified, given
/// `dir`'s owner and mode, and then renamed over the empty `dir` in one
/// step: whoever looks at `dir` sees nothing or the whole checkpoint, never
/// a part, whenever the restore is interrupted. What an interrupted restore
/// left in the staging directory is removed by the next one. `progress`
/// counts the bytes written.
pub async fn restore<S: ObjectStore>(
    store: &S,
    prefix: &str,
    dir: &Path,
    progress: &Progress,
) -> Result<Restored, SyncError> {
    let staged = restore_staged(store, prefix, dir, progress).await?;
    staged.place(dir).await?;
    Ok(staged.restored)
}

/// A restore verified in its staging directory, not yet in place.
#[derive(Debug)]
pub struct Staged {
    pub restored: Restored,
    staging: PathBuf,
}

impl Staged {
    /// Moves the verified checkpoint into `dir` in one step (nothing to
    /// move when no checkpoint was usable).
    pub async fn place(&self, dir: &Path) -> Result<(), SyncError> {
        if self.restored.manifest.is_none() {
            return Ok(());
        }
        let (from, to) = (self.staging.clone(), dir.to_path_buf());
        blocking(to.clone(), move || move_into_place(&from, &to)).await
    }
}

/// The first half of [`restore`]: the newest usable checkpoint fetched and
/// verified in the staging directory, to be moved into `dir` with
/// [`Staged::place`] (a caller records what it restored in between).
pub async fn restore_staged<S: ObjectStore>(
    store: &S,
    prefix: &str,
    dir: &Path,
    progress: &Progress,
) -> Result<Staged, SyncError> {
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
    let stale = stale_seqs(&manifests);
    let staging = restore_staging(dir);
    for manifest in manifests {
        let seq = manifest.seq;
        if stale.contains(&seq) {
            skipped.push((
                seq,
                format!(
                    "committed by attempt {} after a later attempt had committed (a superseded copy)",
                    manifest.attempt
                ),
            ));
            continue;
        }
        remove_staging(&staging).await?;
        fs::create_dir_all(&staging).map_err(local(&staging))?;
        match fetch_verified(store, prefix, &manifest, &staging, progress).await? {
            Ok(()) => {
                return Ok(Staged {
                    restored: Restored {
                        manifest: Some(manifest),
                        skipped,
                    },
                    staging,
                });
            }
            Err(why) => {
                remove_staging(&staging).await?;
                skipped.push((seq, why));
            }
        }
    }
    remove_staging(&staging).await?;
    Ok(Staged {
        restored: Restored {
            manifest: None,
            skipped,
        },
        staging,
    })
}

async fn remove_staging(staging: &Path) -> Result<(), SyncError> {
    let gone = staging.to_path_buf();
    blocking(gone.clone(), move || match fs::remove_dir_all(&gone) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(local(&gone)(e)),
        _ => Ok(()),
    })
    .await
}

/// Gives the verified checkpoint in `staging` the owner and mode of the
/// (empty) `dir`, everything in it the same owner (the job, which may run
/// as another user, owns what it restored), and renames it over `dir`.
fn move_into_place(staging: &Path, dir: &Path) -> Result<(), SyncError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = fs::metadata(dir).map_err(local(dir))?;
    let (uid, gid) = (meta.uid(), meta.gid());
    if fs::metadata(staging).map_err(local(staging))?.uid() != uid
        || fs::metadata(staging).map_err(local(staging))?.gid() != gid
    {
        let mut stack = vec![staging.to_path_buf()];
        while let Some(current) = stack.pop() {
            std::os::unix::fs::lchown(&current, Some(uid), Some(gid)).map_err(local(&current))?;
            if fs::symlink_metadata(&current)
                .map_err(local(&current))?
                .is_dir()
            {
                for entry in fs::read_dir(&current).map_err(local(&current))? {
                    stack.push(entry.map_err(local(&current))?.path());
                }
            }
        }
    }
    fs::set_permissions(staging, fs::Permissions::from_mode(meta.mode() & 0o7777))
        .map_err(local(staging))?;
    // rename(2) replaces an empty directory, and fails if it is not empty.
    fs::rename(staging, dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::DirectoryNotEmpty {
            SyncError::TargetNotEmpty(dir.to_path_buf())
        } else {
            local(dir)(e)
        }
    })
}
