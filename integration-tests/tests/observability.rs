//! Health and metrics endpoints as operators and attackers meet them:
//! `/readyz` follows the services' NATS connection (and the checkpoint
//! service's S3), `/metrics` off loopback needs a bearer token, and the
//! endpoint serves nothing else and survives idle connections.

use std::time::Duration;

use qm_integration_tests::observe::{get, raw, wait_status, Metrics};
use qm_integration_tests::stack::{bin, free_port, running_on, start_nats_on};

const QUEUE_YAML: &str = include_str!("../../examples/queues/three-shares.yaml");

/// /metrics beyond loopback: the token, and nothing but the token; the
/// standby scheduler's metrics; nothing else is served, whatever the
/// method or path.
async fn assert_only_the_token_opens_metrics(exposed: u16, token: &str) {
    let (status, body) = get(exposed, "/metrics", None).await.expect("answers");
    assert_eq!(status, 401, "{body}");
    for wrong in [
        "Bearer wrong".to_string(),
        format!("Bearer {token}x"),
        format!("Bearer {}", &token[..token.len() - 1]),
        format!("bearer{token}"),
        format!("Basic {token}"),
        token.to_string(),
    ] {
        let (status, _) = raw(exposed, "GET", "/metrics", Some(&wrong))
            .await
            .expect("answers");
        assert_eq!(status, 401, "{wrong:?} must not be accepted");
    }
    let (status, _) = get(exposed, &format!("/metrics?token={token}"), None)
        .await
        .expect("answers");
    assert_eq!(
        status, 401,
        "a token in the query string is not a credential"
    );
    let standby = Metrics(prometheus_scrape(exposed, token).await);
    assert_eq!(
        standby.value("qm_scheduler_leader", &[]),
        0.0,
        "scheduler-2 stands by"
    );
    assert_eq!(standby.value("qm_nats_connected", &[]), 1.0);
    // Nothing else is served, whatever the method or path.
    for (method, path, expected) in [
        ("POST", "/metrics", 405),
        ("DELETE", "/readyz", 405),
        ("PUT", "/healthz", 405),
        ("GET", "/", 404),
        ("GET", "/metrics/../etc/passwd", 404),
        ("GET", "/debug/pprof", 404),
    ] {
        let (status, _) = raw(exposed, method, path, Some(&format!("Bearer {token}")))
            .await
            .expect("answers");
        assert_eq!(status, expected, "{method} {path}");
    }
}

/// The endpoint serves at most 16 connections from one address at once
/// (64 in all), and drops idle ones that never send a request after 5 s:
/// one client cannot hold it from the others (issue 28).
async fn assert_one_client_cannot_hold_the_endpoint(exposed: u16) {
    let limits = qm_service::http::Limits::endpoint();
    let opened = std::time::Instant::now();
    let mut idle = Vec::new();
    for _ in 0..limits.max_connections_per_client {
        idle.push(
            tokio::net::TcpStream::connect(("127.0.0.1", exposed))
                .await
                .expect("connects"),
        );
    }
    let mut extra = tokio::net::TcpStream::connect(("127.0.0.1", exposed))
        .await
        .expect("connects");
    let closed = tokio::time::timeout(Duration::from_secs(3), async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let _ = extra
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
            .await;
        let mut buf = [0u8; 64];
        extra.read(&mut buf).await.unwrap_or(0)
    })
    .await;
    // (Unless this machine took 4 s to open them: then they may be gone.)
    if opened.elapsed() < Duration::from_secs(4) {
        assert_eq!(
            closed.ok(),
            Some(0),
            "a 17th connection from one address is closed as it arrives"
        );
    }
    // Another client is answered at once.
    let other = {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind(std::net::SocketAddr::from(([127, 0, 0, 2], 0)))
            .expect("bind 127.0.0.2");
        socket
            .connect(std::net::SocketAddr::from(([127, 0, 0, 1], exposed)))
            .await
            .expect("connects")
    };
    let answered = tokio::time::timeout(
        Duration::from_secs(10),
        qm_integration_tests::observe::request_over(other, exposed, "GET", "/healthz", None),
    )
    .await;
    assert_eq!(
        answered.ok().and_then(Result::ok),
        Some((200, "ok\n".into())),
        "another client is served while one holds its 16"
    );
    drop(idle);
}

