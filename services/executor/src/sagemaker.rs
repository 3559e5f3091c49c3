//! The SageMaker training-container contract, and what every rank of a job
//! spread over several executors needs to find the others.
//!
//! A container attempt sees, as SageMaker gives a training image:
//! - `/opt/ml/input/config/hyperparameters.json` (values as strings),
//!   `resourceconfig.json` (`current_host`, `hosts` `algo-1..N`,
//!   `network_interface_name`) and `inputdataconfig.json`, read-only;
//! - `/opt/ml/input/data/<channel>`: its input channels, read-only;
//! - `/opt/ml/model`, `/opt/ml/output/data` and `/opt/ml/output/failure`,
//!   which it writes;
//! - `/opt/ml/checkpoints` (or its `checkpointConfig.localPath`): the
//!   checkpoint directory the checkpoint service restores and syncs.
//!
//! On the host these are folders of the attempt's directory (`ml/...`),
//! bind-mounted into the container one by one: the job sees nothing else
//! of the node.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::LaunchError;

/// The `/opt/ml` tree of one attempt, on the host.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<attempt>/ml/input` (mounted read-only at `/opt/ml/input`).
    pub input: PathBuf,
    /// `<attempt>/ml/model` (`/opt/ml/model`).
    pub model: PathBuf,
    /// `<attempt>/ml/output` (`/opt/ml/output`; `data/` and `failure`).
    pub output: PathBuf,
}

/// The checkpoint directory inside the container when the job names none.
pub const CONTAINER_CHECKPOINTS: &str = "/opt/ml/checkpoints";
/// How much of `/opt/ml/output/failure` becomes the attempt's reason.
pub const FAILURE_CHARS: usize = 1024;

/// The host name of rank `rank` (0-based) inside the containers.
pub fn host_name(rank: usize) -> String {
    format!("algo-{}", rank + 1)
}

impl Layout {
    pub fn new(attempt_dir: &Path) -> Layout {
        let root = attempt_dir.join("ml");
        Layout {
            input: root.join("input"),
            model: root.join("model"),
            output: root.join("output"),
        }
    }

    pub fn config(&self) -> PathBuf {
        self.input.join("config")
    }

    pub fn data(&self) -> PathBuf {
        self.input.join("data")
    }

    pub fn failure(&self) -> PathBuf {
        self.output.join("failure")
    }

    /// Creates the tree and writes the config files (the folders the job
    /// writes are handed to its user later, `runtime.rs`; the attempt's
    /// directory above them is the executor's alone, mode 0700).
    pub fn prepare(&self, config: &ConfigFiles) -> Result<(), LaunchError> {
        let dirs = [
            self.config(),
            self.data(),
            self.model.clone(),
            self.output.join("data"),
        ];
        for d in &dirs {
            std::fs::create_dir_all(d).map_err(|source| LaunchError::CreateDir {
                path: d.clone(),
                source,
            })?;
        }
        config.write_into(&self.config())
    }

    /// The first [`FAILURE_CHARS`] characters of `/opt/ml/output/failure`,
    /// if the job wrote one (a link is not followed: the job owns the
    /// folder).
    pub fn failure_reason(&self) -> Option<String> {
        owned_text(&self.failure(), FAILURE_CHARS)
    }

    /// `/opt/ml/output/result`, a container's `$QM_RESULT_FILE`.
    pub fn result(&self) -> PathBuf {
        self.output.join("result")
    }
}

/// The first `chars` characters of a file the job wrote, trimmed, if it
/// wrote one that is not empty. A link is not followed (the job owns the
/// folder, and could point it at the executor's files), nor is anything
/// but a plain file read.
pub fn owned_text(path: &Path, chars: usize) -> Option<String> {
    use std::io::Read;
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return None;
    }
    let mut buf = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take((chars * 4) as u64)
        .read_to_end(&mut buf)
        .ok()?;
    let text: String = String::from_utf8_lossy(&buf).chars().take(chars).collect();
    let text = text.trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// The three config files, as SageMaker writes them.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigFiles {
    pub hyperparameters: serde_json::Value,
    pub resource: serde_json::Value,
    pub input_data: serde_json::Value,
}

