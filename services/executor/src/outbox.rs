//! Reports the log has not acknowledged yet. Every report is held here from
//! the moment it is queued until JetStream stores it. An executor stopped
//! (SIGTERM) while NATS is unreachable does not wait for NATS forever: it
//! saves what is still held to `<workDir>/undelivered-reports.json` and
//! exits; the next executor started on that work directory appends them
//! before it registers, so an attempt that ended during the outage is
//! recorded as it ended (not as a lost host). Appends carry the report's
//! message id, so one stored twice is stored once.
//!
//! An attempt's end is kept on disk before anything else happens to it
//! ([`Outbox::keep_end`]): the moment its process ends on its own, before
//! outputs are uploaded or the final checkpoint flushed (which wait for the
//! checkpoint service, and through an outage for a long time), the end is
//! written to the same file, which is written again when an end is queued
//! without having been kept (a stopped attempt's) and when one is stored. Whatever happens next (the executor is stopped, killed, or
//! its host restarts), the next executor on that work directory reports the
//! end, and the job is not run again.
//!
//! In operation the file holds the ends only (kept and queued): a report
//! of a start or of progress is moot once its executor is gone, and writing
//! every held report at each end made each end's write grow with the
//! reports in flight (hundreds at 1,000 instances). A stop writes
//! everything held ([`Outbox::persist`]).
//!
//! Writes are group-committed: a change is counted, and a writer that takes
//! the file after another wrote a version holding its change does not
//! write again (eight attempts ending together are one synced write, not
//! eight in a row).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use qm_wire::system::{Report, ReportPhase};

/// A lock a panicking thread left holds what it held: used as it is (the
/// file is whole, as a rename leaves it, and the lists are whole vectors).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn same_attempt(a: &Report, b: &Report) -> bool {
    a.job_id == b.job_id && a.attempt == b.attempt
}

/// What a write of the file holds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    /// The ends, kept and queued: what must survive this executor dying.
    /// (Its other reports, progress and starts, are moot once it is gone:
    /// the scheduler finds the executor lost, or the next one reports.)
    Ends,
    /// Everything not yet stored: a stop while NATS is unreachable.
    All,
}

pub(crate) struct Outbox {
    unsent: Mutex<Vec<(String, Report)>>,
    /// Ends of attempts whose processes ended on their own, not yet queued
    /// (their outputs and final checkpoint are still being saved).
    kept: Mutex<Vec<Report>>,
    /// Changes made to what the file must hold, counted.
    changed: AtomicU64,
    /// One writer of the file at a time; it holds the count of changes
    /// the file on disk holds.
    writing: Mutex<u64>,
    /// Files written (for tests of the group commit).
    writes: AtomicU64,
    path: PathBuf,
    /// Whose reports these are: a saved report of any other executor is
    /// dropped (this executor may only report as itself).
    executor_id: String,
}

/// The message id a report is appended with (JetStream drops a second
/// append with the same id within the log's de-duplication window).
pub(crate) fn report_id(r: &Report) -> String {
    let base = format!("{}-{}-{}-{:?}", r.executor_id, r.job_id, r.attempt, r.phase);
    match &r.progress {
        // A progress step is its own message (the same step twice is one).
        Some(text) => format!("{base}-progress-{:016x}", fnv1a(text.bytes())),
        None => base,
    }
}

