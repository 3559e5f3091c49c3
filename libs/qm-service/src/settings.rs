//! Service configuration: a YAML or JSON file (optional), then environment
//! variables, then validation that reports every problem at once.
//!
//! Each top-level field `fooBar` of a service's settings can be set by the
//! variable `QM_<SERVICE>_FOO_BAR` (e.g. `QM_EXECUTOR_WORK_DIR`); the common
//! `natsUrl` also by `QM_NATS_URL`. A variable's value is parsed as JSON when
//! it is valid JSON (numbers, lists, objects) and taken as a string otherwise.

use std::path::Path;

use serde::de::DeserializeOwned;
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

fn screaming(field: &str) -> String {
    let mut out = String::new();
    for c in field.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

/// Loads settings of type `T` for `service` (e.g. "executor") from `file`
/// and the environment `env` (pass `std::env::vars()`).
pub fn load<T>(
    service: &str,
    file: Option<&Path>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<T, SettingsError>
where
    T: DeserializeOwned + Validate + serde::Serialize + Default,
{
    let mut problems = Vec::new();
    let mut doc = match serde_json::to_value(T::default()) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    if let Some(path) = file {
        match std::fs::read_to_string(path) {
            Err(e) => problems.push(format!("{}: cannot read: {e}", path.display())),
            Ok(text) => match serde_yaml_ng::from_str::<Value>(&text) {
                Ok(Value::Object(map)) => doc.extend(map),
                Ok(Value::Null) => {}
                Ok(_) => {
                    problems.push(format!("{}: must be a mapping of settings", path.display()))
                }
                Err(e) => problems.push(format!("{}: {e}", path.display())),
            },
        }
    }
    let prefix = format!("QM_{}_", service.to_ascii_uppercase());
    let fields: Vec<String> = doc.keys().cloned().collect();
    let env: Vec<(String, String)> = env.into_iter().collect();
    for field in fields {
        let names = if field == "natsUrl" {
            vec!["QM_NATS_URL".to_string(), format!("{prefix}NATS_URL")]
        } else {
            vec![format!("{prefix}{}", screaming(&field))]
        };
        for name in names {
            if let Some((_, raw)) = env.iter().find(|(k, _)| *k == name) {
                let value =
                    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.clone()));
                doc.insert(field.clone(), value);
            }
        }
    }
    if !problems.is_empty() {
        return Err(SettingsError(problems));
    }
    let settings: T = serde_json::from_value(Value::Object(doc))
        .map_err(|e| SettingsError(vec![e.to_string()]))?;
    let problems = settings.problems();
    if problems.is_empty() {
        Ok(settings)
    } else {
        Err(SettingsError(problems))
    }
}

/// `--config FILE` from the command line, if given; `--help` prints `usage`.
pub fn config_path(usage: &str) -> Result<Option<std::path::PathBuf>, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(None),
        [flag] if flag == "--help" || flag == "-h" => {
            println!("{usage}");
            std::process::exit(0)
        }
        [flag, path] if flag == "--config" => Ok(Some(path.into())),
        _ => Err(format!("unexpected arguments {args:?}\n\n{usage}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::{Deserialize, Serialize};

    #[derive(Debug, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Demo {
        nats_url: String,
        work_dir: String,
        heartbeat_seconds: u64,
    }

    impl Default for Demo {
        fn default() -> Self {
            Demo {
                nats_url: "nats://127.0.0.1:4222".into(),
                work_dir: String::new(),
                heartbeat_seconds: 1,
            }
        }
    }

    impl Validate for Demo {
        fn problems(&self) -> Vec<String> {
            let mut p = Vec::new();
            if self.work_dir.is_empty() {
                p.push("workDir: is required".into());
            }
            if self.heartbeat_seconds == 0 {
                p.push("heartbeatSeconds: must be >= 1".into());
            }
            p
        }
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn environment_overrides_defaults_and_numbers_parse() {
        let s: Demo = load(
            "demo",
            None,
            env(&[
                ("QM_NATS_URL", "nats://n:4222"),
                ("QM_DEMO_WORK_DIR", "/w"),
                ("QM_DEMO_HEARTBEAT_SECONDS", "3"),
            ]),
        )
        .expect("valid");
        assert_eq!(s.nats_url, "nats://n:4222");
        assert_eq!(s.work_dir, "/w");
        assert_eq!(s.heartbeat_seconds, 3);
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let e = load::<Demo>("demo", None, env(&[("QM_DEMO_HEARTBEAT_SECONDS", "0")]))
            .expect_err("invalid");
        assert_eq!(e.0.len(), 2, "{e}");
        assert!(e.to_string().contains("workDir"), "{e}");
        assert!(e.to_string().contains("heartbeatSeconds"), "{e}");
    }

    #[test]
    fn unknown_fields_and_missing_files_are_named() {
        let dir = std::env::temp_dir().join(format!("qm-settings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("s.yaml");
        std::fs::write(&file, "workDir: /w\nheartbeatSecond: 2\n").expect("write");
        let e = load::<Demo>("demo", Some(&file), env(&[])).expect_err("unknown field");
        assert!(e.to_string().contains("heartbeatSecond"), "{e}");
        let e = load::<Demo>("demo", Some(&dir.join("missing.yaml")), env(&[]))
            .expect_err("missing file");
        assert!(e.to_string().contains("cannot read"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
