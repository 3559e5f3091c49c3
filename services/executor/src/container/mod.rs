//! The `container` runtime: an attempt as an OCI image run through the
//! Docker Engine API (bollard, over the engine's unix socket; no `docker`
//! CLI).
//!
//! Every container is labelled with its job, attempt, executor and the
//! executor's incarnation, so that the executor can always tell its own
//! from anyone else's and stop those no current attempt allows
//! ([`Engine::reconcile`], at start and every sweep). A container never
//! outlives the executor that started it: beside each one runs a guard (this
//! binary, `qm-executor guard`), a child that the kernel signals when the
//! executor dies, even by `kill -9`, and that then kills the container, as
//! the kernel kills a host process of a dead executor.
//!
//! The job container gets its attempt's `/opt/ml` folders and checkpoint
//! directory (bind mounts, nothing else of the node), its GPUs through a
//! device request for the NVIDIA runtime, the instance type's CPU and
//! memory limits, a shared-memory size and memlock limit fit for NCCL, no
//! added capabilities, `no-new-privileges`, an init process that forwards
//! signals, and no Docker socket, NATS or S3 credentials.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bollard::models::{ContainerCreateBody, DeviceRequest, HostConfig, ResourcesUlimits};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, ListContainersOptionsBuilder,
    RemoveContainerOptionsBuilder,
};
use bollard::Docker;
use futures::StreamExt;

use crate::error::LaunchError;
use crate::settings::ContainerSettings;

mod guard;
mod image;
mod running;

use guard::spawn_guard;
use running::copy_logs;

pub use guard::guard;
pub use image::read_credentials;
pub use running::Signaller;

/// Labels every container of this runtime carries.
pub const LABEL_JOB: &str = "qm.job";
pub const LABEL_ATTEMPT: &str = "qm.attempt";
pub const LABEL_EXECUTOR: &str = "qm.executor";
pub const LABEL_INCARNATION: &str = "qm.incarnation";
/// The executor's work directory: with its id, what tells this executor
/// (any incarnation) from another of the same id sharing the engine.
pub const LABEL_WORK_DIR: &str = "qm.work-dir";

/// How long one call to the engine may take (a pull streams: no limit).
const ENGINE_TIMEOUT_SECS: u64 = 120;

/// The container engine, as this executor uses it.
pub struct Engine {
    docker: Docker,
    settings: ContainerSettings,
    executor_id: String,
    incarnation: String,
    work_dir: String,
    /// Registry credentials per registry host, from `registryAuthFile`.
    credentials: BTreeMap<String, bollard::auth::DockerCredentials>,
}

/// What an attempt's container is made of.
pub struct ContainerSpec {
    /// What the container's guard enforces when the executor cannot.
    pub fence: qm_fence::Terms,
    pub job_id: String,
    pub attempt: u32,
    pub image: String,
    /// The argv replacing the image's entrypoint; empty: the image's
    /// entrypoint with `train`, as SageMaker starts a training image.
    pub command: Vec<String>,
    pub environment: BTreeMap<String, String>,
    /// (host path, container path, writable).
    pub mounts: Vec<(PathBuf, String, bool)>,
    /// `algo-N` -> address of rank N-1's executor.
    pub hosts: Vec<(String, String)>,
    /// GPU indices on this node.
    pub gpus: Vec<u32>,
    pub cpus: Option<f64>,
    pub memory_mib: Option<u64>,
    /// Run as this user instead of the image's (`uid[:gid]`).
    pub user: Option<String>,
    /// The share forbids root: the user (`uid:gid`) to run as when the
    /// image's user is root or none.
    pub non_root: Option<String>,
}

/// Gives the folders a container writes to the uid and gid it runs as
/// (None: unknown); blocking work, run off the async threads.
pub type HandOver = Arc<dyn Fn(Option<(u32, u32)>) -> Result<(), LaunchError> + Send + Sync>;

