//! A checkpoint's manifest: the file list with sizes and SHA-256, written
//! after every blob it names. A checkpoint is complete once its manifest
//! exists.
//!
//! Layout under a job's prefix:
//! ```text
//! <prefix>/manifests/<seq, 20 digits>.json
//! <prefix>/blobs/<sha256>
//! <prefix>/retired/<seq, 20 digits>.json
//! ```
//!
//! A manifest retention no longer keeps moves to `retired/` for a grace
//! period, during which its blobs stay (a writer that read it before it
//! was retired may still be committing a checkpoint that reuses them).

use serde::{Deserialize, Serialize};

/// Manifest format version; within v1 only optional fields are added.
pub const FORMAT: u32 = 1;

/// One file of a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileEntry {
    /// Relative path inside the checkpoint directory, `/`-separated.
    pub path: String,
    pub size: u64,
    /// Lowercase hex SHA-256 of the contents; also the blob's name.
    pub sha256: String,
}

/// A committed checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub format: u32,
    /// Increases with every commit of the job (across attempts).
    pub seq: u64,
    /// The attempt that committed it. A checkpoint committed by an attempt
    /// older than one already committed before it is superseded work (a
    /// stale copy of the job) and is never restored.
    pub attempt: u32,
    /// The job it belongs to, when the writer named it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// The scheduler's fencing epoch the attempt was started under, when
    /// the writer knew it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// The training step, when the workload reports one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// Milliseconds since the Unix epoch (as the caller's clock says).
    pub created_at_ms: u64,
    pub files: Vec<FileEntry>,
}

pub fn manifests_prefix(prefix: &str) -> String {
    format!("{}/manifests/", prefix.trim_end_matches('/'))
}

pub fn retired_prefix(prefix: &str) -> String {
    format!("{}/retired/", prefix.trim_end_matches('/'))
}

pub fn retired_key(prefix: &str, seq: u64) -> String {
    format!("{}{seq:020}.json", retired_prefix(prefix))
}

pub fn manifest_key(prefix: &str, seq: u64) -> String {
    format!("{}{seq:020}.json", manifests_prefix(prefix))
}

pub fn blob_key(prefix: &str, sha256: &str) -> String {
    format!("{}/blobs/{sha256}", prefix.trim_end_matches('/'))
}

/// The sequence number in a manifest key, if it is one.
pub fn seq_of(key: &str) -> Option<u64> {
    let name = key.rsplit('/').next()?;
    let digits = name.strip_suffix(".json")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())?
}

pub fn is_hex_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_sort_by_sequence_and_parse_back() {
        let a = manifest_key("bucket-prefix/q/job-1/", 9);
        let b = manifest_key("bucket-prefix/q/job-1", 10);
        assert_eq!(
            a,
            "bucket-prefix/q/job-1/manifests/00000000000000000009.json"
        );
        assert!(a < b, "lexicographic order is sequence order");
        assert_eq!(seq_of(&b), Some(10));
        assert_eq!(seq_of("x/manifests/notes.json"), None);
    }

    #[test]
    fn v1_manifests_keep_decoding() {
        let golden = r#"{"format":1,"seq":3,"attempt":2,"createdAtMs":1700000000000,
            "files":[{"path":"trainer-state.bin","size":12,"sha256":"ab"}]}"#;
        let m: Manifest = serde_json::from_str(golden).expect("v1 decodes");
        assert_eq!((m.seq, m.attempt, m.step, m.files.len()), (3, 2, None, 1));
    }
}
