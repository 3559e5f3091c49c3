//! The repository checks of a service's settings: the reference tables
//! of `docs/settings.md` as they must read, every `QM_<SERVICE>_*`
//! variable the docs name sets a key, every settings file in `deploy/`
//! loads. They read files of the repository, so they are compiled for
//! tests only (`cfg(test)` here, the `repository-checks` feature for the
//! services' tests), never into a service's binary.

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{Map, Value};

use super::super::{defaults, parse, read_file, screaming, variables};
use super::{flag, secret, shown, Spec, NATS_KEYS, OBSERVE_KEYS};

/// Whether `key`'s name suggests it holds a secret's value.
fn looks_secret(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    (lower.contains("password") || lower.contains("secret") || lower.ends_with("token"))
        && !lower.ends_with("file")
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

impl Spec {
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
}
