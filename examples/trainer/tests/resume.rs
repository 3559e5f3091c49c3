//! The checkpoint contract, end to end with the real binary: a run stopped by
//! SIGTERM or killed by SIGKILL and started again finishes with the same
//! digest as an uninterrupted run.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

const STEPS: &str = "600";

fn trainer(dir: &Path, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_qm-trainer"));
    cmd.args(["--steps", STEPS, "--checkpoint-every", "50", "--seed", "7"])
        .args(extra)
        .env("QM_CHECKPOINT_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn run_to_end(dir: &Path) -> (String, Vec<String>) {
    let out = trainer(dir, &[]).output().expect("trainer runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    let digest = lines
        .iter()
        .find_map(|l| l.strip_prefix("digest="))
        .expect("prints its digest")
        .to_string();
    (digest, lines)
}

/// Starts a slow run and returns it once it has committed a checkpoint past step 100.
fn start_and_wait_for_checkpoint(dir: &Path) -> Child {
    let mut child = trainer(dir, &["--step-delay-ms", "5"])
        .spawn()
        .expect("trainer starts");
    let stdout = child.stdout.take().expect("piped");
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("utf-8 output");
        if let Some(step) = line.strip_prefix("checkpoint step=") {
            let step: u64 = step
                .split_whitespace()
                .next()
                .and_then(|s| s.parse().ok())
                .expect("step number");
            if step >= 150 {
                return child;
            }
        }
    }
    let _ = child.wait();
    panic!("the trainer ended before its checkpoint at step 150");
}

/// The step a run says it resumed from.
fn resumed_step(lines: &[String]) -> u64 {
    let resumed = lines
        .iter()
        .find_map(|l| l.strip_prefix("resumed from step "))
        .expect("the run resumes");
    resumed
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .expect("a step number")
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("qm-trainer-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn sigterm_then_resume_gives_the_uninterrupted_digest() {
    let (expected, _) = run_to_end(&temp_dir("plain"));
    let dir = temp_dir("term");
    let mut child = start_and_wait_for_checkpoint(&dir);
    signal(&child, "-TERM");
    let status = child.wait().expect("exits");
    assert!(status.success(), "a stopped trainer exits 0 after saving");
    let (digest, lines) = run_to_end(&dir);
    let step = resumed_step(&lines);
    assert!((150..600).contains(&step), "resumed mid-run at {step}");
    assert_eq!(
        digest, expected,
        "a resumed run must end with the same weights"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigkill_then_resume_from_the_last_periodic_checkpoint_gives_the_same_digest() {
    let (expected, _) = run_to_end(&temp_dir("plain2"));
    let dir = temp_dir("kill");
    let mut child = start_and_wait_for_checkpoint(&dir);
    signal(&child, "-KILL");
    let _ = child.wait();
    let (digest, lines) = run_to_end(&dir);
    let step = resumed_step(&lines);
    assert_eq!(
        step % 50,
        0,
        "killed without warning: back to a periodic checkpoint ({step})"
    );
    assert_eq!(digest, expected);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_checkpoint_is_refused_and_kept() {
    let dir = temp_dir("damaged");
    run_to_end(&dir);
    let file = dir.join("trainer-state.bin");
    let mut bytes = std::fs::read(&file).expect("checkpoint written");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&file, &bytes).expect("write");
    let out = trainer(&dir, &[]).output().expect("runs");
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("checksum mismatch") && err.contains("refusing to overwrite"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&file).expect("still there"),
        bytes,
        "nothing stored is lost"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_arguments_name_the_problem() {
    let out = trainer(&temp_dir("args"), &["--steps", "many"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("--steps: \"many\" is not a non-negative integer"));
}

#[test]
fn a_resume_that_forgets_the_optimizer_ends_elsewhere_and_the_result_file_says_so() {
    let (expected, _) = run_to_end(&temp_dir("plain3"));
    let dir = temp_dir("forget");
    let mut child = start_and_wait_for_checkpoint(&dir);
    signal(&child, "-TERM");
    assert!(child.wait().expect("exits").success());
    let result = dir.join("result");
    let out = trainer(&dir, &["--forget-optimizer-on-resume"])
        .env("QM_RESULT_FILE", &result)
        .output()
        .expect("trainer runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("optimizer state not restored"), "{stdout}");
    let written = std::fs::read_to_string(&result).expect("the result file");
    let digest = stdout
        .lines()
        .find_map(|l| l.strip_prefix("digest="))
        .expect("a digest");
    assert_eq!(written.trim(), digest, "the result file holds the digest");
    assert_ne!(
        digest, expected,
        "weights without their optimizer drift elsewhere"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
