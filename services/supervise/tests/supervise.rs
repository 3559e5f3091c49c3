//! `qm-supervise` as the executor runs it: a real binary, real jobs.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SUPERVISE: &str = env!("CARGO_BIN_EXE_qm-supervise");

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("qm-supervise-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        Dir(dir)
    }

    /// The flags of one attempt; the deadline is `deadline_ns` (CLOCK_BOOTTIME).
    fn flags(&self, parent: &str, deadline_ns: u64) -> Vec<String> {
        let deadline = self.0.join("fence-deadline");
        std::fs::write(&deadline, format!("{deadline_ns}\n")).expect("deadline");
        let path = |p: &Path| p.display().to_string();
        vec![
            "--parent".into(),
            parent.into(),
            "--deadline-file".into(),
            path(&deadline),
            "--deadline".into(),
            deadline_ns.to_string(),
            "--grace".into(),
            "1".into(),
            "--record".into(),
            path(&self.0.join("exit.json")),
            "--cwd".into(),
            path(&self.0),
            "--stdout".into(),
            path(&self.0.join("stdout.log")),
            "--stderr".into(),
            path(&self.0.join("stderr.log")),
        ]
    }

    fn record(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.0.join("exit.json")).expect("record"))
            .expect("json")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const FAR: u64 = u64::MAX / 2;

fn supervise(flags: &[String], job: &[&str]) -> Child {
    Command::new(SUPERVISE)
        .args(flags)
        .arg("--")
        .args(job)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("qm-supervise")
}

/// The handshake line.
fn said(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().expect("stdout"))
        .read_line(&mut line)
        .expect("handshake");
    line.trim_end().to_string()
}

fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0): read its state.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
        .is_some_and(|r| !r.starts_with('Z') && !r.starts_with('X'))
}

#[test]
fn the_job_gets_its_output_files_and_the_supervisor_exits_as_it_did() {
    let dir = Dir::new("exit");
    let me = std::process::id().to_string();
    let mut sup = supervise(
        &dir.flags(&me, FAR),
        &["sh", "-c", "echo out; echo err >&2; pwd > where; exit 7"],
    );
    assert!(said(&mut sup).starts_with("started "));
    assert_eq!(sup.wait().expect("waited").code(), Some(7));
    let read = |name: &str| std::fs::read_to_string(dir.0.join(name)).expect(name);
    assert_eq!(read("stdout.log"), "out\n");
    assert_eq!(read("stderr.log"), "err\n");
    // It ran in its directory (`--cwd`).
    assert_eq!(read("where").trim_end(), dir.0.display().to_string());
    let record = dir.record();
    assert!(record["launchedAtMs"].as_u64() <= record["endedAtMs"].as_u64());
    assert_eq!(record["fenced"], false);
    // Killed by a signal: the supervisor dies of the same one.
    let mut sup = supervise(&dir.flags(&me, FAR), &["sh", "-c", "kill -USR1 $$"]);
    assert!(said(&mut sup).starts_with("started "));
    assert_eq!(sup.wait().expect("waited").signal(), Some(libc::SIGUSR1));
}

#[test]
fn a_supervisor_whose_executor_is_gone_starts_nothing() {
    let dir = Dir::new("orphan");
    let marker = dir.0.join("ran");
    // Told its executor is the test, it finds a shell for a parent: as if
    // the executor had died and the supervisor been handed to another
    // parent before it checked.
    let me = std::process::id();
    let flags = dir.flags(&me.to_string(), FAR).join(" ");
    let mut sh = Command::new("sh")
        .args([
            "-c",
            &format!("{SUPERVISE} {flags} -- touch {}; exit $?", marker.display()),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh");
    let line = said(&mut sh);
    assert!(
        line.starts_with(&format!("failed the executor (pid {me}) is gone")),
        "{line}"
    );
    assert_eq!(sh.wait().expect("waited").code(), Some(127));
    assert!(!marker.exists(), "the job ran");
}

#[test]
fn a_killed_executor_takes_the_supervisor_and_its_job_with_it() {
    let dir = Dir::new("killed");
    // A shell stands in for the executor: it spawns the supervisor (not
    // exec: `; exit` keeps the shell) and is then killed with SIGKILL.
    let flags = dir.flags("$$", FAR).join(" ");
    let mut executor = Command::new("sh")
        .args(["-c", &format!("{SUPERVISE} {flags} -- sleep 300; exit $?")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("sh");
    let line = said(&mut executor);
    let job: i32 = line
        .strip_prefix("started ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(alive(job));
    executor.kill().expect("SIGKILL");
    executor.wait().expect("reaped");
    // The kernel's parent-death signals: the supervisor, then the job.
    let waited = Instant::now();
    while alive(job) && waited.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!alive(job), "the job outlived its executor");
}

#[test]
fn past_the_fence_deadline_the_job_is_stopped_and_the_end_recorded_as_fenced() {
    let dir = Dir::new("fenced");
    let me = std::process::id().to_string();
    // The deadline passes in five seconds (the job has set its trap long
    // before): SIGTERM, which the job ignores, then SIGKILL after the 1 s
    // grace.
    let began = Instant::now();
    let mut sup = supervise(
        &dir.flags(&me, qm_fence::boot_now_ns() + 5_000_000_000),
        &[
            "sh",
            "-c",
            "trap '' TERM; touch trapped; sleep 300 & wait; wait",
        ],
    );
    assert!(said(&mut sup).starts_with("started "));
    let status = sup.wait().expect("waited");
    assert!(dir.0.join("trapped").exists(), "the job never set its trap");
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    // Not before the deadline and its grace.
    let took = began.elapsed();
    assert!(took >= Duration::from_secs(6), "{took:?}");
    assert_eq!(dir.record()["fenced"], true);
}

#[test]
fn a_supervisor_outlives_sigterm_and_still_exits_as_its_job_did() {
    let dir = Dir::new("term");
    let me = std::process::id().to_string();
    let mut sup = supervise(&dir.flags(&me, FAR), &["sh", "-c", "sleep 1; exit 3"]);
    assert!(said(&mut sup).starts_with("started "));
    // SAFETY: kill(2) of the supervisor this test started.
    #[allow(unsafe_code)]
    let sent = unsafe { libc::kill(sup.id() as i32, libc::SIGTERM) };
    assert_eq!(sent, 0);
    assert_eq!(sup.wait().expect("waited").code(), Some(3));
}

#[test]
fn version_and_bad_flags_are_answered_plainly() {
    let out = Command::new(SUPERVISE)
        .arg("--version")
        .output()
        .expect("ran");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim_end(),
        format!("qm-supervise {}", env!("CARGO_PKG_VERSION"))
    );
    let out = Command::new(SUPERVISE)
        .args(["--parent", "5", "--", "true"])
        .output()
        .expect("ran");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("qm-supervise: missing --deadline-file"),
        "{err}"
    );
    assert!(err.contains("usage: qm-supervise"), "{err}");
}