#[tokio::test(flavor = "multi_thread")]
async fn readiness_follows_nats_and_metrics_off_loopback_need_the_token() {
    let nats = start_nats_on(Some(free_port())).await;
    let (nats, _s3, mut stack) = running_on(nats, "observe", QUEUE_YAML).await;
    stack.executor("node-1", "training", "ml.g5.xlarge", 1);

    // A second scheduler serving on every interface, behind a token.
    let token = "s3cr3t-t0ken-for-prometheus";
    let token_file = stack.path().join("metrics-token");
    std::fs::write(&token_file, format!("{token}\n")).expect("token file");
    let exposed = free_port();
    stack.spawn_as(
        "scheduler-2",
        "qm-scheduler",
        "scheduler",
        &[
            (
                "QM_SCHEDULER_METRICS_ADDRESS".into(),
                format!("0.0.0.0:{exposed}"),
            ),
            (
                "QM_METRICS_TOKEN_FILE".into(),
                token_file.display().to_string(),
            ),
            ("QM_SCHEDULER_HOLDER".into(), "scheduler-2".into()),
        ],
    );
    let mut ports: Vec<(&str, u16)> = ["admission", "scheduler-1", "node-1", "checkpoint-node-1"]
        .into_iter()
        .map(|n| (n, stack.metrics_port(n)))
        .collect();
    ports.push(("scheduler-2", exposed));
    for (name, port) in &ports {
        let body = wait_status(*port, "/readyz", 200, 60).await;
        assert_eq!(body, "ready\n", "{name}");
        assert_eq!(
            get(*port, "/healthz", None).await,
            Ok((200, "ok\n".into())),
            "{name}"
        );
    }

    assert_only_the_token_opens_metrics(exposed, token).await;
    assert_one_client_cannot_hold_the_endpoint(exposed).await;

    // Over HTTPS when a certificate is given (issue 28): the token never
    // travels in clear; plain HTTP gets no answer.
    let certs = qm_integration_tests::tls::make(&stack.path().join("metrics-tls"), "metrics");
    let secure = free_port();
    stack.spawn_as(
        "scheduler-3",
        "qm-scheduler",
        "scheduler",
        &[
            (
                "QM_SCHEDULER_METRICS_ADDRESS".into(),
                format!("0.0.0.0:{secure}"),
            ),
            (
                "QM_METRICS_TOKEN_FILE".into(),
                token_file.display().to_string(),
            ),
            (
                "QM_METRICS_TLS_CERT_FILE".into(),
                certs.cert.display().to_string(),
            ),
            (
                "QM_METRICS_TLS_KEY_FILE".into(),
                certs.key.display().to_string(),
            ),
            ("QM_SCHEDULER_HOLDER".into(), "scheduler-3".into()),
        ],
    );
    let mut scraped = Err(String::new());
    for _ in 0..100 {
        scraped = qm_integration_tests::tls::https_get(
            secure,
            "/metrics",
            &certs.ca_pem,
            Some(&format!("Bearer {token}")),
        )
        .await;
        if scraped.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = scraped.expect("scraped over HTTPS");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("qm_nats_connected"), "{body}");
    assert!(
        get(secure, "/healthz", None).await.is_err(),
        "plain HTTP is not answered on the HTTPS endpoint"
    );
    let (status, _) = qm_integration_tests::tls::https_get(secure, "/metrics", &certs.ca_pem, None)
        .await
        .expect("answers");
    assert_eq!(status, 401, "over HTTPS too, the token is required");
    assert!(
        stack.log_of("scheduler-3").contains("metrics at https://"),
        "{}",
        stack.log_of("scheduler-3")
    );

    // `qm top` refreshes the queue's view from the API.
    let top = |queue: &str| {
        std::process::Command::new(bin("qm"))
            .args(["--nats", &stack.nats_url, "--nkey"])
            .arg(stack.auth.key("platform"))
            .args([
                "top",
                "--queue",
                queue,
                "--interval",
                "0.5",
                "--iterations",
                "2",
            ])
            .output()
            .expect("qm top runs")
    };
    let out = top("training");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(text.matches("qm top ").count(), 2, "{text}");
    assert_eq!(text.matches("front of queue").count(), 2, "{text}");
    for share in ["QS1", "QS2", "QS3"] {
        assert!(text.contains(share), "{text}");
    }
    // An unknown queue is an error at once (as `qm snapshot`'s), not a blank screen.
    let out = top("no-such-queue");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no-such-queue"),
        "{out:?}"
    );

    // NATS goes away: every service turns unready (and stays alive).
    nats.container.stop().await.expect("NATS stops");
    for (name, port) in &ports {
        let body = wait_status(*port, "/readyz", 503, 60).await;
        assert!(body.contains("NATS disconnected"), "{name}: {body}");
        assert_eq!(
            get(*port, "/healthz", None).await.map(|r| r.0),
            Ok(200),
            "{name}"
        );
    }
    // NATS returns: every service is ready again.
    nats.container.start().await.expect("NATS starts again");
    for (name, port) in &ports {
        let body = wait_status(*port, "/readyz", 200, 90).await;
        assert_eq!(body, "ready\n", "{name}");
    }
    stack.stop_all();
}

