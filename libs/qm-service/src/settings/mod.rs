//! Service configuration: a YAML or JSON file (optional), then environment
//! variables, then validation that reports every problem at once.
//!
//! Each top-level field `fooBar` of a service's settings can be set by the
//! variable `QM_<SERVICE>_FOO_BAR` (e.g. `QM_EXECUTOR_WORK_DIR`). The NATS
//! connection settings every service shares ([`NatsSettings`]: `natsUrl`,
//! `natsPrincipal`, `natsNkeyFile`, ...) also by `QM_NATS_URL`,
//! `QM_NATS_PRINCIPAL`, `QM_NATS_NKEY_FILE`, ... (the service's own variable
//! wins). A variable's value is parsed as JSON when it is valid JSON
//! (numbers, lists, objects) and taken as a string otherwise; a key whose
//! default is a string always takes the text as it is. A command-line
//! flag `--foo-bar VALUE` sets the same key over all of these.
//!
//! Each service describes its keys once ([`spec::Spec`]): its `--help`, the
//! reference tables in `docs/settings.md` and the checks that what `docs/`
//! and `deploy/` name loads all come from that description.

pub mod spec;

pub use spec::{Invocation, Key, Spec};

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Everything wrong with a service's configuration.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration ({} problem{}):\n  - {}", .0.len(), if .0.len() == 1 { "" } else { "s" }, .0.join("\n  - "))]
pub struct SettingsError(pub Vec<String>);

/// Settings a service validates after loading.
pub trait Validate {
    /// Every problem, each naming its field.
    fn problems(&self) -> Vec<String>;
}

/// A file key's environment-variable form: `partSizeMiB` is `PART_SIZE_MIB`
/// (a unit such as `MiB` is one word).
pub(crate) fn screaming(field: &str) -> String {
    let mut out = String::new();
    for c in field.replace("MiB", "Mib").chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// How a service (or `qm`) reaches NATS and proves who it is. Secrets are
/// never printed: the nkey seed stays in its file, the password is
/// redacted in `Debug`.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NatsSettings {
    /// `nats://host:port` or `tls://host:port` (TLS required); several
    /// servers of a cluster separated by commas.
    pub nats_url: String,
    /// The principal this connection acts as (its API subject and inbox).
    /// Default: the name in the nkey file's header, else `natsUser`.
    pub nats_principal: String,
    /// A credentials file `qm auth` wrote (`<principal>.nk`: the nkey seed).
    pub nats_nkey_file: String,
    /// A JWT `.creds` file, for servers run in operator mode.
    pub nats_creds: String,
    pub nats_user: String,
    pub nats_password: String,
    /// PEM file of the CA that signed the server's certificate.
    pub nats_ca_file: String,
    /// PEM client certificate and key, for servers that verify clients.
    pub nats_cert_file: String,
    pub nats_key_file: String,
}

impl Default for NatsSettings {
    fn default() -> Self {
        NatsSettings {
            nats_url: "nats://127.0.0.1:4222".into(),
            nats_principal: String::new(),
            nats_nkey_file: String::new(),
            nats_creds: String::new(),
            nats_user: String::new(),
            nats_password: String::new(),
            nats_ca_file: String::new(),
            nats_cert_file: String::new(),
            nats_key_file: String::new(),
        }
    }
}

impl std::fmt::Debug for NatsSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsSettings")
            .field("nats_url", &self.nats_url)
            .field("nats_principal", &self.nats_principal)
            .field("nats_nkey_file", &self.nats_nkey_file)
            .field("nats_creds", &self.nats_creds)
            .field("nats_user", &self.nats_user)
            .field(
                "nats_password",
                &if self.nats_password.is_empty() {
                    ""
                } else {
                    "<redacted>"
                },
            )
            .field("nats_ca_file", &self.nats_ca_file)
            .field("nats_cert_file", &self.nats_cert_file)
            .field("nats_key_file", &self.nats_key_file)
            .finish()
    }
}

