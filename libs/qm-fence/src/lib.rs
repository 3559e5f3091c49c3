//! Self-fencing outside the executor's event loop (ADR 0007, "A watchdog
//! per attempt").
//!
//! The executor's own watchdog (`Executor::fence_watch`) stops its attempts
//! once no heartbeat has been acknowledged for `fenceAfterSeconds`. That
//! watchdog runs in the executor's event loop: an executor that is stopped
//! (SIGSTOP), stuck in a blocking call or frozen in its cgroup never runs
//! it, while its jobs, in process groups of their own, run on. So beside
//! every attempt runs a small process (`qm-supervise` for a host process,
//! `qm-executor guard` for a container) that enforces the same deadline by
//! itself. This crate is what the two sides share: the executor writes the
//! deadline, a watcher reads it.
//!
//! The deadline lives in one file, `<workDir>/fence-deadline`: the instant
//! (CLOCK_BOOTTIME, nanoseconds; the same clock for every process of one
//! host, and it keeps counting while the host is suspended) after which
//! nothing of this executor may run. The executor moves it forward each
//! time the scheduler acknowledges a heartbeat: it is the send instant of
//! that heartbeat plus `fenceAfterSeconds`, exactly the instant its own
//! watchdog fences at. A watcher reads the file four times a second
//! ([`WATCH_EVERY`]); once the instant has passed, it stops its attempt with the attempt's grace
//! (SIGTERM, grace, SIGKILL), without asking the executor anything. An
//! executor that stops renewing, for whatever reason, is thus fenced on
//! time, and the scheduler's wait (`fence + longest grace + 5 s`) holds.
//!
//! The file never moves the deadline back, and a watcher keeps the latest
//! deadline it has seen (and the one it was started with) when the file
//! cannot be read: a deleted or garbled file cannot extend the deadline.
//! Each watcher also records when its attempt really ended
//! (`attempt-<N>.exit.json`, beside the attempt's directory), since the
//! executor, if it was frozen, sees the end only when it runs again.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The deadline file's name in the work directory.
pub const DEADLINE_FILE: &str = "fence-deadline";

/// How often a watcher reads the deadline.
pub const WATCH_EVERY: Duration = Duration::from_millis(250);

/// Now on CLOCK_BOOTTIME, in nanoseconds.
#[allow(unsafe_code)]
pub fn boot_now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime(2) writes the timespec it is given and nothing
    // else.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc != 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The executor's side: renews the deadline.
pub struct Fence {
    path: PathBuf,
    after_ns: u64,
    /// The deadline last written.
    deadline: AtomicU64,
}

impl Fence {
    pub fn new(work_dir: &str, fence_after_seconds: u64) -> Fence {
        Fence {
            path: PathBuf::from(work_dir).join(DEADLINE_FILE),
            after_ns: fence_after_seconds.saturating_mul(1_000_000_000),
            deadline: AtomicU64::new(0),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The deadline now in force.
    pub fn deadline(&self) -> u64 {
        self.deadline.load(Ordering::SeqCst)
    }

    /// The scheduler heard from this executor after `contact_ns` (a
    /// CLOCK_BOOTTIME instant taken before the heartbeat was sent): nothing
    /// need stop before `contact_ns + fenceAfterSeconds`. Never moves the
    /// deadline back.
    pub fn renew(&self, contact_ns: u64) -> std::io::Result<()> {
        let deadline = contact_ns.saturating_add(self.after_ns);
        if self.deadline.fetch_max(deadline, Ordering::SeqCst) >= deadline {
            return Ok(());
        }
        write_atomically(&self.path, format!("{deadline}\n").as_bytes())
    }
}

/// Writes `body` to `path` through a temporary file renamed over it (a
/// reader sees the old content or the new, never half), readable by
/// everyone (a watcher runs as the executor's user; the deadline is no
/// secret) and never through a link.
pub fn write_atomically(path: &Path, body: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .and_then(|mut f| f.write_all(body))?;
    std::fs::rename(&tmp, path)
}

/// The deadline in the file, if it can be read.
pub fn read_deadline(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// What a watcher enforces: passed on its command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terms {
    /// The executor's deadline file.
    pub deadline_file: PathBuf,
    /// The deadline when the attempt launched (the least one it keeps).
    pub floor_ns: u64,
    /// The attempt's grace between SIGTERM and SIGKILL.
    pub grace_seconds: u64,
    /// Where the watcher records the attempt's end.
    pub record: PathBuf,
}

impl Terms {
    pub fn args(&self) -> Vec<String> {
        vec![
            "--deadline-file".into(),
            self.deadline_file.display().to_string(),
            "--deadline".into(),
            self.floor_ns.to_string(),
            "--grace".into(),
            self.grace_seconds.to_string(),
            "--record".into(),
            self.record.display().to_string(),
        ]
    }

    /// Takes the terms' flags out of `flags` (name -> value).
    pub fn from_flags(flags: &std::collections::BTreeMap<String, String>) -> Result<Terms, String> {
        let get = |name: &str| {
            flags
                .get(name)
                .cloned()
                .ok_or_else(|| format!("missing --{name}"))
        };
        let number = |name: &str| -> Result<u64, String> {
            get(name)?
                .parse()
                .map_err(|_| format!("--{name} is not a number"))
        };
        Ok(Terms {
            deadline_file: PathBuf::from(get("deadline-file")?),
            floor_ns: number("deadline")?,
            grace_seconds: number("grace")?,
            record: PathBuf::from(get("record")?),
        })
    }

    pub fn watch(&self) -> Watch {
        Watch {
            path: self.deadline_file.clone(),
            deadline: self.floor_ns,
        }
    }
}

/// `--name value` pairs up to `--` (or the end); returns them and what
/// follows `--`.
pub fn parse_flags(
    args: &[String],
) -> Result<(std::collections::BTreeMap<String, String>, Vec<String>), String> {
    let mut flags = std::collections::BTreeMap::new();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            return Ok((flags, rest.cloned().collect()));
        }
        let name = arg
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected argument {arg:?}"))?;
        let value = rest
            .next()
            .ok_or_else(|| format!("--{name} needs a value"))?;
        flags.insert(name.to_string(), value.clone());
    }
    Ok((flags, Vec::new()))
}

