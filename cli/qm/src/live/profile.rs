//! `qm`'s profile file, so that a person types `qm list`, not six flags:
//! `$XDG_CONFIG_HOME/quartermaster/config.yaml` (default
//! `~/.config/quartermaster/config.yaml`), or the file `QM_CONFIG` names.
//!
//! ```yaml
//! default: prod                 # the profile used without --profile / QM_PROFILE
//! profiles:
//!   prod:
//!     nats: tls://nats-1.example:4222,tls://nats-2.example:4222
//!     nkey: alice.nk            # relative paths: to this file's folder
//!     tlsCa: ca.pem
//!   dev:
//!     nats: nats://127.0.0.1:4222
//!     nkey: ~/qm/dev/alice.nk
//! ```
//!
//! A flag or a `QM_NATS_*` variable wins over the profile; the profile
//! wins over the built-in default (`nats://127.0.0.1:4222`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::connect::Credentials;
use super::failure::{usage, Failure};

/// Where `qm` looks for NATS when nothing says otherwise.
pub const DEFAULT_NATS: &str = "nats://127.0.0.1:4222";

/// One way to reach one Quartermaster as one principal.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    /// NATS URLs, comma-separated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nats: Option<String>,
    /// The `.nk` credentials file `qm auth` wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nkey: Option<String>,
    /// A JWT `.creds` file (servers in operator mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creds: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// The principal (default: the one the nkey file names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_cert: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_key: Option<String>,
}

/// The profile file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProfileFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// The profile file's path: `QM_CONFIG`, else
/// `$XDG_CONFIG_HOME/quartermaster/config.yaml`, else
/// `~/.config/quartermaster/config.yaml`.
pub fn path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = env("QM_CONFIG").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let base = env("XDG_CONFIG_HOME")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some(base.join("quartermaster").join("config.yaml"))
}

/// `~/x` and paths relative to the profile file's folder, made whole.
fn resolve_path(value: &str, folder: &Path, home: Option<&str>) -> String {
    if let (Some(rest), Some(home)) = (value.strip_prefix("~/"), home) {
        return Path::new(home).join(rest).display().to_string();
    }
    let p = Path::new(value);
    if p.is_absolute() {
        value.to_string()
    } else {
        folder.join(p).display().to_string()
    }
}

/// What to connect to and as whom: each value from the flags or the
/// environment if given there, else from the profile chosen (`--profile`,
/// `QM_PROFILE`, else the file's `default`), else the built-in default.
/// A profile named but not found, or a file that does not read, is an
/// error naming the file; no file and no profile named is no profile.
pub fn resolve(
    nats: Option<&str>,
    given: &Credentials,
    profile: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Credentials), Failure> {
    let file = path(env);
    let text = match &file {
        Some(f) => match std::fs::read_to_string(f) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(usage(format!("cannot read {}: {e}", f.display()))),
        },
        None => None,
    };
    let chosen = match (&text, &file) {
        (Some(text), Some(f)) => {
            let parsed: ProfileFile = serde_yaml_ng::from_str(text)
                .map_err(|e| usage(format!("{}: {e}", f.display())))?;
            let name = profile.map(str::to_string).or(parsed.default.clone());
            match name {
                Some(name) => {
                    let found = parsed.profiles.get(&name).cloned().ok_or_else(|| {
                        usage(format!(
                            "no profile {name:?} in {} (it has: {})",
                            f.display(),
                            if parsed.profiles.is_empty() {
                                "none".to_string()
                            } else {
                                parsed
                                    .profiles
                                    .keys()
                                    .cloned()
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            }
                        ))
                    })?;
                    let folder = f.parent().unwrap_or(Path::new("."));
                    Some(found.with_paths_resolved(folder, env("HOME").as_deref()))
                }
                None => None,
            }
        }
        _ => {
            if let Some(name) = profile {
                let at = file
                    .as_ref()
                    .map_or("(no home folder)".to_string(), |f| f.display().to_string());
                return Err(usage(format!(
                    "--profile {name}: there is no profile file at {at}"
                )));
            }
            None
        }
    };
    let p = chosen.unwrap_or_default();
    let url = nats
        .map(str::to_string)
        .or(p.nats)
        .unwrap_or_else(|| DEFAULT_NATS.to_string());
    let pick = |flag: &Option<String>, from: Option<String>| flag.clone().or(from);
    let credentials = Credentials {
        nkey: pick(&given.nkey, p.nkey),
        creds: pick(&given.creds, p.creds),
        user: pick(&given.user, p.user),
        password: pick(&given.password, p.password),
        principal: pick(&given.principal, p.principal),
        tls_ca: pick(&given.tls_ca, p.tls_ca),
        tls_cert: pick(&given.tls_cert, p.tls_cert),
        tls_key: pick(&given.tls_key, p.tls_key),
    };
    Ok((url, credentials))
}

