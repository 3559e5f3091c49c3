//! The executor's settings: file keys, `QM_EXECUTOR_*` variables, checks.

use qm_service::settings;
use qm_wire::subjects;
use serde::{Deserialize, Serialize};

pub const USAGE: &str = "qm-executor [--config FILE]

Launches and stops training processes for the scheduler. Settings (file keys,
or environment variables QM_EXECUTOR_<KEY>):
  executorId         QM_EXECUTOR_EXECUTOR_ID        required (letters, digits, - and _)
  jobQueue           QM_EXECUTOR_JOB_QUEUE          required
  instances          QM_EXECUTOR_INSTANCES          required, e.g.
                     [{\"instanceType\":\"ml.g5.xlarge\",\"count\":2,\"gpusPerInstance\":1}]
  gpus               QM_EXECUTOR_GPUS               GPU indices to hand out; default:
                                                    discovered with nvidia-smi when any
                                                    instance has gpusPerInstance > 0
  workDir            QM_EXECUTOR_WORK_DIR           default /tmp/qm-executor-<executorId>
  checkpointNode     QM_EXECUTOR_CHECKPOINT_NODE    default: the executor id
  advertiseAddress   QM_EXECUTOR_ADVERTISE_ADDRESS  how other nodes of a multi-node job
                                                    reach this one (QM_HOSTS); default:
                                                    the host name
  heartbeatSeconds   QM_EXECUTOR_HEARTBEAT_SECONDS  default 1
  fenceAfterSeconds  QM_EXECUTOR_FENCE_AFTER_SECONDS
                                                    stop every attempt (SIGTERM, its
                                                    grace, SIGKILL) when no heartbeat has
                                                    been acknowledged for this long, so a
                                                    partitioned node never runs a job the
                                                    scheduler restarted elsewhere; default
                                                    30, at least 2 x heartbeatSeconds + 2;
                                                    keep it above the scheduler's failover
                                                    time (its leaseSeconds and a replay)
                                                    and the NATS outages you ride out
  finishedRetentionSeconds QM_EXECUTOR_FINISHED_RETENTION_SECONDS
                                                    how long an ended attempt is
                                                    remembered (a resent start for it
                                                    ignored, a stop answered with its
                                                    end) and its directory kept (its
                                                    output for qm logs, its restored
                                                    checkpoint); default 21600, at
                                                    least 600
  restoreStallSeconds QM_EXECUTOR_RESTORE_STALL_SECONDS
                                                    a checkpoint restore may take as long
                                                    as it keeps moving bytes; the attempt
                                                    fails (exit code 127) only when the
                                                    restore made no progress, or the
                                                    checkpoint service did not answer,
                                                    for this long; default 600, at least 30
  runAsUser          QM_EXECUTOR_RUN_AS_USER        run every host-process attempt as this
  runAsGroup         QM_EXECUTOR_RUN_AS_GROUP       uid (and gid); default: the executor's own
  runtimes           QM_EXECUTOR_RUNTIMES           how attempts are launched: [\"process\"]
                                                    (host commands, the default),
                                                    [\"container\"] (images, through the
                                                    Docker Engine API), or both; a job with
                                                    a containerImage is placed only on
                                                    executors offering \"container\"
  container          QM_EXECUTOR_CONTAINER          the container runtime, e.g.
                     {\"dockerHost\":\"unix:///var/run/docker.sock\",\"pullPolicy\":\"IfNotPresent\",
                      \"registryAuthFile\":\"/etc/qm/registry-auth.json\",\"network\":\"host\",
                      \"shmSizeMiB\":1024,\"networkInterfaceName\":\"eth0\"}
                     pullPolicy IfNotPresent (default) or Always; registryAuthFile: a
                     Docker config.json ({\"auths\":{\"host\":{\"auth\":\"base64(user:pass)\"}}})
                     read by the executor, never given to a job; network: host (the
                     default; multi-node jobs need it) or a Docker network's name
Per instance type, \"cpus\" and \"memoryMiB\" in instances limit each container's CPU
and memory (times the instances it holds).
NATS connection (QM_NATS_<KEY> or QM_EXECUTOR_NATS_<KEY>):
  natsUrl natsPrincipal natsNkeyFile natsCreds natsUser natsPassword
  natsCaFile natsCertFile natsKeyFile

Commands are obeyed only when their epoch is the current scheduler lease's
(read from the qm_leader bucket, never taken from a message). A job sees
only PATH, HOME, LANG, LC_ALL, TZ and TMPDIR of the executor's environment,
plus its own environment and the QM_* variables.";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceSpec {
    pub instance_type: String,
    pub count: u32,
    #[serde(default)]
    pub gpus_per_instance: u32,
    /// CPUs per instance a container may use (its limit: this times the
    /// instances it holds); absent: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus: Option<f64>,
    /// Memory per instance a container may use, in MiB; absent: no limit.
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u64>,
}

/// The container runtime's settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerSettings {
    /// The engine's socket (`unix:///path`).
    pub docker_host: String,
    /// `IfNotPresent` or `Always`.
    pub pull_policy: String,
    /// A Docker `config.json` with registry credentials (`auths`).
    pub registry_auth_file: Option<String>,
    /// `host`, or the name of a Docker network.
    pub network: String,
    /// `/dev/shm` of each container (NCCL and data loaders use it).
    #[serde(rename = "shmSizeMiB")]
    pub shm_size_mib: u64,
    /// What `resourceconfig.json` names as the network interface.
    pub network_interface_name: String,
}

impl Default for ContainerSettings {
    fn default() -> Self {
        ContainerSettings {
            docker_host: "unix:///var/run/docker.sock".into(),
            pull_policy: "IfNotPresent".into(),
            registry_auth_file: None,
            network: "host".into(),
            shm_size_mib: 1024,
            network_interface_name: "eth0".into(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    pub executor_id: String,
    pub job_queue: String,
    pub instances: Vec<InstanceSpec>,
    pub gpus: Option<Vec<u32>>,
    pub work_dir: String,
    pub checkpoint_node: String,
    pub advertise_address: String,
    pub heartbeat_seconds: u64,
    pub fence_after_seconds: u64,
    pub finished_retention_seconds: u64,
    pub restore_stall_seconds: u64,
    pub run_as_user: Option<u32>,
    pub run_as_group: Option<u32>,
    pub runtimes: Vec<String>,
    pub container: ContainerSettings,
}

impl Settings {
    /// Whether this executor launches attempts with `runtime`.
    pub fn offers(&self, runtime: qm_core::Runtime) -> bool {
        self.runtimes.iter().any(|r| r == runtime.name())
    }
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            executor_id: String::new(),
            job_queue: String::new(),
            instances: Vec::new(),
            gpus: None,
            work_dir: String::new(),
            checkpoint_node: String::new(),
            advertise_address: String::new(),
            heartbeat_seconds: 1,
            fence_after_seconds: 30,
            finished_retention_seconds: 6 * 3600,
            restore_stall_seconds: 600,
            run_as_user: None,
            run_as_group: None,
            runtimes: vec!["process".into()],
            container: ContainerSettings::default(),
        }
    }
}

impl settings::Validate for Settings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if let Err(e) = subjects::token(&self.executor_id) {
            p.push(format!("executorId: {e}"));
        }
        if let Err(e) = subjects::token(&self.job_queue) {
            p.push(format!("jobQueue: {e}"));
        }
        if !self.checkpoint_node.is_empty() {
            if let Err(e) = subjects::token(&self.checkpoint_node) {
                p.push(format!("checkpointNode: {e}"));
            }
        }
        if self.instances.is_empty() {
            p.push("instances: at least one {instanceType, count} is required".into());
        }
        for (i, inst) in self.instances.iter().enumerate() {
            if inst.instance_type.is_empty() {
                p.push(format!("instances[{i}].instanceType: is required"));
            }
            if inst.count == 0 {
                p.push(format!("instances[{i}].count: must be >= 1"));
            }
        }
        if self.heartbeat_seconds == 0 {
            p.push("heartbeatSeconds: must be >= 1".into());
        }
        // One heartbeat may be lost (it times out after 2 s) without fencing.
        let least = self.heartbeat_seconds.saturating_mul(2).saturating_add(2);
        if self.fence_after_seconds < least {
            p.push(format!(
                "fenceAfterSeconds: must be >= 2 x heartbeatSeconds + 2 = {least} (one lost heartbeat must not stop every job)"
            ));
        }
        if self.finished_retention_seconds < 600 {
            p.push("finishedRetentionSeconds: must be >= 600 (a resent command must still find what ended)".into());
        }
        if self.restore_stall_seconds < 30 {
            p.push(
                "restoreStallSeconds: must be >= 30 (a busy S3 server may pause that long)".into(),
            );
        }
        if self.run_as_user.is_some() != self.run_as_group.is_some() {
            p.push("runAsUser and runAsGroup: give both or neither".into());
        }
        if let Err(e) = qm_wire::to_core::runtimes(&self.runtimes) {
            p.push(format!("runtimes: {e}"));
        }
        for (i, inst) in self.instances.iter().enumerate() {
            if inst.cpus.is_some_and(|c| !(c.is_finite() && c > 0.0)) {
                p.push(format!("instances[{i}].cpus: must be a number above 0"));
            }
            if inst.memory_mib == Some(0) {
                p.push(format!("instances[{i}].memoryMiB: must be >= 1"));
            }
        }
        let c = &self.container;
        if !c.docker_host.starts_with("unix://") {
            p.push(format!(
                "container.dockerHost: {:?} must be a unix:// socket (the engine's API is never reached over TCP)",
                c.docker_host
            ));
        }
        if !matches!(c.pull_policy.as_str(), "IfNotPresent" | "Always") {
            p.push(format!(
                "container.pullPolicy: {:?} is not IfNotPresent or Always",
                c.pull_policy
            ));
        }
        if c.network.is_empty() {
            p.push("container.network: give host or a Docker network's name".into());
        }
        if c.shm_size_mib == 0 {
            p.push("container.shmSizeMiB: must be >= 1".into());
        }
        p
    }
}
