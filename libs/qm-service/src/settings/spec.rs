//! One description of a service's settings, from which everything a user
//! reads about them is made: `--help` (clap), the command-line flags, the
//! reference tables in `docs/settings.md`, and the checks that every key
//! the docs and the deploy files name is one that loads (those checks,
//! `spec/repository.rs`, are compiled for tests only). A key added to a
//! service's settings without a description fails its test; so does a
//! variable in the docs that no longer sets anything.

use std::path::PathBuf;

use clap::{Arg, ArgAction, Command};
use serde::Serialize;
use serde_json::Value;

use super::{defaults, screaming, variables};

/// One settings key: its name in a settings file (camelCase) and what it
/// sets, with its unit and limits.
#[derive(Debug, Clone, Copy)]
pub struct Key {
    pub name: &'static str,
    pub help: &'static str,
}

/// What a service is and every key of its own settings (the NATS and
/// metrics keys every service shares are added: [`NATS_KEYS`],
/// [`OBSERVE_KEYS`]).
#[derive(Debug)]
pub struct Spec {
    /// `admission`, `scheduler`, ...: the binary is `qm-<service>` and its
    /// variables `QM_<SERVICE>_*`.
    pub service: &'static str,
    /// One paragraph: what the service does.
    pub about: &'static str,
    pub keys: &'static [Key],
    /// Printed after the keys in `--help` (may be empty).
    pub notes: &'static str,
}

/// How every service reaches NATS and proves who it is.
pub const NATS_KEYS: &[Key] = &[
    Key {
        name: "natsUrl",
        help: "nats://host:port, or tls://host:port to require TLS; the servers of a cluster separated by commas",
    },
    Key {
        name: "natsPrincipal",
        help: "the principal this connection acts as (its API subject and inbox); default: the name in the nkey file's header, else natsUser",
    },
    Key {
        name: "natsNkeyFile",
        help: "a credentials file `qm auth` wrote (<principal>.nk, the nkey seed)",
    },
    Key {
        name: "natsCreds",
        help: "a JWT .creds file, for NATS servers run in operator mode",
    },
    Key {
        name: "natsUser",
        help: "a user name, for servers configured with users and passwords (with natsPassword)",
    },
    Key {
        name: "natsPassword",
        help: "that user's password (never printed)",
    },
    Key {
        name: "natsCaFile",
        help: "PEM file of the CA that signed the server's certificate",
    },
    Key {
        name: "natsCertFile",
        help: "PEM client certificate, for servers that verify clients (with natsKeyFile)",
    },
    Key {
        name: "natsKeyFile",
        help: "the client certificate's PEM key",
    },
];

/// Where every service serves its metrics and health endpoint.
pub const OBSERVE_KEYS: &[Key] = &[
    Key {
        name: "metricsAddress",
        help: "IP address and port of /metrics, /healthz and /readyz (0.0.0.0:9643 for every interface); off serves none; default: loopback, the service's own port (admission 9641, scheduler 9642, executor 9643, checkpoint 9644, gateway 9645, console 9646)",
    },
    Key {
        name: "metricsTokenFile",
        help: "a file holding the bearer token /metrics requires (at least 16 printable characters); required when metricsAddress is reachable from other hosts",
    },
    Key {
        name: "metricsTlsCertFile",
        help: "a PEM certificate chain: serve the endpoint over HTTPS (with metricsTlsKeyFile)",
    },
    Key {
        name: "metricsTlsKeyFile",
        help: "that certificate's PEM key",
    },
];

/// What the command line asked for: a settings file, and keys set by
/// flags (key and raw value), applied over the file and the variables.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Invocation {
    pub config: Option<PathBuf>,
    pub flags: Vec<(String, String)>,
}

/// Whether `key` holds a secret: it has no flag, since other users of the
/// host see a process's command line (a file or a variable sets it).
pub fn secret(key: &str) -> bool {
    SECRETS.contains(&key)
}

/// The keys that hold a secret's value (every other credential setting
/// names a file). A key whose name says password, secret or token but is
/// not listed here fails its service's test ([`Spec::undescribed`]).
pub const SECRETS: &[&str] = &["natsPassword", "s3SecretAccessKey"];

/// A key's flag: `partSizeMiB` is `--part-size-mib`.
pub fn flag(key: &str) -> String {
    screaming(key).to_ascii_lowercase().replace('_', "-")
}

