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
  runAsUser          QM_EXECUTOR_RUN_AS_USER        run every attempt as this uid (and
  runAsGroup         QM_EXECUTOR_RUN_AS_GROUP       gid); default: the executor's own
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
        p
    }
}
