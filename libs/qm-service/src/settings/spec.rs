//! One description of a service's settings, from which everything a user
//! reads about them is made: `--help` (clap), the command-line flags, the
//! reference tables in `docs/settings.md`, and the checks that every key
//! the docs and the deploy files name is one that loads. A key added to a
//! service's settings without a description fails its test; so does a
//! variable in the docs that no longer sets anything.

use std::path::{Path, PathBuf};

use clap::{Arg, ArgAction, Command};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::{defaults, parse, read_file, screaming, variables};

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

/// Whether `key`'s name suggests it holds a secret's value.
fn looks_secret(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    (lower.contains("password") || lower.contains("secret") || lower.ends_with("token"))
        && !lower.ends_with("file")
}

/// A key's flag: `partSizeMiB` is `--part-size-mib`.
pub fn flag(key: &str) -> String {
    screaming(key).to_ascii_lowercase().replace('_', "-")
}

/// A key's flag in a reference table; a secret has none.
fn flag_cell(key: &str) -> String {
    if secret(key) {
        "none (a secret)".to_string()
    } else {
        format!("`--{}`", flag(key))
    }
}

/// Help text in a Markdown table's cell: `|` and HTML's brackets escaped.
fn cell(help: &str) -> String {
    help.replace('|', "\\|")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A settings file found in `deploy/`: its keys, or why they do not read.
type Deployed = Result<Map<String, Value>, String>;

/// A default as the docs show it: strings bare, the rest as JSON; empty
/// when there is none.
fn shown(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        Value::Array(a) if a.is_empty() => String::new(),
        other => other.to_string(),
    }
}

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

    /// The Markdown table of the service's own keys (docs/settings.md).
    pub fn reference<T: Serialize + Default>(&self) -> String {
        let defaults = defaults::<T>(self.service);
        let mut out = String::from(
            "| Key | Variable | Flag | Default | What it sets |\n|---|---|---|---|---|\n",
        );
        for key in self.keys {
            let default = defaults.get(key.name).map(shown).unwrap_or_default();
            out.push_str(&format!(
                "| `{}` | `{}` | {} | {} | {} |\n",
                key.name,
                variables(self.service, key.name).join("`, `"),
                flag_cell(key.name),
                if default.is_empty() {
                    "none".to_string()
                } else {
                    format!("`{}`", default.replace('|', "\\|"))
                },
                cell(key.help)
            ));
        }
        out
    }

    /// Problems with the description itself: a key of `T` it does not
    /// describe, a described key `T` does not have, an empty help.
    pub fn undescribed<T: Serialize + Default>(&self) -> Vec<String> {
        let fields = defaults::<T>(self.service);
        let mut problems = Vec::new();
        for field in fields.keys() {
            if !self.all_keys().any(|(_, k)| k.name == field) {
                problems.push(format!(
                    "qm-{}: the key {field} is not described (add it to the service's settings SPEC)",
                    self.service
                ));
            }
        }
        for (_, key) in self.all_keys() {
            if !fields.contains_key(key.name) {
                problems.push(format!(
                    "qm-{}: {} is described but is no key of its settings",
                    self.service, key.name
                ));
            }
            if key.help.trim().is_empty() {
                problems.push(format!("qm-{}: {} has no help", self.service, key.name));
            }
            if looks_secret(key.name) && !secret(key.name) {
                problems.push(format!(
                    "qm-{}: {} looks like it holds a secret: list it in settings::spec::SECRETS (no flag) or name it ...File",
                    self.service, key.name
                ));
            }
        }
        problems
    }

    /// Every `QM_<SERVICE>_*` variable that the README, `docs/` and
    /// `deploy/` name sets a key (names in `extra` are not settings: a
    /// job's variables that share the prefix), and every settings file
    /// in `deploy/` (the compose files' and the Kubernetes ConfigMaps'
    /// `<service>.yaml`) loads: known keys, values of the right type.
    pub fn check_documented<T: DeserializeOwned + Serialize + Default>(
        &self,
        root: &Path,
        extra: &[&str],
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let known: Vec<String> = defaults::<T>(self.service)
            .keys()
            .flat_map(|k| variables(self.service, k))
            .collect();
        let prefix = format!("QM_{}_", self.service.to_ascii_uppercase());
        let mut files = vec![root.join("README.md")];
        for dir in ["docs", "deploy"] {
            let before = files.len();
            collect_files(&root.join(dir), &mut files);
            if files.len() == before {
                problems.push(format!(
                    "{dir}/: no files to check under {}",
                    root.display()
                ));
            }
        }
        for file in &files {
            let Ok(text) = std::fs::read_to_string(file) else {
                continue;
            };
            let shown = file
                .strip_prefix(root)
                .unwrap_or(file)
                .display()
                .to_string();
            for name in variables_named(&text, &prefix) {
                if !known.contains(&name) && !extra.contains(&name.as_str()) {
                    problems.push(format!(
                        "{shown}: {name} sets no key of qm-{} (a renamed or removed setting?)",
                        self.service
                    ));
                }
            }
        }
        let deployed = self.deployed_files(root);
        if !deployed.iter().any(|(_, d)| d.is_ok()) {
            problems.push(format!(
                "deploy/: no settings file of qm-{} found (deploy/compose/config/{}.yaml, or a ConfigMap's {}.yaml entry)",
                self.service, self.service, self.service
            ));
        }
        for (shown, doc) in deployed {
            match doc {
                Err(e) => problems.push(format!("{shown}: {e}")),
                Ok(map) => {
                    let mut all = defaults::<T>(self.service);
                    all.extend(map);
                    if let Err(e) = parse::<T>(all) {
                        problems.push(format!("{shown}: does not load: {}", e.0.join("; ")));
                    }
                }
            }
        }
        problems
    }

    /// The service's settings files in `deploy/`: the compose file's
    /// `deploy/compose/config/<service>.yaml` and each Kubernetes
    /// ConfigMap's `<service>.yaml` entry.
    fn deployed_files(&self, root: &Path) -> Vec<(String, Deployed)> {
        let mut out = Vec::new();
        let compose = root.join(format!("deploy/compose/config/{}.yaml", self.service));
        if compose.exists() {
            out.push((
                format!("deploy/compose/config/{}.yaml", self.service),
                read_file(&compose),
            ));
        }
        let mut manifests = Vec::new();
        collect_files(&root.join("deploy/kubernetes"), &mut manifests);
        let entry = format!("{}.yaml", self.service);
        let yaml = |f: &PathBuf| f.extension().is_some_and(|e| e == "yaml" || e == "yml");
        for file in manifests.into_iter().filter(yaml) {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let shown = file
                .strip_prefix(root)
                .unwrap_or(&file)
                .display()
                .to_string();
            for document in serde_yaml_ng::Deserializer::from_str(&text) {
                // A document that does not parse ends the file (the
                // iterator does not move past it): said, not skipped.
                let doc = match <serde_yaml_ng::Value as serde::Deserialize>::deserialize(document)
                {
                    Ok(doc) => doc,
                    Err(e) => {
                        out.push((shown.clone(), Err(format!("does not parse: {e}"))));
                        break;
                    }
                };
                if doc.get("kind").and_then(serde_yaml_ng::Value::as_str) != Some("ConfigMap") {
                    continue;
                }
                if let Some(body) = doc
                    .get("data")
                    .and_then(|d| d.get(entry.as_str()))
                    .and_then(serde_yaml_ng::Value::as_str)
                {
                    let parsed = match serde_yaml_ng::from_str::<Value>(body) {
                        Ok(Value::Object(map)) => Ok(map),
                        Ok(_) => Err("must be a mapping of settings".to_string()),
                        Err(e) => Err(e.to_string()),
                    };
                    out.push((format!("{shown} (ConfigMap entry {entry})"), parsed));
                }
            }
        }
        out
    }

    /// Whether `docs/settings.md` holds this service's generated table
    /// (and the shared keys' table) as it is now. With `QM_BLESS_DOCS=1`
    /// it writes them instead.
    pub fn check_generated<T: Serialize + Default>(&self, root: &Path) -> Vec<String> {
        let bless = std::env::var("QM_BLESS_DOCS").is_ok_and(|v| v == "1");
        self.check_generated_as::<T>(root, bless)
    }

    /// [`Self::check_generated`]; with `bless`, a table that differs is
    /// written, and still reported (run again to see it pass).
    pub fn check_generated_as<T: Serialize + Default>(
        &self,
        root: &Path,
        bless: bool,
    ) -> Vec<String> {
        let path = root.join("docs/settings.md");
        let Ok(mut text) = std::fs::read_to_string(&path) else {
            return vec![format!("{}: cannot read", path.display())];
        };
        let mut changed = false;
        let mut problems = Vec::new();
        for (name, table) in [
            (self.service, self.reference::<T>()),
            ("shared", shared_reference()),
        ] {
            let start = format!("<!-- generated: {name} -->\n");
            let end = format!("<!-- end: {name} -->");
            let (Some(a), Some(b)) = (text.find(&start), text.find(&end)) else {
                problems.push(format!(
                    "docs/settings.md: no `{}` ... `{end}` section for the table of {name}",
                    start.trim_end()
                ));
                continue;
            };
            let body = a + start.len();
            if b < body {
                problems.push(format!("docs/settings.md: {end} comes before its start"));
                continue;
            }
            if text[body..b] != table {
                if bless {
                    text.replace_range(body..b, &table);
                    changed = true;
                    problems.push(format!(
                        "docs/settings.md: the table of {name} written; run the test again"
                    ));
                } else {
                    problems.push(format!(
                        "docs/settings.md: the table of {name} is not the one the settings describe; run the test with QM_BLESS_DOCS=1 to write it"
                    ));
                }
            }
        }
        if changed {
            if let Err(e) = std::fs::write(&path, text) {
                problems.push(format!("{}: {e}", path.display()));
            }
        }
        problems
    }

    /// Everything [`Self::undescribed`], [`Self::check_documented`] and
    /// [`Self::check_generated`] find.
    pub fn description_problems<T: DeserializeOwned + Serialize + Default>(
        &self,
        root: &Path,
        extra: &[&str],
    ) -> Vec<String> {
        let mut problems = self.undescribed::<T>();
        problems.extend(self.check_documented::<T>(root, extra));
        problems.extend(self.check_generated::<T>(root));
        problems
    }
}