/// A default as the docs show it: strings bare, the rest as JSON; empty
/// when there is none.
pub(crate) fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Array(a) if a.is_empty() => String::new(),
        other => other.to_string(),
    }
}

// The checks of the repository (docs/, deploy/, the generated tables):
// compiled for tests only (the `repository-checks` feature, which every
// service's tests turn on), never into a service.
#[cfg(any(test, feature = "repository-checks"))]
mod repository;
#[cfg(any(test, feature = "repository-checks"))]
pub use repository::shared_reference;

const LAYERS: &str =
    "Each key is read, the later winning, from: its default, the --config file, its \
variable (a JSON value, or else a string), then its flag. Every problem is named at once, and the \
service exits with code 2 without starting. The keys are described in docs/settings.md.\n\n\
Traces go to OTEL_EXPORTER_OTLP_ENDPOINT (OTLP over HTTP, e.g. http://collector:4318) with the \
other OTEL_* variables; none are exported when it is unset (docs/metrics.md).";

impl Spec {
    /// The service's keys, then the shared ones, each with its `--help`
    /// heading.
    fn all_keys(&self) -> impl Iterator<Item = (&'static str, &'static Key)> {
        let keys: &'static [Key] = self.keys;
        keys.iter()
            .map(|k| ("Settings", k))
            .chain(NATS_KEYS.iter().map(|k| ("NATS connection", k)))
            .chain(OBSERVE_KEYS.iter().map(|k| ("Metrics and health", k)))
    }

    /// The command line: `--config FILE`, a flag per key, `--help` and
    /// `--version`.
    pub fn command<T: Serialize + Default>(&self) -> Command {
        let defaults = defaults::<T>(self.service);
        let after = if self.notes.is_empty() {
            LAYERS.to_string()
        } else {
            format!("{}\n\n{LAYERS}", self.notes)
        };
        let mut cmd = Command::new(format!("qm-{}", self.service))
            .version(env!("CARGO_PKG_VERSION"))
            .about(self.about)
            .after_help(after)
            .arg(
                Arg::new("config")
                    .long("config")
                    .value_name("FILE")
                    .help("A settings file (YAML or JSON) holding any of the keys below"),
            );
        for (heading, key) in self.all_keys().filter(|(_, k)| !secret(k.name)) {
            let mut help = format!(
                "{} [key: {}; env: {}]",
                key.help,
                key.name,
                variables(self.service, key.name).join(" or ")
            );
            let default = defaults.get(key.name).map(shown).unwrap_or_default();
            if !default.is_empty() && key.name != "metricsAddress" {
                help.push_str(&format!(" [default: {default}]"));
            }
            cmd = cmd.arg(
                Arg::new(key.name)
                    .long(flag(key.name))
                    .value_name("VALUE")
                    .help(help)
                    .help_heading(heading)
                    .action(ArgAction::Set),
            );
        }
        cmd
    }

    /// Parses a command line (`args` includes the program's name). Help,
    /// version and usage errors come back as clap's error: `exit()` prints
    /// them (code 0 for help and version, 2 for a mistake).
    pub fn parse_args<T: Serialize + Default>(
        &self,
        args: impl IntoIterator<Item = String>,
    ) -> Result<Invocation, clap::Error> {
        let matches = self.command::<T>().try_get_matches_from(args)?;
        Ok(Invocation {
            config: matches.get_one::<String>("config").map(PathBuf::from),
            flags: self
                .all_keys()
                .filter(|(_, k)| !secret(k.name))
                .filter_map(|(_, k)| {
                    matches
                        .get_one::<String>(k.name)
                        .map(|v| (k.name.to_string(), v.clone()))
                })
                .collect(),
        })
    }
}

/// A service's settings test: its description covers every key, the docs
/// and deploy files name only keys that load, and `docs/settings.md`
/// holds its generated table. Extra arguments are variables with the
/// service's prefix that are not settings (a job's `QM_CHECKPOINT_DIR`).
#[macro_export]
macro_rules! settings_test {
    ($settings:ty, $spec:expr $(, $extra:expr)* $(,)?) => {
        #[test]
        fn settings_are_described_documented_and_load_where_deployed() {
            let root = ::std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
            let problems = $spec.description_problems::<$settings>(&root, &[$($extra),*]);
            assert!(problems.is_empty(), "{}", problems.join("\n"));
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_is_the_key_in_kebab_case() {
        assert_eq!(flag("partSizeMiB"), "part-size-mib");
        assert_eq!(flag("natsUrl"), "nats-url");
    }
}
