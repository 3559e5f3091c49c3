//! Attempt directories are removed a while after their attempt ended.
//!
//! Each attempt runs in `<workDir>/<jobId>/attempt-<N>` (its output, its
//! restored checkpoint); without this a node that runs a million jobs
//! keeps a million directories (16 GB in the fleet benchmark). A directory
//! goes once its attempt is not running here and nothing in it (the
//! directory itself, `stdout.log`, `stderr.log`) changed for
//! `finishedRetentionSeconds`: as long as the executor remembers the
//! attempt, `qm logs` still finds its output. The executor's own record of
//! an attempt's run (`attempt-<N>.run.json` beside it) goes with it, and a
//! job directory left empty goes too. The sweep also covers attempts that
//! ended before the executor restarted (their processes died with it).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How often the work directory is swept.
pub(crate) const SWEEP_EVERY: Duration = Duration::from_secs(600);

/// Creates `dir` and its parents, as `create_dir_all` does, where the
/// sweep may remove an empty job directory at the same moment: the sweep
/// took its list of running attempts before this attempt began, so the job
/// directory just created for it looks like one a finished job left empty.
/// Creation starts over when a parent vanished under it; the sweep removes
/// a job directory once per pass, so one more try suffices and three are
/// plenty.
pub(crate) fn create_attempt_dir(dir: &Path) -> std::io::Result<()> {
    let mut tries = 0;
    loop {
        match std::fs::create_dir_all(dir) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => tries += 1,
            done => return done,
        }
    }
}

/// Removes the attempt directories under `work_dir` that are not in
/// `running` (job id, attempt) and were last changed more than `retention`
/// before `now`. Returns how many it removed. Entries it does not
/// recognise (the checkpoint service's `.qm-checkpoint`, anything a job
/// did not create) are left alone.
pub(crate) fn sweep(
    work_dir: &Path,
    running: &HashSet<(String, u32)>,
    retention: Duration,
    now: SystemTime,
) -> usize {
    let mut removed = 0;
    let Ok(jobs) = std::fs::read_dir(work_dir) else {
        return 0;
    };
    for job in jobs.flatten() {
        let job_id = job.file_name().to_string_lossy().into_owned();
        if job_id.starts_with('.') || qm_wire::subjects::token(&job_id).is_err() {
            continue;
        }
        let job_dir = job.path();
        if !std::fs::symlink_metadata(&job_dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&job_dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(attempt) = name
                .strip_prefix("attempt-")
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let dir = entry.path();
            if running.contains(&(job_id.clone(), attempt))
                || !std::fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir())
            {
                continue;
            }
            let changed = last_change(&dir);
            if changed.is_some_and(|t| now.duration_since(t).unwrap_or_default() > retention) {
                match std::fs::remove_dir_all(&dir) {
                    Ok(()) => {
                        removed += 1;
                        let _ = std::fs::remove_file(crate::process::run_record(&job_dir, attempt));
                    }
                    Err(e) => {
                        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove an old attempt directory")
                    }
                }
            }
        }
        // Gone once nothing is left in it (fails harmlessly otherwise).
        let _ = std::fs::remove_dir(&job_dir);
    }
    removed
}

/// The newest modification time of the directory and its output files.
fn last_change(dir: &Path) -> Option<SystemTime> {
    let paths: [PathBuf; 3] = [
        dir.to_path_buf(),
        dir.join("stdout.log"),
        dir.join("stderr.log"),
    ];
    paths
        .iter()
        .filter_map(|p| std::fs::symlink_metadata(p).and_then(|m| m.modified()).ok())
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_ended_attempts_go_running_and_recent_ones_and_foreign_entries_stay() {
        let work = std::env::temp_dir().join(format!("qm-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        let attempt = |job: &str, n: u32| {
            let d = work.join(job).join(format!("attempt-{n}"));
            std::fs::create_dir_all(d.join("checkpoint")).expect("dir");
            std::fs::write(d.join("stdout.log"), b"out").expect("log");
            crate::process::record_run(&work.join(job), n, 1, 2);
            d
        };
        let old = attempt("j-old", 1);
        let running = attempt("j-run", 1);
        let recent = attempt("j-new", 2);
        let newer_of_old_job = attempt("j-old", 2);
        std::fs::create_dir_all(work.join(".qm-checkpoint").join("uploads")).expect("dir");
        std::fs::create_dir_all(work.join("j-old").join("notes")).expect("dir");
        let set: HashSet<(String, u32)> = [("j-run".to_string(), 1)].into();
        // Everything was written just now: from 10 minutes on, with a
        // retention of 60 s, all of it is old.
        let later = SystemTime::now() + Duration::from_secs(600);
        // j-new's attempt 2 wrote output "later".
        assert_eq!(
            sweep(&work, &set, Duration::from_secs(60), SystemTime::now()),
            0
        );
        std::fs::remove_dir_all(&newer_of_old_job).expect("gone");
        let removed = sweep(&work, &set, Duration::from_secs(60), later);
        assert_eq!(removed, 2, "j-old/attempt-1 and j-new/attempt-2");
        assert!(!old.exists() && !recent.exists());
        assert!(!crate::process::run_record(&work.join("j-old"), 1).exists());
        assert!(running.exists(), "a running attempt's directory stays");
        assert!(work.join(".qm-checkpoint").join("uploads").exists());
        assert!(
            work.join("j-old").join("notes").exists(),
            "not an attempt: left alone"
        );
        assert!(
            !work.join("j-new").exists(),
            "an emptied job directory goes"
        );
        let _ = std::fs::remove_dir_all(&work);
    }

    #[test]
    fn an_attempt_directory_is_created_while_a_sweep_removes_empty_job_directories() {
        // The sweep's running set was taken before these attempts began
        // (empty here); each new job directory is empty for an instant.
        let work = std::env::temp_dir().join(format!("qm-sweep-race-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).expect("dir");
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sweeper = {
            let (work, done) = (work.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    sweep(
                        &work,
                        &HashSet::new(),
                        Duration::from_secs(60),
                        SystemTime::now(),
                    );
                }
            })
        };
        for n in 0..2_000 {
            let dir = work
                .join(format!("j-{n}"))
                .join("attempt-1")
                .join("checkpoint");
            create_attempt_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
            assert!(dir.is_dir());
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        sweeper.join().expect("sweeper");
        let _ = std::fs::remove_dir_all(&work);
    }
}
