//! `qm simulate` as a user runs it: the real binary, its output and exit codes.

use std::process::Command;

fn qm(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_qm"))
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .output()
        .expect("qm runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn simulate_prints_a_timeline_a_reader_can_follow() {
    let (code, out, err) = qm(&["simulate", "examples/scenarios/three-shares.yaml"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("Timeline of queue training"), "{out}");
    assert!(
        out.contains("PREEMPTION_IN_PROGRESS: CROSS_SHARE preemption to run qs2_job"),
        "{out}"
    );
    assert!(out.contains("p2  CROSS_SHARE  for qs2_job"), "{out}");
    assert!(out.contains("p3  IN_SHARE     for p1"), "{out}");
    assert!(out.contains("jobs: SUCCEEDED 4"), "{out}");
}

#[test]
fn simulate_json_is_one_document() {
    let (code, out, _) = qm(&[
        "simulate",
        "examples/scenarios/three-shares.yaml",
        "--output",
        "json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["summary"]["preemptions"]["total"], 2);
    let (code, out, _) = qm(&[
        "simulate",
        "examples/scenarios/contention.yaml",
        "--summary",
        "--output",
        "json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["jobsByStatus"]["SUCCEEDED"], 3000);
}

#[test]
fn errors_are_one_clear_line_and_exit_2() {
    let (code, out, err) = qm(&["simulate", "no/such/file.yaml"]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("qm: error: cannot read no/such/file.yaml"),
        "{err}"
    );
    let (code, _, err) = qm(&[
        "simulate",
        "examples/scenarios/three-shares.yaml",
        "--until=-5",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--until must be a number of seconds >= 0"),
        "{err}"
    );
}

#[test]
fn live_commands_report_bad_usage_and_an_absent_server_in_one_line() {
    // Nothing listens on port 1: usage is checked before connecting.
    let (code, _, err) = qm(&["--nats", "nats://127.0.0.1:1", "submit", "--queue", "q"]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        err.trim(),
        "qm: error: submit needs --share, --type, the command (after --) or --image"
    );
    let (code, _, err) = qm(&[
        "--nats",
        "nats://127.0.0.1:1",
        "submit",
        "--queue",
        "q",
        "--share",
        "s",
        "--type",
        "t",
        "--checkpoint-s3-uri",
        "s3://bucket",
        "--",
        "train",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.trim()
            .starts_with("qm: error: --checkpoint-s3-uri: \"s3://bucket\" needs a prefix"),
        "{err}"
    );
    let (code, _, err) = qm(&["--nats", "nats://127.0.0.1:1", "describe", "j-1"]);
    assert_eq!(code, 3, "{err}");
    assert!(
        err.starts_with("qm: error: cannot connect to NATS at nats://127.0.0.1:1"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn auth_writes_the_server_authorization_and_keeps_existing_keys() {
    let dir = std::env::temp_dir().join(format!("qm-cli-auth-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out_dir = dir.display().to_string();
    let (code, out, err) = qm(&[
        "auth",
        "--tenancy",
        "deploy/tenancy.dev.yaml",
        "--out",
        &out_dir,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("alice") && out.contains("team vision") && out.contains("(new)"),
        "{out}"
    );
    let conf = std::fs::read_to_string(dir.join("nats-auth.conf")).expect("written");
    assert!(
        conf.contains("authorization {") && conf.contains("\"qm.v1.api.alice.>\""),
        "{conf}"
    );
    let key = std::fs::read_to_string(dir.join("alice.nk")).expect("written");
    // The AWS Batch gateway's keys file, and alice's AWS credentials.
    assert!(
        out.contains("gateway-keys.yaml") && out.contains("AKIAQMALICE00000001"),
        "{out}"
    );
    let aws = std::fs::read_to_string(dir.join("alice.aws-credentials")).expect("written");
    assert!(
        aws.contains("[quartermaster]\naws_access_key_id = AKIAQMALICE00000001\n"),
        "{aws}"
    );
    let gateway_keys = std::fs::read_to_string(dir.join("gateway-keys.yaml")).expect("written");
    let (code, out, err) = qm(&[
        "auth",
        "--tenancy",
        "deploy/tenancy.dev.yaml",
        "--out",
        &out_dir,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(kept)") && !out.contains("(new)"), "{out}");
    assert_eq!(
        std::fs::read_to_string(dir.join("alice.nk")).expect("kept"),
        key
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("gateway-keys.yaml")).expect("kept"),
        gateway_keys,
        "the secrets are kept"
    );
    let (code, out, _) = qm(&["auth", "--tenancy", "deploy/tenancy.dev.yaml", "--check"]);
    assert_eq!(code, 0);
    assert!(out.contains("valid (3 team(s)"), "{out}");
    // A broken tenancy file: every problem named, nothing written.
    let bad = dir.join("bad.yaml");
    std::fs::write(
        &bad,
        "teams:\n  t: {shares: [nope], users: [alice]}\nadmins: [alice]\n",
    )
    .expect("write");
    let (code, _, err) = qm(&["auth", "--tenancy", &bad.display().to_string(), "--check"]);
    assert_eq!(code, 1, "{err}");
    for needle in [
        "teams.t.shares[0]: \"nope\" must be queue/share or queue/*",
        "admins[0]: principal \"alice\" is already declared",
        "services.admission: name at least one admission principal",
    ] {
        assert!(err.contains(needle), "{needle:?} missing in {err}");
    }
    let (code, _, err) = qm(&["auth", "--tenancy", "deploy/tenancy.dev.yaml"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--out DIR is required"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn audit_times_and_credentials_are_checked_before_connecting() {
    let (code, _, err) = qm(&["audit", "--since", "yesterday"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--since: \"yesterday\" is not a time"),
        "{err}"
    );
    let (code, _, err) = qm(&["whoami", "--user", "alice"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--user and --password: give both or neither"),
        "{err}"
    );
    let (code, _, err) = qm(&["whoami", "--nkey", "/nonexistent/alice.nk"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--nkey: /nonexistent/alice.nk cannot be read"),
        "{err}"
    );
}

#[test]
fn tenancy_commands_check_their_input_before_connecting() {
    // Nothing listens on port 1: each is refused before any connection.
    let far = ["--nats", "nats://127.0.0.1:1"];
    let args = |rest: &[&'static str]| far.iter().chain(rest).copied().collect::<Vec<_>>();
    let (code, _, err) = qm(&args(&["tenancy", "apply", "-f", "no/such/tenancy.yaml"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no/such/tenancy.yaml: cannot read"), "{err}");
    let dir = std::env::temp_dir().join(format!("qm-cli-tenancy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "teams:\n  vision: {shares: [training], users: []}\n").expect("write");
    let bad = bad.display().to_string();
    let (code, _, err) = qm(&far
        .iter()
        .copied()
        .chain(["tenancy", "diff", "-f", bad.as_str()])
        .collect::<Vec<_>>());
    assert_eq!(code, 2, "{err}");
    for needle in [
        "must be queue/share",
        "at least one user",
        "services.admission",
    ] {
        assert!(err.contains(needle), "{needle:?} missing in {err}");
    }
    let out = dir.join("auth.conf").display().to_string();
    let (code, _, err) = qm(&far
        .iter()
        .copied()
        .chain(["tenancy", "sync-nats", "--out", out.as_str()])
        .collect::<Vec<_>>());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--pid-file FILE (SIGHUP), or a command after --"),
        "{err}"
    );
    let (code, _, err) = qm(&args(&[
        "tenancy",
        "sync-nats",
        "--out",
        "/no/such/dir/auth.conf",
        "--pid-file",
        "/run/nats.pid",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("/no/such/dir does not exist"), "{err}");
    let (code, out, _) = qm(&["tenancy", "rotate-key", "--help"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("--finish") && out.contains("<PRINCIPAL>"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn completions_and_man_pages_come_from_the_command_definitions() {
    let (code, out, err) = qm(&["completions", "bash"]);
    assert_eq!(code, 0, "{err}");
    for word in ["tenancy", "rotate-key", "sync-nats", "submit", "--profile"] {
        assert!(
            out.contains(word),
            "{word} missing from the bash completions"
        );
    }
    let (code, out, _) = qm(&["completions", "zsh"]);
    assert_eq!(code, 0);
    assert!(out.contains("#compdef qm"), "{out}");
    let (code, _, err) = qm(&["completions", "tcsh"]);
    assert_eq!(code, 2);
    assert!(err.contains("tcsh") && err.contains("bash"), "{err}");
    let dir = std::env::temp_dir().join(format!("qm-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = qm(&["man", "--out", &dir.display().to_string()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("wrote "), "{out}");
    let page =
        std::fs::read_to_string(dir.join("qm-tenancy-apply.1")).expect("a page per subcommand");
    assert!(
        page.contains(".TH qm-tenancy-apply") && page.contains("dry"),
        "{page}"
    );
    assert!(dir.join("qm.1").exists() && dir.join("qm-submit.1").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_profile_names_the_server_and_the_credentials() {
    let dir = std::env::temp_dir().join(format!("qm-cli-profile-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("config.yaml");
    std::fs::write(
        &file,
        "default: far\nprofiles:\n  far: {nats: 'nats://127.0.0.1:1'}\n",
    )
    .expect("written");
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_qm"))
            .args(args)
            .env("QM_CONFIG", &file)
            .env_remove("QM_NATS_URL")
            .env_remove("QM_PROFILE")
            .output()
            .expect("qm runs");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // The profile's server is the one tried (nothing listens there).
    let (code, err) = run(&["list", "--queue", "q"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("nats://127.0.0.1:1"), "{err}");
    let (code, err) = run(&["--profile", "near", "list", "--queue", "q"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no profile \"near\"") && err.contains("far"),
        "{err}"
    );
    let (code, err) = run(&["--nats", "nats://127.0.0.1:2", "list", "--queue", "q"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("nats://127.0.0.1:2"), "a flag wins: {err}");
    // qm auth writes one per person (never per service), naming the server.
    let creds = dir.join("auth");
    let creds_s = creds.display().to_string();
    let (code, _, err) = qm(&[
        "auth",
        "--tenancy",
        "deploy/tenancy.dev.yaml",
        "--out",
        &creds_s,
        "--profiles",
    ]);
    assert_eq!(code, 2, "--profiles without --nats: {err}");
    assert!(err.contains("--profiles needs --nats"), "{err}");
    let (code, _, err) = qm(&[
        "--nats",
        "tls://q.example:4222",
        "auth",
        "--tenancy",
        "deploy/tenancy.dev.yaml",
        "--out",
        &creds_s,
        "--profiles",
    ]);
    assert_eq!(code, 0, "{err}");
    let alice = std::fs::read_to_string(creds.join("alice.config.yaml")).expect("alice's profile");
    assert!(
        alice.contains("tls://q.example:4222") && alice.contains("nkey: alice.nk"),
        "{alice}"
    );
    assert!(
        creds.join("platform.config.yaml").exists(),
        "admins get one"
    );
    assert!(
        !creds.join("scheduler.config.yaml").exists(),
        "services get none"
    );
    assert!(
        creds.join("alice.seed").exists(),
        "the seed for NATS's own clients"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
