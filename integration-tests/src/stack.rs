//! A whole Quartermaster on this machine: NATS (JetStream) and the S3 server
//! in containers, the four services as real processes (the binaries cargo
//! built), and helpers to drive and observe it. Used by the end-to-end tests
//! and by `qm-demo`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use qm_service::client::Client;
use qm_wire::messages::{JobRef, ServiceJob, SubmitServiceJob, SubmitServiceJobResponse};
use qm_wire::subjects::Operation;
use qm_wire::system::QueueDocument;
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::S3Server;

/// The tenancy the tests and the demo run with (`deploy/tenancy.dev.yaml`),
/// its generated server authorization, and every principal's credentials
/// file (in a fresh directory per run).
#[derive(Clone)]
pub struct Auth {
    pub dir: PathBuf,
    pub tenancy: qm_tenancy::Tenancy,
    /// The tenancy file (admission reads it).
    pub tenancy_file: PathBuf,
    pub authorization: String,
}

impl Auth {
    pub fn dev(name: &str) -> Auth {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../deploy/tenancy.dev.yaml");
        Auth::made(&Auth::fresh_dir(name), path)
    }

    /// Credentials and the NATS authorization for a tenancy of the
    /// caller's own (`tenancy_yaml`), e.g. a benchmark's fleet of executors.
    pub fn generated(name: &str, tenancy_yaml: &str) -> Auth {
        let dir = Auth::fresh_dir(name);
        std::fs::create_dir_all(&dir).expect("credentials dir");
        let path = dir.join("tenancy.yaml");
        std::fs::write(&path, tenancy_yaml).expect("tenancy written");
        Auth::made(&dir, path)
    }

    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("qm-auth-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    /// Keys for every principal of the tenancy at `path`, written into
    /// `dir` as `qm auth` does, and the authorization they make.
    fn made(dir: &Path, path: PathBuf) -> Auth {
        let tenancy = qm_tenancy::Tenancy::load(&path).expect("the tenancy is valid");
        let keys = qm_tenancy::nats::ensure_keys(&tenancy, dir).expect("credentials");
        let authorization = qm_tenancy::nats::authorization(
            &tenancy,
            &qm_tenancy::nats::public_keys(&tenancy, &keys),
        )
        .expect("authorization");
        Auth {
            tenancy_file: path,
            dir: dir.to_path_buf(),
            tenancy,
            authorization,
        }
    }

    /// The credentials `qm auth` wrote into `dir` for the tenancy at
    /// `tenancy` (e.g. the compose file's).
    pub fn existing(dir: &Path, tenancy: &Path) -> Auth {
        let tenancy_file = tenancy.to_path_buf();
        let tenancy = qm_tenancy::Tenancy::load(tenancy).expect("the tenancy is valid");
        let authorization = std::fs::read_to_string(dir.join("nats-auth.conf"))
            .expect("the credentials directory has nats-auth.conf");
        Auth {
            tenancy_file,
            dir: dir.to_path_buf(),
            tenancy,
            authorization,
        }
    }

    /// The credentials file of `principal`.
    pub fn key(&self, principal: &str) -> PathBuf {
        qm_tenancy::nats::key_path(&self.dir, principal)
    }

    /// Connection settings of `principal` for `url`.
    pub fn settings(&self, url: &str, principal: &str) -> qm_service::settings::NatsSettings {
        qm_service::settings::NatsSettings {
            nats_url: url.to_string(),
            nats_nkey_file: self.key(principal).display().to_string(),
            ..Default::default()
        }
    }

    /// A connected API client acting as `principal`.
    pub async fn client(&self, url: &str, principal: &str) -> Client {
        let (nats, who) = qm_service::nats::connect(
            &self.settings(url, principal),
            principal,
            Some(Duration::from_secs(10)),
        )
        .await
        .unwrap_or_else(|e| panic!("{principal} connects: {e}"));
        Client::new(nats, who)
    }
}

/// TLS for the NATS server: its certificate and key, and the CA that
/// signed them (made at test time).
#[derive(Clone)]
pub struct Tls {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// NATS with JetStream in a container (`QM_NATS_IMAGE`, default
/// `quartermaster/nats:local`; `nats:latest` works the same), started with
/// the authorization `qm auth` generates from the dev tenancy.
pub struct Nats {
    pub container: ContainerAsync<GenericImage>,
    pub url: String,
    pub auth: Auth,
    /// The URL from inside its Docker network (when started on one).
    pub inside_url: Option<String>,
    /// Where JetStream stores its data, on the host.
    pub store: StoreDir,
    /// The host directory the server includes its authorization from
    /// ([`start_nats_reloadable`]).
    pub live: Option<PathBuf>,
}

impl Nats {
    /// The authorization file the server includes (on the host), for a
    /// server from [`start_nats_reloadable`].
    pub fn live_authorization(&self) -> PathBuf {
        self.live
            .as_ref()
            .expect("a NATS from start_nats_reloadable")
            .join("nats-auth.conf")
    }

