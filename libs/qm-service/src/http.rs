//! The one way every HTTP surface of Quartermaster is served (the AWS Batch
//! gateway, the console, and each service's metrics and health endpoint;
//! the gateway and the console read their listener settings alike,
//! [`Listener`]): HTTP/1.1 by
//! hyper, behind TLS when a certificate is configured, with the same limits
//! everywhere:
//!
//! - at most `max_connections` connections served at once (more wait in the
//!   listen queue), and at most `max_connections_per_client` from one IP
//!   address (more are closed as they arrive, so one client cannot take
//!   every slot);
//! - a TLS handshake, and each request's headers (and an idle connection's
//!   next request), within `header_read_timeout`;
//! - at most `max_header_bytes` of request line and headers (a larger head
//!   is answered 431 and the connection closed);
//! - a connection closed after `connection_lifetime`, whatever it does;
//! - on shutdown, no new connection accepted, each open one finishing the
//!   request it is answering (HTTP/1.1 graceful close), and whatever is still
//!   open after `drain_timeout` cut.
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

/// The listener settings the console and the gateway share: their
/// `listenAddress`, `tlsCertFile`, `tlsKeyFile`, `maxConnections` and
/// `maxConnectionsPerClient` keys, read and checked the same way. What each
/// allows without TLS is its own (the console never, the gateway on a
/// loopback address).
#[derive(Clone, Copy, Debug)]
pub struct Listener<'a> {
    pub listen_address: &'a str,
    pub tls_cert_file: &'a str,
    pub tls_key_file: &'a str,
    pub max_connections: usize,
    pub max_connections_per_client: usize,
}

impl Listener<'_> {
    /// Whether a certificate is set: serve HTTPS.
    pub fn tls(&self) -> bool {
        !self.tls_cert_file.is_empty()
    }

    /// The address, or (in `problems`) why `listenAddress` is not one.
    pub fn address(&self, problems: &mut Vec<String>) -> Option<std::net::SocketAddr> {
        match self.listen_address.parse::<std::net::SocketAddr>() {
            Ok(a) => Some(a),
            Err(e) => {
                problems.push(format!(
                    "listenAddress: {:?} is not host:port ({e})",
                    self.listen_address
                ));
                None
            }
        }
    }

    /// The problems of the shared keys but the address: a certificate
    /// without its key (or the reverse), connection limits out of range.
    pub fn problems(&self, problems: &mut Vec<String>) {
        if self.tls_cert_file.is_empty() != self.tls_key_file.is_empty() {
            problems.push("tlsCertFile, tlsKeyFile: give both or neither".into());
        }
        if !(1..=65_536).contains(&self.max_connections) {
            problems.push(format!(
                "maxConnections: {} is not 1 to 65536",
                self.max_connections
            ));
        }
        if !(1..=self.max_connections.max(1)).contains(&self.max_connections_per_client) {
            problems.push(format!(
                "maxConnectionsPerClient: {} is not 1 to maxConnections ({})",
                self.max_connections_per_client, self.max_connections
            ));
        }
    }

    /// The TLS configuration when a certificate is set (read now, so a bad
    /// file stops the service at start, naming the keys).
    pub fn tls_config(&self) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
        if !self.tls() {
            return Ok(None);
        }
        tls_config(self.tls_cert_file, self.tls_key_file)
            .map(Some)
            .map_err(|e| format!("tlsCertFile/tlsKeyFile: {e}"))
    }

    /// Listens on `listenAddress`.
    pub async fn bind(&self) -> Result<tokio::net::TcpListener, String> {
        tokio::net::TcpListener::bind(self.listen_address)
            .await
            .map_err(|e| format!("listenAddress {}: cannot listen: {e}", self.listen_address))
    }

    /// The surface's limits: the connection limits from the settings, the
    /// rest as the service sets them.
    pub fn limits(
        &self,
        header_read_timeout: Duration,
        max_header_bytes: usize,
        connection_lifetime: Duration,
        drain_timeout: Duration,
    ) -> Limits {
        Limits {
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            header_read_timeout,
            max_header_bytes,
            connection_lifetime,
            drain_timeout,
        }
    }
}

