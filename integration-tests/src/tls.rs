//! Certificates made at test time: a CA, and a server certificate for
//! 127.0.0.1 it signed; and an HTTPS client that trusts only that CA.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Files of a test CA and a server certificate for 127.0.0.1.
pub struct TestCerts {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca_pem: String,
}

/// Writes a CA (`ca.pem`) and a certificate it signed for 127.0.0.1
/// (`server.crt`, `server.key`) into `dir`.
pub fn make(dir: &Path, name: &str) -> TestCerts {
    let ca_key = rcgen::KeyPair::generate().expect("key");
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("quartermaster {name} test CA"),
    );
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA");
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
        .expect("params")
        .signed_by(&key, &issuer)
        .expect("cert");
    std::fs::create_dir_all(dir).expect("dir");
    let certs = TestCerts {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.crt"),
        key: dir.join("server.key"),
        ca_pem: ca_cert.pem(),
    };
    std::fs::write(&certs.ca, &certs.ca_pem).expect("ca");
    std::fs::write(&certs.cert, cert.pem()).expect("cert");
    std::fs::write(&certs.key, key.serialize_pem()).expect("key");
    certs
}

/// `GET path` over HTTPS to 127.0.0.1:`port`, trusting only `ca_pem`:
/// the status and body, or why it failed (a handshake refused, no answer).
pub async fn https_get(
    port: u16,
    path: &str,
    ca_pem: &str,
    authorization: Option<&str>,
) -> Result<(u16, String), String> {
    let tls = tls_to(port, ca_pem).await?;
    crate::observe::request_over(tls, port, "GET", path, authorization).await
}

/// One HTTP answer: status, headers (lowercase names) and body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Any request over HTTPS to 127.0.0.1:`port`, trusting only `ca_pem`,
/// with the headers and body given: what a browser, or an attacker, sends.
pub async fn https_request(
    port: u16,
    ca_pem: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer, String> {
    let tls = tls_to(port, ca_pem).await?;
    // Long enough for a console's live poll (25 s).
    let limit = Duration::from_secs(40);
    crate::observe::exchange(tls, port, method, path, headers, body, limit).await
}

/// A TLS connection to 127.0.0.1:`port`, trusting only `ca_pem`.
async fn tls_to(
    port: u16,
    ca_pem: &str,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, String> {
    use rustls_pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pki_types::CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = rustls_pki_types::ServerName::try_from("127.0.0.1").map_err(|e| e.to_string())?;
    let tls = tokio::time::timeout(Duration::from_secs(10), connector.connect(name, tcp))
        .await
        .map_err(|_| "no handshake within 10 s".to_string())?
        .map_err(|e| format!("handshake: {e}"))?;
    Ok(tls)
}