/// How a container ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// The kernel killed it for its memory limit.
    pub oom_killed: bool,
    /// A stop reached it while it ran (not when it had already exited).
    pub stopped: bool,
}

/// A running attempt's container.
pub struct Running {
    engine: Arc<Engine>,
    pub id: String,
    pub name: String,
    guard: Option<tokio::process::Child>,
    logs: tokio::task::JoinHandle<()>,
    /// Waited for and removed (`wait_or_stop`): dropping it does nothing.
    done: bool,
}

impl Drop for Running {
    /// A running container whose attempt is dropped without waiting for it
    /// (a panic, an attempt task cut short) is killed and removed, not left
    /// behind without its guard.
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Its guard stays armed (not killed with its handle): should the
        // removal below never run (the executor is shutting down), the
        // guard removes the container when the executor exits.
        if let Some(guard) = self.guard.take() {
            std::mem::forget(guard);
        }
        let (docker, id) = (self.engine.docker.clone(), self.id.clone());
        tracing::warn!(container = %self.name, "an attempt's container dropped unwaited: removing it");
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = docker
                    .remove_container(
                        &id,
                        Some(RemoveContainerOptionsBuilder::default().force(true).build()),
                    )
                    .await;
            });
        }
    }
}

fn engine_error(e: bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError {
            status_code,
            message,
        } => format!("{message} (engine status {status_code})"),
        other => other.to_string(),
    }
}

impl Engine {
    /// Connects to the engine and checks that it answers.
    pub async fn connect(
        settings: &ContainerSettings,
        executor_id: &str,
        incarnation: &str,
        work_dir: &str,
    ) -> Result<Engine, String> {
        let docker = Docker::connect_with_unix(
            &settings.docker_host,
            ENGINE_TIMEOUT_SECS,
            bollard::API_DEFAULT_VERSION,
        )
        .map_err(|e| format!("container.dockerHost {}: {e}", settings.docker_host))?;
        docker.ping().await.map_err(|e| {
            format!(
                "container.dockerHost {}: the engine does not answer: {}",
                settings.docker_host,
                engine_error(e)
            )
        })?;
        let credentials = match &settings.registry_auth_file {
            Some(path) => read_credentials(Path::new(path))?,
            None => BTreeMap::new(),
        };
        Ok(Engine {
            docker,
            settings: settings.clone(),
            executor_id: executor_id.to_string(),
            incarnation: incarnation.to_string(),
            work_dir: work_dir.to_string(),
            credentials,
        })
    }

    /// The name of an attempt's container (unique per executor, job and
    /// attempt: a resent start finds the one it made).
    pub fn container_name(&self, job_id: &str, attempt: u32) -> String {
        format!("qm-{}-{job_id}-{attempt}", self.executor_id)
    }

