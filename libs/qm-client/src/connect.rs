//! Connecting to NATS as a principal: with the nkey file `qm auth` wrote,
//! a JWT credentials file, or a user and password, over TLS when asked.
//! Every request then goes on the principal's own API subject and every
//! reply arrives in its own inbox, the two places the server lets it use.

use std::path::PathBuf;
use std::time::Duration;

use backon::Retryable;

use qm_wire::subjects;

pub use crate::violations::since as violation_since;
use crate::Client;

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The server refused who we said we are: retrying cannot help.
    #[error("NATS refused the credentials for {principal} at {url}: {detail} (check natsNkeyFile / --nkey, natsCreds or natsUser/natsPassword, and that the server runs the configuration `qm auth` generated)")]
    Refused {
        principal: String,
        url: String,
        detail: String,
    },
    /// TLS could not be set up or the handshake failed.
    #[error("TLS to {url} failed: {detail} (check natsCaFile / --tls-ca, and the client certificate if the server verifies clients)")]
    Tls { url: String, detail: String },
    /// The settings themselves are unusable (an unreadable key file).
    #[error("{0}")]
    Settings(String),
    /// The server did not answer within the time given.
    #[error("cannot connect to NATS at {url}: {detail}")]
    Unreachable { url: String, detail: String },
}

impl ConnectError {
    /// Exit code for a command line: 3 for "no (authorised) service", 2
    /// for unusable settings.
    pub fn exit_code(&self) -> u8 {
        match self {
            ConnectError::Settings(_) => 2,
            _ => 3,
        }
    }
}

/// How to connect: the server(s), who to be, and TLS.
///
/// ```no_run
/// # async fn run() -> Result<(), qm_client::ConnectError> {
/// let client = qm_client::Connect::new("tls://nats.example:4222")
///     .nkey_file("team-a-ci.nk")
///     .ca_file("ca.pem")
///     .connect()
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct Connect {
    /// One server, or every server of a cluster, comma-separated.
    pub url: String,
    /// Who to be; default: the principal the nkey file names, else the
    /// user.
    pub principal: Option<String>,
    /// The credentials file `qm auth` wrote (`<principal>.nk`).
    pub nkey_file: Option<PathBuf>,
    /// A JWT credentials file (servers in operator mode; name the
    /// principal too).
    pub creds_file: Option<PathBuf>,
    pub user: Option<String>,
    pub password: Option<String>,
    /// CA certificate (PEM) the server's certificate is checked against:
    /// TLS is then required.
    pub ca_file: Option<PathBuf>,
    /// Client certificate and key (PEM), for servers that verify clients.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// The connection's name, as the server's monitoring shows it.
    pub name: String,
    /// How long to wait for an unreachable server: None forever,
    /// `Duration::ZERO` not at all. Refused credentials and TLS failures
    /// fail at once, whatever this says.
    pub wait: Option<Duration>,
}

impl Connect {
    /// A connection to `url`, failing at once when it cannot be reached.
    pub fn new(url: impl Into<String>) -> Connect {
        Connect {
            url: url.into(),
            name: "qm-client".into(),
            wait: Some(Duration::ZERO),
            ..Connect::default()
        }
    }

    pub fn nkey_file(mut self, path: impl Into<PathBuf>) -> Connect {
        self.nkey_file = Some(path.into());
        self
    }

    pub fn creds_file(mut self, path: impl Into<PathBuf>) -> Connect {
        self.creds_file = Some(path.into());
        self
    }

    pub fn principal(mut self, principal: impl Into<String>) -> Connect {
        self.principal = Some(principal.into());
        self
    }

    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Connect {
        self.user = Some(user.into());
        self.password = Some(password.into());
        self
    }

    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Connect {
        self.ca_file = Some(path.into());
        self
    }

