//! NATS in a container for a test: plain, with TLS, with a tenancy it
//! reloads, or a cluster of three; the tenancy's credentials.

use super::*;

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