impl Profile {
    fn with_paths_resolved(mut self, folder: &Path, home: Option<&str>) -> Profile {
        for p in [
            &mut self.nkey,
            &mut self.creds,
            &mut self.tls_ca,
            &mut self.tls_cert,
            &mut self.tls_key,
        ] {
            if let Some(v) = p.as_mut() {
                *v = resolve_path(v, folder, home);
            }
        }
        self
    }
}

/// The profile file `qm auth --profiles` writes for one person: their
/// credentials file beside it, the servers given, the CA if any.
pub fn for_person(principal: &str, nats: &str, tls_ca: Option<&str>) -> String {
    let profile = Profile {
        nats: Some(nats.to_string()),
        nkey: Some(format!("{principal}.nk")),
        tls_ca: tls_ca.map(str::to_string),
        ..Default::default()
    };
    let file = ProfileFile {
        default: Some("quartermaster".into()),
        profiles: BTreeMap::from([("quartermaster".to_string(), profile)]),
    };
    let yaml = serde_yaml_ng::to_string(&file).unwrap_or_default();
    format!(
        "# {principal}'s qm profile, written by `qm auth`: put it at\n\
         # ~/.config/quartermaster/config.yaml with {principal}.nk beside it.\n{yaml}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, String)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        move |k| map.get(k).cloned()
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("qm-profile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    #[test]
    fn a_profile_fills_in_what_flags_leave_out_and_flags_win() {
        let home = dir("home");
        let conf = home.join(".config/quartermaster");
        std::fs::create_dir_all(&conf).expect("dir");
        std::fs::write(
            conf.join("config.yaml"),
            "default: prod\nprofiles:\n  prod: {nats: 'tls://a:4222', nkey: alice.nk, tlsCa: ~/ca.pem}\n  dev: {nats: 'nats://b:4222'}\n",
        )
        .expect("written");
        let env = env_of(&[("HOME", home.display().to_string())]);
        let none = Credentials::default();
        let (url, c) = resolve(None, &none, None, &env)
            .map_err(|e| e.0)
            .expect("default profile");
        assert_eq!(url, "tls://a:4222");
        assert_eq!(
            c.nkey,
            Some(conf.join("alice.nk").display().to_string()),
            "relative to the file"
        );
        assert_eq!(
            c.tls_ca,
            Some(home.join("ca.pem").display().to_string()),
            "~ expanded"
        );
        let (url, c) = resolve(None, &none, Some("dev"), &env)
            .map_err(|e| e.0)
            .expect("dev");
        assert_eq!((url.as_str(), c.nkey), ("nats://b:4222", None));
        let flags = Credentials {
            nkey: Some("/k/bob.nk".into()),
            ..Default::default()
        };
        let (url, c) = resolve(Some("nats://flag:1"), &flags, None, &env)
            .map_err(|e| e.0)
            .expect("flags");
        assert_eq!(
            (url.as_str(), c.nkey.as_deref()),
            ("nats://flag:1", Some("/k/bob.nk"))
        );
        assert_eq!(
            c.tls_ca,
            Some(home.join("ca.pem").display().to_string()),
            "the rest from the profile"
        );
        let e = resolve(None, &none, Some("staging"), &env)
            .expect_err("unknown")
            .0;
        assert!(
            e.contains("no profile \"staging\"") && e.contains("dev, prod"),
            "{e}"
        );
    }

    #[test]
    fn no_file_is_no_profile_and_a_bad_file_is_named() {
        let home = dir("empty");
        let env = env_of(&[("HOME", home.display().to_string())]);
        let (url, _) = resolve(None, &Credentials::default(), None, &env)
            .map_err(|e| e.0)
            .expect("none");
        assert_eq!(url, DEFAULT_NATS);
        let e = resolve(None, &Credentials::default(), Some("prod"), &env)
            .expect_err("named")
            .0;
        assert!(e.contains("there is no profile file at"), "{e}");
        let bad = home.join("bad.yaml");
        std::fs::write(&bad, "profiles:\n  prod: {nats: x, nkeyfile: a.nk}\n").expect("written");
        let env = env_of(&[("QM_CONFIG", bad.display().to_string())]);
        let e = resolve(None, &Credentials::default(), Some("prod"), &env)
            .expect_err("bad")
            .0;
        assert!(e.contains("bad.yaml") && e.contains("nkeyfile"), "{e}");
    }

    #[test]
    fn the_profile_qm_auth_writes_reads_back_with_the_key_beside_it() {
        let d = dir("auth");
        std::fs::write(
            d.join("config.yaml"),
            for_person("alice", "tls://q:4222", Some("/etc/ca.pem")),
        )
        .expect("written");
        let env = env_of(&[("QM_CONFIG", d.join("config.yaml").display().to_string())]);
        let (url, c) = resolve(None, &Credentials::default(), None, &env)
            .map_err(|e| e.0)
            .expect("reads");
        assert_eq!(url, "tls://q:4222");
        assert_eq!(c.nkey, Some(d.join("alice.nk").display().to_string()));
        assert_eq!(c.tls_ca.as_deref(), Some("/etc/ca.pem"));
    }
}
