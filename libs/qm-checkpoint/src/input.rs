//! A training job's input channels, as SageMaker delivers them in File
//! mode: every object under a channel's `S3Prefix` downloaded into
//! `/opt/ml/input/data/<channel>/` before the job starts, named by its key
//! after the prefix's last `/`. (The checkpoint service always passes a
//! folder, `<prefix>/`: the share's read rule is checked at a `/`
//! boundary, so a channel never reaches a sibling `<prefix>-other/`.) `FullyReplicated`: every node gets every
//! object; `ShardedByS3Key`: node `rank` of `nodes` gets the objects whose
//! position in key order is `rank` modulo `nodes`.
//!
//! Objects stream to disk ([`ObjectStore::get_file`]: ranged parallel reads
//! above the part size), so memory stays bounded. A key that would land
//! outside the channel's folder (`..`, an absolute path) is refused, and
//! folder markers (keys ending in `/`) are skipped.

use std::path::Path;

use crate::store::{ObjectStore, Progress};
use crate::sync::SyncError;

/// The key prefix a channel of S3 prefix `prefix` (as `parse_s3_uri`
/// gives it: no trailing `/`) lists: the folder `prefix/`, or the whole
/// bucket for an empty prefix.
pub fn channel_folder(prefix: &str) -> String {
    let prefix = prefix.trim_end_matches('/');
    if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    }
}

/// What a channel's download moved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Downloaded {
    pub files: usize,
    pub bytes: u64,
}

/// The objects of `prefix` (an S3 key prefix) node `rank` of `nodes` gets,
/// each with its path under the channel's folder and its size.
pub fn assign(
    objects: &[(String, u64)],
    prefix: &str,
    sharded: bool,
    rank: u32,
    nodes: u32,
) -> Result<Vec<(String, String, u64)>, SyncError> {
    let folder = match prefix.rfind('/') {
        Some(i) => &prefix[..=i],
        None => "",
    };
    let mut out = Vec::new();
    let mut position = 0u64;
    for (key, size) in objects {
        if key.ends_with('/') || !key.starts_with(prefix) {
            continue;
        }
        let mine = !sharded || position % u64::from(nodes.max(1)) == u64::from(rank);
        position += 1;
        if !mine {
            continue;
        }
        let relative = &key[folder.len()..];
        if !qm_wire::paths::safe_relative_path(relative) {
            return Err(SyncError::Local {
                path: relative.into(),
                error: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("object {key:?} would land outside the channel's folder"),
                ),
            });
        }
        out.push((key.clone(), relative.to_string(), *size));
    }
    Ok(out)
}

/// Downloads this node's objects of `prefix` into `dir` (which exists and
/// is empty), counting the bytes in `progress`.
pub async fn download<S: ObjectStore>(
    store: &S,
    prefix: &str,
    dir: &Path,
    sharded: bool,
    rank: u32,
    nodes: u32,
    progress: &Progress,
) -> Result<Downloaded, SyncError> {
    let listed = store.list_sizes(prefix).await?;
    let mine = assign(&listed, prefix, sharded, rank, nodes)?;
    let mut done = Downloaded::default();
    for (key, relative, size) in mine {
        let path = dir.join(&relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|error| SyncError::Local {
                path: parent.to_path_buf(),
                error,
            })?;
        }
        if !store.get_file(&key, &path, size, progress).await? {
            // Deleted since it was listed: as if it had not been there.
            continue;
        }
        done.files += 1;
        done.bytes += size;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn objects(keys: &[&str]) -> Vec<(String, u64)> {
        keys.iter().map(|k| (k.to_string(), 1)).collect()
    }

    #[test]
    fn keys_land_under_the_channel_named_after_the_prefix_folder() {
        let listed = objects(&["data/train/a.csv", "data/train/sub/b.csv", "data/train/"]);
        let got = assign(&listed, "data/train/", false, 0, 1).expect("valid");
        let names: Vec<&str> = got.iter().map(|(_, r, _)| r.as_str()).collect();
        assert_eq!(names, ["a.csv", "sub/b.csv"]);
        // A prefix that is not a folder keeps the rest of the name.
        let listed = objects(&["data/train-1.csv", "data/train-2.csv"]);
        let got = assign(&listed, "data/train", false, 0, 1).expect("valid");
        let names: Vec<&str> = got.iter().map(|(_, r, _)| r.as_str()).collect();
        assert_eq!(names, ["train-1.csv", "train-2.csv"]);
    }

    #[test]
    fn a_channel_is_a_folder_so_a_sibling_with_a_longer_name_is_never_listed() {
        assert_eq!(channel_folder("q/shares/a"), "q/shares/a/");
        assert_eq!(channel_folder("q/shares/a/"), "q/shares/a/");
        assert_eq!(channel_folder(""), "");
        let listed = objects(&["q/shares/a/x", "q/shares/ab/secret"]);
        let folder = channel_folder("q/shares/a");
        let got = assign(&listed, &folder, false, 0, 1).expect("valid");
        assert_eq!(got.len(), 1, "{got:?}");
    }

    #[test]
    fn sharded_by_key_gives_each_node_every_nth_object_and_replicated_gives_all() {
        let listed = objects(&["p/0", "p/1", "p/2", "p/3", "p/4"]);
        let shard = |rank| {
            assign(&listed, "p/", true, rank, 2)
                .expect("valid")
                .into_iter()
                .map(|(_, r, _)| r)
                .collect::<Vec<_>>()
        };
        assert_eq!(shard(0), ["0", "2", "4"]);
        assert_eq!(shard(1), ["1", "3"]);
        assert_eq!(assign(&listed, "p/", false, 1, 2).expect("valid").len(), 5);
    }

    #[test]
    fn a_key_that_would_leave_the_folder_is_refused() {
        let listed = objects(&["p/../../etc/passwd"]);
        assert!(assign(&listed, "p/", false, 0, 1).is_err());
    }

    #[tokio::test]
    async fn a_channel_is_downloaded_file_by_file() {
        let store = crate::MemoryStore::new();
        store.put("in/x/1.txt", b"1 2".to_vec()).await.expect("put");
        store
            .put("in/x/deep/2.txt", b"3".to_vec())
            .await
            .expect("put");
        let dir = std::env::temp_dir().join(format!("qm-input-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let got = download(&store, "in/x/", &dir, false, 0, 1, &Progress::default())
            .await
            .expect("downloaded");
        assert_eq!(got, Downloaded { files: 2, bytes: 4 });
        assert_eq!(
            std::fs::read_to_string(dir.join("deep/2.txt")).expect("file"),
            "3"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
