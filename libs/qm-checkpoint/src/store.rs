//! The object store the checkpoint library talks to. The S3 implementation
//! (aws-sdk-s3) lives with the checkpoint service; this crate's logic only
//! needs these five operations, so it is tested against an in-memory store
//! that stands in for the far side of the trait.

use std::collections::BTreeMap;
use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A failure of the object store, classified so callers know whether to retry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The store could not be reached or timed out: try again.
    #[error("object store unavailable: {0}")]
    Transient(String),
    /// The request itself was refused (permissions, bad bucket): do not retry.
    #[error("object store refused the request: {0}")]
    Refused(String),
    /// A local file being sent or received could not be read or written
    /// (the kind says whether trying again may help).
    #[error("{0}")]
    File(String, std::io::ErrorKind),
}

impl StoreError {
    /// A local file's failure, naming the file.
    pub fn file(path: &Path, what: &str, e: &std::io::Error) -> StoreError {
        StoreError::File(format!("{what} {}: {e}", path.display()), e.kind())
    }
}

/// How large objects move: a file larger than `multipart_threshold` goes
/// up as a multipart upload in parts of `part_size`, a file larger than
/// `part_size` comes down as ranged reads, `parallel` requests at a time
/// over all files, each streamed from or to the file (memory stays at a
/// few buffers a request, whatever the file's size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub part_size: u64,
    /// Files up to this size go up in one request. A multipart upload
    /// costs the server more per byte (Garage: about a tenth more CPU),
    /// and a checkpoint of several files keeps the requests in flight
    /// busy without splitting them; a larger file is split so that its
    /// parts move in parallel and a failure resends one part, not all.
    /// Above [`MAX_SINGLE_PUT`] a file is always split (S3's limit).
    pub multipart_threshold: u64,
    pub parallel: usize,
    /// How long a request waits for the first byte of S3's answer once it
    /// is sent (and for a connection), before it fails as transient: an S3
    /// that stopped answering fails commits (which are retried, and the lag
    /// reported) instead of hanging them.
    pub response_timeout_secs: u64,
}

/// S3 allows at most 10,000 parts an upload, and parts of at least 5 MiB.
pub const MAX_PARTS: u64 = 10_000;
pub const MIN_PART_SIZE: u64 = 5 << 20;
/// S3's largest object in a single PUT.
pub const MAX_SINGLE_PUT: u64 = 5 << 30;

impl Default for Transfer {
    fn default() -> Transfer {
        Transfer {
            part_size: 64 << 20,
            multipart_threshold: 256 << 20,
            parallel: 8,
            response_timeout_secs: 30,
        }
    }
}

impl Transfer {
    /// Whether a file of `size` bytes goes up as a multipart upload.
    pub fn multipart(&self, size: u64) -> bool {
        size > self.multipart_threshold.min(MAX_SINGLE_PUT)
    }

    /// The part size for a file of `size` bytes: the configured one, or
    /// larger where the file would need more than [`MAX_PARTS`] parts.
    pub fn part_size_for(&self, size: u64) -> u64 {
        self.part_size
            .max(MIN_PART_SIZE)
            .max(size.div_ceil(MAX_PARTS))
    }

    /// The byte ranges (offset, length) a file of `size` moves in.
    pub fn parts(&self, size: u64) -> Vec<(u64, u64)> {
        let part = self.part_size_for(size);
        (0..size.div_ceil(part).max(1))
            .map(|i| (i * part, part.min(size - (i * part).min(size))))
            .collect()
    }
}

/// Keys are `/`-separated strings; bodies are bytes.
/// How far a long transfer has come, shared between the task moving the
/// bytes and whoever reports on it (a restore of a 100 GiB checkpoint
/// takes minutes: its caller waits on progress, not on a deadline).
#[derive(Debug, Default)]
pub struct Progress {
    /// Bytes written so far (never decreases, also across a fallback to
    /// an older checkpoint).
    moved: AtomicU64,
    /// Bytes of the checkpoint being moved now.
    total: AtomicU64,
}

