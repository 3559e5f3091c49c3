//! Retention: the newest manifests a restore would use are kept, with
//! their blobs; older manifests and unreferenced blobs go.

use std::collections::BTreeSet;

use crate::manifest::{self, Manifest};
use crate::store::ObjectStore;

use super::{manifest_seqs, read_manifest, SyncError};

/// Keeps the newest `keep` manifests that a restore would use (checkpoints
/// of superseded copies of the job do not count, and are deleted), deletes
/// older ones, then deletes blobs no kept manifest references that were
/// written before `orphans_written_before_ms` (now less a grace longer
/// than any commit takes: a younger one may be part of a commit whose
/// manifest is not written yet; see [`ORPHAN_GRACE`](super::ORPHAN_GRACE)).
/// Returns (manifests, blobs) deleted.
pub async fn retain<S: ObjectStore>(
    store: &S,
    prefix: &str,
    keep: usize,
    orphans_written_before_ms: u64,
) -> Result<(usize, usize), SyncError> {
    let manifests = read_manifests(store, prefix).await?;
    let stale = stale_seqs(&manifests);
    let mut referenced = BTreeSet::new();
    let mut doomed = Vec::new();
    let mut kept = 0;
    for m in manifests {
        if !stale.contains(&m.seq) && kept < keep.max(1) {
            kept += 1;
            referenced.extend(m.files.into_iter().map(|f| f.sha256));
        } else {
            doomed.push(m);
        }
    }
    // Retired first, then removed: a writer that saw the manifest before it
    // went finds its blobs for the grace (a superseded copy's protects
    // nothing: no writer starts from it).
    let mut deleted_manifests = 0;
    for m in doomed {
        if !stale.contains(&m.seq) {
            let body = serde_json::to_vec(&m).expect("manifests serialise");
            store
                .put(&manifest::retired_key(prefix, m.seq), body)
                .await?;
        }
        store.delete(&manifest::manifest_key(prefix, m.seq)).await?;
        deleted_manifests += 1;
    }
    for (key, retired) in store
        .list_modified(&manifest::retired_prefix(prefix))
        .await?
    {
        if retired < orphans_written_before_ms {
            store.delete(&key).await?;
        } else if let Ok(Some(m)) = read_manifest(store, &key).await {
            referenced.extend(m.files.into_iter().map(|f| f.sha256));
        }
    }
    // An unreferenced blob written lately may belong to a commit in
    // flight (its manifest is written last): only older ones go.
    let blob_prefix = manifest::blob_key(prefix, "");
    let mut deleted_blobs = 0;
    for (key, modified) in store.list_modified(&blob_prefix).await? {
        let sha = key.trim_start_matches(&blob_prefix);
        if !referenced.contains(sha) && modified < orphans_written_before_ms {
            store.delete(&key).await?;
            deleted_blobs += 1;
        }
    }
    Ok((deleted_manifests, deleted_blobs))
}

/// The job's readable manifests, newest first (one that cannot be read is
/// left out: it protects nothing and is never restored).
async fn read_manifests<S: ObjectStore>(
    store: &S,
    prefix: &str,
) -> Result<Vec<Manifest>, SyncError> {
    let mut manifests = Vec::new();
    for seq in manifest_seqs(store, prefix).await? {
        if let Ok(Some(m)) = read_manifest(store, &manifest::manifest_key(prefix, seq)).await {
            manifests.push(m);
        }
    }
    Ok(manifests)
}

/// Of manifests newest first, those a stale copy of the job wrote: an
/// attempt older than one that committed before it.
pub(super) fn stale_seqs(manifests: &[Manifest]) -> BTreeSet<u64> {
    let mut stale = BTreeSet::new();
    let mut highest = 0;
    for m in manifests.iter().rev() {
        if m.attempt < highest {
            stale.insert(m.seq);
        }
        highest = highest.max(m.attempt);
    }
    stale
}

/// The newest manifest a restore would pick first (not a stale copy's).
pub(super) async fn newest_restorable<S: ObjectStore>(
    store: &S,
    prefix: &str,
) -> Result<Option<Manifest>, SyncError> {
    let manifests = read_manifests(store, prefix).await?;
    let stale = stale_seqs(&manifests);
    Ok(manifests.into_iter().find(|m| !stale.contains(&m.seq)))
}
