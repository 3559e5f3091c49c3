//! One interface for launching an attempt, two runtimes behind it: `process`
//! (a host command, `process.rs`) and `container` (an OCI image through
//! the Docker Engine API, `container/`, with the SageMaker contract,
//! `sagemaker.rs`). `node/attempts.rs` runs every attempt through this (the
//! executor's side of a launch is `node/launch.rs`), and never asks which
//! runtime it has.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::watch;

use crate::container;
use crate::error::LaunchError;
use crate::process::{self, Launch};
use crate::sagemaker::{self, Layout};

/// A launched attempt.
pub(crate) enum Launched {
    Process(process::Supervised),
    Container {
        running: container::Running,
        layout: Layout,
        memory_mib: Option<u64>,
    },
}

/// Where signals for a running attempt go.
#[derive(Clone)]
pub(crate) enum SignalTarget {
    /// The process group this pid leads.
    Group(u32),
    Container(container::Signaller),
}

impl SignalTarget {
    pub(crate) fn send(&self, number: i32, name: &str) {
        match self {
            SignalTarget::Group(pid) => process::signal_pid_group(*pid, number),
            SignalTarget::Container(c) => c.send(name),
        }
    }
}

/// How an attempt's run ended.
#[derive(Debug, Default)]
pub(crate) struct RunEnd {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Why it failed, in its own words (`/opt/ml/output/failure`) or the
    /// runtime's (killed for its memory limit).
    pub reason: Option<String>,
    /// A stop reached it while it ran: false when it ended on its own,
    /// even if a stop came a moment after it had exited.
    pub stopped: bool,
}

impl Launched {
    pub(crate) fn target(&self) -> Option<SignalTarget> {
        match self {
            Launched::Process(job) => Some(SignalTarget::Group(job.pid)),
            Launched::Container { running, .. } => {
                Some(SignalTarget::Container(running.signaller()))
            }
        }
    }

    /// What the logs name it by: a pid or a container.
    pub(crate) fn describe(&self) -> String {
        match self {
            Launched::Process(job) => format!(
                "pid {} (supervisor {})",
                job.pid,
                job.child.id().unwrap_or(0)
            ),
            Launched::Container { running, .. } => {
                format!(
                    "container {} ({})",
                    running.name,
                    &running.id[..12.min(running.id.len())]
                )
            }
        }
    }

    /// Waits for the attempt to end, stopping it (SIGTERM, its grace,
    /// SIGKILL) when a stop arrives.
    pub(crate) async fn wait_or_stop(self, stop: &mut watch::Receiver<Option<u64>>) -> RunEnd {
        match self {
            Launched::Process(mut job) => {
                let end = process::wait_or_stop(&mut job, stop).await;
                RunEnd {
                    exit_code: end.exit_code,
                    signal: end.signal,
                    reason: None,
                    stopped: end.stopped,
                }
            }
            Launched::Container {
                running,
                layout,
                memory_mib,
            } => {
                let exit = running.wait_or_stop(stop).await;
                let failed = exit.exit_code.is_some_and(|c| c != 0);
                let reason = if exit.oom_killed && exit.exit_code != Some(0) {
                    Some(match memory_mib {
                        Some(m) => format!("OutOfMemory: the container was killed for exceeding its memory limit ({m} MiB)"),
                        None => "OutOfMemory: the container was killed for lack of memory".into(),
                    })
                } else if failed {
                    layout.failure_reason()
                } else {
                    None
                };
                RunEnd {
                    exit_code: exit.exit_code,
                    signal: exit.signal,
                    reason,
                    stopped: exit.stopped,
                }
            }
        }
    }
}