impl Validate for NatsSettings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.nats_url.is_empty() {
            p.push("natsUrl: is required".into());
        }
        for url in self
            .nats_url
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
        {
            if !(url.starts_with("nats://") || url.starts_with("tls://")) {
                p.push(format!(
                    "natsUrl: {url:?} must start with nats:// or tls://"
                ));
            }
        }
        let ways = [
            !self.nats_nkey_file.is_empty(),
            !self.nats_creds.is_empty(),
            !self.nats_user.is_empty(),
        ];
        if ways.iter().filter(|w| **w).count() > 1 {
            p.push(
                "natsNkeyFile, natsCreds and natsUser: give one way to authenticate, not several"
                    .into(),
            );
        }
        if self.nats_user.is_empty() != self.nats_password.is_empty() {
            p.push("natsUser and natsPassword: give both or neither".into());
        }
        if self.nats_cert_file.is_empty() != self.nats_key_file.is_empty() {
            p.push("natsCertFile and natsKeyFile: give both or neither".into());
        }
        for (field, path) in [
            ("natsNkeyFile", &self.nats_nkey_file),
            ("natsCreds", &self.nats_creds),
            ("natsCaFile", &self.nats_ca_file),
            ("natsCertFile", &self.nats_cert_file),
            ("natsKeyFile", &self.nats_key_file),
        ] {
            if !path.is_empty() && std::fs::metadata(path).is_err() {
                p.push(format!("{field}: {path} cannot be read"));
            }
        }
        if !self.nats_principal.is_empty() {
            if let Err(e) = qm_wire::subjects::token(&self.nats_principal) {
                p.push(format!("natsPrincipal: {e}"));
            }
        }
        p
    }
}

impl NatsSettings {
    /// The keys of these settings (camelCase), as in a settings file.
    fn fields() -> Vec<String> {
        match serde_json::to_value(NatsSettings::default()) {
            Ok(Value::Object(map)) => map.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }
}

/// Where a service serves its metrics and health endpoints, and the
/// bearer token `/metrics` requires.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObserveSettings {
    /// `host:port` of the HTTP endpoint (`/metrics`, `/healthz`,
    /// `/readyz`); `off` serves none. Default: loopback, the service's own
    /// port (admission 9641, scheduler 9642, executor 9643, checkpoint
    /// 9644).
    pub metrics_address: String,
    /// A file holding the bearer token `/metrics` requires (Prometheus:
    /// `authorization: {credentials_file: ...}`). Required when the
    /// address is reachable from other hosts.
    pub metrics_token_file: String,
    /// A PEM certificate chain and its key: serve the endpoint over HTTPS
    /// (both or neither).
    pub metrics_tls_cert_file: String,
    pub metrics_tls_key_file: String,
}

/// The default metrics port of each service.
pub fn default_metrics_port(service: &str) -> u16 {
    match service {
        "admission" => 9641,
        "scheduler" => 9642,
        "executor" => 9643,
        "checkpoint" => 9644,
        "gateway" => 9645,
        "console" => 9646,
        _ => 9640,
    }
}

impl ObserveSettings {
    pub fn for_service(service: &str) -> ObserveSettings {
        ObserveSettings {
            metrics_address: format!("127.0.0.1:{}", default_metrics_port(service)),
            metrics_token_file: String::new(),
            metrics_tls_cert_file: String::new(),
            metrics_tls_key_file: String::new(),
        }
    }

