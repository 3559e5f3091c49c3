//! Launching and stopping one attempt's process.

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::sync::watch;

use crate::error::LaunchError;

pub struct Launch {
    pub job_id: String,
    pub attempt: u32,
    pub job_queue: String,
    pub command: Vec<String>,
    pub environment: BTreeMap<String, String>,
    pub gpus: Vec<u32>,
    /// `QM_CHECKPOINT_DIR` (inside the attempt's directory), or why the
    /// job's `localPath` was refused.
    pub checkpoint_dir: Result<PathBuf, String>,
    /// The checkpoint service's request, when the job has checkpoints.
    pub checkpoint: Option<qm_wire::system::CheckpointRequest>,
    /// This node's rank and every node's address (empty: one node).
    pub rank: u32,
    pub hosts: Vec<String>,
    /// Run as this uid/gid (the executor's `runAsUser`/`runAsGroup`).
    pub run_as: Option<(u32, u32)>,
    /// The job's image: it runs in the container runtime.
    pub image: Option<String>,
    /// The job's `checkpointConfig.localPath`, if it gave one (inside a
    /// container, the checkpoint directory is `/` + it; else
    /// `/opt/ml/checkpoints`).
    pub local_path: Option<String>,
    pub instance_type: String,
    /// How many instances this rank holds (its share of the limits).
    pub instances: u32,
    /// Where rank 0 uploads a succeeded container job's outputs.
    pub output_s3_uri: Option<String>,
    pub quota_share_name: String,
    /// Input channels downloaded before a container starts.
    pub input_channels: Vec<qm_wire::messages::InputChannel>,
    /// The share forbids root in containers.
    pub run_as_non_root: bool,
    /// Between SIGTERM and SIGKILL when it is stopped.
    pub grace_seconds: u64,
}

/// The only variables of the executor's own environment a job inherits:
/// nothing secret (NATS credentials, S3 keys) leaks into a job.
/// A host process's `$QM_RESULT_FILE`, in its attempt's directory: what
/// it declares as its result (resume drills compare it).
pub const RESULT_FILE: &str = "result";

/// The most of a result file an executor reports, in characters (the
/// scheduler keeps at most 16 KiB).
pub const RESULT_CHARS: usize = 4096;

const INHERITED: [&str; 6] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"];

impl Launch {
    /// Checkpoints are synced by rank 0 only; the other ranks restore.
    pub fn syncs_checkpoints(&self) -> Option<&qm_wire::system::CheckpointRequest> {
        self.checkpoint.as_ref().filter(|_| self.rank == 0)
    }
}

/// `qm-supervise`, the parent and fence watchdog of every host-process
/// attempt (`services/supervise`), opened once when the executor starts:
/// every attempt runs under this very file, even if an upgrade has
/// replaced it on disk since (the flags it is given are this release's).
pub struct Supervisor {
    file: std::fs::File,
    /// Where it was found (for messages).
    path: PathBuf,
}

impl Supervisor {
    /// Opens `configured` (the `supervisor` setting) or, when that is
    /// empty, `qm-supervise` beside this executable, and checks that it is
    /// this release's (a file that does not answer `--version` within
    /// [`VERSION_WAIT`] is killed and refused: a wrong binary named here
    /// must not hang the executor's start).
    pub async fn open(configured: &str) -> Result<Supervisor, String> {
        let path = if configured.is_empty() {
            let exe = std::env::current_exe()
                .map_err(|e| format!("cannot tell where qm-executor is: {e}"))?;
            exe.with_file_name("qm-supervise")
        } else {
            PathBuf::from(configured)
        };
        let file = std::fs::File::open(&path).map_err(|e| {
            format!(
                "cannot open the supervisor {} ({e}): qm-supervise is installed beside qm-executor, or named by the supervisor setting",
                path.display()
            )
        })?;
        let supervisor = Supervisor { file, path };
        let asked = Command::new(supervisor.program())
            .arg0("qm-supervise")
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .output();
        let answer = tokio::time::timeout(VERSION_WAIT, asked)
            .await
            .map_err(|_| {
                format!(
                    "the supervisor {} did not answer --version within {} s",
                    supervisor.path.display(),
                    VERSION_WAIT.as_secs()
                )
            })?
            .map_err(|e| {
                format!(
                    "cannot run the supervisor {}: {e}",
                    supervisor.path.display()
                )
            })?;
        check_version(&supervisor.path, &String::from_utf8_lossy(&answer.stdout))?;
        Ok(supervisor)
    }

