//! What a waiting job costs the scheduler's memory, counted exactly: the
//! test binary's allocator counts, per thread, the bytes glibc's malloc
//! holds for what is allocated (the request rounded up to its 16-byte
//! steps with the 8-byte header, 32 bytes at least), so a test that
//! builds a state on its own thread reads what that state holds, whatever
//! the other tests do meanwhile.
//!
//! The fleet benchmark measures the same from the outside (the leader's
//! resident memory with a 100,000-job backlog against it empty), where
//! the allocator's free lists and the runtime's buffers add their noise.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use qm_wire::messages::SubmitServiceJob;
use qm_wire::system::{LogEntry, QueueDocument};

use super::State;

thread_local! {
    static HELD: Cell<i64> = const { Cell::new(0) };
}

/// What malloc holds for a request of `size` bytes.
fn footprint(size: usize) -> i64 {
    ((size + 8 + 15) & !15).max(32) as i64
}

fn count(delta: i64) {
    // `try_with`: a thread being torn down has no counter left.
    let _ = HELD.try_with(|h| h.set(h.get() + delta));
}

struct Counting;

// SAFETY: every call goes to the system allocator unchanged; the counter is
// a plain thread-local integer (no allocation, no lock).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(footprint(layout.size()));
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(footprint(layout.size()));
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-footprint(layout.size()));
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(footprint(new_size) - footprint(layout.size()));
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes this thread's allocations hold now.
fn held() -> i64 {
    HELD.with(Cell::get)
}

/// The fleet benchmark's queue (one share a type, as `qm-bench-fleet`
/// configures it, at a smaller scale) and its jobs.
fn fleet_config() -> LogEntry {
    let mut shares = String::new();
    for s in 0..10 {
        shares.push_str(&format!(
            "  - quotaShareName: share-{s}\n    capacityLimits: [{{capacityUnit: type-{t}, maxCapacity: 80}}]\n    resourceSharingConfiguration: {{strategy: LEND_AND_BORROW, borrowLimit: 100}}\n",
            t = s % 5
        ));
    }
    let yaml =
        format!("jobQueue:\n  jobQueueName: fleet\n  queueingStrategy: BEST_EFFORT_FIFO\nquotaShares:\n{shares}");
    let queue: QueueDocument = serde_yaml_ng::from_str(&yaml).expect("queue document");
    LogEntry::Config {
        queue,
        revision: 1,
        principal: None,
        operation: None,
    }
}

fn fleet_job(i: usize) -> LogEntry {
    LogEntry::Submit {
        // As admission names jobs: `j-` and 32 hex digits.
        job_id: format!("j-{:032x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        job: SubmitServiceJob {
            job_name: format!("j{i}"),
            job_queue: "fleet".into(),
            quota_share_name: Some(format!("share-{}", i % 10)),
            instance_type: format!("type-{}", i % 5),
            command: vec!["true".into()],
            client_token: Some(format!("fleet-{i}")),
            ..Default::default()
        },
        principal: Some("team".into()),
    }
}

/// Bytes a waiting job adds to the state and the leader's traces, averaged over `jobs` submits
/// after as many were submitted first (so tables that grow by doubling are
/// counted at their average fill, not at the step of one doubling).
fn bytes_per_waiting_job(jobs: usize) -> (i64, String) {
    let mut state = State::default();
    state.apply(fleet_config(), 1);
    let mut traces = crate::observe::Traces::default();
    let mut headers = async_nats::HeaderMap::new();
    headers.insert(
        "traceparent",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    );
    let mut submit = |state: &mut State, i: usize| {
        let entry = fleet_job(i);
        let submitted = crate::observe::Traces::submitted(&entry, Some(&headers));
        let effects = state.apply(entry, 2 + i as u64);
        traces.keep(submitted, state);
        drop(effects);
    };
    for i in 0..jobs {
        submit(&mut state, i);
    }
    let before = held();
    for i in jobs..2 * jobs {
        submit(&mut state, i);
    }
    let after = held();
    // Where it goes, for the message of a failing test: each part's
    // copy counted (a copy of the meta shares the ids with the original).
    let part = |copy: &dyn Fn() -> Box<dyn std::any::Any>| {
        let b = held();
        let x = copy();
        let bytes = held() - b;
        drop(x);
        bytes / (2 * jobs) as i64
    };
    let qs = &state.queues["fleet"];
    let parts = format!(
        "the core's job {}, the id index {}, the meta {} (the rest: the shared ids and the traces)",
        part(&|| Box::new(qs.cluster.clone())),
        part(&|| Box::new(qs.ids.clone())),
        part(&|| Box::new(qs.meta.clone())),
    );
    drop(traces);
    drop(state);
    ((after - before) / jobs as i64, parts)
}

#[test]
fn a_waiting_job_holds_at_most_one_kib_of_the_scheduler() {
    let (per_job, parts) = bytes_per_waiting_job(20_000);
    eprintln!("a waiting job: {per_job} bytes of the scheduler's memory ({parts})");
    assert!(
        per_job <= 1024,
        "a waiting job holds {per_job} bytes of the scheduler's state and traces (at most 1 KiB): {parts}"
    );
}
