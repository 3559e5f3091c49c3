//! Giving freed memory back to the operating system.
//!
//! glibc's allocator keeps memory a process freed for reuse: after a burst
//! (a snapshot decoded or encoded, a takeover's catch-up, a batch of jobs
//! archived) a service's resident memory stays at the burst's peak though
//! its live data shrank. Every service therefore asks the allocator, now
//! and then and right after such a burst, to return free pages (glibc's
//! `malloc_trim`, which also releases free pages inside the heap). On other
//! allocators this does nothing.

use std::time::Duration;

/// How often every service gives freed memory back.
pub const RELEASE_EVERY: Duration = Duration::from_secs(10);

/// Returns free heap pages to the operating system; blocks for as long as
/// the allocator walks its heap (milliseconds for hundreds of MiB), so call
/// it off the async threads (see [`release_soon`]).
pub fn release() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only takes the allocator's own locks; it has no
    // preconditions and may be called from any thread at any time.
    #[allow(unsafe_code)]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Releases freed memory on a blocking thread, without waiting for it.
pub fn release_soon() {
    drop(tokio::task::spawn_blocking(release));
}

/// Releases freed memory every [`RELEASE_EVERY`] for the life of the
/// process (started by [`crate::main`] for every service).
pub fn release_periodically() {
    tokio::spawn(async {
        let mut every = tokio::time::interval(RELEASE_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let _ = tokio::task::spawn_blocking(release).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releasing_after_a_burst_gives_pages_back_and_keeps_live_data() {
        // A burst of small allocations, most of them freed again: the heap
        // keeps its peak until it is trimmed.
        let burst: Vec<Vec<u8>> = (0..200_000).map(|i| vec![(i % 251) as u8; 512]).collect();
        let kept: Vec<Vec<u8>> = burst.iter().step_by(1000).cloned().collect();
        drop(burst);
        let before = resident().expect("resident memory from /proc");
        release();
        let after = resident().expect("resident memory from /proc");
        // Live data is untouched.
        assert!(kept
            .iter()
            .enumerate()
            .all(|(n, v)| v.len() == 512 && v[0] == ((n * 1000) % 251) as u8));
        // glibc gives the freed pages back; other allocators are not asked.
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert!(
                after + 50 * 1024 * 1024 <= before,
                "about 100 MiB freed in the burst; resident {before} bytes before the release, {after} after"
            );
        }
    }

    fn resident() -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
        kb.trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
            .map(|k| k * 1024)
    }
}