    /// Creates and starts the attempt's container, with its guard and its
    /// output copied to `stdout.log` / `stderr.log` in `dir`. Between the
    /// two, `hand_over` is given the uid and gid the container runs as (None:
    /// unknown), to hand it the folders it writes.
    pub async fn launch(
        self: &Arc<Self>,
        spec: ContainerSpec,
        dir: &Path,
        hand_over: HandOver,
    ) -> Result<Running, LaunchError> {
        let name = self.container_name(&spec.job_id, spec.attempt);
        // A container of this name is left from a launch interrupted
        // before it was recorded: it never ran for anyone, so it goes.
        let _ = self
            .docker
            .remove_container(
                &name,
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await;
        let mut spec = spec;
        if let (Some(instead), None) = (&spec.non_root, &spec.user) {
            let image_user = self
                .docker
                .inspect_image(&spec.image)
                .await
                .ok()
                .and_then(|i| i.config)
                .and_then(|c| c.user)
                .unwrap_or_default();
            let name = image_user.split(':').next().unwrap_or_default();
            if name.is_empty() || name == "root" || name == "0" {
                spec.user = Some(instead.clone());
            }
        }
        let body = self.create_body(&spec)?;
        let created = self
            .docker
            .create_container(
                Some(CreateContainerOptionsBuilder::default().name(&name).build()),
                body,
            )
            .await
            .map_err(|e| {
                LaunchError::Container(format!("cannot create {name}: {}", engine_error(e)))
            })?;
        let id = created.id;
        // The guard first: from here on the container dies with the
        // executor.
        let guard = match spawn_guard(&id, &self.settings.docker_host, &spec.fence) {
            Ok(g) => Some(g),
            Err(e) => {
                self.remove(&id).await;
                return Err(LaunchError::Container(format!(
                    "cannot start the container's guard: {e}"
                )));
            }
        };
        let ids = self.user_ids(&id).await;
        if spec.non_root.is_some() && ids.is_none_or(|(uid, _)| uid == 0) {
            // A named user that is root in the image's own passwd, or one
            // that cannot be told.
            self.remove(&id).await;
            return Err(LaunchError::Contract(format!(
                "the share forbids root (runAsNonRoot) and image {}'s user is root or cannot be told",
                spec.image
            )));
        }
        // A restored checkpoint may hold many files: changing their owner
        // is blocking work, off the async threads.
        let handed = tokio::task::spawn_blocking(move || hand_over(ids))
            .await
            .unwrap_or_else(|e| {
                Err(LaunchError::Container(format!(
                    "handing the folders over failed: {e}"
                )))
            });
        if let Err(e) = handed {
            self.remove(&id).await;
            return Err(e);
        }
        if let Err(e) = self.docker.start_container(&id, None).await {
            self.remove(&id).await;
            let reason = engine_error(e);
            let hint = if reason.contains("nvidia") || reason.contains("device driver") {
                " (this node's engine has no NVIDIA container runtime: install the NVIDIA Container Toolkit, or do not give this executor gpusPerInstance)"
            } else {
                ""
            };
            return Err(LaunchError::Container(format!(
                "cannot start {name}: {reason}{hint}"
            )));
        }
        let logs = tokio::spawn(copy_logs(
            self.docker.clone(),
            id.clone(),
            dir.to_path_buf(),
        ));
        Ok(Running {
            engine: Arc::clone(self),
            id,
            name,
            guard,
            logs,
            done: false,
        })
    }

    fn create_body(&self, spec: &ContainerSpec) -> Result<ContainerCreateBody, LaunchError> {
        let mut labels = HashMap::new();
        labels.insert(LABEL_JOB.to_string(), spec.job_id.clone());
        labels.insert(LABEL_ATTEMPT.to_string(), spec.attempt.to_string());
        labels.insert(LABEL_EXECUTOR.to_string(), self.executor_id.clone());
        labels.insert(LABEL_INCARNATION.to_string(), self.incarnation.clone());
        labels.insert(LABEL_WORK_DIR.to_string(), self.work_dir.clone());
        let binds = spec
            .mounts
            .iter()
            .map(|(host, inside, writable)| {
                let host = host.to_str().ok_or_else(|| {
                    LaunchError::Contract(format!("{} is not UTF-8", host.display()))
                })?;
                if host.contains(':') || inside.contains(':') {
                    return Err(LaunchError::Contract(format!(
                        "cannot mount {host} at {inside}: a ':' in a path"
                    )));
                }
                Ok(format!(
                    "{host}:{inside}:{}",
                    if *writable { "rw" } else { "ro" }
                ))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let device_requests = (!spec.gpus.is_empty()).then(|| {
            vec![DeviceRequest {
                driver: Some("nvidia".into()),
                device_ids: Some(spec.gpus.iter().map(ToString::to_string).collect()),
                capabilities: Some(vec![vec!["gpu".into()]]),
                ..Default::default()
            }]
        });
        let (entrypoint, cmd) = match spec.command.split_first() {
            Some((program, args)) => (Some(vec![program.clone()]), Some(args.to_vec())),
            None => (None, Some(vec!["train".to_string()])),
        };
        let host_config = HostConfig {
            binds: Some(binds),
            network_mode: Some(self.settings.network.clone()),
            extra_hosts: Some(
                spec.hosts
                    .iter()
                    .map(|(name, addr)| format!("{name}:{addr}"))
                    .collect(),
            ),
            security_opt: Some(vec!["no-new-privileges:true".into()]),
            // No capability at all: a job that runs as root is root in its
            // own files only (no chown to others, no overriding file modes,
            // no raw sockets).
            cap_drop: Some(vec!["ALL".into()]),
            privileged: Some(false),
            init: Some(true),
            shm_size: Some((self.settings.shm_size_mib as i64) << 20),
            ulimits: Some(vec![ResourcesUlimits {
                name: Some("memlock".into()),
                soft: Some(memlock_limit()),
                hard: Some(memlock_limit()),
            }]),
            memory: spec.memory_mib.map(|m| (m as i64) << 20),
            nano_cpus: spec.cpus.map(|c| (c * 1e9) as i64),
            device_requests,
            auto_remove: Some(false),
            ..Default::default()
        };
        Ok(ContainerCreateBody {
            image: Some(spec.image.clone()),
            entrypoint,
            cmd,
            env: Some(
                spec.environment
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect(),
            ),
            labels: Some(labels),
            user: spec.user.clone(),
            host_config: Some(host_config),
            ..Default::default()
        })
    }

    /// The uid and gid the container's main process runs as: its `user`
    /// (or the image's), numeric or a name looked up in the container's own
    /// `/etc/passwd` (read through the engine before it starts). None when
    /// it cannot be told.
    pub async fn user_ids(&self, id: &str) -> Option<(u32, u32)> {
        let inspect = self
            .docker
            .inspect_container(id, None::<InspectContainerOptions>)
            .await
            .ok()?;
        let user = inspect.config.and_then(|c| c.user).unwrap_or_default();
        let (name, group) = match user.split_once(':') {
            Some((u, g)) => (u.to_string(), Some(g.to_string())),
            None => (user.clone(), None),
        };
        if name.is_empty() || name == "root" {
            return Some((0, group.and_then(|g| g.parse().ok()).unwrap_or(0)));
        }
        let numeric_group = group.as_deref().and_then(|g| g.parse::<u32>().ok());
        if let Ok(uid) = name.parse::<u32>() {
            return Some((uid, numeric_group.unwrap_or(uid)));
        }
        let options = bollard::query_parameters::DownloadFromContainerOptionsBuilder::default()
            .path("/etc/passwd")
            .build();
        let mut archive = Vec::new();
        let mut stream = self.docker.download_from_container(id, Some(options));
        while let Some(chunk) = stream.next().await {
            archive.extend_from_slice(&chunk.ok()?);
            if archive.len() > 4 << 20 {
                return None;
            }
        }
        let passwd = first_tar_entry(&archive)?;
        let (uid, gid) = passwd_lookup(&passwd, &name)?;
        Some((uid, numeric_group.unwrap_or(gid)))
    }

    async fn remove(&self, id: &str) {
        if let Err(e) = self
            .docker
            .remove_container(
                id,
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await
        {
            let e = engine_error(e);
            if !e.contains("No such container") {
                tracing::warn!(container = id, error = %e, "cannot remove a container");
            }
        }
    }

    /// Stops and removes every container of this executor that no attempt
    /// `allowed` lists (job, attempt) of this incarnation accounts for
    /// (`allowed` None: it cannot be told now, nothing is removed); returns
    /// how many. At start, `allowed` is empty: what a killed incarnation
    /// left goes (the scheduler has ended those attempts).
    pub async fn reconcile(
        &self,
        allowed: &(dyn Fn() -> Option<std::collections::HashSet<(String, u32)>> + Sync),
    ) -> usize {
        let mut filters = HashMap::new();
        filters.insert(
            "label".to_string(),
            vec![
                format!("{LABEL_EXECUTOR}={}", self.executor_id),
                format!("{LABEL_WORK_DIR}={}", self.work_dir),
            ],
        );
        let listed = match self
            .docker
            .list_containers(Some(
                ListContainersOptionsBuilder::default()
                    .all(true)
                    .filters(&filters)
                    .build(),
            ))
            .await
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %engine_error(e), "cannot list this executor's containers");
                return 0;
            }
        };
        // What may run is read after the listing: a container created in
        // between belongs to an attempt already recorded.
        let Some(allowed) = allowed() else {
            return 0;
        };
        let mut removed = 0;
        for c in listed {
            let labels = c.labels.unwrap_or_default();
            let key = (
                labels.get(LABEL_JOB).cloned().unwrap_or_default(),
                labels
                    .get(LABEL_ATTEMPT)
                    .and_then(|a| a.parse().ok())
                    .unwrap_or(0),
            );
            let ours_now = labels.get(LABEL_INCARNATION) == Some(&self.incarnation);
            if ours_now && allowed.contains(&key) {
                continue;
            }
            let Some(id) = c.id else { continue };
            tracing::warn!(
                container = %id,
                job = %key.0,
                attempt = key.1,
                state = ?c.state,
                "a container no current attempt allows: stopped and removed"
            );
            self.remove(&id).await;
            removed += 1;
        }
        removed
    }
}

/// The content of the first file in a tar archive (what the engine sends
/// for one path).
fn first_tar_entry(archive: &[u8]) -> Option<String> {
    let header = archive.get(..512)?;
    let size_field = std::str::from_utf8(&header[124..136]).ok()?;
    let size =
        usize::from_str_radix(size_field.trim_matches(|c: char| c == '\0' || c == ' '), 8).ok()?;
    let body = archive.get(512..512 + size)?;
    Some(String::from_utf8_lossy(body).into_owned())
}

/// A user's uid and gid in a passwd file.
fn passwd_lookup(passwd: &str, name: &str) -> Option<(u32, u32)> {
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.len() >= 4 && fields[0] == name)
            .then(|| Some((fields[2].parse().ok()?, fields[3].parse().ok()?)))
            .flatten()
    })
}