impl ConfigFiles {
    /// Writes the three files into `dir` (which exists).
    pub fn write_into(&self, dir: &Path) -> Result<(), LaunchError> {
        for (name, body) in [
            ("hyperparameters.json", &self.hyperparameters),
            ("resourceconfig.json", &self.resource),
            ("inputdataconfig.json", &self.input_data),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, body.to_string())
                .map_err(|source| LaunchError::Output { path, source })?;
        }
        Ok(())
    }

    /// `hps`: the job's `SM_HPS` (a JSON object of strings, as the gateway
    /// sets it from `HyperParameters`); a value that is not a string is
    /// written as its JSON text, as SageMaker stringifies them.
    pub fn new(
        hps: Option<&str>,
        rank: u32,
        nodes: usize,
        interface: &str,
        channels: &[qm_wire::messages::InputChannel],
    ) -> Result<ConfigFiles, LaunchError> {
        let hyperparameters = match hps {
            None => serde_json::json!({}),
            Some(text) => {
                let parsed: BTreeMap<String, serde_json::Value> = serde_json::from_str(text)
                    .map_err(|e| {
                        LaunchError::Contract(format!(
                            "SM_HPS is not a JSON object of hyperparameters: {e}"
                        ))
                    })?;
                let strings: serde_json::Map<String, serde_json::Value> = parsed
                    .into_iter()
                    .map(|(k, v)| {
                        let s = match v {
                            serde_json::Value::String(s) => s,
                            other => other.to_string(),
                        };
                        (k, serde_json::Value::String(s))
                    })
                    .collect();
                serde_json::Value::Object(strings)
            }
        };
        let hosts: Vec<String> = (0..nodes.max(1)).map(host_name).collect();
        let resource = serde_json::json!({
            "current_host": host_name(rank as usize),
            "current_instance_type": serde_json::Value::Null,
            "hosts": hosts,
            "network_interface_name": interface,
        });
        let input_data: serde_json::Map<String, serde_json::Value> = channels
            .iter()
            .map(|c| {
                (
                    c.channel_name.clone(),
                    serde_json::json!({
                        "TrainingInputMode": "File",
                        "S3DistributionType": if c.sharded() { "ShardedByS3Key" } else { "FullyReplicated" },
                        "RecordWrapperType": "None"
                    }),
                )
            })
            .collect();
        Ok(ConfigFiles {
            hyperparameters,
            resource,
            input_data: serde_json::Value::Object(input_data),
        })
    }
}

/// What one rank of a job needs to find the others, as `torchrun` and MPI
/// launchers read it, and SageMaker's names for the same. `master`: rank
/// 0's address as this rank reaches it; `gpus`: the rank's GPUs.
pub fn rank_environment(
    job_id: &str,
    attempt: u32,
    rank: u32,
    nodes: usize,
    master: &str,
    gpus: usize,
) -> BTreeMap<String, String> {
    let nodes = nodes.max(1);
    let per_node = gpus.max(1);
    let hosts: Vec<String> = (0..nodes).map(host_name).collect();
    let mut env = BTreeMap::new();
    env.insert("MASTER_ADDR".into(), master.to_string());
    env.insert(
        "MASTER_PORT".into(),
        master_port(job_id, attempt).to_string(),
    );
    env.insert("NNODES".into(), nodes.to_string());
    env.insert("WORLD_SIZE".into(), (nodes * per_node).to_string());
    env.insert("NODE_RANK".into(), rank.to_string());
    env.insert("NPROC_PER_NODE".into(), per_node.to_string());
    env.insert(
        "SM_HOSTS".into(),
        serde_json::to_string(&hosts).expect("strings serialize"),
    );
    env.insert("SM_CURRENT_HOST".into(), host_name(rank as usize));
    env.insert("SM_NUM_GPUS".into(), gpus.to_string());
    env
}