/// FNV-1a of `bytes`: a stable short name for what a message id covers.
pub(crate) fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl Outbox {
    pub(crate) fn new(work_dir: &str, executor_id: &str) -> Outbox {
        Outbox {
            unsent: Mutex::new(Vec::new()),
            kept: Mutex::new(Vec::new()),
            changed: AtomicU64::new(0),
            writing: Mutex::new(0),
            writes: AtomicU64::new(0),
            path: PathBuf::from(work_dir).join("undelivered-reports.json"),
            executor_id: executor_id.to_string(),
        }
    }

    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// A report was queued for the log (an end is written to disk first).
    pub(crate) fn hold(&self, r: &Report) {
        if r.phase != ReportPhase::Ended {
            lock(&self.unsent).push((report_id(r), r.clone()));
            return;
        }
        // An end moves from kept to unsent with no write between (one
        // writer at a time): a write at that moment would find it in
        // neither and leave it off the file.
        let mut written = lock(&self.writing);
        lock(&self.unsent).push((report_id(r), r.clone()));
        // An end kept on disk as it is queued is on disk already (the file
        // holds what is kept and what is unsent alike): no write.
        let on_disk = {
            let mut kept = lock(&self.kept);
            let on_disk = kept.iter().any(|e| e == r);
            kept.retain(|e| !same_attempt(e, r));
            on_disk
        };
        if !on_disk {
            self.changed.fetch_add(1, Ordering::SeqCst);
            self.warn(self.write_locked(Held::Ends, &mut written));
        }
    }

    /// The process of `r`'s attempt ended on its own: its end is kept on
    /// disk now (replacing an earlier version of it), before it is queued.
    pub(crate) fn keep_end(&self, r: &Report) {
        {
            let mut kept = lock(&self.kept);
            kept.retain(|e| !same_attempt(e, r));
            kept.push(r.clone());
        }
        self.write_change();
    }

    /// Whether the attempt's end is kept (it ended on its own).
    pub(crate) fn is_kept(&self, job_id: &str, attempt: u32) -> bool {
        lock(&self.kept)
            .iter()
            .any(|e| e.job_id == job_id && e.attempt == attempt)
    }

    /// The log stored these.
    pub(crate) fn delivered(&self, ids: &[String]) {
        let mut ended = false;
        lock(&self.unsent).retain(|(id, r)| {
            let stored = ids.contains(id);
            ended |= stored && r.phase == ReportPhase::Ended;
            !stored
        });
        if ended {
            // The file then holds the ends still undelivered (synced), or
            // is removed: should a crash undo the removal, the next
            // executor appends the delivered ends again, and a second end
            // of an ended attempt changes nothing.
            self.write_change();
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        lock(&self.unsent).is_empty() && lock(&self.kept).is_empty()
    }

    /// Writes everything held and kept to disk, not only the ends (at a
    /// stop; atomically: a temporary file renamed over the old one; no
    /// file when there is nothing). Returns how many reports it wrote.
    pub(crate) fn persist(&self) -> std::io::Result<usize> {
        let mut written = lock(&self.writing);
        self.write_locked(Held::All, &mut written)
    }

    /// Counts a change of the ends and puts it on disk, unless a write
    /// since the change made it (a group commit).
    fn write_change(&self) {
        let change = self.changed.fetch_add(1, Ordering::SeqCst) + 1;
        let mut written = lock(&self.writing);
        if *written < change {
            self.warn(self.write_locked(Held::Ends, &mut written));
        }
    }

    fn warn(&self, result: std::io::Result<usize>) {
        if let Err(e) = result {
            tracing::error!(path = %self.path.display(), error = %e, "cannot keep the undelivered reports on disk");
        }
    }

    /// Files written so far.
    #[cfg(test)]
    fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// Writes the file, by the caller that holds `writing` (`written`):
    /// every change counted so far is in it.
    fn write_locked(&self, held: Held, written: &mut u64) -> std::io::Result<usize> {
        // Counted before what is held is read: every change counted up to
        // here is in what follows.
        let changes = self.changed.load(Ordering::SeqCst);
        self.writes.fetch_add(1, Ordering::SeqCst);
        let result = self.write_file(held);
        if result.is_ok() {
            *written = changes;
        }
        result
    }

    /// The file, synced with its folder (it holds ends, or everything at a
    /// stop); removed when there is nothing to hold.
    fn write_file(&self, held: Held) -> std::io::Result<usize> {
        let mut all: Vec<Report> = lock(&self.unsent)
            .iter()
            .filter(|(_, r)| held == Held::All || r.phase == ReportPhase::Ended)
            .map(|(_, r)| r.clone())
            .collect();
        all.extend(lock(&self.kept).iter().cloned());
        if all.is_empty() {
            self.clear_saved();
            return Ok(0);
        }
        let tmp = self.path.with_extension("json.tmp");
        let body = serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?;
        let _ = std::fs::remove_file(&tmp);
        // Readable by the executor's user only; never through a link.
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| {
                f.write_all(&body)?;
                f.sync_all()
            })?;
        std::fs::rename(&tmp, &self.path)?;
        // The rename itself survives a power loss once its folder is synced.
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(all.len())
    }

    /// The reports a previous executor saved (none if there is no file; an
    /// unreadable file is set aside, named, rather than lost or retried
    /// forever).
    pub(crate) fn load(&self) -> Vec<Report> {
        let Ok(bytes) = std::fs::read(&self.path) else {
            return Vec::new();
        };
        match serde_json::from_slice::<Vec<Report>>(&bytes) {
            Ok(reports) => reports
                .into_iter()
                .filter(|r| {
                    let ours = r.executor_id == self.executor_id;
                    if !ours {
                        tracing::warn!(executor = %r.executor_id, job = %r.job_id, "saved report of another executor dropped");
                    }
                    ours
                })
                .collect(),
            Err(e) => {
                let aside = self.path.with_extension("json.unreadable");
                tracing::error!(path = %self.path.display(), moved_to = %aside.display(), error = %e, "saved reports unreadable; set aside");
                let _ = std::fs::rename(&self.path, &aside);
                Vec::new()
            }
        }
    }

    /// The saved reports were appended: forget them.
    pub(crate) fn clear_saved(&self) {
        if let Err(e) = std::fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot remove delivered reports");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_progress_step_is_a_message_of_its_own() {
        let mut start = report("j", ReportPhase::Starting);
        let plain = report_id(&start);
        start.progress = Some("pulling image x".into());
        let step = report_id(&start);
        assert_ne!(
            plain, step,
            "a step must not be taken for the STARTING report"
        );
        start.progress = Some("pulling image y".into());
        assert_ne!(step, report_id(&start));
    }

    use super::*;
    use qm_wire::system::ReportPhase;

    fn report(job: &str, phase: ReportPhase) -> Report {
        Report {
            exit_code: Some(0),
            ..Report::new("node-1", job, 1, phase)
        }
    }

    #[test]
    fn an_end_is_on_disk_from_the_moment_its_process_ends_until_the_log_stores_it() {
        let dir = std::env::temp_dir().join(format!("qm-outbox-end-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let work = dir.to_str().expect("utf-8");
        let outbox = Outbox::new(work, "node-1");
        let mut ended = report("j-1", ReportPhase::Ended);
        outbox.keep_end(&ended);
        assert!(outbox.is_kept("j-1", 1));
        assert!(!outbox.is_empty());
        // The executor dies here (before the flush, before queuing it): the
        // next one finds the end.
        assert_eq!(Outbox::new(work, "node-1").load(), vec![ended.clone()]);
        // Its outputs failed to upload: the kept end is replaced.
        ended.exit_code = None;
        ended.error = Some("the outputs could not be uploaded".into());
        outbox.keep_end(&ended);
        assert_eq!(Outbox::new(work, "node-1").load(), vec![ended.clone()]);
        // Queued: held once (not kept and held), still on disk.
        outbox.hold(&ended);
        assert!(!outbox.is_kept("j-1", 1));
        assert_eq!(Outbox::new(work, "node-1").load(), vec![ended.clone()]);
        // Stored by the log: nothing left on disk.
        outbox.delivered(&[report_id(&ended)]);
        assert!(outbox.is_empty());
        assert!(!outbox.path().exists(), "nothing to deliver, no file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn ends_kept_while_a_write_is_under_way_are_written_together_once() {
        let dir = std::env::temp_dir().join(format!("qm-outbox-group-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let outbox = std::sync::Arc::new(Outbox::new(dir.to_str().expect("utf-8"), "node-1"));
        let ends: Vec<Report> = (0..8)
            .map(|i| report(&format!("j-{i}"), ReportPhase::Ended))
            .collect();
        // A write is under way (the lock is the writer's) while eight
        // attempts end.
        let writer = outbox.writing.lock().expect("lock");
        let threads: Vec<_> = ends
            .iter()
            .cloned()
            .map(|end| {
                let outbox = std::sync::Arc::clone(&outbox);
                std::thread::spawn(move || outbox.keep_end(&end))
            })
            .collect();
        while outbox.changed.load(Ordering::SeqCst) < 8 {
            std::thread::yield_now();
        }
        drop(writer);
        for t in threads {
            t.join().expect("kept");
        }
        assert_eq!(
            outbox.writes(),
            1,
            "the first writer writes all eight ends; the others find theirs written"
        );
        let mut on_disk = Outbox::new(dir.to_str().expect("utf-8"), "node-1").load();
        on_disk.sort_by(|a, b| a.job_id.cmp(&b.job_id));
        assert_eq!(on_disk, ends, "every end is on disk");
        // A change after that write is written again.
        outbox.keep_end(&report("j-8", ReportPhase::Ended));
        assert_eq!(outbox.writes(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn in_operation_the_file_holds_the_ends_and_a_stop_writes_everything() {
        let dir = std::env::temp_dir().join(format!("qm-outbox-ends-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let work = dir.to_str().expect("utf-8");
        let outbox = Outbox::new(work, "node-1");
        let running: Vec<Report> = (0..50)
            .map(|i| report(&format!("busy-{i}"), ReportPhase::Running))
            .collect();
        for r in &running {
            outbox.hold(r);
        }
        let ended = report("j-1", ReportPhase::Ended);
        outbox.keep_end(&ended);
        assert_eq!(
            Outbox::new(work, "node-1").load(),
            vec![ended.clone()],
            "an end's write does not carry the fifty reports in flight"
        );
        assert_eq!(outbox.persist().expect("saved"), 51, "a stop saves all");
        assert_eq!(Outbox::new(work, "node-1").load().len(), 51);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn held_reports_survive_a_restart_until_delivered() {
        let dir = std::env::temp_dir().join(format!("qm-outbox-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let first = Outbox::new(dir.to_str().expect("utf-8"), "node-1");
        let (running, ended) = (
            report("j-1", ReportPhase::Running),
            report("j-1", ReportPhase::Ended),
        );
        first.hold(&running);
        first.hold(&ended);
        first.delivered(&[report_id(&running)]);
        assert!(!first.is_empty());
        assert_eq!(first.persist().expect("saved"), 1);

        let next = Outbox::new(dir.to_str().expect("utf-8"), "node-1");
        assert_eq!(next.load(), vec![ended.clone()], "only the undelivered one");
        next.clear_saved();
        assert!(next.load().is_empty(), "delivered once");

        // Reports of another executor left in the file are not sent as ours.
        let mut forged = report("j-2", ReportPhase::Ended);
        forged.executor_id = "node-2".into();
        std::fs::write(
            next.path(),
            serde_json::to_vec(&vec![forged, ended.clone()]).expect("json"),
        )
        .expect("write");
        assert_eq!(next.load(), vec![ended.clone()]);
        next.clear_saved();

        std::fs::write(next.path(), b"{ not json").expect("write");
        assert!(next.load().is_empty(), "an unreadable file is set aside");
        assert!(next.path().with_extension("json.unreadable").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