    /// What to execute: the opened file itself (a new file renamed over
    /// the old one on disk does not change it; overwriting the file in
    /// place does).
    fn program(&self) -> String {
        use std::os::fd::AsRawFd;
        format!("/proc/self/fd/{}", self.file.as_raw_fd())
    }
}

/// How long the supervisor may take to say its version at start.
const VERSION_WAIT: Duration = Duration::from_secs(10);

/// Whether `said`, the answer of `path --version`, is this release's
/// supervisor.
fn check_version(path: &Path, said: &str) -> Result<(), String> {
    let expected = format!("qm-supervise {}", env!("CARGO_PKG_VERSION"));
    if said.trim_end() == expected {
        return Ok(());
    }
    Err(format!(
        "{} is not this release's supervisor: it says {:?}, where {expected:?} was expected",
        path.display(),
        said.trim_end()
    ))
}

/// A job's process, started under its supervisor (`qm-supervise`).
pub struct Supervised {
    /// The supervisor: it exits as the job did.
    pub child: Child,
    /// The job's process, leader of its process group (where signals go).
    pub pid: u32,
}

/// How long a supervisor may take to say whether the job started.
const HANDSHAKE: Duration = Duration::from_secs(30);

/// Starts the process under its supervisor: argv (no shell), its own
/// process group, output to `stdout.log` / `stderr.log` in `dir`, killed if
/// the executor dies, and stopped by the supervisor once the fence deadline
/// (`fence`) has passed, whatever the executor is doing then.
///
/// The supervisor is spawned without a fork of the executor (nothing runs
/// in the child before exec, and it changes into the job's directory
/// itself, so the standard library uses `posix_spawn`, which copies no
/// page tables, whatever the C library's version); it asks for its
/// parent-death signal itself, and checks that its parent is still this
/// executor.
pub async fn spawn(
    supervisor: &Supervisor,
    launch: &Launch,
    dir: &Path,
    checkpoint_dir: &Path,
    fence: &qm_fence::Terms,
) -> Result<Supervised, LaunchError> {
    let program = launch.command.first().ok_or(LaunchError::EmptyCommand)?;
    let mut cmd = Command::new(supervisor.program());
    cmd.arg0("qm-supervise")
        .args(["--parent", &std::process::id().to_string()])
        .args(fence.args())
        .arg("--cwd")
        .arg(dir);
    for (flag, name) in [("--stdout", "stdout.log"), ("--stderr", "stderr.log")] {
        cmd.arg(flag).arg(dir.join(name));
    }
    if let Some((uid, gid)) = launch.run_as {
        cmd.args(["--uid", &uid.to_string(), "--gid", &gid.to_string()]);
    }
    cmd.arg("--").args(&launch.command);
    cmd.env_clear();
    for name in INHERITED {
        if let Some(v) = std::env::var_os(name) {
            cmd.env(name, v);
        }
    }
    if let Some(hps) = launch.environment.get("SM_HPS") {
        // SageMaker compatibility (the AWS Batch gateway sets SM_HPS from
        // a job's HyperParameters): the config files SageMaker gives a
        // training container, as a container job gets them, at
        // input/config.
        let config = dir.join("input").join("config");
        std::fs::create_dir_all(&config).map_err(|source| LaunchError::CreateDir {
            path: config.clone(),
            source,
        })?;
        crate::sagemaker::ConfigFiles::new(
            Some(hps),
            launch.rank,
            launch.hosts.len(),
            "eth0",
            &launch.input_channels,
        )?
        .write_into(&config)?;
        cmd.env("SM_INPUT_CONFIG_DIR", &config);
    }
    // The job's own environment may override what the ranks are told.
    cmd.envs(crate::sagemaker::rank_environment(
        &launch.job_id,
        launch.attempt,
        launch.rank,
        launch.hosts.len(),
        launch.hosts.first().map_or("127.0.0.1", String::as_str),
        launch.gpus.len(),
    ))
    .envs(&launch.environment)
    .env("QM_JOB_ID", &launch.job_id)
    .env("QM_ATTEMPT", launch.attempt.to_string())
    .env("QM_JOB_QUEUE", &launch.job_queue)
    .env("QM_CHECKPOINT_DIR", checkpoint_dir)
    .env("QM_RESULT_FILE", dir.join(RESULT_FILE))
    .env("QM_NODE_RANK", launch.rank.to_string())
    .env("QM_NUM_NODES", launch.hosts.len().max(1).to_string())
    .env("QM_HOSTS", launch.hosts.join(","))
    .env(
        "CUDA_VISIBLE_DEVICES",
        launch
            .gpus
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
    )
    .stdin(std::process::Stdio::null())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::inherit())
    // Dropped unwaited (an attempt cut short): the supervisor is killed,
    // and the kernel kills the job with it.
    .kill_on_drop(true);
    let spawn_error = |source| LaunchError::Spawn {
        program: program.clone(),
        source,
    };
    let mut child = cmd.spawn().map_err(spawn_error)?;
    let said = match child.stdout.take() {
        Some(out) => {
            use tokio::io::AsyncBufReadExt;
            let mut line = String::new();
            let mut reader = tokio::io::BufReader::new(out);
            match tokio::time::timeout(HANDSHAKE, reader.read_line(&mut line)).await {
                Ok(Ok(_)) => line,
                _ => String::new(),
            }
        }
        None => String::new(),
    };
    let said = said.trim_end();
    if let Some(pid) = said
        .strip_prefix("started ")
        .and_then(|p| p.parse::<u32>().ok())
    {
        return Ok(Supervised { child, pid });
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    Err(spawn_error(std::io::Error::other(
        match said.strip_prefix("failed ") {
            Some(why) => why.to_string(),
            None => format!("its supervisor said {said:?}"),
        },
    )))
}