/// A watcher's view of the deadline.
pub struct Watch {
    path: PathBuf,
    deadline: u64,
}

impl Watch {
    /// Whether the deadline has passed (reading the file again first).
    pub fn expired(&mut self) -> bool {
        if let Some(d) = read_deadline(&self.path) {
            self.deadline = self.deadline.max(d);
        }
        boot_now_ns() > self.deadline
    }
}

/// Now, in milliseconds since the Unix epoch (what the records hold).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Records that the attempt's process was launched at `launched_at_ms`
/// (ms since the Unix epoch), before anything else of it runs.
pub fn record_launch(path: &Path, launched_at_ms: u64) {
    let body = serde_json::json!({"launchedAtMs": launched_at_ms});
    if let Err(e) = write_atomically(path, body.to_string().as_bytes()) {
        eprintln!(
            "attempt watcher: cannot record the attempt's launch in {}: {e}",
            path.display()
        );
    }
}

/// Records that the attempt ended at `ended_at_ms` (ms since the Unix
/// epoch), and whether its watcher fenced it (keeping its launch).
pub fn record_exit(path: &Path, ended_at_ms: u64, fenced: bool) {
    let launched = std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["launchedAtMs"].as_u64());
    let mut body = serde_json::json!({"endedAtMs": ended_at_ms, "fenced": fenced});
    if let Some(at) = launched {
        body["launchedAtMs"] = at.into();
    }
    if let Err(e) = write_atomically(path, body.to_string().as_bytes()) {
        eprintln!(
            "attempt watcher: cannot record the attempt's end in {}: {e}",
            path.display()
        );
    }
}

/// What a watcher recorded: (ended at, fenced by it).
pub fn read_exit(path: &Path) -> Option<(u64, bool)> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    Some((
        v["endedAtMs"].as_u64()?,
        v["fenced"].as_bool().unwrap_or(false),
    ))
}

/// Where a watcher records attempt `attempt`'s end: beside its directory,
/// in the job's directory, which only the executor's user writes.
pub fn exit_record(job_dir: &Path, attempt: u32) -> PathBuf {
    job_dir.join(format!("attempt-{attempt}.exit.json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_only_moves_forward_and_a_watcher_keeps_the_latest_it_saw() {
        let dir = std::env::temp_dir().join(format!("qm-fence-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let fence = Fence::new(dir.to_str().expect("utf-8"), 5);
        let now = boot_now_ns();
        fence.renew(now).expect("written");
        assert_eq!(read_deadline(fence.path()), Some(now + 5_000_000_000));
        fence.renew(now - 1_000_000_000).expect("no-op");
        assert_eq!(
            read_deadline(fence.path()),
            Some(now + 5_000_000_000),
            "an older contact never moves the deadline back"
        );
        let terms = Terms {
            deadline_file: fence.path().to_path_buf(),
            floor_ns: 0,
            grace_seconds: 1,
            record: dir.join("attempt-1.exit.json"),
        };
        let (flags, rest) = parse_flags(&terms.args()).expect("flags");
        assert!(rest.is_empty());
        assert_eq!(Terms::from_flags(&flags).expect("terms"), terms);
        let mut watch = terms.watch();
        assert!(!watch.expired(), "the deadline is 5 s away");
        // The file disappears or is garbled: the watcher keeps what it saw.
        std::fs::write(fence.path(), b"never").expect("write");
        assert!(!watch.expired());
        std::fs::remove_file(fence.path()).expect("rm");
        assert!(!watch.expired());
        // A deadline in the past: expired.
        let mut past = Terms {
            floor_ns: now - 1,
            ..terms.clone()
        }
        .watch();
        assert!(past.expired());
        record_exit(&terms.record, 1234, true);
        assert_eq!(read_exit(&terms.record), Some((1234, true)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn flags_need_values_and_stop_at_the_double_dash() {
        let args: Vec<String> = ["--a", "1", "--", "prog", "--a"]
            .iter()
            .map(ToString::to_string)
            .collect();
        let (flags, rest) = parse_flags(&args).expect("parsed");
        assert_eq!(flags.get("a").map(String::as_str), Some("1"));
        assert_eq!(rest, vec!["prog".to_string(), "--a".to_string()]);
        assert!(parse_flags(&["--a".to_string()]).is_err());
        assert!(parse_flags(&["a".to_string()]).is_err());
    }
}
