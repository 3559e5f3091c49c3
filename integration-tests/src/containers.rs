//! Services in containers: each service from its own image
//! (`deploy/images/services.sh`, `make images`), on the Docker network of
//! the test's NATS and S3 servers, driven with the `docker` command line.
//!
//! Paths keep their meaning inside: the stack's directory (work
//! directories, attempt outputs) is mounted at the same path, and any
//! setting naming a file of this machine (a credentials file, the tenancy)
//! is mounted read-only at its own path, alone. The images run as user
//! 65532, so the stack's directory is opened to it and each mounted
//! credentials file made readable (these are a test's own temporary files).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The services' image names: `QM_IMAGE_PREFIX` (default `quartermaster/`)
/// and `QM_IMAGE_TAG` (default `local`), as `make images` tags them.
pub fn image_of(binary: &str) -> String {
    let prefix = std::env::var("QM_IMAGE_PREFIX").unwrap_or_else(|_| "quartermaster/".into());
    let tag = std::env::var("QM_IMAGE_TAG").unwrap_or_else(|_| "local".into());
    format!("{prefix}{binary}:{tag}")
}

/// Where the services' containers run and what they reach the servers by.
#[derive(Clone, Debug)]
pub struct Containers {
    pub network: String,
    /// NATS from inside the network.
    pub nats_url: String,
    /// S3 from inside the network.
    pub s3_endpoint: String,
    /// Every container's name starts with this.
    pub prefix: String,
    /// The metrics token every service requires (metrics are served on
    /// all interfaces inside the container, published on loopback).
    pub token: String,
    pub token_file: PathBuf,
}

/// The port every service serves its metrics on inside its container.
pub const METRICS_PORT: u16 = 9640;

/// Runs `docker args...`; its stdout, or the error with its stderr.
pub fn docker(args: &[&str]) -> Result<String, String> {
    let out = Command::new("docker")
        .args(args)
        .output()
        .map_err(|e| format!("docker {args:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "docker {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Containers {
    /// The container of service `name`.
    pub fn container(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    /// `docker run -d` of `binary`'s image as service `name`: the settings
    /// in `env` (host addresses and paths made to work inside), metrics
    /// published on `metrics_port` of this machine's loopback (None: as
    /// `env` says).
    pub fn run(
        &self,
        dir: &Path,
        name: &str,
        binary: &str,
        env: &[(String, String)],
        metrics_port: Option<u16>,
    ) -> Result<String, String> {
        let container = self.container(name);
        let _ = docker(&["rm", "-f", &container]);
        let mut args: Vec<String> = [
            "run",
            "-d",
            "--name",
            &container,
            "--hostname",
            name,
            "--network",
            &self.network,
            "--add-host",
            "host.docker.internal:host-gateway",
            "--label",
            "qm.test=stack",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut mounts = vec![format!("{}:{}", dir.display(), dir.display())];
        let mut settings = vec![
            ("QM_NATS_URL".to_string(), self.nats_url.clone()),
            (
                "RUST_LOG".into(),
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            ),
        ];
        if let Some(port) = metrics_port {
            settings.push((
                "QM_METRICS_ADDRESS".into(),
                format!("0.0.0.0:{METRICS_PORT}"),
            ));
            settings.push((
                "QM_METRICS_TOKEN_FILE".into(),
                self.token_file.display().to_string(),
            ));
            mounts.push(format!(
                "{}:{}:ro",
                self.token_file.display(),
                self.token_file.display()
            ));
            args.extend(["-p".into(), format!("127.0.0.1:{port}:{METRICS_PORT}")]);
        }
        for (k, v) in env {
            let v = match k.as_str() {
                "QM_NATS_URL" => self.nats_url.clone(),
                "QM_CHECKPOINT_S3_ENDPOINT" => self.s3_endpoint.clone(),
                k if k.starts_with("OTEL_EXPORTER_OTLP") => {
                    v.replace("127.0.0.1", "host.docker.internal")
                }
                _ => v.clone(),
            };
            // A file of this machine: mounted alone, read-only, at its
            // canonical path (`..` cannot be followed inside, where the
            // directories on the way do not exist).
            let path = Path::new(&v);
            let v = match path.canonicalize() {
                Ok(real) if path.is_absolute() && real.is_file() && !real.starts_with(dir) => {
                    make_readable(&real)?;
                    let real = real.display().to_string();
                    mounts.push(format!("{real}:{real}:ro"));
                    real
                }
                _ => v,
            };
            settings.push((k.clone(), v));
        }
        for m in mounts {
            args.extend(["-v".into(), m]);
        }
        for (k, v) in settings {
            args.extend(["-e".into(), format!("{k}={v}")]);
        }
        args.push(image_of(binary));
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        docker(&refs).map(|id| id.trim().to_string())
    }

    /// The container's output so far (stdout and stderr), or "" if gone.
    pub fn logs(&self, name: &str) -> String {
        let out = Command::new("docker")
            .args(["logs", &self.container(name)])
            .output();
        match out {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(_) => String::new(),
        }
    }

    pub fn running(&self, name: &str) -> bool {
        docker(&[
            "inspect",
            "-f",
            "{{ .State.Running }}",
            &self.container(name),
        ])
        .is_ok_and(|s| s.trim() == "true")
    }

    /// The exit code of a stopped container.
    pub fn exit_code(&self, name: &str) -> Option<i32> {
        docker(&[
            "inspect",
            "-f",
            "{{ .State.ExitCode }}",
            &self.container(name),
        ])
        .ok()
        .and_then(|s| s.trim().parse().ok())
    }

    /// Sends `signal` to the container's main process.
    pub fn signal(&self, name: &str, signal: &str) {
        let _ = docker(&["kill", "--signal", signal, &self.container(name)]);
    }

    pub fn remove(&self, name: &str) {
        let _ = docker(&["rm", "-f", &self.container(name)]);
    }
}

/// A credentials file mounted into a container is read there by user
/// 65532: readable by all (a test's own temporary file).
fn make_readable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mode = meta.permissions().mode();
    if mode & 0o004 == 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | 0o044))
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// Opens the stack's directory to the containers' user (65532).
pub fn open_dir(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777));
}
