//! `qm-supervise`: the parent of one attempt's host process, and the
//! watchdog that fences it when the executor cannot (`qm-fence`).
//!
//! ```text
//! qm-supervise --parent PID --deadline-file F --deadline NS --grace S
//!     --record R --cwd DIR --stdout OUT --stderr ERR [--uid U --gid G]
//!     -- PROGRAM ARGS...
//! qm-supervise --version
//! ```
//!
//! The executor starts it for every attempt, with the job's environment
//! and working directory. It is a binary of its own, small and without
//! threads, because its start is paid once per job: loading the executor
//! itself for this (110 MB, tens of thousands of relocations) cost more
//! CPU before its `main` than this program's whole run with its job
//! (1.05 ms against 0.74), and forking the
//! multi-threaded executor to set the parent-death signal copied its page
//! tables. Now the executor spawns it without a fork (`posix_spawn`), and
//! it asks for that signal itself.
//!
//! It runs as the executor's user (so the job, run as another user, cannot
//! signal or stop it). First it asks the kernel for SIGKILL when its parent
//! dies, and checks that its parent is still the executor `--parent` (one
//! that died before the request would go unnoticed otherwise). Then it
//! opens the job's output files and starts the job: in a process group of
//! its own, as `--uid`/`--gid` when given, killed by the kernel if this
//! supervisor dies. It tells the executor on its standard output, in one
//! line, either `started <pid>` or `failed <why>`, then:
//!
//! - records when the job was launched (`--record`), waits for it, records
//!   when it ended and exits as the job did (the same exit code, or the
//!   same signal), so the executor sees the job's own status. The end is
//!   seen when it happens (a pidfd; every 50 ms on a kernel without them);
//! - four times a second, checks the fence deadline; once it has passed,
//!   sends SIGTERM to the job's process group, and SIGKILL after `--grace`
//!   seconds if anything of it is left.
//!
//! SIGTERM, SIGINT and SIGHUP sent to the supervisor itself are caught and
//! do nothing: the executor stops a job by signalling the job's process
//! group, and only its death (or SIGKILL) ends a supervisor early, which
//! kills the job.

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use qm_fence as fence;

const USAGE: &str = "usage: qm-supervise --parent PID --deadline-file F --deadline NS --grace S --record R --cwd DIR --stdout OUT --stderr ERR [--uid U --gid G] -- PROGRAM ARGS...\n       qm-supervise --version\n\nThe parent and fence watchdog of one attempt's host process; qm-executor starts it for every attempt (it is not meant to be run by hand).";

/// What one run supervises.
#[derive(Debug)]
struct Supervision {
    parent: i32,
    terms: fence::Terms,
    /// The job's working directory (the supervisor changes into it for
    /// the job, so the executor's spawn needs no `chdir` of its own, which
    /// an older C library cannot do without a fork).
    cwd: String,
    stdout: String,
    stderr: String,
    run_as: Option<(u32, u32)>,
    argv: Vec<String>,
}

fn parse(args: &[String]) -> Result<Supervision, String> {
    let (flags, argv) = fence::parse_flags(args)?;
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
    // 1 is a parent like any other: an executor is the first process of
    // its container.
    let parent = get("parent")?
        .parse::<i32>()
        .ok()
        .filter(|p| *p > 0)
        .ok_or("--parent is not a process id")?;
    if argv.is_empty() {
        return Err("no program after --".to_string());
    }
    Ok(Supervision {
        parent,
        terms,
        cwd: get("cwd")?,
        stdout: get("stdout")?,
        stderr: get("stderr")?,
        run_as: id("uid")?.zip(id("gid")?),
        argv,
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--version") => {
            println!("qm-supervise {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Some("--help" | "-h") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => {}
    }
    let s = match parse(&args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("qm-supervise: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut handshake = std::io::stdout();
    let mut say = |line: String| {
        let _ = writeln!(handshake, "{line}");
        let _ = handshake.flush();
    };
    name_this_process();
    if let Err(why) = die_with(s.parent) {
        say(format!("failed {why}"));
        return ExitCode::from(127);
    }
    catch_stop_signals();
    let mut child = match start(&s) {
        Ok(child) => {
            fence::record_launch(&s.terms.record, fence::now_ms());
            say(format!("started {}", child.id()));
            child
        }
        Err(e) => {
            say(format!("failed {e}"));
            return ExitCode::from(127);
        }
    };
    let pid = child.id() as i32;
    let ended = pidfd(pid);
    // With a pidfd the end wakes the wait at once; without, the wait is
    // short so the end is recorded close to when it happened. Either way
    // the deadline file is read every WATCH_EVERY.
    let tick = match ended {
        Some(_) => fence::WATCH_EVERY,
        None => Duration::from_millis(50),
    };
    let mut watch = s.terms.watch();
    let mut read_at: Option<Instant> = None;
    let grace = Duration::from_secs(s.terms.grace_seconds);
    let mut fenced_at: Option<Instant> = None;
    let mut killed = false;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                if fenced_at.is_some() {
                    // Whatever of the job's group outlived its leader
                    // must not run on past the fence.
                    signal_group(pid, libc::SIGKILL);
                }
                fence::record_exit(&s.terms.record, fence::now_ms(), fenced_at.is_some());
                mirror(status);
            }
            Ok(None) => {}
            Err(e) => {
                eprintln!("qm-supervise: cannot wait for pid {pid}: {e}");
                return ExitCode::from(1);
            }
        }
        let due =
            fenced_at.is_none() && read_at.is_none_or(|at| at.elapsed() >= fence::WATCH_EVERY);
        let expired = due && {
            read_at = Some(Instant::now());
            watch.expired()
        };
        match fenced_at {
            None if expired => {
                eprintln!(
                    "qm-supervise: the executor has not renewed its fence deadline ({}): fencing; SIGTERM to pid {pid}'s group, SIGKILL after {} s",
                    s.terms.deadline_file.display(),
                    s.terms.grace_seconds
                );
                signal_group(pid, libc::SIGTERM);
                fenced_at = Some(Instant::now());
            }
            Some(at) if !killed && at.elapsed() >= grace => {
                eprintln!("qm-supervise: grace over; SIGKILL to pid {pid}'s group");
                signal_group(pid, libc::SIGKILL);
                killed = true;
            }
            _ => {}
        }
        let wait = match fenced_at {
            Some(at) if !killed => tick.min(grace.saturating_sub(at.elapsed())),
            _ => tick,
        };
        wait_for_end(ended.as_ref(), wait);
    }
}

/// Asks the kernel for SIGKILL when the parent dies, then checks that the
/// parent is still `parent`: if it died before the request, this process
/// was already handed to another parent, and no signal would ever come.
/// (The signal follows the executor's thread that spawned this one, a
/// runtime worker that lives as long as the executor; the check sees the
/// executor's process.)
#[allow(unsafe_code)]
fn die_with(parent: i32) -> Result<(), String> {
    // SAFETY: prctl(2) and getppid(2) change and read only this process's
    // own attributes.
    unsafe {
        if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
            return Err(format!(
                "cannot ask for the parent-death signal: {}",
                std::io::Error::last_os_error()
            ));
        }
        let now = libc::getppid();
        if now != parent {
            return Err(format!(
                "the executor (pid {parent}) is gone; the parent is pid {now}"
            ));
        }
    }
    Ok(())
}