    fn fields() -> Vec<String> {
        match serde_json::to_value(ObserveSettings::for_service("")) {
            Ok(Value::Object(map)) => map.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// The address to serve on; None when switched off.
    pub fn address(&self) -> Option<std::net::SocketAddr> {
        if self.metrics_address == "off" {
            return None;
        }
        self.metrics_address.parse().ok()
    }

    /// The TLS configuration, when a certificate is set.
    pub fn tls(&self) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, String> {
        if self.metrics_tls_cert_file.is_empty() {
            return Ok(None);
        }
        crate::http::tls_config(&self.metrics_tls_cert_file, &self.metrics_tls_key_file)
            .map(Some)
            .map_err(|e| format!("metricsTlsCertFile/metricsTlsKeyFile: {e}"))
    }

    /// The bearer token, read from its file (surrounding whitespace
    /// removed); None when no file is set.
    pub fn token(&self) -> Result<Option<String>, String> {
        if self.metrics_token_file.is_empty() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&self.metrics_token_file)
            .map_err(|e| format!("metricsTokenFile: {}: {e}", self.metrics_token_file))?;
        let token = text.trim().to_string();
        if token.len() < 16 {
            return Err(format!(
                "metricsTokenFile: {}: the token must be at least 16 characters",
                self.metrics_token_file
            ));
        }
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(format!(
                "metricsTokenFile: {}: the token must be printable ASCII without spaces",
                self.metrics_token_file
            ));
        }
        Ok(Some(token))
    }
}

impl Validate for ObserveSettings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.metrics_address == "off" {
            return p;
        }
        let Ok(addr) = self.metrics_address.parse::<std::net::SocketAddr>() else {
            p.push(format!(
                "metricsAddress: {:?} must be host:port with an IP address (e.g. 127.0.0.1:9643 or 0.0.0.0:9643), or off",
                self.metrics_address
            ));
            return p;
        };
        if self.metrics_tls_cert_file.is_empty() != self.metrics_tls_key_file.is_empty() {
            p.push("metricsTlsCertFile, metricsTlsKeyFile: give both or neither".into());
        } else if let Err(e) = self.tls() {
            p.push(e);
        }
        match self.token() {
            Err(e) => p.push(e),
            Ok(None) if !addr.ip().is_loopback() => p.push(format!(
                "metricsAddress: {addr} is reachable from other hosts, so /metrics needs a token: set metricsTokenFile (or serve on 127.0.0.1)"
            )),
            Ok(_) => {}
        }
        p
    }
}