/// The container's environment: SageMaker's and Quartermaster's variables,
/// the job's own, its channels, and the GPUs of its device request.
pub(crate) fn container_environment(
    launch: &Launch,
    nodes: usize,
    inside_checkpoints: &str,
) -> std::collections::BTreeMap<String, String> {
    let mut environment = sagemaker::rank_environment(
        &launch.job_id,
        launch.attempt,
        launch.rank,
        nodes,
        &sagemaker::host_name(0),
        launch.gpus.len(),
    );
    environment.extend(launch.environment.clone());
    environment.insert("QM_JOB_ID".into(), launch.job_id.clone());
    environment.insert("QM_ATTEMPT".into(), launch.attempt.to_string());
    environment.insert("QM_JOB_QUEUE".into(), launch.job_queue.clone());
    environment.insert("QM_CHECKPOINT_DIR".into(), inside_checkpoints.to_string());
    environment.insert("QM_RESULT_FILE".into(), "/opt/ml/output/result".into());
    environment.insert("QM_NODE_RANK".into(), launch.rank.to_string());
    environment.insert("QM_NUM_NODES".into(), nodes.to_string());
    environment.insert("SM_MODEL_DIR".into(), "/opt/ml/model".into());
    environment.insert("SM_OUTPUT_DATA_DIR".into(), "/opt/ml/output/data".into());
    environment.insert("SM_INPUT_DIR".into(), "/opt/ml/input".into());
    environment.insert("SM_INPUT_CONFIG_DIR".into(), "/opt/ml/input/config".into());
    let names: Vec<&str> = launch
        .input_channels
        .iter()
        .map(|c| c.channel_name.as_str())
        .collect();
    environment.insert(
        "SM_CHANNELS".into(),
        serde_json::to_string(&names).expect("strings serialize"),
    );
    for name in names {
        environment.insert(
            format!(
                "SM_CHANNEL_{}",
                name.to_ascii_uppercase().replace(['.', '-'], "_")
            ),
            format!("/opt/ml/input/data/{name}"),
        );
    }
    // The GPUs are the device request's, and only those: a CUDA image's
    // own NVIDIA_VISIBLE_DEVICES=all (or the job's) must not widen it
    // on an engine whose default runtime is NVIDIA's.
    environment.retain(|k, _| !k.starts_with("NVIDIA_VISIBLE_DEVICES"));
    environment.insert(
        "NVIDIA_VISIBLE_DEVICES".into(),
        if launch.gpus.is_empty() {
            "void".into()
        } else {
            launch
                .gpus
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",")
        },
    );
    // Inside, they count from 0.
    environment.insert(
        "CUDA_VISIBLE_DEVICES".into(),
        (0..launch.gpus.len())
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(","),
    );
    environment
}

/// Gives the folders a container writes to the user it runs as (and
/// everything already in them: a restored checkpoint). Where that user is
/// not known, or this executor may not change owners, they are opened to
/// every user instead: the attempt's directory above them is the
/// executor's, so only this attempt's container reaches them.
pub(crate) fn hand_over(folders: &[PathBuf], ids: Option<(u32, u32)>) -> Result<(), LaunchError> {
    use std::os::unix::fs::PermissionsExt;
    let open_to_all = |d: &Path| {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).map_err(|source| {
            LaunchError::CreateDir {
                path: d.to_path_buf(),
                source,
            }
        })
    };
    for folder in folders {
        let Some((uid, gid)) = ids else {
            open_to_all(folder)?;
            continue;
        };
        let mut stack = vec![folder.clone()];
        let mut ok = true;
        while let Some(current) = stack.pop() {
            if std::os::unix::fs::lchown(&current, Some(uid), Some(gid)).is_err() {
                ok = false;
                break;
            }
            let meta =
                std::fs::symlink_metadata(&current).map_err(|source| LaunchError::CreateDir {
                    path: current.clone(),
                    source,
                })?;
            if meta.is_dir() {
                let entries =
                    std::fs::read_dir(&current).map_err(|source| LaunchError::CreateDir {
                        path: current.clone(),
                        source,
                    })?;
                stack.extend(entries.flatten().map(|entry| entry.path()));
            }
        }
        if ok {
            std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o750)).map_err(
                |source| LaunchError::CreateDir {
                    path: folder.clone(),
                    source,
                },
            )?;
        } else {
            tracing::debug!(folder = %folder.display(), uid, "cannot hand the folder over; opening it to every user");
            open_to_all(folder)?;
        }
    }
    Ok(())
}

/// `algo-N` -> the address of rank N-1's executor, as the engine's
/// `extraHosts` needs it (an IP address: names are resolved here).
pub(crate) async fn resolve_hosts(hosts: &[String]) -> Result<Vec<(String, String)>, LaunchError> {
    let mut out = Vec::new();
    for (rank, host) in hosts.iter().enumerate() {
        let address = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => ip,
            // An IPv4 address if it has one, else whatever it resolves to.
            Err(_) => tokio::net::lookup_host((host.as_str(), 0))
                .await
                .ok()
                .and_then(|addrs| {
                    let all: Vec<std::net::SocketAddr> = addrs.collect();
                    all.iter().find(|a| a.is_ipv4()).or(all.first()).copied()
                })
                .map(|a| a.ip())
                .ok_or_else(|| {
                    LaunchError::Contract(format!(
                        "rank {rank}'s executor address {host:?} does not resolve (its advertiseAddress)"
                    ))
                })?,
        };
        out.push((sagemaker::host_name(rank), address.to_string()));
    }
    if out.is_empty() {
        out.push((sagemaker::host_name(0), "127.0.0.1".into()));
    }
    Ok(out)
}

/// The executor's engine, when it offers the container runtime.
pub(crate) type SharedEngine = Option<Arc<container::Engine>>;
