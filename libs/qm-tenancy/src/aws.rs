//! The AWS Batch gateway's secrets, made by `qm auth`: one secret per
//! access key id the tenancy's `awsAccessKeys` maps, kept across runs in
//! `gateway-keys.yaml` (the gateway's keys file, mode 0600), and for each
//! person an AWS shared-credentials file to hand them
//! (`<principal>.aws-credentials`, profile `quartermaster`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Tenancy;

/// The gateway's keys file in `dir`.
pub fn keys_path(dir: &Path) -> PathBuf {
    dir.join("gateway-keys.yaml")
}

/// A person's AWS credentials file in `dir`.
pub fn credentials_path(dir: &Path, principal: &str) -> PathBuf {
    dir.join(format!("{principal}.aws-credentials"))
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    secret: String,
}

/// One access key after [`ensure_secrets`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccessKey {
    pub id: String,
    pub principal: String,
    /// Made by this run (else kept from the keys file).
    pub new: bool,
}

fn new_secret() -> String {
    // 256 random bits (two version-4 UUIDs' random parts, from the OS).
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn write_private(path: &Path, text: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Makes sure every access key the tenancy maps has a secret in `dir`'s
/// keys file (existing secrets are kept, as are keys the tenancy no longer
/// maps, which the gateway refuses), and writes each person's credentials
/// file. Nothing is written when the tenancy maps no key.
pub fn ensure_secrets(tenancy: &Tenancy, dir: &Path) -> Result<Vec<AccessKey>, String> {
    if tenancy.aws_access_keys.is_empty() {
        return Ok(Vec::new());
    }
    let path = keys_path(dir);
    let mut secrets: BTreeMap<String, Entry> = if path.exists() {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        serde_yaml_ng::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        BTreeMap::new()
    };
    let mut keys = Vec::new();
    for (id, principal) in &tenancy.aws_access_keys {
        let new = !secrets.contains_key(id);
        if new {
            secrets.insert(
                id.clone(),
                Entry {
                    secret: new_secret(),
                },
            );
        }
        keys.push(AccessKey {
            id: id.clone(),
            principal: principal.clone(),
            new,
        });
    }
    let mut text = String::from(
        "# The AWS Batch gateway's keys file (keysFile), written by `qm auth`:\n# access key id -> secret. Keep it secret; only the gateway reads it.\n",
    );
    text.push_str(&serde_yaml_ng::to_string(&secrets).map_err(|e| e.to_string())?);
    write_private(&path, &text)?;
    let mut by_person: BTreeMap<&str, Vec<&AccessKey>> = BTreeMap::new();
    for k in &keys {
        by_person.entry(&k.principal).or_default().push(k);
    }
    for (person, theirs) in by_person {
        let mut text = format!(
            "# {person}'s keys for Quartermaster's AWS Batch gateway (written by `qm auth`).\n# Use with --profile quartermaster (or AWS_PROFILE=quartermaster) and the gateway's --endpoint-url.\n"
        );
        for (i, k) in theirs.iter().enumerate() {
            let profile = if i == 0 {
                "quartermaster".to_string()
            } else {
                format!("quartermaster-{}", i + 1)
            };
            let secret = &secrets[&k.id].secret;
            text.push_str(&format!(
                "[{profile}]\naws_access_key_id = {}\naws_secret_access_key = {secret}\n",
                k.id
            ));
        }
        write_private(&credentials_path(dir, person), &text)?;
    }
    Ok(keys)
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct KeyEntry {
    secret: String,
}

/// Reads a keys file (the gateway's and the console's `keysFile`):
/// access key id -> secret. Refused when any user may read it, or a secret
/// is shorter than 16 characters.
pub fn load_keys(path: &Path) -> Result<BTreeMap<String, String>, String> {
    let shown = path.display();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|e| format!("keysFile {shown}: {e}"))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o007 != 0 {
            return Err(format!(
                "keysFile {shown}: mode {mode:o} lets any user read the secrets; chmod 600 it"
            ));
        }
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("keysFile {shown}: {e}"))?;
    let keys: BTreeMap<String, KeyEntry> =
        serde_yaml_ng::from_str(&text).map_err(|e| format!("keysFile {shown}: {e}"))?;
    let mut out = BTreeMap::new();
    for (id, entry) in keys {
        if entry.secret.len() < 16 {
            return Err(format!(
                "keysFile {shown}: {id}: the secret is shorter than 16 characters"
            ));
        }
        out.insert(id, entry.secret);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_keys_file_must_be_private_and_its_secrets_long() {
        let dir = std::env::temp_dir().join(format!("qm-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("keys.yaml");
        let write = |text: &str, mode: u32| {
            std::fs::write(&path, text).expect("written");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        };
        write(
            "AKIAQMALICE00000001: {secret: 0123456789abcdef0123}\n",
            0o600,
        );
        let keys = load_keys(&path).expect("valid");
        assert_eq!(keys["AKIAQMALICE00000001"], "0123456789abcdef0123");
        write(
            "AKIAQMALICE00000001: {secret: 0123456789abcdef0123}\n",
            0o644,
        );
        assert!(load_keys(&path)
            .expect_err("world-readable")
            .contains("lets any user read the secrets; chmod 600"));
        write("AKIAQMALICE00000001: {secret: short}\n", 0o600);
        assert!(load_keys(&path)
            .expect_err("short")
            .contains("shorter than 16"));
        write(
            "AKIAQMALICE00000001: {secrte: 0123456789abcdef0123}\n",
            0o600,
        );
        assert!(load_keys(&path).expect_err("misspelt").contains("secrte"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn secrets_are_made_once_and_kept_private() {
        let with_keys = format!(
            "{}  gateway: [aws-gateway]\nawsAccessKeys:\n  AKIAALICE0000000001: alice\n",
            crate::tests::EXAMPLE
        );
        let t = Tenancy::parse(&with_keys).expect("valid");
        let dir = std::env::temp_dir().join(format!("qm-aws-keys-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let first = ensure_secrets(&t, &dir).expect("made");
        assert_eq!(
            first,
            [AccessKey {
                id: "AKIAALICE0000000001".into(),
                principal: "alice".into(),
                new: true
            }]
        );
        let keys = std::fs::read_to_string(keys_path(&dir)).expect("keys file");
        let creds = std::fs::read_to_string(credentials_path(&dir, "alice")).expect("creds");
        assert!(creds.contains("[quartermaster]\naws_access_key_id = AKIAALICE0000000001\n"));
        use std::os::unix::fs::PermissionsExt;
        for p in [keys_path(&dir), credentials_path(&dir, "alice")] {
            let mode = std::fs::metadata(&p).expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", p.display());
        }
        // Again: the same secret, marked kept.
        let again = ensure_secrets(&t, &dir).expect("kept");
        assert!(!again[0].new);
        assert_eq!(
            std::fs::read_to_string(keys_path(&dir)).expect("keys"),
            keys
        );
        let secret = creds
            .lines()
            .find_map(|l| l.strip_prefix("aws_secret_access_key = "))
            .expect("secret");
        assert_eq!(secret.len(), 64);
        assert!(keys.contains(secret));
        // No keys in the tenancy: nothing written.
        let plain = Tenancy::parse(crate::tests::EXAMPLE).expect("valid");
        let empty = dir.join("empty");
        assert!(ensure_secrets(&plain, &empty).expect("nothing").is_empty());
        assert!(!keys_path(&empty).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