/// Loads settings of type `T` for `service` (e.g. "executor") from `file`
/// and the environment `env` (pass `std::env::vars()`), with the NATS
/// connection settings every service shares.
pub fn load<T>(
    service: &str,
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(T, NatsSettings), SettingsError>
where
    T: DeserializeOwned + Validate + serde::Serialize + Default,
{
    load_all(service, file, env).map(|(t, nats, _)| (t, nats))
}

/// [`load`], with the observability settings every service shares
/// ([`ObserveSettings`]: `metricsAddress`, `metricsTokenFile`, also by
/// `QM_METRICS_ADDRESS`, `QM_METRICS_TOKEN_FILE`; the service's own
/// variable wins). The default address is the service's own port.
pub fn load_all<T>(
    service: &str,
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(T, NatsSettings, ObserveSettings), SettingsError>
where
    T: DeserializeOwned + Validate + serde::Serialize + Default,
{
    load_layers(service, file, env, &[])
}

/// A service's settings from every layer, each over the one before: the
/// defaults, the settings `file`, the `QM_*` variables of `env`, then
/// `flags` (key and value, as [`spec::Spec::parse_args`] gives them).
/// Every problem is reported at once, each naming its key.
pub fn load_layers<T>(
    service: &str,
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
    flags: &[(String, String)],
) -> Result<(T, NatsSettings, ObserveSettings), SettingsError>
where
    T: DeserializeOwned + Validate + serde::Serialize + Default,
{
    let mut problems = Vec::new();
    let mut doc = defaults::<T>(service);
    if let Some(path) = file {
        match read_file(path) {
            Ok(map) => doc.extend(map),
            Err(e) => problems.push(e),
        }
    }
    let env: Vec<(String, String)> = env.into_iter().collect();
    let fields: Vec<String> = doc.keys().cloned().collect();
    for field in fields {
        for name in variables(service, &field) {
            if let Some((_, raw)) = env.iter().find(|(k, _)| *k == name) {
                let value = value_of(raw, doc.get(&field));
                doc.insert(field.clone(), value);
            }
        }
    }
    for (key, raw) in flags {
        let value = value_of(raw, doc.get(key));
        doc.insert(key.clone(), value);
    }
    if !problems.is_empty() {
        return Err(SettingsError(problems));
    }
    let (settings, nats, observe) = parse::<T>(doc)?;
    let mut problems = nats.problems();
    problems.extend(observe.problems());
    problems.extend(settings.problems());
    if problems.is_empty() {
        Ok((settings, nats, observe))
    } else {
        Err(SettingsError(problems))
    }
}

/// Every key of `T` and of the shared settings, with its default value.
pub(crate) fn defaults<T: serde::Serialize + Default>(service: &str) -> Map<String, Value> {
    let mut doc = match serde_json::to_value(T::default()) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    if let Ok(Value::Object(nats)) = serde_json::to_value(NatsSettings::default()) {
        doc.extend(nats);
    }
    if let Ok(Value::Object(observe)) = serde_json::to_value(ObserveSettings::for_service(service))
    {
        doc.extend(observe);
    }
    doc
}

/// A settings file's keys (YAML or JSON; empty is none).
pub(crate) fn read_file(path: &Path) -> Result<Map<String, Value>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    match serde_yaml_ng::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        Ok(_) => Err(format!("{}: must be a mapping of settings", path.display())),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Whether `key` is one of the settings every service shares.
pub(crate) fn is_shared(key: &str) -> bool {
    spec::NATS_KEYS
        .iter()
        .chain(spec::OBSERVE_KEYS)
        .any(|k| k.name == key)
}

/// The variables that set `key` of `service`, the one that wins last:
/// `QM_<SERVICE>_<KEY>`, after `QM_<KEY>` for a shared key.
pub fn variables(service: &str, key: &str) -> Vec<String> {
    let own = format!("QM_{}_{}", service.to_ascii_uppercase(), screaming(key));
    if is_shared(key) {
        vec![format!("QM_{}", screaming(key)), own]
    } else {
        vec![own]
    }
}

/// A variable's or flag's value: JSON when it is valid JSON (numbers,
/// lists, objects), else the string itself.
fn value_of(raw: &str, default: Option<&Value>) -> Value {
    // A key whose default is a string takes the text as it is: an account
    // id or a node named with digits only is not a number.
    if matches!(default, Some(Value::String(_))) {
        return Value::String(raw.to_string());
    }
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}

/// The settings `doc` holds, split into the service's own and the shared
/// ones, each checked against its type (unknown keys and wrong types are
/// errors) but not validated.
pub(crate) fn parse<T: DeserializeOwned>(
    mut doc: Map<String, Value>,
) -> Result<(T, NatsSettings, ObserveSettings), SettingsError> {
    let mut take = |fields: Vec<String>| {
        let mut part = Map::new();
        for field in fields {
            if let Some(v) = doc.remove(&field) {
                part.insert(field, v);
            }
        }
        Value::Object(part)
    };
    let nats = take(NatsSettings::fields());
    let observe = take(ObserveSettings::fields());
    let mut problems = Vec::new();
    let settings = serde_json::from_value::<T>(Value::Object(doc))
        .map_err(|e| problems.push(e.to_string()))
        .ok();
    let nats = serde_json::from_value::<NatsSettings>(nats)
        .map_err(|e| problems.push(e.to_string()))
        .ok();
    let observe = serde_json::from_value::<ObserveSettings>(observe)
        .map_err(|e| problems.push(e.to_string()))
        .ok();
    match (settings, nats, observe) {
        (Some(s), Some(n), Some(o)) => Ok((s, n, o)),
        _ => Err(SettingsError(problems)),
    }
}

#[cfg(test)]
mod tests;
