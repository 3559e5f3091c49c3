//! The AWS Batch gateway as the demo and the tests start it, and the `aws
//! batch` command a person types against it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::stack::{free_port, Stack};
use crate::tls::TestCerts;

/// A gateway serving a stack.
pub struct GatewayProc {
    pub port: u16,
    /// `http(s)://127.0.0.1:<port>`.
    pub endpoint: String,
    pub region: String,
}

impl GatewayProc {
    /// Starts `qm-gateway` as `name` on `stack` with the keys file `keys`
    /// (HTTPS with `certs` when given), the example trainer's image run as
    /// a host command, and extra settings; waits until it serves.
    pub async fn start(
        stack: &mut Stack,
        name: &str,
        keys: &Path,
        certs: Option<&TestCerts>,
        region: &str,
        extra: &[(String, String)],
    ) -> GatewayProc {
        let port = free_port();
        let mut env = vec![
            (
                "QM_GATEWAY_TENANCY".to_string(),
                stack.auth.tenancy_file.display().to_string(),
            ),
            (
                "QM_GATEWAY_KEYS_FILE".to_string(),
                keys.display().to_string(),
            ),
            (
                "QM_GATEWAY_LISTEN_ADDRESS".to_string(),
                format!("127.0.0.1:{port}"),
            ),
            ("QM_GATEWAY_REGION".to_string(), region.to_string()),
            // The example trainer's "image" is this host's binary: run as a
            // host command (container jobs: tests/containers.rs).
            (
                "QM_GATEWAY_HOST_COMMAND_IMAGES".to_string(),
                r#"["quartermaster/qm-trainer:local"]"#.to_string(),
            ),
        ];
        if let Some(c) = certs {
            env.push((
                "QM_GATEWAY_TLS_CERT_FILE".to_string(),
                c.cert.display().to_string(),
            ));
            env.push((
                "QM_GATEWAY_TLS_KEY_FILE".to_string(),
                c.key.display().to_string(),
            ));
        }
        env.extend(extra.iter().cloned());
        stack.spawn_as(name, "qm-gateway", "gateway", &env);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !stack.log_of(name).contains("AWS Batch API at") {
            assert!(
                std::time::Instant::now() < deadline,
                "the gateway did not start:\n{}",
                stack.log_of(name)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let scheme = if certs.is_some() { "https" } else { "http" };
        GatewayProc {
            port,
            endpoint: format!("{scheme}://127.0.0.1:{port}"),
            region: region.to_string(),
        }
    }

    /// The `aws batch` command line (the AWS CLI, unchanged) that runs
    /// `args` against this gateway as the holder of `key_id` and `secret`,
    /// trusting `ca` (for HTTPS).
    pub fn aws_command(&self, key_id: &str, secret: &str, ca: Option<&Path>, args: &str) -> String {
        aws_command(&self.endpoint, &self.region, key_id, secret, ca, args)
    }
}

/// The `aws batch` command line against `endpoint` (see
/// [`GatewayProc::aws_command`]).
pub fn aws_command(
    endpoint: &str,
    region: &str,
    key_id: &str,
    secret: &str,
    ca: Option<&Path>,
    args: &str,
) -> String {
    let ca = ca.map_or_else(String::new, |c| format!(" --ca-bundle {}", c.display()));
    format!(
        "AWS_ACCESS_KEY_ID={key_id} AWS_SECRET_ACCESS_KEY={secret} aws batch {args} --endpoint-url {endpoint} --region {region}{ca}"
    )
}

/// The pinned AWS clients' virtual environment (`integration-tests/aws`,
/// installed on first use): boto3 and the AWS CLI.
pub fn aws_clients() -> PathBuf {
    pinned_clients("aws")
}

/// The virtual environment of the pinned Python clients under
/// `integration-tests/<dir>` (its `setup.sh` installs them on first use and
/// prints the environment's path).
pub fn pinned_clients(dir: &str) -> PathBuf {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(dir)
        .join("setup.sh");
    let out = std::process::Command::new(&script)
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", script.display()));
    assert!(
        out.status.success(),
        "installing the clients of integration-tests/{dir} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}
