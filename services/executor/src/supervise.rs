//! `qm-executor supervise`: the parent of one attempt's host process, the
//! watchdog that fences it when the executor cannot (`fence.rs`).
//!
//! ```text
//! qm-executor supervise --deadline-file F --deadline NS --grace S --record R
//!     --stdout OUT --stderr ERR [--uid U --gid G] -- PROGRAM ARGS...
//! ```
//!
//! The executor starts it with the job's environment and working directory;
//! it runs as the executor's user (so the job, run as another user, cannot
//! signal or stop it), opens the job's output files, and starts the job:
//! in a process group of its own, as `--uid`/`--gid` when given, killed by
//! the kernel if this supervisor dies (and this supervisor if the executor
//! dies). It tells the executor on its standard output, in one line, either
//! `started <pid>` or `failed <why>`, then:
//!
//! - records when the job was launched (`--record`), waits for it, records
//!   when it ended and exits as the job did (the same exit code, or the same signal), so the executor sees
//!   the job's own status;
//! - twenty times a second, checks the fence deadline; once it has passed,
//!   sends SIGTERM to the job's process group, and SIGKILL after `--grace`
//!   seconds if anything of it is left.
//!
//! SIGTERM, SIGINT and SIGHUP sent to the supervisor itself are ignored:
//! the executor stops a job by signalling the job's process group, and only
//! its death (or SIGKILL) ends a supervisor early, which kills the job.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::fence;

pub fn main(args: &[String]) -> ExitCode {
    let usage = "usage: qm-executor supervise --deadline-file F --deadline NS --grace S --record R --stdout OUT --stderr ERR [--uid U --gid G] -- PROGRAM ARGS...";
    let parsed = fence::parse_flags(args).and_then(|(flags, argv)| {
        let terms = fence::Terms::from_flags(&flags)?;
        let get = |name: &str| {
            flags
                .get(name)
                .cloned()
                .ok_or_else(|| format!("missing --{name}"))
        };
        let id = |name: &str| -> Result<Option<u32>, String> {
            flags
                .get(name)
                .map(|v| v.parse().map_err(|_| format!("--{name} is not a number")))
                .transpose()
        };
        if argv.is_empty() {
            return Err("no program after --".to_string());
        }
        Ok((
            terms,
            get("stdout")?,
            get("stderr")?,
            id("uid")?.zip(id("gid")?),
            argv,
        ))
    });
    let (terms, stdout, stderr, run_as, argv) = match parsed {
        Ok(p) => p,
        Err(e) => {
            eprintln!("qm-executor supervise: {e}\n{usage}");
            return ExitCode::from(2);
        }
    };
    // Caught (not ignored: a caught signal is reset for the job by exec).
    let _signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ]);
    let started = start(&argv, &stdout, &stderr, run_as);
    let mut handshake = std::io::stdout();
    let mut child = match started {
        Ok(child) => {
            fence::record_launch(&terms.record, qm_service::now_ms());
            let _ = writeln!(handshake, "started {}", child.id());
            let _ = handshake.flush();
            child
        }
        Err(e) => {
            let _ = writeln!(handshake, "failed {e}");
            let _ = handshake.flush();
            return ExitCode::from(127);
        }
    };
    let pid = child.id() as i32;
    let mut watch = terms.watch();
    let grace = Duration::from_secs(terms.grace_seconds);
    let mut fenced_at: Option<Instant> = None;
    let mut killed = false;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                fence::record_exit(&terms.record, qm_service::now_ms(), fenced_at.is_some());
                mirror(status);
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("qm-executor supervise: cannot wait for pid {pid}: {e}");
                return ExitCode::from(1);
            }
        }
        match fenced_at {
            None if watch.expired() => {
                eprintln!(
                    "qm-executor supervise: the executor has not renewed its fence deadline ({}): fencing; SIGTERM to pid {pid}'s group, SIGKILL after {} s",
                    terms.deadline_file.display(),
                    terms.grace_seconds
                );
                signal_group(pid, libc::SIGTERM);
                fenced_at = Some(Instant::now());
            }
            Some(at) if !killed && at.elapsed() >= grace => {
                eprintln!("qm-executor supervise: grace over; SIGKILL to pid {pid}'s group");
                signal_group(pid, libc::SIGKILL);
                killed = true;
            }
            _ => {}
        }
        // Short, so the end is recorded close to when it happened.
        std::thread::sleep(Duration::from_millis(50).min(fence::WATCH_EVERY));
    }
}

/// Starts the job.
fn start(
    argv: &[String],
    stdout: &str,
    stderr: &str,
    run_as: Option<(u32, u32)>,
) -> Result<std::process::Child, String> {
    // The attempt's directory may be the job's user's: never through a
    // link, never waiting on a FIFO planted there, and only a regular file.
    let open = |path: &str| {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path)
            .map_err(|e| format!("cannot open {path}: {e}"))?;
        match file.metadata() {
            Ok(m) if m.is_file() => Ok(file),
            _ => Err(format!("cannot open {path}: not a regular file")),
        }
    };
    let (out, err) = (open(stdout)?, open(stderr)?);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    if let Some((uid, gid)) = run_as {
        cmd.uid(uid).gid(gid);
    }
    crate::process::on_parent_death_std(&mut cmd, libc::SIGKILL);
    cmd.spawn()
        .map_err(|e| format!("cannot start {}: {e}", argv[0]))
}

fn signal_group(pid: i32, signal: i32) {
    // SAFETY: kill(2) with a negative pid signals a process group; no memory
    // is shared.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(-pid, signal);
    }
}

/// Exits as the job did: its exit code, or killed by its signal.
#[allow(unsafe_code)]
fn mirror(status: std::process::ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code);
    }
    if let Some(signal) = status.signal() {
        // SAFETY: resetting a signal's disposition, lowering this process's
        // own core limit and raising a signal at itself share no memory.
        unsafe {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(signal, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, signal);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::raise(signal);
        }
        std::process::exit(128 + signal);
    }
    std::process::exit(1);
}