    /// The command that makes this server reload its configuration
    /// (SIGHUP to its container's first process).
    pub fn reload_command(&self) -> Vec<String> {
        ["docker", "kill", "--signal", "HUP", self.container.id()]
            .map(String::from)
            .to_vec()
    }

    /// The server's own address on Docker's bridge, reached from the host
    /// without Docker's userland port proxy (which copies every byte and,
    /// under a benchmark's load, used a sixth of the machine). Falls back
    /// to the published port.
    pub async fn direct_url(&self) -> String {
        let inspected = tokio::process::Command::new("docker")
            .args([
                "inspect",
                "-f",
                "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}",
                self.container.id(),
            ])
            .output()
            .await;
        let ip = inspected.ok().and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .find_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
        });
        match ip {
            Some(ip) if !self.url.starts_with("tls") => format!("nats://{ip}:4222"),
            _ => self.url.clone(),
        }
    }
}

/// A host directory for a NATS server's JetStream store, bind-mounted into
/// its container: the store survives the container's restarts, and writes
/// skip the container's own filesystem (on hosts whose Docker storage
/// driver is fuse-overlayfs, every JetStream write went through FUSE).
/// Removed when dropped.
pub struct StoreDir(PathBuf);

impl StoreDir {
    fn new(label: &str) -> StoreDir {
        let dir = std::env::temp_dir().join(format!("qm-js-{label}-{}", free_port()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a directory for the JetStream store");
        // NATS runs as root in its container (ours and the upstream
        // image); nobody else on the host may read or change its store.
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        StoreDir(dir)
    }

    fn mount(&self) -> testcontainers::core::Mount {
        testcontainers::core::Mount::bind_mount(self.0.to_string_lossy(), "/tmp/js")
    }
}

impl Drop for StoreDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub async fn start_nats() -> Nats {
    start_nats_on(None).await
}

/// NATS on a fixed host port (None: any free one). A fixed port survives a
/// restart of the container, for outage tests.
pub async fn start_nats_on(host_port: Option<u16>) -> Nats {
    start_nats_with(host_port, None).await
}

/// NATS, optionally with TLS (then the URL is `tls://`).
pub async fn start_nats_with(host_port: Option<u16>, tls: Option<Tls>) -> Nats {
    start_nats_full(host_port, tls, None).await
}

/// NATS on the Docker network `network` too (as `nats://<its name>:4222`),
/// for services in containers.
pub async fn start_nats_in(network: &str) -> Nats {
    start_nats_full(None, None, Some(network)).await
}

/// NATS whose users are `auth`'s (a tenancy of the caller's own).
pub async fn start_nats_for(auth: Auth) -> Nats {
    start_nats_auth(None, None, None, auth).await
}

/// NATS that includes its authorization from a host file,
/// [`Nats::live_authorization`] (`<auth dir>/live/nats-auth.conf`, at first
/// `auth`'s), so that `qm tenancy sync-nats` can rewrite it and have the
/// server reload it ([`Nats::reload_command`]).
pub async fn start_nats_reloadable(auth: Auth) -> Nats {
    let live = auth.dir.join("live");
    std::fs::create_dir_all(&live).expect("a directory for the live authorization");
    std::fs::write(live.join("nats-auth.conf"), &auth.authorization).expect("authorization");
    let mut auth = auth;
    // Relative to the configuration file (/etc/qm/nats.conf), as nats-server reads includes.
    auth.authorization = "include \"live/nats-auth.conf\"\n".into();
    let mut nats = start_nats_auth(None, None, None, auth).await;
    nats.live = Some(live);
    nats
}

async fn start_nats_full(host_port: Option<u16>, tls: Option<Tls>, network: Option<&str>) -> Nats {
    let auth = Auth::dev(&format!("nats-{}", free_port()));
    start_nats_auth(host_port, tls, network, auth).await
}

async fn start_nats_auth(
    host_port: Option<u16>,
    tls: Option<Tls>,
    network: Option<&str>,
    auth: Auth,
) -> Nats {
    let (name, tag) = crate::image("QM_NATS_IMAGE", "quartermaster/nats:local");
    let mut config =
        String::from("listen: \"0.0.0.0:4222\"\njetstream { store_dir: \"/tmp/js\" }\n");
    if tls.is_some() {
        config.push_str(
            "tls { cert_file: \"/etc/qm/server.pem\", key_file: \"/etc/qm/server-key.pem\", ca_file: \"/etc/qm/ca.pem\" }\n",
        );
    }
    config.push_str(&auth.authorization);
    let store = StoreDir::new("server");
    // A fixed port (a free one the caller picked) may be taken by another
    // process before Docker binds it: then another free one is tried.
    let mut host_port = host_port;
    let mut tries = 0;
    let (container, inside_url) = loop {
        tries += 1;
        let mut image = GenericImage::new(name.clone(), tag.clone())
            .with_exposed_port(4222.tcp())
            .with_wait_for(WaitFor::message_on_stderr("Server is ready"))
            .with_copy_to("/etc/qm/nats.conf", config.clone().into_bytes())
            .with_mount(store.mount())
            .with_cmd(["-c", "/etc/qm/nats.conf"]);
        if let Some(live) = auth
            .dir
            .join("live")
            .is_dir()
            .then(|| auth.dir.join("live"))
        {
            image = image.with_mount(testcontainers::core::Mount::bind_mount(
                live.to_string_lossy(),
                "/etc/qm/live",
            ));
        }
        if let Some(t) = &tls {
            image = image
                .with_copy_to("/etc/qm/server.pem", t.cert_pem.clone().into_bytes())
                .with_copy_to("/etc/qm/server-key.pem", t.key_pem.clone().into_bytes())
                .with_copy_to("/etc/qm/ca.pem", t.ca_pem.clone().into_bytes());
        }
        let request = match host_port {
            Some(p) => image.with_mapped_port(p, 4222.tcp()),
            None => image,
        };
        let (request, inside_url) = match network {
            Some(n) => {
                let host = format!("qm-nats-{}", free_port());
                let inside = format!("nats://{host}:4222");
                (
                    request.with_network(n).with_container_name(host),
                    Some(inside),
                )
            }
            None => (request, None),
        };
        match request.start().await {
            Ok(c) => break (c, inside_url),
            Err(e)
                if host_port.is_some()
                    && tries < 5
                    && e.to_string().contains("address already in use") =>
            {
                host_port = Some(free_port());
            }
            Err(e) => panic!("NATS starts (run deploy/images/build.sh first): {e}"),
        }
    };
    let port = container
        .get_host_port_ipv4(4222.tcp())
        .await
        .expect("port");
    let scheme = if tls.is_some() { "tls" } else { "nats" };
    Nats {
        container,
        url: format!("{scheme}://127.0.0.1:{port}"),
        auth,
        inside_url,
        store,
        live: None,
    }
}

/// A start command for attempt 1 of `job_id` on slot 0 of an
/// `ml.g5.xlarge` of the training queue's QS1, running `command`: what a
/// test sends on an executor's command subject as an attacker (or a lost
/// resend) would.
pub fn start_command(
    epoch: u64,
    job_id: &str,
    command: Vec<String>,
) -> qm_wire::system::ExecCommand {
    qm_wire::system::ExecCommand::Start {
        epoch,
        job_id: job_id.into(),
        attempt: 1,
        job_queue: "training".into(),
        quota_share_name: "QS1".into(),
        command,
        environment: Default::default(),
        instance_type: "ml.g5.xlarge".into(),
        slots: vec![0],
        checkpoints: false,
        checkpoint_config: None,
        rank: 0,
        grace_seconds: None,
        container_image: None,
        output_s3_uri: None,
        input_channels: vec![],
        run_as_non_root: false,
        hosts: vec![],
    }
}

/// Three NATS servers with JetStream, clustered (routes over a Docker
/// network of their own), each on a fixed host port so that one can be
/// stopped and started again. `nats.url` lists all three (clients fail over
/// between them); `nats.container` is the first server, `others` the rest.
pub struct NatsCluster {
    pub nats: Nats,
    pub others: Vec<ContainerAsync<GenericImage>>,
    /// The other servers' JetStream stores.
    pub stores: Vec<StoreDir>,
}

pub async fn start_nats_cluster() -> NatsCluster {
    let suffix = free_port();
    let auth = Auth::dev(&format!("nats-cluster-{suffix}"));
    let (name, tag) = crate::image("QM_NATS_IMAGE", "quartermaster/nats:local");
    // A port free when asked may be taken before Docker binds it (another
    // process's connection got it): then three servers start again, on
    // new ports and under new names.
    let mut tries = 0;
    let (mut containers, urls, names, mut stores) = loop {
        tries += 1;
        let names: Vec<String> = ["a", "b", "c"]
            .iter()
            .map(|n| format!("qm-nats-{n}-{suffix}-{tries}"))
            .collect();
        let routes: Vec<String> = names
            .iter()
            .map(|n| format!("\"nats-route://{n}:6222\""))
            .collect();
        let stores: Vec<StoreDir> = names.iter().map(|n| StoreDir::new(n)).collect();
        let mut urls = Vec::new();
        // Started together: JetStream's cluster forms once all three route.
        let mut starting = Vec::new();
        for (server, store) in names.iter().zip(&stores) {
            let port = free_port();
            let config = format!(
                "server_name: {server}\nlisten: \"0.0.0.0:4222\"\njetstream {{ store_dir: \"/tmp/js\" }}\ncluster {{\n  name: qm\n  listen: \"0.0.0.0:6222\"\n  routes: [{}]\n  no_advertise: true\n}}\n{}",
                routes.join(", "),
                auth.authorization
            );
            let request = GenericImage::new(name.clone(), tag.clone())
                .with_exposed_port(4222.tcp())
                .with_wait_for(WaitFor::message_on_stderr("Server is ready"))
                .with_copy_to("/etc/qm/nats.conf", config.into_bytes())
                .with_cmd(["-c", "/etc/qm/nats.conf"])
                .with_network(format!("qm-nats-net-{suffix}"))
                .with_container_name(server.clone())
                .with_mount(store.mount())
                .with_mapped_port(port, 4222.tcp());
            urls.push(format!("nats://127.0.0.1:{port}"));
            starting.push(request.start());
        }
        let started = futures::future::join_all(starting).await;
        let taken = started.iter().any(|r| {
            r.as_ref()
                .err()
                .is_some_and(|e| e.to_string().contains("address already in use"))
        });
        if taken && tries < 3 {
            // Those that started are removed as they are dropped.
            drop(started);
            continue;
        }
        let containers: Vec<_> = started
            .into_iter()
            .map(|r| r.expect("a NATS cluster server starts"))
            .collect();
        break (containers, urls, names, stores);
    };
    let first = containers.remove(0);
    let store = stores.remove(0);
    NatsCluster {
        nats: Nats {
            container: first,
            url: urls.join(","),
            auth,
            inside_url: Some(
                names
                    .iter()
                    .map(|n| format!("nats://{n}:4222"))
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            store,
            live: None,
        },
        others: containers,
        stores,
    }
}

/// NATS and S3 in containers, admission and one scheduler running, and
/// the queue `queue_yaml` applied (add executors with [`Stack::executor`]).
pub async fn running(name: &str, queue_yaml: &str) -> (Nats, S3Server, Stack) {
    running_on(start_nats().await, name, queue_yaml).await
}

/// [`running`] on a NATS already started (e.g. on a fixed port).
pub async fn running_on(nats: Nats, name: &str, queue_yaml: &str) -> (Nats, S3Server, Stack) {
    running_with(nats, name, queue_yaml, Vec::new()).await
}

/// [`running_on`], with settings for every service (e.g. where to send
/// traces).
pub async fn running_with(
    nats: Nats,
    name: &str,
    queue_yaml: &str,
    service_env: Vec<(String, String)>,
) -> (Nats, S3Server, Stack) {
    let s3 = crate::start_s3().await;
    let mut stack = Stack::new_with(&nats, &s3, name, service_env).await;
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(queue_yaml).await;
    stack.wait_leader("scheduler-1").await;
    (nats, s3, stack)
}

/// [`running_with`], but every service in its own container from the
/// service images (`make images`), on a Docker network of its own with
/// NATS and S3.
pub async fn running_in_containers(
    name: &str,
    queue_yaml: &str,
    service_env: Vec<(String, String)>,
) -> (Nats, S3Server, Stack) {
    let network = format!("qm-net-{name}-{}", free_port());
    let nats = start_nats_in(&network).await;
    let s3 = crate::start_s3_on(Some(&network)).await;
    let mut stack = Stack::new_with(&nats, &s3, name, service_env).await;
    stack.use_containers(&nats, &s3, &network);
    stack.admission();
    stack.scheduler("scheduler-1");
    stack.apply(queue_yaml).await;
    stack.wait_leader("scheduler-1").await;
    (nats, s3, stack)
}

/// A free TCP port on 127.0.0.1 (free when this returns).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Where the service binaries are: `QM_BIN_DIR`, else the workspace's
/// `target/debug` (run `cargo build --bins` first; `make test` does).
pub fn bin_dir() -> PathBuf {
    std::env::var_os("QM_BIN_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug"),
        PathBuf::from,
    )
}

pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --bins` first (or set QM_BIN_DIR)",
        path.display()
    );
    path
}

/// Every event seen live (job, preemption and checkpoint events), in
/// arrival order.
#[derive(Clone, Default)]
pub struct Events(pub Arc<Mutex<Vec<(String, serde_json::Value)>>>);

impl Events {
    pub fn snapshot(&self) -> Vec<(String, serde_json::Value)> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Whether the job's admission was announced (SUBMITTED -> RUNNABLE).
    pub fn announced(&self, job_id: &str) -> bool {
        self.snapshot()
            .iter()
            .any(|(_, v)| v["jobId"] == job_id && v["from"] == "SUBMITTED" && v["to"] == "RUNNABLE")
    }

    /// The statuses a job went through, in order.
    pub fn statuses(&self, job_id: &str) -> Vec<String> {
        self.snapshot()
            .iter()
            .filter(|(s, v)| s.starts_with("qm.v1.events.job.") && v["jobId"] == job_id)
            .map(|(_, v)| v["to"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// (kind, phase) of the preemptions of a job.
    pub fn preemptions(&self, job_id: &str) -> Vec<(String, String)> {
        self.snapshot()
            .iter()
            .filter(|(s, v)| s.starts_with("qm.v1.events.preemption.") && v["jobId"] == job_id)
            .map(|(_, v)| {
                (
                    v["kind"].as_str().unwrap_or("").to_string(),
                    v["phase"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }
}

/// A service started by a [`Stack`].
enum Proc {
    Process(Child),
    /// Named after the service (see [`crate::containers::Containers`]).
    Container,
}

pub struct Stack {
    pub nats_url: String,
    /// The tenancy and every principal's credentials.
    pub auth: Auth,
    /// Extra settings every service started gets (e.g. TLS files).
    pub service_env: Vec<(String, String)>,
    pub s3: qm_checkpoint::s3::S3Config,
    pub dir: PathBuf,
    pub client: Client,
    pub events: Events,
    procs: BTreeMap<String, Proc>,
    /// How each service was started (binary, settings): to start it again.
    specs: BTreeMap<String, (String, Vec<(String, String)>)>,
    /// Some: the services run in containers, not as processes.
    containers: Option<crate::containers::Containers>,
    /// The exit code of each service that stopped by itself, last time.
    exits: BTreeMap<String, i32>,
    /// Where jobs find the example trainer, when not as [`Stack::trainer`]
    /// works it out (an attached deployment's executor image).
    pub trainer_at: Option<String>,
    /// Settings every scheduler started gets (e.g. short timeouts in tests).
    pub scheduler_env: Vec<(String, String)>,
    /// Extra settings for admission replicas started after it is set.
    pub admission_env: Vec<(String, String)>,
    /// Extra settings for checkpoint services started after it is set.
    pub checkpoint_env: Vec<(String, String)>,
    /// Extra settings for executors started after it is set.
    pub executor_env: Vec<(String, String)>,
    executors: Vec<String>,
    /// The metrics port of each process started (by name).
    metrics: BTreeMap<String, u16>,
}

impl Stack {
    /// Connects to the servers as the admin `platform` (the stack's own
    /// client), starts no service yet.
    pub async fn new(nats: &Nats, s3: &S3Server, name: &str) -> Stack {
        Stack::new_with(nats, s3, name, Vec::new()).await
    }

    /// [`Stack::new`] with settings for every service (and the stack's
    /// client: TLS files).
    pub async fn new_with(
        nats: &Nats,
        s3: &S3Server,
        name: &str,
        service_env: Vec<(String, String)>,
    ) -> Stack {
        let dir = std::env::temp_dir().join(format!("qm-stack-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("stack dir");
        Stack::connect(&nats.url, &nats.auth, s3.config.clone(), dir, service_env).await
    }

    /// A stack for a Quartermaster running elsewhere (e.g. the compose
    /// file's): connects to `url` as the admin `platform` with `auth`'s
    /// credentials, starts nothing; `dir` is where executors' work
    /// directories are seen (`<dir>/<executor id>/...`).
    pub async fn attach(url: &str, auth: &Auth, dir: PathBuf) -> Stack {
        let s3 = qm_checkpoint::s3::S3Config {
            endpoint: None,
            region: String::new(),
            access_key_id: String::new(),
            secret_access_key: String::new(),
            credentials: None,
            bucket: String::new(),
            force_path_style: true,
            transfer: Default::default(),
            journal: None,
        };
        let mut stack = Stack::connect(url, auth, s3, dir, Vec::new()).await;
        // Its executors run from the executor image, which carries it.
        stack.trainer_at = Some("/qm-trainer".into());
        stack
    }

    async fn connect(
        url: &str,
        auth: &Auth,
        s3: qm_checkpoint::s3::S3Config,
        dir: PathBuf,
        service_env: Vec<(String, String)>,
    ) -> Stack {
        let mut settings = auth.settings(url, "platform");
        for (k, v) in &service_env {
            if k == "QM_NATS_CA_FILE" {
                settings.nats_ca_file = v.clone();
            }
        }
        let (nats_client, _) =
            qm_service::nats::connect(&settings, "qm-test", Some(Duration::from_secs(10)))
                .await
                .expect("NATS connects as platform");
        let events = Events::default();
        // The live events, not the stored frames (a copy of the same).
        let mut subs = Vec::new();
        for subject in qm_wire::subjects::live_events() {
            subs.push(nats_client.subscribe(subject).await.expect("subscribe"));
        }
        let mut sub = futures::stream::select_all(subs);
        let sink = events.clone();
        tokio::spawn(async move {
            while let Some(m) = sub.next().await {
                let v = serde_json::from_slice(&m.payload).unwrap_or_default();
                if let Ok(mut e) = sink.0.lock() {
                    e.push((m.subject.to_string(), v));
                }
            }
        });
        nats_client.flush().await.expect("flush");
        Stack {
            nats_url: url.to_string(),
            auth: auth.clone(),
            service_env,
            s3,
            dir,
            client: Client::new(nats_client, "platform"),
            events,
            procs: BTreeMap::new(),
            specs: BTreeMap::new(),
            containers: None,
            exits: BTreeMap::new(),
            trainer_at: None,
            scheduler_env: Vec::new(),
            admission_env: Vec::new(),
            checkpoint_env: Vec::new(),
            executor_env: Vec::new(),
            executors: Vec::new(),
            metrics: BTreeMap::new(),
        }
    }

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

    pub async fn apply(&self, doc_yaml: &str) -> QueueDocument {
        let doc: QueueDocument = serde_yaml_ng::from_str(doc_yaml).expect("queue document");
        self.retry(|c| {
            let doc = doc.clone();
            async move {
                c.call::<_, QueueDocument>(Operation::ApplyJobQueue, &doc)
                    .await
            }
        })
        .await
    }

    pub async fn submit(&self, job: &SubmitServiceJob) -> String {
        self.submit_as(&self.client, job).await
    }

    /// Submits as `client`'s principal (e.g. a team's user).
    pub async fn submit_as(&self, client: &Client, job: &SubmitServiceJob) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match client
                .call::<_, SubmitServiceJobResponse>(Operation::SubmitServiceJob, job)
                .await
            {
                Ok(r) => return r.job_id,
                Err(e)
                    if Instant::now() < deadline
                        && e.code()
                            .is_none_or(|c| c == qm_wire::messages::ErrorCode::Transient) =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("submit as {} failed: {e}", client.principal),
            }
        }
    }

    /// Submits as the stack's admin, expecting a refusal: its text (or the
    /// job id, if it was accepted).
    pub async fn try_submit(&self, job: &SubmitServiceJob) -> Result<String, String> {
        self.client
            .call::<_, SubmitServiceJobResponse>(Operation::SubmitServiceJob, job)
            .await
            .map(|r| r.job_id)
            .map_err(|e| e.to_string())
    }

    /// Sets the job's scheduling priority as `client`'s principal.
    pub async fn update_priority_as(&self, client: &Client, job_id: &str, priority: u32) {
        let _: ServiceJob = client
            .call(
                Operation::UpdateServiceJob,
                &qm_wire::messages::UpdateServiceJob {
                    job_id: job_id.into(),
                    scheduling_priority: priority,
                },
            )
            .await
            .unwrap_or_else(|e| panic!("priority of {job_id} not updated: {e}"));
    }

    pub async fn describe(&self, job_id: &str) -> Option<ServiceJob> {
        self.client
            .call(
                Operation::DescribeServiceJob,
                &JobRef {
                    job_id: job_id.into(),
                },
            )
            .await
            .ok()
    }

    /// Retries a call while services are starting (no reply / transient).
    async fn retry<T, F, Fut>(&self, f: F) -> T
    where
        F: Fn(Client) -> Fut,
        Fut: std::future::Future<Output = Result<T, qm_service::client::CallError>>,
    {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match f(self.client.clone()).await {
                Ok(v) => return v,
                Err(e)
                    if Instant::now() < deadline
                        && e.code()
                            .is_none_or(|c| c == qm_wire::messages::ErrorCode::Transient) =>
                {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("call failed: {e}\n{}", self.logs()),
            }
        }
    }

    /// Polls the job until `done` holds (or panics after `secs`, with the
    /// job and the service logs).
    pub async fn wait_for(
        &self,
        job_id: &str,
        secs: u64,
        what: &str,
        done: impl Fn(&ServiceJob) -> bool,
    ) -> ServiceJob {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let mut last = None;
        while Instant::now() < deadline {
            if let Some(j) = self.describe(job_id).await {
                if done(&j) {
                    return j;
                }
                last = Some(j);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "job {job_id} did not reach {what} in {secs}s; last seen: {last:#?}\n{}",
            self.logs()
        );
    }

    /// Waits until scheduler `name` leads (its log says so): reads and
    /// updates answer TRANSIENT until some scheduler does, and a test must
    /// not race the services' start-up.
    pub async fn wait_leader(&self, name: &str) {
        self.wait_log(name, "became the scheduler leader").await;
    }

    /// Waits until scheduler `name` stands by, following the log.
    pub async fn wait_standing_by(&self, name: &str) {
        self.wait_log(name, "standing by: following the log").await;
    }

    /// Waits (60 s at most) until `name`'s log holds `text`.
    async fn wait_log(&self, name: &str, text: &str) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !self.log_of(name).contains(text) {
            assert!(
                std::time::Instant::now() < deadline,
                "{name} did not log {text:?} within 60 s\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits for the job's final status (SUCCEEDED or FAILED).
    pub async fn wait_final(&self, job_id: &str, secs: u64) -> ServiceJob {
        self.wait_for(job_id, secs, "a final status", |j| {
            j.status == "SUCCEEDED" || j.status == "FAILED"
        })
        .await
    }

    pub fn logs(&self) -> String {
        let mut out = String::new();
        for name in self.procs.keys() {
            let log = self.log_of(name);
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            out.push_str(&format!("--- {name} (last lines)\n"));
            for l in tail.into_iter().rev() {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }

    /// The output of an attempt's process, read from the executor's directory.
    pub fn attempt_stdout(&self, executor: &str, job_id: &str, attempt: u32) -> String {
        std::fs::read_to_string(
            self.dir
                .join(executor)
                .join(job_id)
                .join(format!("attempt-{attempt}"))
                .join("stdout.log"),
        )
        .unwrap_or_default()
    }

    /// When the attempt's process was launched and seen to end (the
    /// executor's `attempt-<N>.run.json` beside the attempt's directory), in
    /// milliseconds since the Unix epoch.
    /// What the attempt's watcher (its supervisor) recorded in
    /// `attempt-<N>.exit.json`: when its process was launched and, if the
    /// supervisor saw it, when it ended (a supervisor killed with its
    /// executor records no end: the process died with it).
    pub fn attempt_watch(
        &self,
        executor: &str,
        job_id: &str,
        attempt: u32,
    ) -> Option<(u64, Option<u64>)> {
        let text = std::fs::read_to_string(
            self.dir
                .join(executor)
                .join(job_id)
                .join(format!("attempt-{attempt}.exit.json")),
        )
        .ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        Some((v["launchedAtMs"].as_u64()?, v["endedAtMs"].as_u64()))
    }

    pub fn attempt_run(&self, executor: &str, job_id: &str, attempt: u32) -> Option<(u64, u64)> {
        let text = std::fs::read_to_string(
            self.dir
                .join(executor)
                .join(job_id)
                .join(format!("attempt-{attempt}.run.json")),
        )
        .ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        Some((v["launchedAtMs"].as_u64()?, v["endedAtMs"].as_u64()?))
    }

    /// The job's status changes as stored in the QM_EVENTS stream (read as
    /// the scheduler, which reads that stream after a failover): in frames,
    /// or one a message as stored before frames. Ordered by their position
    /// and with duplicates (the same position) dropped: (from, to) pairs.
    pub async fn stored_transitions(&self, job_id: &str) -> Vec<(String, String)> {
        use futures::StreamExt;
        let scheduler = self.auth.client(&self.nats_url, "scheduler").await;
        let js = async_nats::jetstream::new(scheduler.nats.clone());
        let stream = js.get_stream("QM_EVENTS").await.expect("events stream");
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                filter_subjects: vec![
                    "qm.v1.events.job.>".into(),
                    qm_wire::subjects::EVENT_FRAMES.into(),
                ],
                ..Default::default()
            })
            .await
            .expect("consumer");
        let pending = consumer.cached_info().num_pending;
        let mut messages = consumer.messages().await.expect("messages");
        let mut seen = std::collections::BTreeMap::new();
        let parse = |p: &str| -> Vec<u64> { p.split('.').filter_map(|n| n.parse().ok()).collect() };
        for _ in 0..pending {
            let Ok(Some(Ok(m))) =
                tokio::time::timeout(Duration::from_secs(5), messages.next()).await
            else {
                break;
            };
            let events: Vec<(String, Vec<u64>, serde_json::Value)> =
                if m.subject.as_str() == qm_wire::subjects::EVENT_FRAMES {
                    let frame: qm_wire::messages::EventFrame =
                        serde_json::from_slice(&m.payload).expect("a frame decodes");
                    frame
                        .events
                        .into_iter()
                        .map(|e| (e.subject, parse(&e.position), e.event))
                        .collect()
                } else {
                    let position = m
                        .headers
                        .as_ref()
                        .and_then(|h| h.get("Qm-Position"))
                        .map(|p| parse(p.as_str()))
                        .unwrap_or_default();
                    let v = serde_json::from_slice(&m.payload).unwrap_or_default();
                    vec![(m.subject.to_string(), position, v)]
                };
            for (subject, position, v) in events {
                if !subject.starts_with("qm.v1.events.job.") || v["jobId"] != job_id {
                    continue;
                }
                let from = v["from"].as_str().unwrap_or("").to_string();
                let to = v["to"].as_str().unwrap_or("").to_string();
                seen.insert(position, (from, to));
            }
        }
        seen.into_values().collect()
    }

    /// The log entries stored on `subject` (read as the scheduler), in
    /// order; unreadable ones are left out.
    pub async fn log_entries(&self, subject: &str) -> Vec<qm_wire::system::LogEntry> {
        use futures::StreamExt;
        let scheduler = self.auth.client(&self.nats_url, "scheduler").await;
        let js = async_nats::jetstream::new(scheduler.nats.clone());
        let stream = js.get_stream("QM_LOG").await.expect("the log");
        let consumer = stream
            .create_consumer(async_nats::jetstream::consumer::pull::OrderedConfig {
                filter_subject: subject.into(),
                ..Default::default()
            })
            .await
            .expect("consumer");
        let pending = consumer.cached_info().num_pending;
        let mut messages = consumer.messages().await.expect("messages");
        let mut out = Vec::new();
        for _ in 0..pending {
            let Ok(Some(Ok(m))) =
                tokio::time::timeout(Duration::from_secs(5), messages.next()).await
            else {
                break;
            };
            if let Ok(e) = serde_json::from_slice(&m.payload) {
                out.push(e);
            }
        }
        out
    }

    /// Waits until the job's first attempt has committed a checkpoint at
    /// `step` or later.
    pub async fn wait_committed(&self, job_id: &str, step: u64) {
        self.wait_for(job_id, 60, "a committed checkpoint", |j| {
            j.attempts
                .first()
                .and_then(|a| a.last_checkpoint_step)
                .unwrap_or(0)
                >= step
        })
        .await;
    }

    /// Asserts that the events stream holds the job's transitions in order,
    /// each starting where the one before ended, the last one to `last`;
    /// returns them.
    pub async fn assert_stored_events(&self, job_id: &str, last: &str) -> Vec<(String, String)> {
        let stored = self.stored_transitions(job_id).await;
        for pair in stored.windows(2) {
            assert_eq!(
                pair[0].1, pair[1].0,
                "a gap in {job_id}'s stored events: {stored:?}"
            );
        }
        assert_eq!(
            stored.last().map(|(_, to)| to.as_str()),
            Some(last),
            "{job_id}: {stored:?}"
        );
        stored
    }

    /// The usage ledger's held instance-seconds (own plus borrowed) of
    /// `queue` over yesterday and today (UTC), and what the attempts of
    /// `jobs` record they held: (stopped - scheduled) x instances. Every
    /// job of the queue must be in `jobs` and finished.
    pub async fn usage_against_attempts(&self, queue: &str, jobs: &[String]) -> (f64, f64) {
        use qm_wire::messages::{GetUsage, UsageReport};
        let today = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        let report: UsageReport = self
            .client
            .call(
                Operation::GetUsage,
                &GetUsage {
                    job_queue: queue.into(),
                    from: Some(qm_wire::dates::utc_date(today - 86_400_000)),
                    to: Some(qm_wire::dates::utc_date(today)),
                    ..Default::default()
                },
            )
            .await
            .expect("the usage report");
        let ledger: f64 = report
            .rows
            .iter()
            .map(|r| r.own_instance_seconds + r.borrowed_instance_seconds)
            .sum();
        let mut held_ms = 0u64;
        for id in jobs {
            let j = self.describe(id).await.expect("the job");
            for a in &j.attempts {
                let (Some(from), Some(to)) = (a.scheduled_at, a.stopped_at) else {
                    panic!("{id} attempt {} has not ended: {j:#?}", a.attempt);
                };
                held_ms += (to - from) * u64::from(j.instance_count);
            }
        }
        assert!(held_ms > 0, "the jobs held no instance: nothing to compare");
        (ledger, held_ms as f64 / 1000.0)
    }

    /// How many attempt directories the executor made for the job.
    pub fn attempt_dirs(&self, executor: &str, job_id: &str) -> usize {
        std::fs::read_dir(self.dir.join(executor).join(job_id)).map_or(0, |d| {
            d.filter_map(Result::ok)
                .filter(|e| e.path().is_dir())
                .count()
        })
    }

    /// Whether every service process started is still running.
    pub fn all_running(&mut self) -> bool {
        let containers = self.containers.clone();
        self.procs.iter_mut().all(|(name, p)| match p {
            Proc::Process(c) => matches!(c.try_wait(), Ok(None)),
            Proc::Container => containers.as_ref().is_some_and(|c| c.running(name)),
        })
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for (name, p) in std::mem::take(&mut self.procs) {
            match p {
                Proc::Process(mut child) => {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                Proc::Container => {
                    if let Some(c) = &self.containers {
                        c.remove(&name);
                    }
                }
            }
        }
    }
}

/// The trainer's final digest, from its output.
pub fn digest_in(output: &str) -> Option<String> {
    output
        .lines()
        .find_map(|l| l.strip_prefix("digest=").map(str::to_string))
}

/// Runs the trainer uninterrupted (no delay) and returns its digest.
pub fn reference_digest(args: &[&str]) -> String {
    let dir = std::env::temp_dir().join(format!(
        "qm-reference-{}-{}",
        std::process::id(),
        args.join("_")
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(bin("qm-trainer"))
        .args(args)
        .args(["--step-delay-ms", "0"])
        .env("QM_CHECKPOINT_DIR", &dir)
        .output()
        .expect("trainer runs");
    let _ = std::fs::remove_dir_all(&dir);
    digest_in(&String::from_utf8_lossy(&out.stdout)).expect("trainer prints a digest")
}

/// A submit of the example trainer.
pub fn trainer_job(
    name: &str,
    queue: &str,
    share: &str,
    priority: u32,
    args: &[&str],
) -> SubmitServiceJob {
    let mut command = vec![bin("qm-trainer").display().to_string()];
    command.extend(args.iter().map(|s| s.to_string()));
    SubmitServiceJob {
        job_name: name.into(),
        job_queue: queue.into(),
        quota_share_name: Some(share.into()),
        instance_type: "ml.g5.xlarge".into(),
        instance_count: Some(1),
        scheduling_priority: Some(priority),
        checkpoint_config: Some(Default::default()),
        termination_grace_period_seconds: Some(10),
        command,
        ..Default::default()
    }
}
