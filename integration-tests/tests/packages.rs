//! The release packages as a platform team installs them on a GPU node:
//! `make dist`'s Debian packages installed with dpkg on a Debian system
//! (a root file system made with mmdebstrap, no registry) booted with
//! systemd in a container, the services started by their hardened units,
//! and the three-share story run against them with NATS and S3 beside.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use qm_integration_tests::stack::{start_nats_in, Stack};
use qm_integration_tests::story::{three_shares, QUEUE_YAML};

const IMAGE: &str = "quartermaster/debian-systemd:local";
const SERVICES: [&str; 4] = [
    "qm-checkpoint",
    "qm-executor",
    "qm-admission",
    "qm-scheduler",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_path_buf()
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{what} failed:\n{text}");
    text
}

/// A container running systemd, removed when dropped.
struct Node {
    name: String,
}

impl Node {
    fn exec(&self, script: &str) -> std::process::Output {
        Command::new("docker")
            .args(["exec", &self.name, "sh", "-c", script])
            .output()
            .expect("docker exec runs")
    }

    fn ok(&self, script: &str) -> String {
        let out = self.exec(script);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success(),
            "{script}:\n{text}\n{}",
            self.journal()
        );
        text
    }

    fn write(&self, path: &str, text: &str) {
        let out = Command::new("docker")
            .args([
                "exec",
                "-i",
                &self.name,
                "sh",
                "-c",
                &format!("cat > {path}"),
            ])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut child| {
                use std::io::Write;
                child
                    .stdin
                    .take()
                    .expect("stdin")
                    .write_all(text.as_bytes())?;
                child.wait_with_output()
            })
            .expect("docker exec runs");
        assert!(out.status.success(), "writing {path}");
    }

    fn journal(&self) -> String {
        let out = self.exec(
            "for u in qm-admission qm-scheduler qm-checkpoint qm-executor; do echo \"--- $u\"; journalctl --no-pager -n 12 -u $u 2>&1; done",
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["rm", "-f", &self.name])
            .output();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_debian_packages_install_and_systemd_runs_the_services_through_the_story() {
    // The packages, from the binaries the tests built.
    let dist = std::env::temp_dir().join(format!("qm-dist-{}", std::process::id()));
    run(
        Command::new(root().join("deploy/packages/build.sh"))
            .env("QM_DIST_PROFILE", "dev")
            .env("QM_SKIP_BUILD", "1")
            .env("QM_DIST_DIR", &dist),
        "make dist",
    );
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).expect("SHA256SUMS");
    let debs: Vec<&str> = sums
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|f| f.ends_with(".deb"))
        .collect();
    assert_eq!(debs.len(), 7, "six services and the command line: {sums}");
    assert!(sums.contains("-linux.tar.gz"), "{sums}");
    // The Python client's wheel installs (pip, as a user would) and is the
    // whole API.
    let wheel = sums
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .find(|f| f.starts_with("quartermaster-") && f.ends_with("-py3-none-any.whl"))
        .unwrap_or_else(|| panic!("no wheel of the Python client: {sums}"));
    let python =
        qm_integration_tests::gateway::pinned_clients("../clients/python").join("bin/python");
    let site = dist.join("site");
    run(
        Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--no-deps", "--target"])
            .arg(&site)
            .arg(dist.join(wheel)),
        "pip installs the wheel",
    );
    let out = Command::new(&python)
        .args([
            "-c",
            "import quartermaster as qm; print(qm.__file__, len(qm.OPERATIONS))",
        ])
        .env("PYTHONPATH", &site)
        .output()
        .expect("python runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&site.display().to_string())
            && text
                .trim_end()
                .ends_with(&format!(" {}", qm_wire::subjects::Operation::ALL.len())),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    run(
        Command::new("sha256sum")
            .arg("-c")
            .arg("SHA256SUMS")
            .current_dir(&dist),
        "the sums check",
    );
    run(
        &mut Command::new(root().join("deploy/packages/debian-image.sh")),
        "the Debian image with systemd",
    );

    // NATS and S3 on a network the node joins; the node's work directory
    // is this test's, to read the jobs' output.
    let network = format!("qm-net-packages-{}", std::process::id());
    let nats = start_nats_in(&network).await;
    let s3 = qm_integration_tests::start_s3_on(Some(&network)).await;
    let mut stack = Stack::new(&nats, &s3, "packages").await;
    qm_integration_tests::containers::open_dir(&stack.dir);
    let node = Node {
        name: format!("qm-packages-{}", std::process::id()),
    };
    // systemd as process 1: it needs to mount (CAP_SYS_ADMIN) and to see
    // the cgroups; nothing else is granted.
    run(
        Command::new("docker").args([
            "run",
            "-d",
            "--name",
            &node.name,
            "--hostname",
            "gpu-node-1",
            "--network",
            &network,
            "--cap-add",
            "SYS_ADMIN",
            "-v",
            "/sys/fs/cgroup:/sys/fs/cgroup:ro",
            "--tmpfs",
            "/run",
            "--tmpfs",
            "/run/lock",
            "-e",
            "container=docker",
            "-v",
            &format!("{}:/dist:ro", dist.display()),
            "-v",
            &format!("{}:/var/lib/quartermaster", stack.dir.display()),
            IMAGE,
            "/lib/systemd/systemd",
        ]),
        "the node boots systemd",
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let state = node.exec("systemctl is-system-running");
        let said = String::from_utf8_lossy(&state.stdout).trim().to_string();
        if said == "running" || said == "degraded" {
            break;
        }
        assert!(Instant::now() < deadline, "systemd did not start: {said}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // dpkg installs them; nothing starts before it is configured.
    let installed = node.ok("dpkg -i /dist/*.deb");
    assert!(
        installed.contains("Setting up quartermaster-executor"),
        "{installed}"
    );
    let id = node.ok("id quartermaster");
    assert!(id.contains("(quartermaster)"), "a system user: {id}");
    let verify = node.ok("systemd-analyze verify /lib/systemd/system/qm-*.service 2>&1");
    assert!(
        verify.trim().is_empty(),
        "the units verify clean:\n{verify}"
    );
    for unit in SERVICES {
        let state = node.exec(&format!("systemctl is-active {unit}"));
        assert_eq!(
            String::from_utf8_lossy(&state.stdout).trim(),
            "inactive",
            "{unit} started before it was configured"
        );
    }
    let creds = node.ok("stat -c '%a %U %G' /etc/quartermaster/credentials");
    assert_eq!(creds.trim(), "750 root quartermaster");
    let qm = node.ok("qm --version && qm-trainer --help | head -1");
    assert!(qm.contains("qm "), "{qm}");
    let cli = run(
        Command::new("dpkg-deb")
            .arg("-c")
            .arg(dist.join(debs.iter().find(|d| d.contains("-cli_")).expect("cli"))),
        "the cli package's files",
    );
    for file in [
        "./usr/share/man/man1/qm.1.gz",
        "./usr/share/bash-completion/completions/qm",
    ] {
        assert!(cli.contains(file), "{file} in:\n{cli}");
    }

    // Configured as docs/packages.md says: keys, the tenancy, S3's key.
    for principal in ["admission", "scheduler", "node-1", "ckpt-node-1"] {
        let key = std::fs::read_to_string(stack.auth.key(principal)).expect("key");
        node.write(
            &format!("/etc/quartermaster/credentials/{principal}.nk"),
            &key,
        );
    }
    let tenancy = std::fs::read_to_string(&stack.auth.tenancy_file).expect("tenancy");
    node.write("/etc/quartermaster/tenancy.yaml", &tenancy);
    let url = nats.inside_url.clone().expect("NATS on the network");
    let endpoint = s3.inside_endpoint.clone().expect("S3 on the network");
    let edit = |file: &str, pairs: &[(&str, &str)]| {
        let mut script = String::new();
        for (key, value) in pairs {
            script.push_str(&format!(
                "sed -i 's|^{key}:.*|{key}: {value}|' /etc/quartermaster/{file}.yaml && "
            ));
        }
        script.push_str(&format!("grep -q . /etc/quartermaster/{file}.yaml"));
        node.ok(&script);
    };
    let cred = |p: &str| format!("/etc/quartermaster/credentials/{p}.nk");
    edit(
        "admission",
        &[("natsUrl", &url), ("natsNkeyFile", &cred("admission"))],
    );
    edit(
        "scheduler",
        &[("natsUrl", &url), ("natsNkeyFile", &cred("scheduler"))],
    );
    edit(
        "executor",
        &[
            ("natsUrl", &url),
            ("natsNkeyFile", &cred("node-1")),
            ("instances", "[{instanceType: ml.g5.xlarge, count: 3}]"),
        ],
    );
    edit(
        "checkpoint",
        &[
            ("natsUrl", &url),
            ("natsNkeyFile", &cred("ckpt-node-1")),
            ("s3Endpoint", &endpoint),
            ("s3Region", &s3.config.region),
            ("s3Bucket", &s3.config.bucket),
        ],
    );
    node.write(
        "/etc/quartermaster/checkpoint.env",
        &format!(
            "QM_CHECKPOINT_S3_ACCESS_KEY_ID={}\nQM_CHECKPOINT_S3_SECRET_ACCESS_KEY={}\n",
            s3.config.access_key_id, s3.config.secret_access_key
        ),
    );
    node.ok(
        "chown root:quartermaster /etc/quartermaster/credentials/* /etc/quartermaster/checkpoint.env \
         && chmod 0640 /etc/quartermaster/credentials/* /etc/quartermaster/checkpoint.env",
    );
    node.ok(&format!("systemctl enable --now {}", SERVICES.join(" ")));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !node
        .exec(&format!(
            "systemctl is-active --quiet {}",
            SERVICES.join(" ")
        ))
        .status
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "the services did not all start:\n{}",
            node.journal()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // As the units say: the system user, no new privileges, a read-only
    // system, the executor's stop timeout longer than its drain.
    for unit in SERVICES {
        let user = node.ok(&format!(
            "ps -o user= -p $(systemctl show -p MainPID --value {unit})"
        ));
        assert_eq!(user.trim(), "quartermaster", "{unit}");
    }
    let shown = node.ok(
        "systemctl show qm-executor -p NoNewPrivileges -p ProtectSystem -p TimeoutStopUSec -p KillMode -p Restart",
    );
    for want in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "TimeoutStopUSec=4min",
        "KillMode=mixed",
        "Restart=on-failure",
    ] {
        assert!(shown.contains(want), "{want} in:\n{shown}");
    }
    let denied = node.exec("runuser -u quartermaster -- touch /usr/bin/qm-owned");
    assert!(!denied.status.success(), "the service user writes /usr/bin");

    stack.apply(QUEUE_YAML).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !node
        .ok("journalctl --no-pager -u qm-executor")
        .contains("registered with the scheduler")
    {
        assert!(
            Instant::now() < deadline,
            "the executor did not register:\n{}",
            node.journal()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // The story against them, as the admin from this machine.
    stack.trainer_at = Some("/usr/bin/qm-trainer".into());
    let jobs = three_shares(&stack, None, None).await;
    println!(
        "packages: the story's jobs {} {} {} {}",
        jobs.p1, jobs.p2, jobs.p3, jobs.q2
    );

    // A crash is restarted by systemd.
    node.ok("kill -KILL $(systemctl show -p MainPID --value qm-scheduler)");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let restarts = node.ok("systemctl show -p NRestarts --value qm-scheduler");
        if restarts.trim() != "0"
            && node
                .exec("systemctl is-active --quiet qm-scheduler")
                .status
                .success()
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not restarted:\n{}",
            node.journal()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Stopped, the executor drains and exits within its stop timeout.
    let stopped = Instant::now();
    node.ok("systemctl stop qm-executor");
    assert!(stopped.elapsed() < Duration::from_secs(240));
    let log = node.ok("journalctl --no-pager -u qm-executor");
    assert!(!log.contains("State 'stop-sigterm' timed out"), "{log}");
    stack.stop_all();
    drop(node);
    let _ = std::fs::remove_dir_all(&dist);
}