/// The limits of one HTTP surface.
#[derive(Clone, Debug)]
pub struct Limits {
    pub max_connections: usize,
    pub max_connections_per_client: usize,
    pub header_read_timeout: Duration,
    pub max_header_bytes: usize,
    pub connection_lifetime: Duration,
    /// How long a shutdown waits for open connections to finish.
    pub drain_timeout: Duration,
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
            drain_timeout: Duration::from_secs(5),
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

/// The address of the client a request came from, in every request's
/// extensions (a console trusts a proxy's header only from the proxy's
/// address).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(pub std::net::SocketAddr);

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

/// Serves `handler` on `listener` until `shutdown` completes, behind `tls`
/// when given, within `limits`. `refused` is called for each connection
/// closed as it arrived (its client had `max_connections_per_client`).
///
/// When `shutdown` completes the listener is closed, every open connection
/// finishes the request it is answering and closes, and `serve` returns once
/// all have, or after `limits.drain_timeout` with the rest cut.
pub async fn serve<H, F>(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    handler: H,
    refused: impl Fn(IpAddr) + Send + Sync + 'static,
    shutdown: impl Future<Output = ()>,
) where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let clients = Arc::new(PerClient::default());
    let (stop, stopping) = tokio::sync::watch::channel(false);
    let mut open = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        // Connections that ended since: their results, let go.
        while open.try_join_next().is_some() {}
        let permit = tokio::select! {
            _ = &mut shutdown => break,
            permit = Arc::clone(&slots).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Some(client) = clients.take(peer.ip(), limits.max_connections_per_client) else {
            refused(peer.ip());
            drop(stream);
            continue;
        };
        let (handler, acceptor, limits) = (handler.clone(), acceptor.clone(), limits.clone());
        let stopping = stopping.clone();
        open.spawn(async move {
            let _slots = (permit, client);
            match acceptor {
                Some(acceptor) => {
                    let Ok(Ok(tls)) =
                        tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream))
                            .await
                    else {
                        return;
                    };
                    connection(tls, peer, handler, &limits, stopping).await;
                }
                None => connection(stream, peer, handler, &limits, stopping).await,
            }
        });
    }
    drop(listener);
    let _ = stop.send(true);
    let drained = tokio::time::timeout(limits.drain_timeout, async {
        while open.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            connections = open.len(),
            "HTTP connections still open after the {:?} drain: cut",
            limits.drain_timeout
        );
        open.abort_all();
        while open.join_next().await.is_some() {}
    }
}

/// Serves one connection until it closes, its lifetime ends, or (once
/// `stopping` turns true) it has finished the request it was answering.
async fn connection<I, H, F>(
    io: I,
    peer: std::net::SocketAddr,
    handler: H,
    limits: &Limits,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<Full<Bytes>>> + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        req.extensions_mut().insert(Peer(peer));
        let answer = handler(req);
        async move { Ok::<_, Infallible>(answer.await) }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        // The head's own limit (431 past it): the read buffer's size alone
        // is not one, a single read may fill more.
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes.max(8192) * 2);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(io), service);
    tokio::pin!(conn);
    let lifetime = tokio::time::sleep(limits.connection_lifetime);
    tokio::pin!(lifetime);
    let mut draining = *stopping.borrow();
    if draining {
        conn.as_mut().graceful_shutdown();
    }
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = &mut lifetime => return,
            changed = stopping.changed(), if !draining => {
                if changed.is_err() || *stopping.borrow() {
                    draining = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn limits(drain: Duration) -> Limits {
        Limits {
            drain_timeout: drain,
            ..Limits::endpoint()
        }
    }

    /// Serves a handler that answers after `delay` (never when `None`),
    /// until the returned sender fires.
    async fn slow_server(
        delay: Option<Duration>,
        drain: Duration,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("bound address");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            None,
            limits(drain),
            move |_req| async move {
                match delay {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending::<()>().await,
                }
                Response::new(Full::new(Bytes::from_static(b"done")))
            },
            |_| {},
            async {
                let _ = rx.await;
            },
        ));
        (addr, tx, server)
    }

    async fn send_request(addr: std::net::SocketAddr) -> tokio::net::TcpStream {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"GET / HTTP/1.1\r\nhost: test\r\n\r\n")
            .await
            .expect("send a request");
        s
    }

    #[tokio::test]
    async fn a_shutdown_lets_the_request_in_flight_finish_then_refuses_new_connections() {
        let (addr, stop, server) =
            slow_server(Some(Duration::from_millis(400)), Duration::from_secs(10)).await;
        let mut client = send_request(addr).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send(()).expect("the server listens for the shutdown");
        let mut answer = String::new();
        tokio::time::timeout(Duration::from_secs(10), client.read_to_string(&mut answer))
            .await
            .expect("the connection closes once answered")
            .expect("read the answer");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with("done"), "{answer}");
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("serve returns once drained")
            .expect("serve did not panic");
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "the listener is closed"
        );
    }

    #[tokio::test]
    async fn a_connection_still_busy_after_the_drain_timeout_is_cut() {
        let (addr, stop, server) = slow_server(None, Duration::from_millis(300)).await;
        let mut client = send_request(addr).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop.send(()).expect("the server listens for the shutdown");
        tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("serve returns after its drain timeout")
            .expect("serve did not panic");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer))
            .await
            .expect("the cut connection is closed");
        assert!(
            read.is_err() || answer.is_empty(),
            "nothing answered: {answer:?}"
        );
    }
}