impl Progress {
    pub fn add(&self, bytes: u64) {
        self.moved.fetch_add(bytes, Ordering::Relaxed);
    }

    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    pub fn set_total(&self, bytes: u64) {
        self.total.store(bytes, Ordering::Relaxed);
    }

    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

pub trait ObjectStore: Send + Sync {
    fn put(&self, key: &str, body: Vec<u8>) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Writes `key` only if no object is there: true if written, false if
    /// one was (it is left as it was). S3 does this with `If-None-Match: *`.
    fn put_new(
        &self,
        key: &str,
        body: Vec<u8>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// `None` if there is no object at `key`.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, StoreError>> + Send;
    fn exists(&self, key: &str) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// Every key that starts with `prefix`, in lexicographic order.
    fn list(&self, prefix: &str) -> impl Future<Output = Result<Vec<String>, StoreError>> + Send;
    /// The keys under `prefix`, each with when it was last written
    /// (milliseconds since the Unix epoch), sorted.
    fn list_modified(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<(String, u64)>, StoreError>> + Send;
    /// The keys under `prefix`, each with its size in bytes, sorted.
    fn list_sizes(
        &self,
        prefix: &str,
    ) -> impl Future<Output = Result<Vec<(String, u64)>, StoreError>> + Send;
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Stores the file at `path` (`size` bytes) as `key`, streamed from
    /// disk: never held in memory whole (the in-memory test store reads it
    /// whole, as it keeps every object).
    fn put_file(
        &self,
        key: &str,
        path: &Path,
        size: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;
    /// Writes object `key` (`size` bytes) to a new file at `path`, streamed
    /// to disk. False: there is no object at `key` (no file is left). The
    /// caller verifies the contents.
    fn get_file(
        &self,
        key: &str,
        path: &Path,
        size: u64,
        progress: &Progress,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
    /// How many files a commit or a restore moves at once. A store that
    /// splits files into parts keeps its own limit on the requests in
    /// flight, whatever the number of files.
    fn concurrency(&self) -> usize {
        1
    }
}

/// An in-memory store for tests of the code that uses the trait. It can be
/// told to fail the next puts, to test what a half-finished upload leaves.
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<MemoryInner>>,
}

#[derive(Debug, Default)]
struct MemoryInner {
    objects: BTreeMap<String, Vec<u8>>,
    /// When each object was last written.
    modified: BTreeMap<String, u64>,
    /// The time writes are stamped with; None: the system clock.
    clock: Option<u64>,
    puts: usize,
    fail_puts_after: Option<usize>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MemoryInner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Puts made so far.
    pub fn puts(&self) -> usize {
        self.lock().puts
    }

    /// After `n` more successful puts, every put fails (transiently).
    pub fn fail_puts_after(&self, n: usize) {
        let mut inner = self.lock();
        inner.fail_puts_after = Some(inner.puts + n);
    }

    /// Replaces an object's bytes behind the library's back (bit rot, tampering).
    pub fn corrupt(&self, key: &str) {
        if let Some(body) = self.lock().objects.get_mut(key) {
            if let Some(b) = body.first_mut() {
                *b ^= 0xff;
            }
        }
    }

    pub fn keys(&self) -> Vec<String> {
        self.lock().objects.keys().cloned().collect()
    }

    /// Stamps later writes with `ms` instead of the system clock.
    pub fn set_clock(&self, ms: u64) {
        self.lock().clock = Some(ms);
    }
}

impl MemoryInner {
    fn write(&mut self, key: &str, body: Vec<u8>) {
        let now = self.clock.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64)
        });
        self.puts += 1;
        self.objects.insert(key.to_string(), body);
        self.modified.insert(key.to_string(), now);
    }
}

impl ObjectStore for MemoryStore {
    async fn put(&self, key: &str, body: Vec<u8>) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if inner.fail_puts_after.is_some_and(|n| inner.puts >= n) {
            return Err(StoreError::Transient(format!(
                "injected failure putting {key}"
            )));
        }
        inner.write(key, body);
        Ok(())
    }

