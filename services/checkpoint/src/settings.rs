//! The checkpoint service's settings: file keys, `QM_CHECKPOINT_*`
//! variables, checks.

use qm_service::settings::{Key, Spec};
use qm_wire::subjects;
use serde::{Deserialize, Serialize};

/// What `qm-checkpoint` is and every key of its settings: its `--help`, its
/// flags and the tables in `docs/settings.md` come from here.
pub(crate) const SPEC: Spec = Spec {
    service: "checkpoint",
    about: "Syncs attempts' checkpoint directories to S3-compatible storage for the executor on this node, and restores them when an attempt resumes.",
    keys: &[
        Key {
            name: "node",
            help: "required: the executor's checkpointNode (the node this service serves; letters, digits, - and _)",
        },
        Key {
            name: "workDir",
            help: "the executor's workDir; only directories inside it are synced; an absolute path; default /tmp/qm-executor-<node>",
        },
        Key {
            name: "s3Endpoint",
            help: "the S3 endpoint, e.g. http://127.0.0.1:3900; empty: AWS",
        },
        Key {
            name: "s3Region",
            help: "the region requests are signed for",
        },
        Key {
            name: "s3Bucket",
            help: "required: the bucket checkpoints go to",
        },
        Key {
            name: "s3AccessKeyId",
            help: "explicit S3 keys (with s3SecretAccessKey); when empty, the AWS default chain (AWS_* variables, profile, web identity, instance metadata)",
        },
        Key {
            name: "s3SecretAccessKey",
            help: "the secret of s3AccessKeyId",
        },
        Key {
            name: "scanIntervalMs",
            help: "how often a tracked checkpoint directory is looked at for a new checkpoint, in milliseconds; at least 50",
        },
        Key {
            name: "keep",
            help: "manifests kept per job (older ones and the blobs only they use are deleted); at least 1",
        },
        Key {
            name: "trackLeaseSeconds",
            help: "a tracked attempt its executor has not re-asserted for this long has ended unseen: its last checkpoint is committed and it is forgotten; at least 10",
        },
        Key {
            name: "partSizeMiB",
            help: "the size of the parts large files move in (multipart upload, ranged reads); 5 to 5120 (S3's part size limits)",
        },
        Key {
            name: "multipartThresholdMiB",
            help: "files larger than this go up in parts (smaller ones in one request); 5 to 5120 (S3's single-PUT limit); downloads split above partSizeMiB",
        },
        Key {
            name: "transferParallelism",
            help: "requests moving file bytes in flight, over all files (parts and whole small files); 1 to 64; memory stays a few buffers a request whatever the checkpoint's size",
        },
        Key {
            name: "s3ResponseTimeoutSeconds",
            help: "how long a request waits for a connection and for the first byte of S3's answer (an S3 that stops answering fails the commit, which is retried, instead of hanging it); 1 to 3600",
        },
    ],
    notes: "A checkpoint directory may hold qm-checkpoint.json with {\"step\": N}: the step is recorded in the manifest. Files whose names start with '.' are never uploaded (write temporary files that way, then rename).",
};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Settings {
    pub(crate) node: String,
    pub(crate) work_dir: String,
    pub(crate) s3_endpoint: String,
    pub(crate) s3_region: String,
    pub(crate) s3_bucket: String,
    pub(crate) s3_access_key_id: String,
    pub(crate) s3_secret_access_key: String,
    pub(crate) scan_interval_ms: u64,
    pub(crate) keep: usize,
    pub(crate) track_lease_seconds: u64,
    #[serde(rename = "partSizeMiB")]
    pub(crate) part_size_mib: u64,
    #[serde(rename = "multipartThresholdMiB")]
    pub(crate) multipart_threshold_mib: u64,
    pub(crate) transfer_parallelism: usize,
    pub(crate) s3_response_timeout_seconds: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            node: String::new(),
            work_dir: String::new(),
            s3_endpoint: String::new(),
            s3_region: "garage".into(),
            s3_bucket: String::new(),
            s3_access_key_id: String::new(),
            s3_secret_access_key: String::new(),
            scan_interval_ms: 1000,
            keep: 5,
            track_lease_seconds: 300,
            part_size_mib: 64,
            multipart_threshold_mib: 256,
            transfer_parallelism: 8,
            s3_response_timeout_seconds: 30,
        }
    }
}

