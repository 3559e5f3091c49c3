//! `qm-probe URL`: the health check of Quartermaster's images, which are
//! FROM scratch and so have no shell, curl or wget. Sends one HTTP/1.1 GET
//! and exits 0 on a 2xx status, 1 on any other status or when the server
//! cannot be reached within the timeout, 2 on bad usage. Plain HTTP only:
//! probes go to the container's own loopback.
//!
//!   qm-probe http://127.0.0.1:9642/readyz
//!   qm-probe --timeout-ms 500 http://127.0.0.1:8222/healthz

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

const USAGE: &str = "usage: qm-probe [--timeout-ms N] http://HOST:PORT/PATH

Sends one GET and exits 0 on a 2xx answer, 1 otherwise (another status, no
answer within the timeout, default 2000 ms), 2 on bad usage. For container
health checks: Quartermaster's images have no shell or curl.";

/// The parts of a plain `http://` URL.
#[derive(Debug, PartialEq)]
struct Target {
    host: String,
    port: u16,
    path: String,
}

fn parse(url: &str) -> Result<Target, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url:?}: only http:// URLs can be probed"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("{url:?}: the port {p:?} is not a number"))?,
        ),
        None => (authority, 80),
    };
    if host.is_empty() {
        return Err(format!("{url:?}: no host"));
    }
    if path.chars().any(|c| c.is_control() || c == ' ') {
        return Err(format!(
            "{url:?}: the path has spaces or control characters"
        ));
    }
    Ok(Target {
        host: host.trim_start_matches('[').trim_end_matches(']').into(),
        port,
        path: path.into(),
    })
}

/// The status code of the answer to one GET.
fn status(target: &Target, timeout: Duration) -> Result<u16, String> {
    let addr = (target.host.as_str(), target.port)
        .to_socket_addrs()
        .map_err(|e| format!("{}: {e}", target.host))?
        .next()
        .ok_or_else(|| format!("{}: no address", target.host))?;
    let mut stream =
        TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("{addr}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    // One write of the whole request: `write!` on an unbuffered stream sends
    // each formatted piece as its own segment.
    let request = format!(
        "GET {} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: qm-probe\r\nConnection: close\r\n\r\n",
        target.path, target.host, target.port
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("{addr}: {e}"))?;
    // The status line is all that matters; read at most 1 KiB of the head.
    let mut head = Vec::new();
    let mut buf = [0u8; 256];
    while !head.contains(&b'\n') && head.len() < 1024 {
        let n = stream.read(&mut buf).map_err(|e| format!("{addr}: {e}"))?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    status_of(&head).ok_or_else(|| format!("{addr}: not an HTTP answer"))
}

fn status_of(head: &[u8]) -> Option<u16> {
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    if !words.next()?.starts_with("HTTP/1.") {
        return None;
    }
    words.next()?.parse().ok()
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let mut timeout = Duration::from_millis(2000);
    let mut url = None;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            "--version" => {
                println!("qm-probe {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            "--timeout-ms" => {
                match args.next().and_then(|v| v.parse::<u64>().ok()) {
                    Some(ms) if ms > 0 => timeout = Duration::from_millis(ms),
                    _ => {
                        eprintln!("qm-probe: --timeout-ms needs a positive number of milliseconds\n\n{USAGE}");
                        return ExitCode::from(2);
                    }
                }
            }
            _ if url.is_none() && !arg.starts_with('-') => url = Some(arg),
            _ => {
                eprintln!("qm-probe: unexpected argument {arg:?}\n\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(url) = url else {
        eprintln!("qm-probe: no URL\n\n{USAGE}");
        return ExitCode::from(2);
    };
    let target = match parse(&url) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("qm-probe: {e}");
            return ExitCode::from(2);
        }
    };
    match status(&target, timeout) {
        Ok(code) if (200..300).contains(&code) => ExitCode::SUCCESS,
        Ok(code) => {
            eprintln!("qm-probe: {url} answered {code}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("qm-probe: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn parses_plain_http_urls_and_names_what_is_wrong() {
        assert_eq!(
            parse("http://127.0.0.1:9642/readyz"),
            Ok(Target {
                host: "127.0.0.1".into(),
                port: 9642,
                path: "/readyz".into()
            })
        );
        assert_eq!(
            parse("http://localhost").map(|t| (t.port, t.path)),
            Ok((80, "/".into()))
        );
        assert_eq!(
            parse("http://[::1]:8222/healthz").map(|t| t.host),
            Ok("::1".into())
        );
        assert!(parse("https://x:1/")
            .expect_err("https://x:1/")
            .contains("only http://"));
        assert!(parse("http://x:port/")
            .expect_err("http://x:port/")
            .contains("not a number"));
        assert!(parse("http://:80/")
            .expect_err("http://:80/")
            .contains("no host"));
        assert!(parse("http://x:1/a b")
            .expect_err("http://x:1/a b")
            .contains("spaces"));
    }

    #[test]
    fn reads_the_status_line_only() {
        assert_eq!(status_of(b"HTTP/1.1 200 OK\r\n"), Some(200));
        assert_eq!(
            status_of(b"HTTP/1.0 503 Service Unavailable\r\nx: y\r\n"),
            Some(503)
        );
        assert_eq!(status_of(b"SSH-2.0-OpenSSH\r\n"), None);
        assert_eq!(status_of(b""), None);
    }

    /// A one-shot server answering `reply`; returns the request it saw.
    fn serve(reply: &'static str) -> (u16, std::thread::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let handle = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().expect("accept");
            // Read the whole head, however many segments it comes in.
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(reply.as_bytes());
            String::from_utf8_lossy(&seen).into_owned()
        });
        (port, handle)
    }

    #[test]
    fn gets_the_path_and_reports_the_status() {
        let (port, seen) = serve("HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n");
        let target = parse(&format!("http://127.0.0.1:{port}/readyz")).expect("url");
        assert_eq!(status(&target, Duration::from_secs(5)), Ok(503));
        assert!(seen
            .join()
            .expect("server")
            .starts_with("GET /readyz HTTP/1.1\r\n"));
    }

    #[test]
    fn a_closed_port_or_a_silent_server_is_unhealthy() {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("port")
            .port();
        let target = parse(&format!("http://127.0.0.1:{port}/")).expect("url");
        assert!(status(&target, Duration::from_secs(2)).is_err());
        // Accepts, never answers: the read times out.
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let target = parse(&format!("http://127.0.0.1:{port}/")).expect("url");
        let started = std::time::Instant::now();
        assert!(status(&target, Duration::from_millis(300)).is_err());
        assert!(started.elapsed() < Duration::from_secs(10));
        drop(listener);
    }
}