/// Records when attempt `attempt`'s process was launched and when it was
/// seen to end (milliseconds since the Unix epoch, this host's clock) in
/// `<job_dir>/attempt-<N>.run.json`, for post-mortems and for tests that
/// check that two attempts of a job never overlapped. It is written beside
/// the attempt's directory, not in it: the job (possibly another user) may
/// write its own directory, and could plant a link there for the executor
/// to write through.
///
/// The end is when the attempt's watcher (its supervisor or container
/// guard) saw it end, where it recorded that: an executor that was frozen
/// sees the end only when it runs again.
pub fn record_run(job_dir: &Path, attempt: u32, launched_at_ms: u64, ended_at_ms: u64) {
    let ended_at_ms = qm_fence::read_exit(&qm_fence::exit_record(job_dir, attempt))
        .map_or(ended_at_ms, |(at, _)| at.min(ended_at_ms));
    let body = serde_json::json!({"launchedAtMs": launched_at_ms, "endedAtMs": ended_at_ms});
    let path = run_record(job_dir, attempt);
    if let Err(e) = std::fs::write(&path, body.to_string()) {
        tracing::warn!(path = %path.display(), error = %e, "cannot record the attempt's run");
    }
}

/// Where [`record_run`] writes.
pub fn run_record(job_dir: &Path, attempt: u32) -> PathBuf {
    job_dir.join(format!("attempt-{attempt}.run.json"))
}

