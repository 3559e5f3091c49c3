//! Admission's settings: file keys, `QM_ADMISSION_*` variables, checks.

use qm_service::settings::{Key, Spec};
use serde::{Deserialize, Serialize};

/// What `qm-admission` is and every key of its settings: its `--help`, its
/// flags and the tables in `docs/settings.md` come from here.
pub(crate) const SPEC: Spec = Spec {
    service: "admission",
    about: "Answers the Quartermaster API (qm.v1.api.<principal>.*), checking every request against the tenancy file, and stores every accepted write in the log before it replies. Stateless: run as many as you like.",
    keys: &[
        Key {
            name: "tenancy",
            help: "required: the tenancy file (teams, admins, readers, services; docs/tenancy.md)",
        },
        Key {
            name: "checkpointBucket",
            help: "the checkpoint services' bucket, to check a job's checkpointConfig.s3Uri when it is submitted",
        },
        Key {
            name: "schedulerTimeoutMs",
            help: "how long a request relayed to the scheduler leader waits for its answer, in milliseconds; at least 1",
        },
        Key {
            name: "insecureAllowUnauthenticatedNats",
            help: "serve even when the NATS server lets anyone connect (then any client could claim any principal); for experiments only",
        },
        Key {
            name: "streamReplicas",
            help: "copies JetStream keeps of the log, the events and the buckets admission creates: 1 for a single server, 3 for a cluster (survives losing one server); 1 to 5",
        },
        Key {
            name: "clientTokenHours",
            help: "how long a clientToken keeps naming its job (a retried submit returns that job; after this the token is free again); 8 to 8760",
        },
        Key {
            name: "eventsRetentionDays",
            help: "how long the events stream (qm watch, audits) keeps events; 1 to 3650",
        },
        Key {
            name: "archiveRetentionSeconds",
            help: "how long a finished job's record stays in the archive after the scheduler lets it go (describe and list still answer), in seconds; 1 to 315360000 (10 years)",
        },
        Key {
            name: "auditRetentionDays",
            help: "how long every accepted write's audit record is kept (qm audit), whatever the log keeps; 1 to 3650",
        },
    ],
    notes: "",
};

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

#[cfg(test)]
mod described {
    qm_service::settings_test!(super::Settings, super::SPEC);
}