impl qm_service::settings::Validate for Settings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if let Err(e) = subjects::token(&self.node) {
            p.push(format!("node: {e}"));
        }
        if self.s3_bucket.is_empty() {
            p.push("s3Bucket: is required".into());
        }
        if self.s3_access_key_id.is_empty() != self.s3_secret_access_key.is_empty() {
            p.push("s3AccessKeyId and s3SecretAccessKey: give both (or neither, for the AWS default credentials chain)".into());
        }
        if !self.work_dir.is_empty() && !std::path::Path::new(&self.work_dir).is_absolute() {
            p.push(format!(
                "workDir: {:?} must be an absolute path",
                self.work_dir
            ));
        }
        if self.track_lease_seconds < 10 {
            p.push(format!(
                "trackLeaseSeconds: {} is below 10 (executors re-assert tracking every 5 heartbeats; keep it well above that)",
                self.track_lease_seconds
            ));
        }
        if self.scan_interval_ms < 50 {
            p.push("scanIntervalMs: must be >= 50".into());
        }
        if self.keep == 0 {
            p.push("keep: must be >= 1".into());
        }
        if self.part_size_mib < 5 || self.part_size_mib > 5 * 1024 {
            p.push(format!(
                "partSizeMiB: {} is outside 5 to 5120 (S3's part size limits)",
                self.part_size_mib
            ));
        }
        if !(5..=5 * 1024).contains(&self.multipart_threshold_mib) {
            p.push(format!(
                "multipartThresholdMiB: {} is outside 5 to 5120 (S3's smallest part and largest single PUT)",
                self.multipart_threshold_mib
            ));
        }
        if !(1..=3600).contains(&self.s3_response_timeout_seconds) {
            p.push(format!(
                "s3ResponseTimeoutSeconds: {} is outside 1 to 3600",
                self.s3_response_timeout_seconds
            ));
        }
        if !(1..=64).contains(&self.transfer_parallelism) {
            p.push(format!(
                "transferParallelism: {} is outside 1 to 64",
                self.transfer_parallelism
            ));
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Environment variables for the transfer sizes.
    fn sizes(part: &str, threshold: &str) -> Vec<(String, String)> {
        vec![
            ("QM_CHECKPOINT_PART_SIZE_MIB".into(), part.into()),
            (
                "QM_CHECKPOINT_MULTIPART_THRESHOLD_MIB".into(),
                threshold.into(),
            ),
        ]
    }

    #[test]
    fn transfer_sizes_load_from_the_documented_keys_and_variables() {
        let dir = std::env::temp_dir().join(format!("qm-ckpt-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("checkpoint.yaml");
        std::fs::write(
            &file,
            "node: node-1\ns3Bucket: b\npartSizeMiB: 32\nmultipartThresholdMiB: 128\n",
        )
        .expect("write");
        let (s, _): (Settings, _) =
            qm_service::settings::load("checkpoint", Some(&file), Vec::new()).expect("valid");
        assert_eq!((s.part_size_mib, s.multipart_threshold_mib), (32, 128));
        let (s, _): (Settings, _) =
            qm_service::settings::load("checkpoint", Some(&file), sizes("16", "5120"))
                .expect("valid");
        assert_eq!((s.part_size_mib, s.multipart_threshold_mib), (16, 5120));
        let e =
            qm_service::settings::load::<Settings>("checkpoint", Some(&file), sizes("4", "6000"))
                .expect_err("out of S3's limits");
        assert!(e.to_string().contains("partSizeMiB: 4"), "{e}");
        assert!(e.to_string().contains("multipartThresholdMiB: 6000"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[cfg(test)]
mod described {
    qm_service::settings_test!(super::Settings, super::SPEC, "QM_CHECKPOINT_DIR");
}
