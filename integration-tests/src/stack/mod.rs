//! A whole Quartermaster on this machine: NATS (JetStream) and the S3 server
//! in containers, the four services as real processes (the binaries cargo
//! built), and helpers to drive and observe it. Used by the end-to-end tests
//! and by `qm-demo`.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the stack: its processes, its clients, the events it saw |
//! | `nats.rs` | NATS in a container (TLS, a reloadable tenancy, a cluster of three), the tenancy's credentials |
//! | `running.rs` | a whole stack started for a test; where the binaries are |
//! | `processes.rs` | starting, stopping and signalling the services, their logs |
//! | `api.rs` | what a test asks of the running system, and waits for |

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

mod api;
mod nats;
mod processes;
mod running;

pub use nats::*;
pub use running::*;

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
