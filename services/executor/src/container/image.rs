//! Images: pulled when not here (`IfNotPresent`), with the registry
//! credentials of a Docker `config.json`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use bollard::query_parameters::CreateImageOptionsBuilder;
use futures::StreamExt;

use crate::error::LaunchError;

use super::{engine_error, Engine};

impl Engine {
    /// Makes sure the image is here (pull policy `IfNotPresent` or
    /// `Always`), reporting pull progress lines to `progress`. A missing
    /// image or a refused pull is [`LaunchError::Image`] with the
    /// registry's reason.
    pub async fn ensure_image(
        &self,
        image: &str,
        progress: &(dyn Fn(String) + Send + Sync),
    ) -> Result<(), LaunchError> {
        let present = self.docker.inspect_image(image).await.is_ok();
        if present && self.settings.pull_policy == "IfNotPresent" {
            return Ok(());
        }
        let fail = |reason: String| LaunchError::Image {
            image: image.to_string(),
            reason,
        };
        progress(format!("pulling image {image}"));
        let options = CreateImageOptionsBuilder::default()
            .from_image(image)
            .build();
        let credentials = self.credentials.get(registry_of(image)).cloned();
        let mut pull = self.docker.create_image(Some(options), None, credentials);
        let mut last_report = std::time::Instant::now();
        while let Some(item) = pull.next().await {
            match item {
                Ok(info) => {
                    if let Some(detail) = info.error_detail.and_then(|d| d.message) {
                        return Err(fail(detail));
                    }
                    if last_report.elapsed() >= Duration::from_secs(2) {
                        last_report = std::time::Instant::now();
                        let status = info.status.unwrap_or_default();
                        let layer = info.id.unwrap_or_default();
                        let how_far = info
                            .progress_detail
                            .and_then(|d| Some(format!("{} of {} bytes", d.current?, d.total?)))
                            .unwrap_or_default();
                        progress(format!("pulling image {image}: {layer} {status} {how_far}"));
                    }
                }
                Err(e) => {
                    let reason = engine_error(e);
                    // `Always` with an image already here: a registry that
                    // cannot be reached leaves the local copy usable.
                    if present {
                        tracing::warn!(image, reason, "pull failed; running the local copy");
                        return Ok(());
                    }
                    return Err(fail(reason));
                }
            }
        }
        if self.docker.inspect_image(image).await.is_err() {
            return Err(fail("not present after the pull".into()));
        }
        progress(format!("pulled image {image}"));
        Ok(())
    }
}

/// The registry host of an image reference (`docker.io` for names without
/// one).
pub fn registry_of(image: &str) -> &str {
    match image.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

/// Registry credentials from a Docker `config.json` (`auths`: per host,
/// `auth` = base64 of `user:password`, or `username`/`password`).
pub fn read_credentials(
    path: &Path,
) -> Result<BTreeMap<String, bollard::auth::DockerCredentials>, String> {
    #[derive(serde::Deserialize)]
    struct Config {
        #[serde(default)]
        auths: BTreeMap<String, Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        auth: Option<String>,
        username: Option<String>,
        password: Option<String>,
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("container.registryAuthFile {}: {e}", path.display()))?;
    let config: Config = serde_json::from_str(&text).map_err(|e| {
        format!(
            "container.registryAuthFile {}: not a Docker config.json: {e}",
            path.display()
        )
    })?;
    let mut out = BTreeMap::new();
    for (host, entry) in config.auths {
        let host = host
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        // Docker writes Docker Hub's entry under its index host.
        let host = match host.as_str() {
            "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
            _ => host,
        };
        let (username, password) = match (&entry.auth, entry.username, entry.password) {
            (Some(auth), _, _) => {
                let decoded = base64_decode(auth).ok_or_else(|| {
                    format!(
                        "container.registryAuthFile {}: auths.{host}.auth is not base64 of user:password",
                        path.display()
                    )
                })?;
                match decoded.split_once(':') {
                    Some((u, p)) => (Some(u.to_string()), Some(p.to_string())),
                    None => {
                        return Err(format!(
                            "container.registryAuthFile {}: auths.{host}.auth is not base64 of user:password",
                            path.display()
                        ))
                    }
                }
            }
            (None, u, p) => (u, p),
        };
        out.insert(
            host.clone(),
            bollard::auth::DockerCredentials {
                username,
                password,
                serveraddress: Some(host),
                ..Default::default()
            },
        );
    }
    Ok(out)
}

fn base64_decode(text: &str) -> Option<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut bits: u32 = 0;
    let mut count = 0;
    let mut out = Vec::new();
    for b in text.trim().bytes().filter(|b| *b != b'=') {
        let v = ALPHABET.iter().position(|a| *a == b)? as u32;
        bits = (bits << 6) | v;
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registries_and_credentials_are_read_as_docker_writes_them() {
        assert_eq!(
            registry_of("registry.local:5000/team/trainer:1"),
            "registry.local:5000"
        );
        assert_eq!(registry_of("localhost/trainer"), "localhost");
        assert_eq!(
            registry_of("quartermaster/pytorch-trainer:local"),
            "docker.io"
        );
        assert_eq!(registry_of("ubuntu"), "docker.io");
        let dir = std::env::temp_dir().join(format!("qm-auth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("config.json");
        // base64("robot:s3cret")
        std::fs::write(
            &path,
            r#"{"auths":{"https://registry.local:5000/v2/":{"auth":"cm9ib3Q6czNjcmV0"},"other.io":{"username":"u","password":"p"}}}"#,
        )
        .expect("write");
        let creds = read_credentials(&path).expect("read");
        let c = &creds["registry.local:5000"];
        assert_eq!(
            (c.username.as_deref(), c.password.as_deref()),
            (Some("robot"), Some("s3cret"))
        );
        assert_eq!(creds["other.io"].username.as_deref(), Some("u"));
        std::fs::write(&path, r#"{"auths":{"x.io":{"auth":"bm9jb2xvbg=="}}}"#).expect("write");
        let err = read_credentials(&path).expect_err("no colon");
        assert!(err.contains("auths.x.io.auth"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
