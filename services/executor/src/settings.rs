//! The executor's settings: file keys, `QM_EXECUTOR_*` variables, checks.

use qm_service::settings;
use qm_service::settings::{Key, Spec};
use qm_wire::subjects;
use serde::{Deserialize, Serialize};

/// What `qm-executor` is and every key of its settings: its `--help`, its
/// flags and the tables in `docs/settings.md` come from here.
pub const SPEC: Spec = Spec {
    service: "executor",
    about: "Launches and stops training runs (host processes or containers) for the scheduler, and fences itself: a node cut off from the scheduler stops its attempts before they could run elsewhere.",
    keys: &[
        Key {
            name: "executorId",
            help: "required: this executor's id (letters, digits, - and _)",
        },
        Key {
            name: "jobQueue",
            help: "the job queue it runs jobs of (this, or serviceEnvironment, is required)",
        },
        Key {
            name: "serviceEnvironment",
            help: "the service environment it joins: it runs the jobs of every queue attached to it (a queue's serviceEnvironment), higher-priority queues first; instead of jobQueue",
        },
        Key {
            name: "instances",
            help: "required: the instances it offers, e.g. [{\"instanceType\":\"ml.g5.xlarge\",\"count\":2,\"gpusPerInstance\":1}]; per instance type, cpus and memoryMiB limit each container's CPU and memory (times the instances it holds)",
        },
        Key {
            name: "gpus",
            help: "GPU indices to hand out; default: discovered with nvidia-smi when any instance has gpusPerInstance > 0",
        },
        Key {
            name: "workDir",
            help: "where attempts' directories live; default /tmp/qm-executor-<executorId>",
        },
        Key {
            name: "checkpointNode",
            help: "the checkpoint service that syncs this executor's attempts; default: the executor id",
        },
        Key {
            name: "advertiseAddress",
            help: "how other nodes of a multi-node job reach this one (QM_HOSTS); default: the host name",
        },
        Key {
            name: "heartbeatSeconds",
            help: "how often it tells the scheduler it lives, in seconds; at least 1",
        },
        Key {
            name: "fenceAfterSeconds",
            help: "stop every attempt (SIGTERM, its grace, SIGKILL) when no heartbeat has been acknowledged for this long, so a partitioned node never runs a job the scheduler restarted elsewhere; at least 2 x heartbeatSeconds + 2; keep it above the scheduler's failover time and the NATS outages you ride out",
        },
        Key {
            name: "finishedRetentionSeconds",
            help: "how long an ended attempt is remembered (a resent start for it ignored, a stop answered with its end) and its directory kept (its output for qm logs); at least 600",
        },
        Key {
            name: "restoreStallSeconds",
            help: "a checkpoint restore may take as long as it keeps moving bytes; the attempt fails (exit code 127) only when it made no progress, or the checkpoint service did not answer, for this long; at least 30",
        },
        Key {
            name: "batchReports",
            help: "append the reports queued together (and STARTING with RUNNING of a host process) as one log entry: fewer stored messages a job; turn it on once every scheduler runs this release (an older one skips such entries)",
        },
        Key {
            name: "runAsUser",
            help: "run every host-process attempt as this uid; default: the executor's own",
        },
        Key {
            name: "runAsGroup",
            help: "and as this gid",
        },
        Key {
            name: "runtimes",
            help: "how attempts are launched: [\"process\"] (host commands), [\"container\"] (images, through the Docker Engine API), or both; a job with a containerImage is placed only on executors offering container",
        },
        Key {
            name: "supervisor",
            help: "the qm-supervise binary every host-process attempt runs under (its parent and fence watchdog); default: qm-supervise beside qm-executor. It is opened once at start and must be this release's",
        },
        Key {
            name: "container",
            help: "the container runtime, e.g. {\"dockerHost\":\"unix:///var/run/docker.sock\",\"pullPolicy\":\"IfNotPresent\",\"registryAuthFile\":\"/etc/qm/registry-auth.json\",\"network\":\"host\",\"shmSizeMiB\":1024,\"networkInterfaceName\":\"eth0\"}; any field may be left out (the example shows the defaults, but registryAuthFile: none); pullPolicy IfNotPresent or Always; registryAuthFile, a Docker config.json, is read by the executor and never given to a job; network host (multi-node jobs need it) or a Docker network's name",
        },
    ],
    notes: "Commands are obeyed only when their epoch is the current scheduler lease's (read from the qm_leader bucket, never taken from a message). A job sees only PATH, HOME, LANG, LC_ALL, TZ and TMPDIR of the executor's environment, plus its own environment and the QM_* variables.",
};

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
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
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
    pub service_environment: String,
    pub instances: Vec<InstanceSpec>,
    pub gpus: Option<Vec<u32>>,
    pub work_dir: String,
    pub checkpoint_node: String,
    pub advertise_address: String,
    pub heartbeat_seconds: u64,
    pub fence_after_seconds: u64,
    pub finished_retention_seconds: u64,
    pub restore_stall_seconds: u64,
    /// Reports queued together are appended as one `Reports` entry.
    pub batch_reports: bool,
    pub run_as_user: Option<u32>,
    pub run_as_group: Option<u32>,
    pub runtimes: Vec<String>,
    pub supervisor: String,
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
            service_environment: String::new(),
            instances: Vec::new(),
            gpus: None,
            work_dir: String::new(),
            checkpoint_node: String::new(),
            advertise_address: String::new(),
            heartbeat_seconds: 1,
            fence_after_seconds: 30,
            finished_retention_seconds: 6 * 3600,
            restore_stall_seconds: 600,
            batch_reports: false,
            run_as_user: None,
            run_as_group: None,
            runtimes: vec!["process".into()],
            supervisor: String::new(),
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
        p.extend(qm_wire::messages::serving_problem(
            &self.job_queue,
            &self.service_environment,
        ));
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

#[cfg(test)]
mod described {
    qm_service::settings_test!(super::Settings, super::SPEC);
}

#[cfg(test)]
mod partial {
    #[test]
    fn a_container_setting_may_name_only_what_differs() {
        let env = [
            ("QM_EXECUTOR_EXECUTOR_ID", "node-1"),
            ("QM_EXECUTOR_JOB_QUEUE", "training"),
            (
                "QM_EXECUTOR_INSTANCES",
                r#"[{"instanceType":"ml.g5.xlarge","count":1}]"#,
            ),
            ("QM_EXECUTOR_CONTAINER", r#"{"network":"qm-net"}"#),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let (s, _): (super::Settings, _) =
            qm_service::settings::load("executor", None, env).expect("loads");
        assert_eq!(s.container.network, "qm-net");
        assert_eq!(s.container.docker_host, "unix:///var/run/docker.sock");
        assert_eq!(s.container.shm_size_mib, 1024);
    }
}