    pub fn client_certificate(
        mut self,
        cert: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Connect {
        self.cert_file = Some(cert.into());
        self.key_file = Some(key.into());
        self
    }

    pub fn name(mut self, name: impl Into<String>) -> Connect {
        self.name = name.into();
        self
    }

    /// Waits up to `wait` (None: forever) for a server that cannot be
    /// reached yet.
    pub fn wait(mut self, wait: Option<Duration>) -> Connect {
        self.wait = wait;
        self
    }

    /// The principal this connection acts as: the one named, else the
    /// name in the nkey file's header, else the user, else `anonymous`.
    pub fn principal_name(&self) -> Result<String, ConnectError> {
        if let Some(p) = self.principal.as_ref().filter(|p| !p.is_empty()) {
            return Ok(p.clone());
        }
        if let Some(file) = &self.nkey_file {
            let (named, _) =
                qm_tenancy::nats::read_key_file(file).map_err(ConnectError::Settings)?;
            return named.ok_or_else(|| {
                ConnectError::Settings(format!(
                    "{} does not name its principal; set natsPrincipal (QM_NATS_PRINCIPAL, --principal)",
                    file.display()
                ))
            });
        }
        if let Some(user) = self.user.as_ref().filter(|u| !u.is_empty()) {
            return Ok(user.clone());
        }
        if self.creds_file.is_some() {
            return Err(ConnectError::Settings(
                "with natsCreds, set natsPrincipal (QM_NATS_PRINCIPAL, --principal) to the principal the credentials belong to".into(),
            ));
        }
        Ok("anonymous".into())
    }

    async fn options(&self, principal: &str) -> Result<async_nats::ConnectOptions, ConnectError> {
        let inbox = subjects::inbox_prefix(principal)
            .map_err(|e| ConnectError::Settings(format!("principal {e}")))?;
        let mut o = if let Some(file) = &self.nkey_file {
            let (_, seed) =
                qm_tenancy::nats::read_key_file(file).map_err(ConnectError::Settings)?;
            async_nats::ConnectOptions::with_nkey(seed)
        } else if let Some(file) = &self.creds_file {
            async_nats::ConnectOptions::with_credentials_file(file)
                .await
                .map_err(|e| ConnectError::Settings(format!("natsCreds {}: {e}", file.display())))?
        } else if let Some(user) = &self.user {
            async_nats::ConnectOptions::with_user_and_password(
                user.clone(),
                self.password.clone().unwrap_or_default(),
            )
        } else {
            async_nats::ConnectOptions::new()
        };
        o = o
            .name(&self.name)
            .custom_inbox_prefix(inbox)
            .connection_timeout(Duration::from_secs(5));
        if let Some(ca) = &self.ca_file {
            o = o.add_root_certificates(ca.clone());
        }
        if let Some(cert) = &self.cert_file {
            o = o.add_client_certificate(cert.clone(), self.key_file.clone().unwrap_or_default());
        }
        if self.url.contains("tls://") || self.ca_file.is_some() {
            o = o.require_tls(true);
        }
        Ok(with_events(o, &self.name))
    }

    fn classify(&self, e: &async_nats::ConnectError, principal: &str) -> ConnectError {
        use async_nats::ConnectErrorKind as K;
        let url = self.url.clone();
        let detail = e.to_string();
        match e.kind() {
            K::AuthorizationViolation | K::Authentication => ConnectError::Refused {
                principal: principal.to_string(),
                url,
                detail,
            },
            K::Tls => ConnectError::Tls { url, detail },
            // rustls reports a refused server certificate as an I/O error.
            K::Io if detail.contains("certificate") => ConnectError::Tls { url, detail },
            _ => ConnectError::Unreachable { url, detail },
        }
    }

    /// Connects, and returns the connection and the principal it acts as.
    /// Waits for the server while it cannot be reached (up to `wait`),
    /// but fails at once when it refuses the credentials or TLS fails.
    /// After an outage the connection reconnects by itself
    /// (subscriptions are restored, publishes buffered).
    pub async fn connect_nats(&self) -> Result<(async_nats::Client, String), ConnectError> {
        let principal = self.principal_name()?;
        // Two TLS crypto providers may be linked (the AWS SDK's and
        // NATS's); pick one for the process before the first TLS
        // connection.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let servers = self
            .url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| {
                u.parse::<async_nats::ServerAddr>()
                    .map_err(|e| ConnectError::Settings(format!("natsUrl: {u:?}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let started = tokio::time::Instant::now();
        let attempt = || async {
            let o = self.options(&principal).await?;
            o.connect(servers.as_slice())
                .await
                .map_err(|e| self.classify(&e, &principal))
        };
        let client = attempt
            .retry(crate::retry::forever(Duration::from_millis(200)))
            .when(|e| {
                matches!(e, ConnectError::Unreachable { .. })
                    && self.wait.is_none_or(|w| started.elapsed() < w)
            })
            .notify(|e, _| {
                tracing::warn!(url = %self.url, error = %e, "NATS not reachable; retrying");
            })
            .await?;
        Ok((client, principal))
    }

    /// Connects, and returns a [`Client`] of the API.
    pub async fn connect(&self) -> Result<Client, ConnectError> {
        let (nats, principal) = self.connect_nats().await?;
        Ok(Client::new(nats, principal))
    }
}

/// How many times this process's NATS connections have dropped. A
/// scheduler leader compares it across a lease renewal: a connection that
/// dropped meanwhile may have let a standby take the lease at once, so the
/// leader stops acting until a renewal succeeds again.
static DISCONNECTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// See [`DISCONNECTS`].
pub fn disconnects() -> u64 {
    DISCONNECTS.load(std::sync::atomic::Ordering::SeqCst)
}

/// Reconnects forever after an outage, logging connection events (and
/// recording permission violations for
/// [`crate::violations::since`]).
fn with_events(o: async_nats::ConnectOptions, name: &str) -> async_nats::ConnectOptions {
    let label = name.to_string();
    o.max_reconnects(None).event_callback(move |event| {
        let name = label.clone();
        async move {
            match event {
                async_nats::Event::Connected => {
                    tracing::info!(service = %name, "connected to NATS")
                }
                async_nats::Event::Disconnected => {
                    DISCONNECTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tracing::warn!(service = %name, "disconnected from NATS; reconnecting")
                }
                async_nats::Event::ServerError(e) => {
                    let text = e.to_string();
                    if text.to_lowercase().contains("permissions violation") {
                        crate::violations::record(&text);
                    }
                    tracing::warn!(service = %name, error = %text, "NATS server error")
                }
                other => tracing::debug!(service = %name, event = %other, "NATS event"),
            }
        }
    })
}