/// The Markdown table of the keys every service shares.
pub fn shared_reference() -> String {
    let mut out = String::from("| Key | Variables | Flag | What it sets |\n|---|---|---|---|\n");
    for key in NATS_KEYS.iter().chain(OBSERVE_KEYS) {
        out.push_str(&format!(
            "| `{}` | `QM_{}`, `QM_<SERVICE>_{}` | {} | {} |\n",
            key.name,
            screaming(key.name),
            screaming(key.name),
            flag_cell(key.name),
            cell(key.help)
        ));
    }
    out
}

/// Every variable named `prefix` + `[A-Z0-9_]+` in `text`, skipping
/// patterns (`QM_EXECUTOR_<KEY>`, `QM_CHECKPOINT_S3_*`).
fn variables_named(text: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        let before = rest[..at].chars().next_back();
        let tail = &rest[at + prefix.len()..];
        let len = tail
            .find(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        let next = tail[len..].chars().next();
        let word = before.is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'));
        let pattern = matches!(next, Some('<' | '*' | '{')) || tail[..len].ends_with('_');
        if word && len > 0 && !pattern {
            let name = format!("{prefix}{}", &tail[..len]);
            if !out.contains(&name) {
                out.push(name);
            }
        }
        rest = &tail[len..];
    }
    out
}

/// Every file under `dir`, recursively, in a stable order.
fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            collect_files(&path, out);
        } else {
            out.push(path);
        }
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
    fn variables_are_found_and_patterns_skipped() {
        let text = "set QM_EXECUTOR_WORK_DIR=/w and QM_EXECUTOR_GPUS, not QM_EXECUTOR_<KEY> \
                    nor QM_EXECUTOR_NATS_* nor XQM_EXECUTOR_FOO; QM_EXECUTOR_WORK_DIR again";
        assert_eq!(
            variables_named(text, "QM_EXECUTOR_"),
            vec!["QM_EXECUTOR_WORK_DIR", "QM_EXECUTOR_GPUS"]
        );
    }

    #[test]
    fn a_flag_is_the_key_in_kebab_case() {
        assert_eq!(flag("partSizeMiB"), "part-size-mib");
        assert_eq!(flag("natsUrl"), "nats-url");
    }
}