/// The port rank 0 listens on for the others: fixed per (job, attempt), so
/// every rank computes the same one without talking, in 29500-31499
/// (torchrun's default and above; a clash with another job on the same
/// host is possible and fails that attempt's rendezvous, not a wrong join:
/// the attempt is part of the key).
pub fn master_port(job_id: &str, attempt: u32) -> u16 {
    // FNV-1a: stable across builds and platforms (std's hasher is not).
    let mut h: u32 = 0x811c_9dc5;
    for b in job_id.bytes().chain(attempt.to_le_bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    29_500 + (h % 2_000) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hyperparameters_are_strings_and_ranks_are_algo_hosts() {
        let train = qm_wire::messages::InputChannel {
            channel_name: "train".into(),
            s3_uri: "s3://b/p".into(),
            s3_data_distribution_type: Some("ShardedByS3Key".into()),
        };
        let files = ConfigFiles::new(
            Some(r#"{"epochs":"3","lr":0.5,"name":"x"}"#),
            1,
            3,
            "eth0",
            &[train],
        )
        .expect("valid");
        assert_eq!(
            files.hyperparameters,
            serde_json::json!({"epochs": "3", "lr": "0.5", "name": "x"})
        );
        assert_eq!(files.resource["current_host"], "algo-2");
        assert_eq!(
            files.resource["hosts"],
            serde_json::json!(["algo-1", "algo-2", "algo-3"])
        );
        assert_eq!(files.resource["network_interface_name"], "eth0");
        assert_eq!(
            files.input_data["train"]["TrainingInputMode"],
            serde_json::json!("File")
        );
        assert_eq!(
            files.input_data["train"]["S3DistributionType"],
            serde_json::json!("ShardedByS3Key")
        );
        let err = ConfigFiles::new(Some("[1]"), 0, 1, "eth0", &[]).expect_err("not an object");
        assert!(err.to_string().contains("SM_HPS"), "{err}");
    }

    #[test]
    fn every_rank_gets_the_same_master_and_its_own_rank() {
        let a = rank_environment("job-1", 2, 0, 2, "algo-1", 0);
        let b = rank_environment("job-1", 2, 1, 2, "algo-1", 0);
        assert_eq!(a["MASTER_PORT"], b["MASTER_PORT"]);
        assert_eq!(a["MASTER_ADDR"], "algo-1");
        assert_eq!(
            (a["NODE_RANK"].as_str(), b["NODE_RANK"].as_str()),
            ("0", "1")
        );
        assert_eq!(a["WORLD_SIZE"], "2");
        assert_eq!(a["NPROC_PER_NODE"], "1");
        assert_eq!(b["SM_CURRENT_HOST"], "algo-2");
        assert_eq!(a["SM_HOSTS"], r#"["algo-1","algo-2"]"#);
        let gpus = rank_environment("job-1", 2, 0, 2, "algo-1", 4);
        assert_eq!(
            (gpus["WORLD_SIZE"].as_str(), gpus["SM_NUM_GPUS"].as_str()),
            ("8", "4")
        );
        let port = master_port("job-1", 2);
        assert!((29_500..31_500).contains(&port));
        assert_ne!(
            port,
            master_port("job-1", 3),
            "another attempt, another port"
        );
    }

    #[test]
    fn the_failure_file_is_cut_at_1024_characters_and_a_link_is_not_followed() {
        let dir = std::env::temp_dir().join(format!("qm-sm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let layout = Layout::new(&dir);
        layout
            .prepare(&ConfigFiles::new(None, 0, 1, "eth0", &[]).expect("valid"))
            .expect("prepared");
        assert_eq!(layout.failure_reason(), None);
        std::fs::write(layout.failure(), "é".repeat(2000)).expect("write");
        let reason = layout.failure_reason().expect("a reason");
        assert_eq!(reason.chars().count(), FAILURE_CHARS);
        std::fs::remove_file(layout.failure()).expect("rm");
        std::os::unix::fs::symlink("/etc/hostname", layout.failure()).expect("link");
        assert_eq!(layout.failure_reason(), None, "a planted link is not read");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_result_is_read_only_from_a_plain_file_and_cut() {
        let dir = std::env::temp_dir().join(format!("qm-result-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let result = dir.join("result");
        assert_eq!(owned_text(&result, 8), None, "none written");
        std::fs::write(&result, "digest-0123456789\n").expect("write");
        assert_eq!(owned_text(&result, 8).as_deref(), Some("digest-0"));
        std::fs::remove_file(&result).expect("rm");
        std::os::unix::fs::symlink("/etc/hostname", &result).expect("link");
        assert_eq!(owned_text(&result, 64), None, "a planted link is not read");
        std::fs::remove_file(&result).expect("rm");
        std::fs::create_dir(&result).expect("a folder");
        assert_eq!(owned_text(&result, 64), None, "nor a folder");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
