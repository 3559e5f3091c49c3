//! The object store the checkpoint library talks to. The S3 implementation
//! (aws-sdk-s3) lives with the checkpoint service; this crate's logic only
//! needs these five operations, so it is tested against an in-memory store
//! that stands in for the far side of the trait.

use std::collections::BTreeMap;
use std::future::Future;
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
}

/// Keys are `/`-separated strings; bodies are bytes.
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
    fn delete(&self, key: &str) -> impl Future<Output = Result<(), StoreError>> + Send;
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
}

impl ObjectStore for MemoryStore {
    async fn put(&self, key: &str, body: Vec<u8>) -> Result<(), StoreError> {
        let mut inner = self.lock();
        if inner.fail_puts_after.is_some_and(|n| inner.puts >= n) {
            return Err(StoreError::Transient(format!(
                "injected failure putting {key}"
            )));
        }
        inner.puts += 1;
        inner.objects.insert(key.to_string(), body);
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
        inner.puts += 1;
        inner.objects.insert(key.to_string(), body);
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

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.lock().objects.remove(key);
        Ok(())
    }
}
