//! Starting, stopping and signalling the services, and their logs.

use super::*;

impl Stack {
    /// Starts a service binary as `name`, acting as `principal`, with extra
    /// environment; its output goes to `<dir>/<name>.log`.
    pub fn spawn_as(
        &mut self,
        name: &str,
        binary: &str,
        principal: &str,
        env: &[(String, String)],
    ) {
        let mut all = vec![(
            "QM_NATS_NKEY_FILE".to_string(),
            self.auth.key(principal).display().to_string(),
        )];
        all.extend(self.service_env.iter().cloned());
        all.extend(env.iter().cloned());
        self.spawn(name, binary, &all);
    }

    /// Starts a service binary as `name` with extra environment (and no
    /// credentials unless `env` gives them); its output goes to
    /// `<dir>/<name>.log`.
    pub fn spawn(&mut self, name: &str, binary: &str, env: &[(String, String)]) {
        self.specs
            .insert(name.to_string(), (binary.to_string(), env.to_vec()));
        if let Some(c) = &self.containers {
            let port = (!env.iter().any(|(k, _)| k.ends_with("METRICS_ADDRESS"))).then(free_port);
            c.run(&self.dir, name, binary, env, port)
                .unwrap_or_else(|e| panic!("cannot start {name} in a container: {e}"));
            if let Some(port) = port {
                self.metrics.insert(name.to_string(), port);
            }
            self.procs.insert(name.to_string(), Proc::Container);
            return;
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("{name}.log")))
            .expect("log file");
        // Every process serves its metrics on a port of its own.
        let mut metrics = Vec::new();
        if !env.iter().any(|(k, _)| k.ends_with("METRICS_ADDRESS")) {
            let port = free_port();
            self.metrics.insert(name.to_string(), port);
            metrics.push(("QM_METRICS_ADDRESS", format!("127.0.0.1:{port}")));
        }
        let child = Command::new(bin(binary))
            .env("QM_NATS_URL", &self.nats_url)
            .envs(metrics)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().cloned())
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {binary}: {e}"));
        self.procs.insert(name.to_string(), Proc::Process(child));
    }

    /// Starts service `name` again as it was started last (after it was
    /// stopped): the same binary (or image) and settings.
    pub fn restart(&mut self, name: &str) {
        let (binary, env) = self
            .specs
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} was never started"));
        assert!(
            !self.procs.contains_key(name),
            "{name} is still running: stop it first"
        );
        self.spawn(name, &binary, &env);
    }

    /// Runs the services from here on in containers (one per service, from
    /// the service images) on the Docker network of `nats` and `s3`.
    pub fn use_containers(&mut self, nats: &Nats, s3: &S3Server, network: &str) {
        // 24 random bytes, as an operator's `openssl rand -hex 24`.
        let mut random = [0u8; 24];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").expect("/dev/urandom"),
            &mut random,
        )
        .expect("random bytes");
        let token = hex::encode(random);
        let token_file = self.dir.join("metrics-token");
        std::fs::write(&token_file, &token).expect("token file");
        crate::containers::open_dir(&self.dir);
        self.containers = Some(crate::containers::Containers {
            network: network.to_string(),
            nats_url: nats
                .inside_url
                .clone()
                .expect("NATS started on the services' network"),
            s3_endpoint: s3
                .inside_endpoint
                .clone()
                .expect("S3 started on the services' network"),
            prefix: format!(
                "qm-{}-{}",
                self.dir
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default()
                    .trim_start_matches("qm-stack-"),
                free_port()
            ),
            token,
            token_file,
        });
    }

    /// Whether the services run in containers.
    pub fn in_containers(&self) -> bool {
        self.containers.is_some()
    }

    /// Scrapes service `name`'s metrics (with the token where one is needed).
    pub async fn scrape(&self, name: &str) -> crate::observe::Metrics {
        let token = self.containers.as_ref().map(|c| c.token.clone());
        crate::observe::Metrics::scrape(self.metrics_port(name), token.as_deref()).await
    }

    /// The example trainer as a job's command sees it: this machine's
    /// binary, or the one in the executor's image.
    pub fn trainer(&self) -> String {
        if let Some(path) = &self.trainer_at {
            path.clone()
        } else if self.containers.is_some() {
            "/qm-trainer".into()
        } else {
            bin("qm-trainer").display().to_string()
        }
    }

    /// [`trainer_job`] with the trainer where this stack's executors find it.
    pub fn trainer_job(
        &self,
        name: &str,
        queue: &str,
        share: &str,
        priority: u32,
        args: &[&str],
    ) -> SubmitServiceJob {
        let mut job = trainer_job(name, queue, share, priority, args);
        job.command[0] = self.trainer();
        job
    }

    /// The port `name` serves its metrics and health endpoints on.
    pub fn metrics_port(&self, name: &str) -> u16 {
        *self
            .metrics
            .get(name)
            .unwrap_or_else(|| panic!("{name} serves no metrics here"))
    }

    pub fn admission(&mut self) {
        self.admission_named("admission");
    }

    /// An admission replica named `name` (replicas share the `admission`
    /// principal and split the requests between them).
    pub fn admission_named(&mut self, name: &str) {
        let env = vec![
            (
                "QM_ADMISSION_TENANCY".to_string(),
                self.auth.tenancy_file.display().to_string(),
            ),
            (
                "QM_ADMISSION_CHECKPOINT_BUCKET".to_string(),
                self.s3.bucket.clone(),
            ),
        ];
        let env: Vec<(String, String)> =
            env.into_iter().chain(self.admission_env.clone()).collect();
        self.spawn_as(name, "qm-admission", "admission", &env);
    }

    pub fn scheduler(&mut self, name: &str) {
        let mut env = self.scheduler_env.clone();
        env.push(("QM_SCHEDULER_HOLDER".into(), name.into()));
        self.spawn_as(name, "qm-scheduler", "scheduler", &env);
    }

    /// A checkpoint service for `node`.
    /// (Nothing if it runs already: an executor restarted alone keeps it.)
    pub fn checkpoint(&mut self, node: &str) {
        if self.procs.contains_key(&format!("checkpoint-{node}")) {
            return;
        }
        let s3 = &self.s3;
        let env = vec![
            ("QM_CHECKPOINT_NODE".into(), node.to_string()),
            (
                "QM_CHECKPOINT_S3_ENDPOINT".into(),
                s3.endpoint.clone().unwrap_or_default(),
            ),
            ("QM_CHECKPOINT_S3_REGION".into(), s3.region.clone()),
            ("QM_CHECKPOINT_S3_BUCKET".into(), s3.bucket.clone()),
            (
                "QM_CHECKPOINT_S3_ACCESS_KEY_ID".into(),
                s3.access_key_id.clone(),
            ),
            (
                "QM_CHECKPOINT_S3_SECRET_ACCESS_KEY".into(),
                s3.secret_access_key.clone(),
            ),
            ("QM_CHECKPOINT_SCAN_INTERVAL_MS".into(), "300".into()),
        ];
        let mut env: Vec<(String, String)> =
            env.into_iter().chain(self.checkpoint_env.clone()).collect();
        env.push((
            "QM_CHECKPOINT_WORK_DIR".into(),
            self.dir.join(node).display().to_string(),
        ));
        self.spawn_as(
            &format!("checkpoint-{node}"),
            "qm-checkpoint",
            &format!("ckpt-{node}"),
            &env,
        );
    }

    /// An executor (acting as principal `id`) offering `count` instances
    /// of `instance_type`, without a checkpoint service (for jobs that do
    /// not checkpoint).
    pub fn executor_alone(&mut self, id: &str, queue: &str, instance_type: &str, count: u32) {
        self.spawn_executor(id, ("QM_EXECUTOR_JOB_QUEUE", queue), instance_type, count);
    }

    /// An executor (with its node's checkpoint service) that joins service
    /// environment `env`: it serves every queue attached to it.
    pub fn executor_joining(&mut self, id: &str, env: &str, instance_type: &str, count: u32) {
        self.checkpoint(id);
        self.spawn_executor(
            id,
            ("QM_EXECUTOR_SERVICE_ENVIRONMENT", env),
            instance_type,
            count,
        );
    }

    fn spawn_executor(&mut self, id: &str, serves: (&str, &str), instance_type: &str, count: u32) {
        let instances = format!(r#"[{{"instanceType":"{instance_type}","count":{count}}}]"#);
        let env = vec![
            ("QM_EXECUTOR_EXECUTOR_ID".into(), id.to_string()),
            (serves.0.to_string(), serves.1.to_string()),
            ("QM_EXECUTOR_INSTANCES".into(), instances),
            (
                "QM_EXECUTOR_WORK_DIR".into(),
                self.dir.join(id).display().to_string(),
            ),
        ];
        let env: Vec<(String, String)> = env.into_iter().chain(self.executor_env.clone()).collect();
        self.spawn_as(id, "qm-executor", id, &env);
        if !self.executors.iter().any(|e| e == id) {
            self.executors.push(id.to_string());
        }
    }

    /// The process id of service `name` (None: not running as a process).
    pub fn pid(&self, name: &str) -> Option<u32> {
        match self.procs.get(name) {
            Some(Proc::Process(child)) => Some(child.id()),
            _ => None,
        }
    }

    /// An executor offering `count` instances of `instance_type`, with its
    /// node's checkpoint service.
    pub fn executor(&mut self, id: &str, queue: &str, instance_type: &str, count: u32) {
        self.checkpoint(id);
        self.executor_alone(id, queue, instance_type, count);
    }

    /// Sends `signal` (e.g. "STOP" to pause, "CONT" to resume) to a service
    /// without waiting for anything.
    pub fn send_signal(&self, name: &str, signal: &str) {
        match self.procs.get(name) {
            Some(Proc::Process(child)) => {
                let _ = Command::new("kill")
                    .args([format!("-{signal}"), child.id().to_string()])
                    .status();
            }
            Some(Proc::Container) => {
                if let Some(c) = &self.containers {
                    c.signal(name, signal);
                }
            }
            None => panic!("no service {name}"),
        }
    }

    /// Sends `signal` to a service and waits up to `secs` for it to exit by
    /// itself: how long it took, or None if it had to be killed.
    pub fn stop_within(&mut self, name: &str, signal: &str, secs: u64) -> Option<Duration> {
        self.exits.remove(name);
        let mut child = match self.procs.remove(name) {
            Some(Proc::Process(child)) => child,
            Some(Proc::Container) => return self.stop_container(name, signal, secs),
            None => panic!("no service {name}"),
        };
        let started = Instant::now();
        let _ = Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status();
        while started.elapsed() < Duration::from_secs(secs) {
            if let Ok(Some(status)) = child.try_wait() {
                if let Some(code) = status.code() {
                    self.exits.insert(name.to_string(), code);
                }
                return Some(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// [`Stack::stop_within`] of a container: its output is kept in
    /// `<dir>/<name>.log` before the container is removed.
    fn stop_container(&mut self, name: &str, signal: &str, secs: u64) -> Option<Duration> {
        let c = self.containers.clone()?;
        let started = Instant::now();
        c.signal(name, signal);
        let mut stopped = None;
        while started.elapsed() < Duration::from_secs(secs) {
            if !c.running(name) {
                stopped = Some(started.elapsed());
                if let Some(code) = c.exit_code(name) {
                    self.exits.insert(name.to_string(), code);
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.keep_log(name);
        c.remove(name);
        stopped
    }

    /// Appends a container's output to `<dir>/<name>.log` (before it goes).
    fn keep_log(&self, name: &str) {
        if let Some(c) = &self.containers {
            use std::io::Write;
            let out = c.logs(name);
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.dir.join(format!("{name}.log")))
            {
                let _ = f.write_all(out.as_bytes());
            }
        }
    }

    /// The exit code of service `name` when it last stopped by itself in
    /// [`Stack::stop_within`] (None: it never did, or a signal ended it).
    pub fn last_exit_code(&self, name: &str) -> Option<i32> {
        self.exits.get(name).copied()
    }

    /// Sends `signal` (e.g. "KILL", "TERM") to a service and waits for it to
    /// exit (killing it after 60 s).
    pub fn signal(&mut self, name: &str, signal: &str) {
        self.stop_within(name, signal, 60);
    }

    pub fn stop_all(&mut self) {
        let mut names: Vec<String> = self.procs.keys().cloned().collect();
        names.sort_by_key(|n| !self.executors.contains(n));
        for n in names {
            self.signal(&n, "TERM");
        }
    }

    pub fn log_of(&self, name: &str) -> String {
        let kept =
            std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
        match (&self.containers, self.procs.get(name)) {
            (Some(c), Some(Proc::Container)) => kept + &c.logs(name),
            _ => kept,
        }
    }
}
