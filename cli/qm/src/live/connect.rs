//! Who `qm` is to NATS, and the connection made with it.

use std::time::Duration;

use qm_service::client::Client;

use super::failure::{usage, Failure};

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
