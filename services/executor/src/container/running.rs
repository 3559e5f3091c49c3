//! A running attempt's container: its signals, waiting for it to exit (or
//! stopping it), and its output copied to the attempt's log files.

use std::path::PathBuf;
use std::time::Duration;

use bollard::query_parameters::{
    InspectContainerOptions, KillContainerOptionsBuilder, LogsOptionsBuilder,
    WaitContainerOptionsBuilder,
};
use bollard::Docker;
use futures::StreamExt;
use tokio::sync::watch;

use super::{engine_error, Exit, Running};

/// Sends a running container's main process signals (the init process
/// forwards them), from code that does not hold the container.
#[derive(Clone)]
pub struct Signaller {
    docker: Docker,
    id: String,
}

impl Signaller {
    pub fn send(&self, signal: &str) {
        let (docker, id, signal) = (self.docker.clone(), self.id.clone(), signal.to_string());
        tokio::spawn(async move {
            let options = KillContainerOptionsBuilder::default()
                .signal(&signal)
                .build();
            if let Err(e) = docker.kill_container(&id, Some(options)).await {
                tracing::warn!(container = %id, signal, error = %engine_error(e), "cannot signal the container");
            }
        });
    }
}

impl Running {
    pub fn signaller(&self) -> Signaller {
        Signaller {
            docker: self.engine.docker.clone(),
            id: self.id.clone(),
        }
    }

    async fn wait(&self) -> Result<(), String> {
        let mut waiting = self.engine.docker.wait_container(
            &self.id,
            Some(
                WaitContainerOptionsBuilder::default()
                    .condition("not-running")
                    .build(),
            ),
        );
        match waiting.next().await {
            // A non-zero exit is an "error" to bollard; the state says more.
            Some(Ok(_)) | Some(Err(bollard::errors::Error::DockerContainerWaitError { .. })) => {
                Ok(())
            }
            Some(Err(e)) => Err(engine_error(e)),
            None => Ok(()),
        }
    }

    /// Waits for the container to exit; when a stop arrives (with its grace
    /// period), sends SIGTERM, then SIGKILL after the grace. Then reads how
    /// it ended and removes it (its output is in the attempt's logs).
    pub async fn wait_or_stop(mut self, stop: &mut watch::Receiver<Option<u64>>) -> Exit {
        let mut stopped = false;
        loop {
            let requested = *stop.borrow();
            if let Some(grace) = requested {
                let signalled = std::time::Instant::now();
                if !self.kill("SIGTERM").await {
                    // It had exited on its own a moment before the stop
                    // came: its end is its own.
                    let _ = self.wait().await;
                    break;
                }
                stopped = true;
                let killed = match tokio::time::timeout(Duration::from_secs(grace), self.wait())
                    .await
                {
                    Ok(_) => "false",
                    Err(_) => {
                        tracing::warn!(grace, container = %self.name, "grace period over; SIGKILL");
                        self.kill("SIGKILL").await;
                        let _ = self.wait().await;
                        "true"
                    }
                };
                crate::observe::METRICS
                    .stop
                    .with_label_values(&[killed])
                    .observe(signalled.elapsed().as_secs_f64());
                break;
            }
            tokio::select! {
                waited = self.wait() => {
                    if let Err(e) = waited {
                        // The engine went away: poll the state instead.
                        tracing::warn!(container = %self.name, error = %e, "waiting on the container failed; polling");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        if self.state().await.is_some_and(|s| s.running == Some(true)) {
                            continue;
                        }
                    }
                    break;
                }
                changed = stop.changed() => {
                    if changed.is_err() {
                        let _ = self.wait().await;
                        break;
                    }
                }
            }
        }
        let state = self.state().await.unwrap_or_default();
        let code = state.exit_code.map(|c| c as i32);
        let oom_killed = state.oom_killed == Some(true);
        // The init process exits 128+N when the job was killed by signal N;
        // a job stopped here reads as the host runtime's (signal, no code).
        let exit = match code {
            Some(c) if stopped && (129..=128 + 64).contains(&c) => Exit {
                exit_code: None,
                signal: Some(c - 128),
                oom_killed,
                stopped,
            },
            _ => Exit {
                exit_code: code,
                signal: None,
                oom_killed,
                stopped,
            },
        };
        let _ = (&mut self.logs).await;
        self.engine.remove(&self.id).await;
        self.done = true;
        if let Some(mut guard) = self.guard.take() {
            let _ = guard.start_kill();
            let _ = guard.wait().await;
        }
        exit
    }

    /// Signals the container; false when it was no longer running (the
    /// engine says so atomically: it exited before the signal).
    async fn kill(&self, signal: &str) -> bool {
        let options = KillContainerOptionsBuilder::default()
            .signal(signal)
            .build();
        match self
            .engine
            .docker
            .kill_container(&self.id, Some(options))
            .await
        {
            Ok(()) => true,
            Err(e) => {
                let e = engine_error(e);
                if e.contains("is not running") {
                    return false;
                }
                tracing::warn!(container = %self.name, signal, error = %e, "cannot signal the container");
                true
            }
        }
    }

    async fn state(&self) -> Option<bollard::models::ContainerState> {
        self.engine
            .docker
            .inspect_container(&self.id, None::<InspectContainerOptions>)
            .await
            .ok()?
            .state
    }
}

/// Appends the container's output to `stdout.log` and `stderr.log` until
/// it ends.
pub(super) async fn copy_logs(docker: Docker, id: String, dir: PathBuf) {
    use tokio::io::AsyncWriteExt;
    let open = |name: &str| {
        let path = dir.join(name);
        async move {
            // A link planted in place of a log file is not written through.
            tokio::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
                .await
        }
    };
    let (Ok(mut out), Ok(mut err)) = (open("stdout.log").await, open("stderr.log").await) else {
        tracing::warn!(container = %id, dir = %dir.display(), "cannot open the attempt's log files");
        return;
    };
    let options = LogsOptionsBuilder::default()
        .follow(true)
        .stdout(true)
        .stderr(true)
        .build();
    let mut logs = docker.logs(&id, Some(options));
    while let Some(item) = logs.next().await {
        match item {
            Ok(bollard::container::LogOutput::StdErr { message }) => {
                let _ = err.write_all(&message).await;
            }
            Ok(output) => {
                let _ = out.write_all(&output.into_bytes()).await;
            }
            Err(_) => break,
        }
    }
    let _ = out.flush().await;
    let _ = err.flush().await;
}
