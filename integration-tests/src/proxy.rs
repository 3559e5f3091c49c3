//! A TCP proxy the test controls, put between a service and NATS to cut a
//! node off (a network partition) and heal it again.
//!
//! `cut` closes every connection through the proxy at once and closes each
//! new one as soon as it is accepted (as a firewall dropping the node's
//! traffic would, from both sides' point of view: the service sees its
//! connection fail and cannot reconnect; the server sees the client gone);
//! `heal` lets connections through again.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    /// `nats://127.0.0.1:<port>`: give this to the service instead of the
    /// server's own URL.
    pub url: String,
    cut: Arc<AtomicBool>,
    /// Bumped on every cut: live connections watch it and close.
    cuts: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Forwards a local port to `target` (`host:port`).
    pub async fn start(target: &str) -> Proxy {
        let target: SocketAddr = tokio::net::lookup_host(target)
            .await
            .expect("resolvable target")
            .next()
            .expect("an address");
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a free port");
        let port = listener.local_addr().expect("bound").port();
        let cut = Arc::new(AtomicBool::new(false));
        let (cuts, _) = watch::channel(0u64);
        let task = {
            let cut = Arc::clone(&cut);
            let cuts = cuts.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        continue;
                    };
                    if cut.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let mut cut_signal = cuts.subscribe();
                    tokio::spawn(async move {
                        let Ok(mut server) = TcpStream::connect(target).await else {
                            return;
                        };
                        let mut client = client;
                        tokio::select! {
                            _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                            _ = cut_signal.changed() => {}
                        }
                    });
                }
            })
        };
        Proxy {
            url: format!("nats://127.0.0.1:{port}"),
            cut,
            cuts,
            task,
        }
    }

    /// Partitions: every connection through the proxy closes now, and new
    /// ones are refused until `heal`.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Lets connections through again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
