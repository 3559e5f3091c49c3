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
  clientTokenHours   QM_ADMISSION_CLIENT_TOKEN_HOURS  how long a clientToken keeps naming its
                                                     job (a retried submit returns that job;
                                                     after this, the token is free again):
                                                     default 24, at least 8
  eventsRetentionDays QM_ADMISSION_EVENTS_RETENTION_DAYS  how long the events stream
                                                     (qm watch, audits) keeps events: default 7
  archiveRetentionSeconds QM_ADMISSION_ARCHIVE_RETENTION_SECONDS  how long a finished
                                                     job's record stays in the archive after
                                                     the scheduler lets it go (describe and
                                                     list still answer): default 604800 (7 days)
  auditRetentionDays QM_ADMISSION_AUDIT_RETENTION_DAYS  how long every accepted write's
                                                     audit record is kept (qm audit),
                                                     whatever the log keeps: default 400
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
    pub(crate) client_token_hours: u64,
    pub(crate) events_retention_days: u64,
    pub(crate) archive_retention_seconds: u64,
    pub(crate) audit_retention_days: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tenancy: String::new(),
            checkpoint_bucket: String::new(),
            scheduler_timeout_ms: 5000,
            insecure_allow_unauthenticated_nats: false,
            stream_replicas: 1,
            client_token_hours: 24,
            events_retention_days: 7,
            archive_retention_seconds: 7 * 24 * 3600,
            audit_retention_days: 400,
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
        if !(8..=24 * 365).contains(&self.client_token_hours) {
            p.push(format!(
                "clientTokenHours: {} is not 8 to 8760 (a retried submit must find its job for at least 8 hours)",
                self.client_token_hours
            ));
        }
        if !(1..=3650).contains(&self.audit_retention_days) {
            p.push(format!(
                "auditRetentionDays: {} is not 1 to 3650",
                self.audit_retention_days
            ));
        }
        if !(1..=3650).contains(&self.events_retention_days) {
            p.push(format!(
                "eventsRetentionDays: {} is not 1 to 3650",
                self.events_retention_days
            ));
        }
        if !(1..=10 * 365 * 24 * 3600).contains(&self.archive_retention_seconds) {
            p.push(format!(
                "archiveRetentionSeconds: {} is not 1 to 315360000 (10 years)",
                self.archive_retention_seconds
            ));
        }
        if self.scheduler_timeout_ms == 0 {
            p.push("schedulerTimeoutMs: must be >= 1".into());
        }
        p
    }
}
