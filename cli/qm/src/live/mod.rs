//! The commands that talk to a running Quartermaster over NATS.

use std::time::Duration;

use qm_service::client::{CallError, Client};
use time::macros::format_description;
use time::OffsetDateTime;

mod admin;
mod audit;
mod drill;
mod events;
mod governance;
mod jobs;
mod observe;
pub mod profile;
mod queues;
mod submit;
mod tenancy;
mod usage;

pub use admin::{apply, auth, whoami};
pub use audit::{audit, audit_request, parse_time};
pub use drill::{drill, drill_request, drills, DrillArgs};
pub use events::{events, EventsArgs};
pub use governance::governance;
pub use jobs::{describe, list, logs, terminate, update};
pub use observe::{snapshot, top, watch};
pub use queues::{queue, QueueCommand};
pub use submit::{dry_run, explain, submit, submit_request, SubmitArgs};
pub use tenancy::TenancyCommand;
pub use usage::{check_usage_days, show_usage, UsagePeriod};

pub mod tenancy_ops {
    pub use super::tenancy::{apply, check_sync_args, diff, history, rotate_key, show, sync_nats};
}

/// A failure: one line for the user and the exit code.
pub struct Failure(pub String, pub u8);

impl From<CallError> for Failure {
    fn from(e: CallError) -> Self {
        let code = match e {
            CallError::NoReply { .. } | CallError::Transport(_) | CallError::Refused { .. } => 3,
            CallError::Api(_) => 1,
        };
        Failure(e.to_string(), code)
    }
}

fn usage(message: impl Into<String>) -> Failure {
    Failure(message.into(), 2)
}

/// Who `qm` is to NATS (global flags, or the same `QM_NATS_*` variables
/// the services read).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct Credentials {
    /// Credentials file `qm auth` wrote for you (`<principal>.nk`).
    #[arg(long, global = true, env = "QM_NATS_NKEY_FILE", value_name = "FILE")]
    pub nkey: Option<String>,
    /// JWT credentials file (servers in operator mode; give --principal too).
    #[arg(long, global = true, env = "QM_NATS_CREDS", value_name = "FILE")]
    pub creds: Option<String>,
    #[arg(long, global = true, env = "QM_NATS_USER")]
    pub user: Option<String>,
    #[arg(long, global = true, env = "QM_NATS_PASSWORD", hide_env_values = true)]
    pub password: Option<String>,
    /// The principal you act as (default: the one your nkey file names).
    #[arg(long, global = true, env = "QM_NATS_PRINCIPAL")]
    pub principal: Option<String>,
    /// CA certificate (PEM) the server's certificate is checked against.
    #[arg(long, global = true, env = "QM_NATS_CA_FILE", value_name = "FILE")]
    pub tls_ca: Option<String>,
    /// Client certificate and key (PEM), for servers that verify clients.
    #[arg(long, global = true, env = "QM_NATS_CERT_FILE", value_name = "FILE")]
    pub tls_cert: Option<String>,
    #[arg(long, global = true, env = "QM_NATS_KEY_FILE", value_name = "FILE")]
    pub tls_key: Option<String>,
}

pub async fn connect(url: &str, c: &Credentials) -> Result<Client, Failure> {
    use qm_service::settings::{NatsSettings, Validate};
    let s = NatsSettings {
        nats_url: url.to_string(),
        nats_principal: c.principal.clone().unwrap_or_default(),
        nats_nkey_file: c.nkey.clone().unwrap_or_default(),
        nats_creds: c.creds.clone().unwrap_or_default(),
        nats_user: c.user.clone().unwrap_or_default(),
        nats_password: c.password.clone().unwrap_or_default(),
        nats_ca_file: c.tls_ca.clone().unwrap_or_default(),
        nats_cert_file: c.tls_cert.clone().unwrap_or_default(),
        nats_key_file: c.tls_key.clone().unwrap_or_default(),
    };
    let problems = s.problems();
    if !problems.is_empty() {
        let flags = problems
            .join("; ")
            .replace("natsNkeyFile", "--nkey")
            .replace("natsCreds", "--creds")
            .replace("natsUser", "--user")
            .replace("natsPassword", "--password")
            .replace("natsCaFile", "--tls-ca")
            .replace("natsCertFile", "--tls-cert")
            .replace("natsKeyFile", "--tls-key")
            .replace("natsUrl", "--nats")
            .replace("natsPrincipal", "--principal");
        return Err(usage(flags));
    }
    let (nats, principal) = qm_service::nats::connect(&s, "qm", Some(Duration::ZERO))
        .await
        .map_err(|e| {
            let hint = match e {
                qm_service::nats::ConnectError::Unreachable { .. } => {
                    " (set --nats or QM_NATS_URL)"
                }
                _ => "",
            };
            Failure(format!("{e}{hint}"), e.exit_code())
        })?;
    Ok(Client::new(nats, principal))
}

/// Bytes for a person: B, KiB, MiB, GiB or TiB with one decimal.
fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// `ms` since the Unix epoch in RFC 3339, UTC, to the millisecond
/// (`2026-12-03T09:00:00.123Z`; past the year 9999, the number itself).
fn rfc3339(ms: u64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
            ))
            .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

/// A borderless table whose columns are as wide as their widest cell (ids
/// of any length stay aligned); `right` lists the numeric columns.
fn table(header: &[&str], right: &[usize]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(header.to_vec());
    for &i in right {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    t
}

fn print_json<T: serde::Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("qm: cannot print JSON: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_a_person_would_write_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(2 << 30), "2.0 GiB");
        assert_eq!(human_bytes(5 << 40), "5.0 TiB");
        assert_eq!(human_bytes(3 << 50), "3072.0 TiB");
    }

    #[test]
    fn tables_fit_their_widest_cell_and_align_numbers_right() {
        let mut t = table(&["JOB", "PRIO", "REASON"], &[1]);
        t.add_row(vec!["0b6f7c1e-2a4d-4b9e-9a51-3f1d2c7e8a90", "5", "waiting"]);
        t.add_row(vec!["j-1", "10", ""]);
        let text = t.trim_fmt();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        // Every row's second column ends where the header's does.
        let end = lines[0].find("PRIO").expect("header") + "PRIO".len();
        assert_eq!(&lines[1][end - 1..end], "5", "{text}");
        assert_eq!(&lines[2][end - 2..end], "10", "{text}");
        assert!(lines[1].contains("0b6f7c1e-2a4d-4b9e-9a51-3f1d2c7e8a90"));
        // A table without rows is its header line alone.
        assert_eq!(
            table(&["TIME", "DETAIL"], &[]).trim_fmt().lines().count(),
            1
        );
    }
}