/// The kernel sends the child `signal` when the executor (the thread that
/// spawned it: always a runtime worker, which lives as long as the
/// executor) dies, whatever killed it.
#[allow(unsafe_code)]
pub fn on_parent_death(cmd: &mut Command, signal: i32) {
    // SAFETY: the closure runs in the forked child before exec and only calls
    // prctl(2), which is async-signal-safe; it touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Signals the process group `pid` leads (every attempt's process leads
/// its own).
pub fn signal_pid_group(pid: u32, signal: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory is shared.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(-(pid as i32), signal);
    }
}

/// The signal number of a job's `checkpointSignal` (one of
/// `qm_wire::messages::CHECKPOINT_SIGNALS`).
pub fn checkpoint_signal(name: &str) -> Option<i32> {
    match name {
        "SIGUSR1" => Some(libc::SIGUSR1),
        "SIGUSR2" => Some(libc::SIGUSR2),
        "SIGHUP" => Some(libc::SIGHUP),
        "SIGINT" => Some(libc::SIGINT),
        _ => None,
    }
}

/// How a job's process ended: its status, and whether a stop reached it
/// while it ran (false when it had already exited when the stop came, so
/// its end is its own however late the stop was).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessEnd {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stopped: bool,
}

/// Whether the process `pid` has exited: gone, or a zombie its parent (the
/// supervisor) has not reaped yet. Unknown (no `/proc`) reads as running,
/// so a stop is never skipped for a live job.
pub fn has_exited(pid: u32) -> bool {
    // SAFETY: kill(2) with signal 0 sends nothing; it only checks the pid.
    #[allow(unsafe_code)]
    let gone = unsafe { libc::kill(pid as i32, 0) } == -1
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
    if gone {
        return true;
    }
    // `/proc/<pid>/stat`: "pid (comm) S ...", where comm may hold ')'.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat.rsplit_once(')')?.1.trim_start().chars().next()?;
            Some(matches!(state, 'Z' | 'X'))
        })
        .unwrap_or(false)
}

/// Waits for the process to exit; when a stop arrives (with its grace
/// period), sends SIGTERM, then SIGKILL after the grace, unless the job
/// has already exited (its end is then its own, not the stop's).
pub async fn wait_or_stop(
    job: &mut Supervised,
    stop: &mut watch::Receiver<Option<u64>>,
) -> ProcessEnd {
    let Supervised { child, pid } = job;
    let pid = *pid;
    use std::os::unix::process::ExitStatusExt;
    let decode = |s: std::io::Result<std::process::ExitStatus>, stopped: bool| match s {
        Ok(s) => ProcessEnd {
            exit_code: s.code(),
            signal: s.signal(),
            stopped,
        },
        Err(_) => ProcessEnd {
            exit_code: None,
            signal: None,
            stopped,
        },
    };
    loop {
        let requested = *stop.borrow();
        if let Some(grace) = requested {
            if has_exited(pid) {
                // It ended on its own a moment before the stop came; the
                // supervisor is about to exit as it did.
                return decode(child.wait().await, false);
            }
            signal_pid_group(pid, libc::SIGTERM);
            let signalled = std::time::Instant::now();
            let (status, killed) =
                match tokio::time::timeout(Duration::from_secs(grace), child.wait()).await {
                    Ok(s) => (decode(s, true), "false"),
                    Err(_) => {
                        tracing::warn!(grace, "grace period over; SIGKILL");
                        signal_pid_group(pid, libc::SIGKILL);
                        (decode(child.wait().await, true), "true")
                    }
                };
            crate::observe::METRICS
                .stop
                .with_label_values(&[killed])
                .observe(signalled.elapsed().as_secs_f64());
            return status;
        }
        tokio::select! {
            s = child.wait() => return decode(s, false),
            changed = stop.changed() => {
                if changed.is_err() {
                    return decode(child.wait().await, false);
                }
            }
        }
    }
}

/// The most of each stream `qm logs` gets from one attempt.
pub const MAX_TAIL_BYTES: u64 = 256 * 1024;

