//! The guard beside each container: a child of the executor that the
//! kernel signals when the executor dies, and that then kills the container.

use std::time::Duration;

use bollard::query_parameters::RemoveContainerOptionsBuilder;
use bollard::Docker;

use super::ENGINE_TIMEOUT_SECS;

/// Starts the guard of container `id`: this executable's `guard` mode, a
/// child the kernel sends SIGTERM when the executor dies, and the
/// container's fence watchdog (`fence`).
pub(super) fn spawn_guard(
    id: &str,
    docker_host: &str,
    fence: &qm_fence::Terms,
) -> std::io::Result<tokio::process::Child> {
    // /proc/self/exe: this binary even if an upgrade replaced its file.
    let mut cmd = tokio::process::Command::new("/proc/self/exe");
    cmd.arg("guard")
        .arg(id)
        .arg(std::process::id().to_string())
        .arg(docker_host)
        .args(fence.args())
        .env_clear()
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    crate::process::on_parent_death(&mut cmd, libc::SIGTERM);
    cmd.spawn()
}

/// `qm-executor guard CONTAINER EXECUTOR_PID DOCKER_HOST --deadline-file F
/// --deadline NS --grace S --record R`: until its parent, the executor, is
/// gone (the kernel's SIGTERM on its death, or a parent already gone),
/// checks the fence deadline four times a second; once it has passed, stops
/// the container (its stop signal, then SIGKILL after the grace) and records
/// when. When the executor is gone it kills and removes the container.
/// Killed with SIGKILL by the executor when the attempt ends normally.
pub fn guard(args: &[String]) -> std::process::ExitCode {
    let usage = "usage: qm-executor guard CONTAINER EXECUTOR_PID DOCKER_HOST --deadline-file F --deadline NS --grace S --record R";
    let (Some([container, parent, docker_host]), Some(flags)) = (
        args.get(..3).and_then(|a| <&[String; 3]>::try_from(a).ok()),
        args.get(3..),
    ) else {
        eprintln!("{usage}");
        return std::process::ExitCode::from(2);
    };
    let Ok(parent) = parent.parse::<u32>() else {
        eprintln!("qm-executor guard: {parent:?} is not a process id");
        return std::process::ExitCode::from(2);
    };
    let terms = match qm_fence::parse_flags(flags)
        .and_then(|(flags, _)| qm_fence::Terms::from_flags(&flags))
    {
        Ok(t) => t,
        Err(e) => {
            eprintln!("qm-executor guard: {e}\n{usage}");
            return std::process::ExitCode::from(2);
        }
    };
    // Caught, so that a signal is only a wake-up: whether the executor is
    // gone is read from the parent id (a ^C from a terminal is not its
    // death).
    let signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ]);
    let mut signals = match signals {
        Ok(s) => s,
        Err(e) => {
            eprintln!("qm-executor guard: cannot wait for signals: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let Ok(runtime) = runtime else {
        return std::process::ExitCode::from(1);
    };
    let docker = || {
        Docker::connect_with_unix(
            docker_host,
            ENGINE_TIMEOUT_SECS,
            bollard::API_DEFAULT_VERSION,
        )
        .map_err(|e| {
            eprintln!(
                "qm-executor guard: cannot reach {docker_host} for container {container}: {e}"
            )
        })
    };
    let mut watch = terms.watch();
    let mut fenced = false;
    // The executor may have died before the kernel was told to signal us.
    while std::os::unix::process::parent_id() == parent {
        if !fenced && watch.expired() {
            fenced = true;
            eprintln!(
                "qm-executor guard: the executor has not renewed its fence deadline ({}): fencing; stopping container {container} (SIGKILL after {} s)",
                terms.deadline_file.display(),
                terms.grace_seconds
            );
            if let Ok(docker) = docker() {
                let options = bollard::query_parameters::StopContainerOptionsBuilder::default()
                    .t(i32::try_from(terms.grace_seconds).unwrap_or(i32::MAX))
                    .build();
                // The engine's own call may outlast its usual timeout: the
                // grace comes first.
                let docker = docker.with_timeout(Duration::from_secs(
                    terms.grace_seconds.saturating_add(ENGINE_TIMEOUT_SECS),
                ));
                let stopped = runtime.block_on(docker.stop_container(container, Some(options)));
                if let Err(e) = stopped {
                    eprintln!("qm-executor guard: stopping container {container}: {e}; killing it");
                    let _ = runtime.block_on(docker.remove_container(
                        container,
                        Some(RemoveContainerOptionsBuilder::default().force(true).build()),
                    ));
                }
                qm_fence::record_exit(&terms.record, qm_service::now_ms(), true);
            }
        }
        let _ = signals.pending().count();
        std::thread::sleep(qm_fence::WATCH_EVERY);
    }
    runtime.block_on(async {
        let Ok(docker) = docker() else {
            return;
        };
        eprintln!("qm-executor guard: the executor is gone; killing container {container}");
        let _ = docker
            .remove_container(
                container,
                Some(RemoveContainerOptionsBuilder::default().force(true).build()),
            )
            .await;
    });
    std::process::ExitCode::SUCCESS
}