/// The locked-memory limit a job container gets: as much as this node
/// allows (the executor's own hard limit, read from `/proc/self/limits`;
/// unlimited, as NCCL wants, where the node does not limit it). The engine
/// cannot raise a container's limit above the node's.
fn memlock_limit() -> i64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    parse_memlock(&limits)
}

fn parse_memlock(limits: &str) -> i64 {
    limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .and_then(|l| l.split_whitespace().nth(4))
        .map_or(-1, |hard| {
            if hard == "unlimited" {
                -1
            } else {
                hard.parse().unwrap_or(-1)
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memlock_limit_is_the_nodes_hard_limit() {
        let limited = "Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         8388608              8388608              bytes\n";
        assert_eq!(parse_memlock(limited), 8_388_608);
        let open = "Max locked memory         unlimited            unlimited            bytes\n";
        assert_eq!(parse_memlock(open), -1);
    }

    #[test]
    fn a_user_name_is_found_in_the_images_passwd() {
        let passwd =
            "root:x:0:0:root:/root:/bin/bash\ntrainer:x:1000:1001::/home/trainer:/bin/sh\n";
        assert_eq!(passwd_lookup(passwd, "trainer"), Some((1000, 1001)));
        assert_eq!(passwd_lookup(passwd, "nobody"), None);
        let mut archive = vec![0u8; 512];
        archive[124..135].copy_from_slice(format!("{:011o}", passwd.len()).as_bytes());
        archive.extend_from_slice(passwd.as_bytes());
        archive.resize(2048, 0);
        assert_eq!(first_tar_entry(&archive).as_deref(), Some(passwd));
    }
}