/// The largest logs answer sent (NATS's default message limit is 1 MiB).
pub const MAX_LOGS_ANSWER: usize = 900 * 1024;

/// The logs answer for the attempt directory `dir`: the last `requested`
/// bytes of each stream (64 KiB by default), at most [`MAX_TAIL_BYTES`],
/// and fewer while the answer would not fit in one NATS message (JSON
/// escapes a control byte as six): asking for more never makes the
/// executor read more.
pub fn logs_answer(dir: &Path, requested: Option<u64>) -> qm_wire::system::LogsResponse {
    let mut bytes = requested.unwrap_or(64 * 1024).min(MAX_TAIL_BYTES);
    loop {
        let (stdout, cut_out) = tail(&dir.join("stdout.log"), bytes);
        let (stderr, cut_err) = tail(&dir.join("stderr.log"), bytes);
        let response = qm_wire::system::LogsResponse {
            stdout,
            stderr,
            truncated: cut_out || cut_err,
        };
        let size = serde_json::to_vec(&response).map_or(usize::MAX, |b| b.len());
        if size <= MAX_LOGS_ANSWER || bytes <= 1024 {
            return response;
        }
        bytes /= 2;
    }
}

/// The last `max` bytes of a file (lossy UTF-8) and whether it was cut.
/// The attempt's directory may be the job's user's: the file is opened
/// without following a link (and non-blocking, so a FIFO in its place
/// cannot hold the executor), and read only if it is a regular file, so a
/// job cannot make `qm logs` show another file of the node.
pub fn tail(path: &Path, max: u64) -> (String, bool) {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let Ok(mut f) = opened else {
        return (String::new(), false);
    };
    let Ok(meta) = f.metadata() else {
        return (String::new(), false);
    };
    if !meta.is_file() {
        return (String::new(), false);
    }
    let len = meta.len();
    let cut = len > max;
    if cut {
        let _ = f.seek(SeekFrom::Start(len - max));
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    (String::from_utf8_lossy(&buf).into_owned(), cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job stopped (drain, preemption) a moment after it had exited on
    /// its own ended on its own: its exit is reported as its end (before,
    /// a node restarted right after a job finished could run it again).
    #[tokio::test]
    async fn a_stop_that_comes_after_the_job_exited_leaves_its_end_its_own() {
        let spawn = |script: &str| {
            let mut c = Command::new("sh");
            c.args(["-c", script]).process_group(0);
            let child = c.spawn().expect("sh");
            let pid = child.id().expect("pid");
            Supervised { child, pid }
        };
        let mut done = spawn("exit 0");
        // A zombie until waited for: exited, not yet reaped.
        for _ in 0..500 {
            if has_exited(done.pid) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(has_exited(done.pid), "sh never exited");
        let (_tx, mut stop) = watch::channel(Some(5));
        let end = wait_or_stop(&mut done, &mut stop).await;
        assert_eq!(
            end,
            ProcessEnd {
                exit_code: Some(0),
                signal: None,
                stopped: false
            }
        );
        // One still running is stopped, and says so.
        let mut live = spawn("sleep 30");
        assert!(!has_exited(live.pid));
        let (tx, mut stop) = watch::channel(None);
        let waiting = tokio::spawn(async move { wait_or_stop(&mut live, &mut stop).await });
        tx.send(Some(5)).expect("stop");
        let end = waiting.await.expect("waited");
        assert!(end.stopped, "{end:?}");
        assert_eq!(end.signal, Some(libc::SIGTERM), "{end:?}");
    }

    /// A missing or foreign supervisor stops the executor at its start,
    /// named, rather than failing every attempt later.
    #[tokio::test]
    async fn a_supervisor_that_is_missing_or_not_this_releases_is_refused_by_name() {
        let Err(missing) = Supervisor::open("/nonexistent/qm-supervise").await else {
            panic!("opened a missing supervisor");
        };
        assert!(
            missing.starts_with("cannot open the supervisor /nonexistent/qm-supervise"),
            "{missing}"
        );
        let dir = std::env::temp_dir().join(format!("qm-sup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let other = dir.join("qm-supervise");
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o755)
                .open(&other)
                .expect("script");
            std::io::Write::write_all(&mut f, b"#!/bin/sh\necho qm-supervise 0.0.1\n")
                .expect("written");
        }
        let Err(foreign) = Supervisor::open(other.to_str().expect("utf-8")).await else {
            panic!("took another release's supervisor");
        };
        // (A script run from its open descriptor cannot reopen itself, so
        // this one says nothing at all; another release's binary would
        // say its version.)
        let start = format!(
            "{} is not this release's supervisor: it says ",
            other.display()
        );
        let end = format!(
            ", where \"qm-supervise {}\" was expected",
            env!("CARGO_PKG_VERSION")
        );
        assert!(
            foreign.starts_with(&start) && foreign.ends_with(&end),
            "{foreign}"
        );
        let _ = std::fs::remove_dir_all(&dir);
        // What another release's binary says.
        let path = Path::new("/usr/bin/qm-supervise");
        assert_eq!(
            check_version(path, "qm-supervise 0.0.1\n"),
            Err(format!(
                "/usr/bin/qm-supervise is not this release's supervisor: it says \"qm-supervise 0.0.1\", where \"qm-supervise {}\" was expected",
                env!("CARGO_PKG_VERSION")
            ))
        );
        let this = format!("qm-supervise {}\n", env!("CARGO_PKG_VERSION"));
        assert_eq!(check_version(path, &this), Ok(()));
    }

    #[test]
    fn a_logs_answer_is_bounded_whatever_is_asked() {
        let dir = std::env::temp_dir().join(format!("qm-logs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        // 4 MiB of control bytes each: escaped six times over in JSON.
        std::fs::write(dir.join("stdout.log"), vec![1u8; 4 << 20]).expect("out");
        std::fs::write(dir.join("stderr.log"), vec![2u8; 4 << 20]).expect("err");
        let answer = logs_answer(&dir, Some(u64::MAX));
        let size = serde_json::to_vec(&answer).expect("json").len();
        assert!(size <= MAX_LOGS_ANSWER, "{size} bytes");
        assert!(answer.truncated);
        assert!(answer.stdout.len() as u64 <= MAX_TAIL_BYTES);
        // A plain log gets what it asks for, up to the cap.
        std::fs::write(dir.join("stdout.log"), vec![b'a'; 4 << 20]).expect("out");
        std::fs::write(dir.join("stderr.log"), b"e").expect("err");
        let answer = logs_answer(&dir, Some(u64::MAX));
        assert_eq!(answer.stdout.len() as u64, MAX_TAIL_BYTES);
        assert_eq!(logs_answer(&dir, None).stdout.len(), 64 * 1024);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_log_swapped_for_a_link_or_a_fifo_shows_nothing() {
        let dir = std::env::temp_dir().join(format!("qm-tail-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("secret"), "SECRET").expect("secret");
        std::fs::write(dir.join("stdout.log"), "0123456789").expect("log");
        assert_eq!(tail(&dir.join("stdout.log"), 4), ("6789".into(), true));
        std::fs::remove_file(dir.join("stdout.log")).expect("rm");
        std::os::unix::fs::symlink(dir.join("secret"), dir.join("stdout.log")).expect("link");
        assert_eq!(tail(&dir.join("stdout.log"), 64), (String::new(), false));
        let fifo = std::ffi::CString::new(dir.join("stderr.log").to_string_lossy().as_bytes())
            .expect("path");
        // SAFETY: mkfifo(3) with a NUL-terminated path.
        #[allow(unsafe_code)]
        let made = unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) };
        assert_eq!(made, 0);
        assert_eq!(tail(&dir.join("stderr.log"), 64), (String::new(), false));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