    async fn put_new(&self, key: &str, body: Vec<u8>) -> Result<bool, StoreError> {
        let mut inner = self.lock();
        if inner.objects.contains_key(key) {
            return Ok(false);
        }
        if inner.fail_puts_after.is_some_and(|n| inner.puts >= n) {
            return Err(StoreError::Transient(format!(
                "injected failure putting {key}"
            )));
        }
        inner.write(key, body);
        Ok(true)
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.lock().objects.get(key).cloned())
    }

    async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        Ok(self.lock().objects.contains_key(key))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .lock()
            .objects
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect())
    }

    async fn list_modified(&self, prefix: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .objects
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| (k.clone(), inner.modified.get(k).copied().unwrap_or(0)))
            .collect())
    }

    async fn list_sizes(&self, prefix: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let inner = self.lock();
        Ok(inner
            .objects
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.len() as u64))
            .collect())
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        let mut inner = self.lock();
        inner.objects.remove(key);
        inner.modified.remove(key);
        Ok(())
    }

    async fn put_file(&self, key: &str, path: &Path, _size: u64) -> Result<(), StoreError> {
        let body = std::fs::read(path).map_err(|e| StoreError::file(path, "reading", &e))?;
        self.put(key, body).await
    }

    async fn get_file(
        &self,
        key: &str,
        path: &Path,
        _size: u64,
        progress: &Progress,
    ) -> Result<bool, StoreError> {
        let Some(body) = self.get(key).await? else {
            return Ok(false);
        };
        std::fs::write(path, &body).map_err(|e| StoreError::file(path, "writing", &e))?;
        progress.add(body.len() as u64);
        Ok(true)
    }

    /// Several at once, so that the tests exercise the concurrent paths.
    fn concurrency(&self) -> usize {
        4
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_above_the_threshold_go_up_in_parts_and_above_s3s_single_put_limit_always() {
        let t = Transfer::default();
        assert!(!t.multipart(0));
        assert!(!t.multipart(256 << 20), "at the threshold: one request");
        assert!(t.multipart((256 << 20) + 1));
        let never = Transfer {
            multipart_threshold: u64::MAX,
            ..Transfer::default()
        };
        assert!(!never.multipart(MAX_SINGLE_PUT));
        assert!(
            never.multipart(MAX_SINGLE_PUT + 1),
            "S3 refuses a single PUT over 5 GiB"
        );
    }

    #[test]
    fn parts_cover_the_file_once_and_respect_s3s_limits() {
        let t = Transfer {
            part_size: 8 << 20,
            parallel: 4,
            ..Transfer::default()
        };
        for size in [0, 1, 8 << 20, (8 << 20) + 1, 100 << 20, 1 << 40] {
            let parts = t.parts(size);
            assert!(
                parts.len() as u64 <= MAX_PARTS,
                "{size}: {} parts",
                parts.len()
            );
            let mut next = 0;
            for (i, (offset, len)) in parts.iter().enumerate() {
                assert_eq!(*offset, next, "{size}: contiguous");
                if i + 1 < parts.len() {
                    assert!(
                        *len >= MIN_PART_SIZE,
                        "{size}: only the last part may be small"
                    );
                }
                next += len;
            }
            assert_eq!(next, size, "{size}: every byte once");
        }
        // 1 TiB in 8 MiB parts would be 131,072 parts: the size grows.
        assert_eq!(t.parts(1 << 40).len() as u64, MAX_PARTS);
        // A part size below S3's minimum is raised to it.
        let tiny = Transfer {
            part_size: 1,
            parallel: 1,
            ..Transfer::default()
        };
        assert_eq!(tiny.part_size_for(100 << 20), MIN_PART_SIZE);
    }
}
