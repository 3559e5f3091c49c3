//! `qm-scheduler`: keeps the cluster state as a projection of the `QM_LOG`
//! stream, runs the scheduling core on every event and at least once a
//! second, and sends start/stop commands to executors. One leader at a time
//! (see `leader.rs`); others stand by. See `docs/adr/0004-services.md`.
//!
//! | file | what |
//! |---|---|
//! | `state/` | the state: every queue's core, positions, views, usage, governance |
//! | `snapshot.rs`, `archive.rs` | snapshots of the state, archived jobs |
//! | `stream.rs`, `acks.rs` | the log's headers and errors, heartbeat acknowledgements |
//! | `follow.rs`, `runner/`, `upkeep.rs` | following the log as a standby, leading it, upkeep |
//! | `leader.rs`, `tenure.rs` | the lease, and until when this process surely holds it |
//! | `observe.rs` | metrics and readiness |
//!
//! Layers, bottom first, in the same order: `tests/layers.rs`.

mod acks;
mod archive;
mod follow;
mod leader;
mod observe;
mod runner;
mod snapshot;
mod state;
mod stream;
mod tenure;
mod upkeep;

use qm_service::settings::{Key, Spec};
use std::time::Duration;

use qm_service::{nats, settings};
use serde::{Deserialize, Serialize};

/// What `qm-scheduler` is and every key of its settings: its `--help`, its
/// flags and the tables in `docs/settings.md` come from here.
const SPEC: Spec = Spec {
    service: "scheduler",
    about: "Runs the scheduling core over the durable log: one leader at a time decides, the others stand by and take over when its lease lapses.",
    keys: &[
        Key {
            name: "holder",
            help: "this scheduler's name in the leader lease; default: <hostname>-<pid>",
        },
        Key {
            name: "leaseSeconds",
            help: "how long the leader's lease lasts without renewal; at least 2",
        },
        Key {
            name: "executorTimeoutSeconds",
            help: "an executor silent for this long is lost: its attempts end HOST_LOST and resume elsewhere; at least 2",
        },
        Key {
            name: "passIntervalMs",
            help: "at most this long between scheduling passes while work waits; 10 to 1000",
        },
        Key {
            name: "resendSeconds",
            help: "a command an executor has not acknowledged is sent again after this many seconds; at least 1",
        },
        Key {
            name: "finishedRetentionSeconds",
            help: "how long a finished job stays in memory; then its record moves to the archive (describe and list still find it for admission's archiveRetentionSeconds), in seconds; at least 1",
        },
        Key {
            name: "snapshotEveryEntries",
            help: "log entries between snapshots of the state (a new leader reads only what follows the newest); at least 10",
        },
        Key {
            name: "snapshotIntervalSeconds",
            help: "at most this many seconds between snapshots while anything happens; at least 1",
        },
        Key {
            name: "snapshotsKept",
            help: "snapshots kept (a damaged newest one falls back to the one before; the log is truncated behind the oldest); 2 to 10",
        },
        Key {
            name: "logRetentionHours",
            help: "log entries younger than this are never truncated (nor any accepted write admission has not yet copied to the audit stream); at most 87600 (10 years)",
        },
    ],
    notes: "Requests admission relays carry the caller; the scheduler checks again that the caller may read or change the job's share before it answers or stores.",
};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    pub holder: String,
    pub lease_seconds: u64,
    pub executor_timeout_seconds: u64,
    pub pass_interval_ms: u64,
    pub resend_seconds: u64,
    pub finished_retention_seconds: u64,
    pub snapshot_every_entries: u64,
    pub snapshot_interval_seconds: u64,
    pub snapshots_kept: usize,
    pub log_retention_hours: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            holder: String::new(),
            lease_seconds: 5,
            executor_timeout_seconds: 10,
            pass_interval_ms: 1000,
            resend_seconds: 3,
            finished_retention_seconds: 600,
            snapshot_every_entries: 100_000,
            snapshot_interval_seconds: 300,
            snapshots_kept: 2,
            log_retention_hours: 24,
        }
    }
}

impl settings::Validate for Settings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.lease_seconds < 2 {
            p.push("leaseSeconds: must be >= 2".into());
        }
        if self.executor_timeout_seconds < 2 {
            p.push("executorTimeoutSeconds: must be >= 2".into());
        }
        if !(10..=1000).contains(&self.pass_interval_ms) {
            p.push("passIntervalMs: must be 10..=1000 (a pass at least once a second)".into());
        }
        if self.resend_seconds == 0 {
            p.push("resendSeconds: must be >= 1".into());
        }
        if self.finished_retention_seconds == 0 {
            p.push("finishedRetentionSeconds: must be >= 1".into());
        }
        if self.snapshot_every_entries < 10 {
            p.push("snapshotEveryEntries: must be >= 10".into());
        }
        if self.snapshot_interval_seconds == 0 {
            p.push("snapshotIntervalSeconds: must be >= 1".into());
        }
        if !(2..=10).contains(&self.snapshots_kept) {
            p.push(
                "snapshotsKept: must be 2 to 10 (one to fall back to if the newest is damaged)"
                    .into(),
            );
        }
        if self.log_retention_hours > 24 * 3650 {
            p.push("logRetentionHours: must be at most 87600 (10 years)".into());
        }
        p
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    qm_service::main::<Settings, _, _>(&SPEC, run).await
}