async fn prometheus_scrape(port: u16, token: &str) -> prometheus_parse::Scrape {
    Metrics::scrape(port, Some(token)).await.0
}

/// A service refuses to serve metrics beyond loopback without a token, or
/// with a token too short to be one, and names the setting.
#[test]
fn metrics_beyond_loopback_without_a_real_token_refuse_to_start() {
    let dir = std::env::temp_dir().join(format!("qm-observe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let short = dir.join("short-token");
    std::fs::write(&short, "abc").expect("token");
    for (env, expected) in [
        (vec![], "set metricsTokenFile"),
        (
            vec![("QM_METRICS_TOKEN_FILE", short.display().to_string())],
            "at least 16 characters",
        ),
        (
            vec![(
                "QM_METRICS_TOKEN_FILE",
                dir.join("missing").display().to_string(),
            )],
            "metricsTokenFile",
        ),
    ] {
        let out = std::process::Command::new(bin("qm-scheduler"))
            .env("QM_SCHEDULER_METRICS_ADDRESS", "0.0.0.0:9642")
            .envs(env)
            .output()
            .expect("qm-scheduler runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
    }
    let out = std::process::Command::new(bin("qm-scheduler"))
        .env("QM_SCHEDULER_METRICS_ADDRESS", "localhost:9642")
        .output()
        .expect("qm-scheduler runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("metricsAddress"), "{stderr}");
}

/// Logs a collector can read: through a pipe, text without colour codes;
/// with `QM_LOG_FORMAT=json`, one JSON object a line (any case of the
/// value); an unknown format is said, and text is logged.
#[test]
fn logs_are_plain_text_in_a_pipe_and_one_json_object_a_line_when_asked() {
    let run = |format: Option<&str>| {
        let mut cmd = std::process::Command::new(qm_integration_tests::stack::bin("qm-scheduler"));
        cmd.env("QM_NATS_URL", "nats://127.0.0.1:1")
            .env_remove("QM_LOG_FORMAT")
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        if let Some(f) = format {
            cmd.env("QM_LOG_FORMAT", f);
        }
        let mut child = cmd.spawn().expect("qm-scheduler starts");
        // It logs each failed try to reach NATS; a second is plenty.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let _ = child.kill();
        let out = child.wait_with_output().expect("its output");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let text = run(None);
    assert!(text.contains("NATS not reachable"), "{text}");
    assert!(!text.contains('\u{1b}'), "colour codes in a pipe: {text:?}");
    for format in ["json", "JSON"] {
        let json = run(Some(format));
        let lines: Vec<&str> = json.lines().collect();
        assert!(!lines.is_empty(), "{format}: nothing logged");
        for line in lines {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{format}: not one JSON object a line ({e}): {line}"));
            assert!(
                v["level"].is_string() && v["fields"]["message"].is_string(),
                "{line}"
            );
        }
    }
    let odd = run(Some("yaml"));
    assert!(odd.contains("unknown log format"), "{odd}");
    assert!(odd.contains("NATS not reachable"), "{odd}");
}