/// The executor runs this file from its descriptor (`/proc/self/fd/N`),
/// so the kernel names the process `N`; `top` and `ps -o comm` should say
/// what it is.
#[allow(unsafe_code)]
fn name_this_process() {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"qm-supervise".as_ptr());
    }
}

/// A no-op handler for the signals a supervisor outlives. Caught, not
/// ignored: exec resets a caught signal for the job, not an ignored one.
extern "C" fn nothing(_: libc::c_int) {}

#[allow(unsafe_code)]
fn catch_stop_signals() {
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: the handler does nothing, so it is async-signal-safe.
        unsafe {
            libc::signal(
                signal,
                nothing as extern "C" fn(libc::c_int) as libc::sighandler_t,
            );
        }
    }
}

/// A pidfd of the job (Linux 5.3 on): readable once it has exited.
#[allow(unsafe_code)]
fn pidfd(pid: i32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open(2) returns a new descriptor or -1; the descriptor
    // is owned by nothing else.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0);
        (fd >= 0).then(|| OwnedFd::from_raw_fd(fd as i32))
    }
}

/// Waits up to `wait` for the job to end (returns early on its end or a
/// signal).
#[allow(unsafe_code)]
fn wait_for_end(pidfd: Option<&OwnedFd>, wait: Duration) {
    use std::os::fd::AsRawFd;
    let Some(fd) = pidfd else {
        std::thread::sleep(wait);
        return;
    };
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: poll(2) on one descriptor this process owns, with a pollfd it
    // may write.
    unsafe {
        libc::poll(&mut poll, 1, ms);
    }
}

/// Starts the job.
fn start(s: &Supervision) -> Result<std::process::Child, String> {
    let (argv, run_as) = (&s.argv, s.run_as);
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
    let (out, err) = (open(&s.stdout)?, open(&s.stderr)?);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .current_dir(&s.cwd)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    if let Some((uid, gid)) = run_as {
        cmd.uid(uid).gid(gid);
    }
    // The job gets SIGKILL when this supervisor dies; should it die
    // before the job asked for that, the job does not start (it would
    // run with no watchdog).
    let me = std::process::id() as libc::pid_t;
    #[allow(unsafe_code)]
    // SAFETY: the closure runs in the forked child before exec and only
    // calls prctl(2) and getppid(2), which are async-signal-safe; it
    // touches no memory of the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != me {
                return Err(std::io::Error::other("its supervisor is gone"));
            }
            Ok(())
        });
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<String> {
        line.split_whitespace().map(ToString::to_string).collect()
    }

    #[test]
    fn every_flag_is_checked_and_the_program_is_required() {
        let ok = "--parent 42 --deadline-file /w/fence-deadline --deadline 7 --grace 3 --record /w/r --cwd /w --stdout o --stderr e --uid 1 --gid 2 -- prog --flag";
        let s = parse(&args(ok)).expect("parsed");
        assert_eq!(s.parent, 42);
        assert_eq!(s.terms.grace_seconds, 3);
        assert_eq!(s.run_as, Some((1, 2)));
        assert_eq!(s.argv, args("prog --flag"));
        assert_eq!(s.cwd, "/w");
        // An executor that is its container's first process.
        let first = parse(&args(&ok.replace("--parent 42", "--parent 1"))).expect("pid 1");
        assert_eq!(first.parent, 1);
        for (line, why) in [
            (ok.replace("--parent 42 ", ""), "missing --parent"),
            (
                ok.replace("--parent 42", "--parent 0"),
                "--parent is not a process id",
            ),
            (ok.replace("--cwd /w ", ""), "missing --cwd"),
            (
                ok.replace("--parent 42", "--parent x"),
                "--parent is not a process id",
            ),
            (ok.replace("--uid 1", "--uid me"), "--uid is not a number"),
            (ok.replace("--stderr e ", ""), "missing --stderr"),
            (ok.replace(" -- prog --flag", ""), "no program after --"),
        ] {
            assert_eq!(
                parse(&args(&line)).map(|_| ()),
                Err(why.to_string()),
                "{line}"
            );
        }
    }
}