/// This process's name in the leader lease when `holder` is not set:
/// `<hostname>-<pid>`.
fn default_holder() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "scheduler".into());
    format!("{host}-{}", std::process::id())
}

async fn run(
    mut settings: Settings,
    nats_settings: settings::NatsSettings,
    observe_settings: settings::ObserveSettings,
) -> std::process::ExitCode {
    if settings.holder.is_empty() {
        settings.holder = default_holder();
    }
    let (client, _principal) = match qm_service::connect(&nats_settings, "scheduler").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let role = std::sync::Arc::new(observe::Role::default());
    let mut metrics = observe::Metrics::new();
    let ready = {
        let role = role.clone();
        let lease = Duration::from_secs(settings.lease_seconds);
        Box::new(move || role.ready(lease))
    };
    let gauges = {
        let (role, report) = (role.clone(), metrics.role_gauges());
        Box::new(move || report(&role))
    };
    let endpoint =
        qm_service::observe::Endpoint::for_service("scheduler", &client, ready).refresh(gauges);
    if let Err(code) = qm_service::serve_metrics(&observe_settings, "scheduler", endpoint).await {
        return code;
    }
    let storage = nats::scheduler_storage(&client).await;
    let ttl = Duration::from_secs(settings.lease_seconds);
    let shutdown = nats::shutdown_signal();
    tokio::pin!(shutdown);
    // Answered from start to exit, and in place before the first campaign:
    // a standby probing it learns at once when this process is gone
    // (leader.rs).
    let probes = match leader::present(&client, &settings.holder).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("qm-scheduler: cannot answer presence probes: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let _presence = runner::AbortOnDrop(tokio::spawn(leader::answer_presence(
        client.clone(),
        probes,
    )));
    loop {
        // Standing by: campaign for the lease and follow the log meanwhile,
        // so that taking over costs only its last entries (follow.rs).
        let mut follower: Option<follow::Follower> = None;
        let mut retry_at: Option<tokio::time::Instant> = None;
        let campaign = leader::acquire(&client, &storage.leader, &settings.holder, ttl, &role);
        tokio::pin!(campaign);
        let taken = loop {
            tokio::select! {
                biased;
                _ = &mut shutdown => break None,
                taken = &mut campaign => break Some(taken),
                failed = follow_step(&mut follower, &storage, &mut retry_at) => {
                    if let Err(e) = failed {
                        tracing::warn!(error = %e, "following the log as a standby failed; starting again in 5 s");
                        follower = None;
                        retry_at = Some(tokio::time::Instant::now() + Duration::from_secs(5));
                    }
                }
            }
        };
        let Some(taken) = taken else {
            tracing::info!("scheduler stopped (was standing by)");
            return std::process::ExitCode::SUCCESS;
        };
        let epoch = taken.epoch;
        tracing::info!(epoch, holder = %settings.holder, "became the scheduler leader");
        let (lost, tenure, keeper) =
            leader::keep(storage.leader.clone(), settings.holder.clone(), ttl, &taken);
        let lease = runner::Lease {
            epoch,
            role: role.clone(),
            lost,
            tenure,
        };
        let outcome = runner::run(
            &client,
            &storage,
            &settings,
            lease,
            follower,
            &mut metrics,
            &mut shutdown,
        )
        .await;
        keeper.abort();
        match outcome {
            runner::Outcome::Shutdown => {
                let release = leader::release(&storage.leader, &settings.holder);
                qm_service::within("releasing the lease", Duration::from_secs(3), release).await;
                qm_service::within("NATS flush", Duration::from_secs(2), client.flush()).await;
                tracing::info!("scheduler stopped");
                return std::process::ExitCode::SUCCESS;
            }
            runner::Outcome::LostLease => {
                tracing::warn!("no longer the leader; standing by");
            }
            runner::Outcome::Failed(e) => {
                tracing::error!(error = %e, "leader loop failed; standing by and retrying");
                leader::release(&storage.leader, &settings.holder).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
}

/// One step of a standby's following: start the follower (after `retry_at`
/// when the last one failed), or read its next entry.
async fn follow_step(
    follower: &mut Option<follow::Follower>,
    storage: &nats::Storage,
    retry_at: &mut Option<tokio::time::Instant>,
) -> Result<(), runner::LeadError> {
    match follower {
        Some(f) => f.step(&storage.js).await,
        None => {
            if let Some(at) = *retry_at {
                tokio::time::sleep_until(at).await;
            }
            *retry_at = None;
            let f = follow::Follower::start(storage).await?;
            tracing::info!(
                from = f.from,
                ms = f.started.elapsed().as_millis() as u64,
                "standing by: following the log"
            );
            *follower = Some(f);
            Ok(())
        }
    }
}

#[cfg(test)]
mod described {
    qm_service::settings_test!(super::Settings, super::SPEC);
}
