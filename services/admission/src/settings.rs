//! Admission's settings: file keys, `QM_ADMISSION_*` variables, checks.

use super::*;

pub(crate) const USAGE: &str = "qm-admission [--config FILE]

Answers the Quartermaster API (qm.v1.api.<principal>.*), checking every
request against the tenancy file. Settings (file keys, or environment
variables):
  tenancy            QM_ADMISSION_TENANCY            required: the tenancy file (teams,
                                                     admins, readers, services)
  checkpointBucket   QM_ADMISSION_CHECKPOINT_BUCKET  the checkpoint services' bucket, to
                                                     check checkpointConfig.s3Uri at submit
  schedulerTimeoutMs QM_ADMISSION_SCHEDULER_TIMEOUT_MS  default 5000
  streamReplicas     QM_ADMISSION_STREAM_REPLICAS    copies JetStream keeps of the log, the
                                                     events and the buckets it creates:
                                                     1 for a single server (default), 3 for
                                                     a cluster (survives losing one server)
  insecureAllowUnauthenticatedNats  QM_ADMISSION_INSECURE_ALLOW_UNAUTHENTICATED_NATS
                     default false: refuse to serve when the NATS server lets
                     anyone connect (then any client could claim any principal)
NATS connection (QM_NATS_<KEY> or QM_ADMISSION_NATS_<KEY>):
  natsUrl natsPrincipal natsNkeyFile natsCreds natsUser natsPassword
  natsCaFile natsCertFile natsKeyFile";

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Settings {
    pub(crate) tenancy: String,
    pub(crate) checkpoint_bucket: String,
    pub(crate) scheduler_timeout_ms: u64,
    pub(crate) insecure_allow_unauthenticated_nats: bool,
    pub(crate) stream_replicas: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tenancy: String::new(),
            checkpoint_bucket: String::new(),
            scheduler_timeout_ms: 5000,
            insecure_allow_unauthenticated_nats: false,
            stream_replicas: 1,
        }
    }
}

impl qm_service::settings::Validate for Settings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.tenancy.is_empty() {
            p.push(
                "tenancy: is required (a tenancy file; `qm auth --help` shows the format)".into(),
            );
        }
        if !(1..=5).contains(&self.stream_replicas) {
            p.push(format!(
                "streamReplicas: {} is not 1 to 5 (JetStream keeps at most 5 copies)",
                self.stream_replicas
            ));
        }
        if self.scheduler_timeout_ms == 0 {
            p.push("schedulerTimeoutMs: must be >= 1".into());
        }
        p
    }
}
