//! The one way every HTTP surface of Quartermaster is served (the AWS Batch
//! gateway, and each service's metrics and health endpoint): HTTP/1.1 by
//! hyper, behind TLS when a certificate is configured, with the same limits
//! everywhere (issue 28):
//!
//! - at most `max_connections` connections served at once (more wait in the
//!   listen queue), and at most `max_connections_per_client` from one IP
//!   address (more are closed as they arrive, so one client cannot take
//!   every slot);
//! - a TLS handshake, and each request's headers (and an idle connection's
//!   next request), within `header_read_timeout`;
//! - at most `max_header_bytes` of request line and headers (a larger head
//!   is answered 431 and the connection closed);
//! - a connection closed after `connection_lifetime`, whatever it does.
//!
//! Request bodies are the handler's to read, with its own deadline and
//! budget (the gateway's `bodyReadTimeoutSeconds` and
//! `maxBodiesInFlightBytes`); the metrics endpoint reads none.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};

/// The limits of one HTTP surface.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    pub header_read_timeout: Duration,
    pub max_header_bytes: usize,
    pub connection_lifetime: Duration,
}

impl Limits {
    /// A metrics and health endpoint: a few scrapers, small requests.
    pub fn endpoint() -> Limits {
        Limits {
            max_connections: 64,
            max_connections_per_client: 16,
            header_read_timeout: Duration::from_secs(5),
            max_header_bytes: 16 * 1024,
            connection_lifetime: Duration::from_secs(60),
        }
    }
}

/// The TLS configuration of a certificate chain and its key (PEM files).
pub fn tls_config(cert_file: &str, key_file: &str) -> Result<Arc<rustls::ServerConfig>, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert_file)
        .and_then(|i| i.collect::<Result<_, _>>())
        .map_err(|e| format!("{cert_file}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("{cert_file}: no certificate in it"));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| format!("{key_file}: {e}"))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| format!("{cert_file}/{key_file}: {e}"))?;
    Ok(Arc::new(config))
}

/// Connections open per client address.
#[derive(Default)]
struct PerClient(Mutex<HashMap<IpAddr, usize>>);

/// One connection of a client, counted while it lives.
struct ClientSlot {
    clients: Arc<PerClient>,
    ip: IpAddr,
}

impl PerClient {
    /// A slot for one more connection from `ip`, unless it has `most`.
    fn take(self: &Arc<Self>, ip: IpAddr, most: usize) -> Option<ClientSlot> {
        let mut open = self.0.lock().ok()?;
        let n = open.entry(ip).or_insert(0);
        if *n >= most {
            return None;
        }
        *n += 1;
        Some(ClientSlot {
            clients: Arc::clone(self),
            ip,
        })
    }
}

impl Drop for ClientSlot {
    fn drop(&mut self) {
        if let Ok(mut open) = self.clients.0.lock() {
            if let Some(n) = open.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    open.remove(&self.ip);
                }
            }
        }
    }
}

/// Serves `handler` on `listener` until the listener fails, behind `tls`
/// when given, within `limits`. `refused` is called for each connection
/// closed as it arrived (its client had `max_connections_per_client`).
pub async fn serve<H, F>(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    handler: H,
    refused: impl Fn(IpAddr) + Send + Sync + 'static,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let clients = Arc::new(PerClient::default());
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Ok((stream, peer)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let Some(client) = clients.take(peer.ip(), limits.max_connections_per_client) else {
            refused(peer.ip());
            drop(stream);
            continue;
        };
        let (handler, acceptor, limits) = (handler.clone(), acceptor.clone(), limits.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let _client = client;
            let service = hyper::service::service_fn(move |req| {
                let answer = handler(req);
                async move { Ok::<_, Infallible>(answer.await) }
            });
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout)
                // The head's own limit (431 past it): the read buffer's
                // size alone is not one, a single read may fill more.
                .max_header_size(limits.max_header_bytes)
                .max_buf_size(limits.max_header_bytes.max(8192) * 2);
            match acceptor {
                Some(acceptor) => {
                    let Ok(Ok(tls)) =
                        tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream))
                            .await
                    else {
                        return;
                    };
                    let io = hyper_util::rt::TokioIo::new(tls);
                    let _ = tokio::time::timeout(
                        limits.connection_lifetime,
                        builder.serve_connection(io, service),
                    )
                    .await;
                }
                None => {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = tokio::time::timeout(
                        limits.connection_lifetime,
                        builder.serve_connection(io, service),
                    )
                    .await;
                }
            }
        });
    }
}
