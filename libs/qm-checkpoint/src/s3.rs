//! [`ObjectStore`] on S3-compatible storage (Garage, MinIO, AWS S3) through
//! the AWS SDK. Files move streamed from and to disk: above the part size
//! as a multipart upload and as ranged reads, several parts at a time
//! ([`Transfer`]). An upload that fails is aborted; one cut short by a
//! crash is named in a journal directory, so the next start aborts it
//! ([`S3Store::abort_journaled`]), and [`S3Store::abort_stale`] aborts any
//! left under a prefix for longer than a day.

use std::fmt;
use std::path::{Path, PathBuf};

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;

use crate::store::{ObjectStore, Progress, StoreError, Transfer};

/// Where and how to reach the bucket.
#[derive(Clone)]
pub struct S3Config {
    /// e.g. `http://127.0.0.1:3900`; None for AWS S3 itself.
    pub endpoint: Option<String>,
    pub region: String,
    /// Explicit keys; when empty, `credentials` (the default chain) is used.
    pub access_key_id: String,
    pub secret_access_key: String,
    /// aws-config's default credentials chain (environment, profile, web
    /// identity, container and instance metadata): see [`default_chain`].
    pub credentials: Option<SharedCredentialsProvider>,
    pub bucket: String,
    /// Path-style addressing (`endpoint/bucket/key`), which Garage and MinIO
    /// need without wildcard DNS.
    pub force_path_style: bool,
    /// Part size and parallelism of large files.
    pub transfer: Transfer,
    /// Where multipart uploads in flight are recorded (one small file
    /// each), so that a restarted process aborts those a crash left; None:
    /// not recorded.
    pub journal: Option<PathBuf>,
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("default_chain", &self.credentials.is_some())
            .field("bucket", &self.bucket)
            .field("force_path_style", &self.force_path_style)
            .field("transfer", &self.transfer)
            .field("journal", &self.journal)
            .finish()
    }
}

/// A bucket as an [`ObjectStore`].
#[derive(Clone, Debug)]
pub struct S3Store {
    client: Client,
    bucket: String,
    transfer: Transfer,
    journal: Option<PathBuf>,
    /// One permit per request moving file bytes (a part, a small file's
    /// PUT, a ranged GET): `transfer.parallel` in flight in all, however
    /// many files move at once.
    slots: std::sync::Arc<tokio::sync::Semaphore>,
}

/// aws-config's default credentials chain: `AWS_ACCESS_KEY_ID` and
/// friends, the shared profile (`AWS_PROFILE`), web identity tokens (EKS),
/// ECS container and EC2 instance metadata, tried in that order.
pub async fn default_chain() -> SharedCredentialsProvider {
    SharedCredentialsProvider::new(
        aws_config::default_provider::credentials::DefaultCredentialsChain::builder()
            .build()
            .await,
    )
}

impl S3Store {
    /// A store with the explicit keys of `config`, else its default chain.
    pub fn new(config: &S3Config) -> S3Store {
        let mut builder = aws_sdk_s3::config::Builder::new()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(config.region.clone()))
            .force_path_style(config.force_path_style)
            // No checksum trailers on streamed bodies (aws-chunked with a
            // CRC trailer, whose payload signature Garage refused): a
            // blob's integrity is its SHA-256, checked on every restore (a
            // damaged blob makes the restore fall back).
            .request_checksum_calculation(
                aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired,
            )
            .timeout_config(
                aws_sdk_s3::config::timeout::TimeoutConfig::builder()
                    .connect_timeout(std::time::Duration::from_secs(
                        config.transfer.response_timeout_secs,
                    ))
                    .read_timeout(std::time::Duration::from_secs(
                        config.transfer.response_timeout_secs,
                    ))
                    .build(),
            );
        if !config.access_key_id.is_empty() {
            builder = builder.credentials_provider(Credentials::new(
                config.access_key_id.clone(),
                config.secret_access_key.clone(),
                None,
                None,
                "quartermaster",
            ));
        } else if let Some(chain) = &config.credentials {
            builder = builder.credentials_provider(chain.clone());
        }
        if let Some(endpoint) = &config.endpoint {
            builder = builder.endpoint_url(endpoint.clone());
        }
        S3Store {
            client: Client::from_conf(builder.build()),
            bucket: config.bucket.clone(),
            transfer: config.transfer,
            journal: config.journal.clone(),
            slots: std::sync::Arc::new(tokio::sync::Semaphore::new(
                config.transfer.parallel.max(1),
            )),
        }
    }

    /// A permit to send one request that moves file bytes.
    async fn slot(&self) -> Result<tokio::sync::SemaphorePermit<'_>, StoreError> {
        self.slots
            .acquire()
            .await
            .map_err(|_| StoreError::Transient("the transfer slots are closed".into()))
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Creates the bucket (for servers that let a key create buckets, such as
    /// MinIO); an existing bucket owned by this key is fine.
    pub async fn create_bucket(&self) -> Result<(), StoreError> {
        match self
            .client
            .create_bucket()
            .bucket(&self.bucket)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) if e.err().is_bucket_already_owned_by_you() => Ok(()),
            Err(e) => Err(classify(&format!("create bucket {}", self.bucket), e)),
        }
    }
}

/// Transient (retry) for transport failures, timeouts and 5xx; refused for
/// the rest (credentials, permissions, a missing bucket).
fn classify<E: ProvideErrorMetadata + fmt::Debug>(
    what: &str,
    err: SdkError<E, HttpResponse>,
) -> StoreError {
    match &err {
        SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) | SdkError::ResponseError(_) => {
            StoreError::Transient(format!("{what}: {err:?}"))
        }
        SdkError::ServiceError(service) => {
            let status = service.raw().status().as_u16();
            let text = format!(
                "{what}: {} ({})",
                service.err().message().unwrap_or("no message"),
                service.err().code().unwrap_or("no code")
            );
            if status >= 500 {
                StoreError::Transient(text)
            } else {
                StoreError::Refused(text)
            }
        }
        _ => StoreError::Refused(format!("{what}: {err:?}")),
    }
}

/// A file the SDK could not open or read for a body.
fn unreadable(path: &Path, e: impl fmt::Display) -> StoreError {
    StoreError::File(
        format!("reading {}: {e}", path.display()),
        std::io::ErrorKind::Other,
    )
}

/// One multipart upload in flight, as its journal entry records it.
#[derive(serde::Serialize, serde::Deserialize)]
struct InFlight {
    bucket: String,
    key: String,
    upload_id: String,
}

/// Uploads left in flight longer than this are aborted by [`S3Store::abort_stale`].
pub const STALE_UPLOAD: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

impl S3Store {
    fn journal_entry(&self, upload_id: &str) -> Option<PathBuf> {
        // Upload ids are the server's; only safe characters name the file.
        let name: String = upload_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        self.journal
            .as_ref()
            .map(|d| d.join(format!("{name}.upload.json")))
    }

    fn record(&self, key: &str, upload_id: &str) {
        let Some(path) = self.journal_entry(upload_id) else {
            return;
        };
        let entry = InFlight {
            bucket: self.bucket.clone(),
            key: key.to_string(),
            upload_id: upload_id.to_string(),
        };
        if let Some(dir) = path.parent() {
            // The service's own: an entry planted by anyone else (a job on
            // the node) could make it abort another job's upload.
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::create_dir_all(dir);
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
        let _ = std::fs::write(&path, serde_json::to_vec(&entry).unwrap_or_default());
    }

    fn forget(&self, upload_id: &str) {
        if let Some(path) = self.journal_entry(upload_id) {
            let _ = std::fs::remove_file(path);
        }
    }

    async fn abort(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        match self
            .client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await
        {
            Ok(_) => {}
            // Already completed or aborted: nothing is left.
            Err(SdkError::ServiceError(e)) if e.raw().status().as_u16() == 404 => {}
            Err(e) => return Err(classify(&format!("abort upload of {key}"), e)),
        }
        self.forget(upload_id);
        Ok(())
    }

    /// Aborts the multipart uploads this store's journal names (a crash
    /// left them): their parts stop taking space. Returns how many.
    pub async fn abort_journaled(&self) -> Result<usize, StoreError> {
        let Some(dir) = &self.journal else {
            return Ok(0);
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(0);
        };
        let mut aborted = 0;
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(u) = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<InFlight>(&b).ok())
            else {
                continue;
            };
            if u.bucket != self.bucket {
                continue;
            }
            self.abort(&u.key, &u.upload_id).await?;
            aborted += 1;
        }
        Ok(aborted)
    }

    /// The multipart uploads in flight under `prefix`: key, upload id and
    /// when each was started (seconds since the Unix epoch).
    pub async fn uploads(&self, prefix: &str) -> Result<Vec<(String, String, i64)>, StoreError> {
        let mut found = Vec::new();
        let (mut key_marker, mut id_marker): (Option<String>, Option<String>) = (None, None);
        loop {
            let out = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_key_marker(key_marker.clone())
                .set_upload_id_marker(id_marker.clone())
                .send()
                .await
                .map_err(|e| classify(&format!("list uploads under {prefix}"), e))?;
            for u in out.uploads() {
                if let (Some(key), Some(id)) = (u.key(), u.upload_id()) {
                    let started = u.initiated().map_or(0, |t| t.secs());
                    found.push((key.to_string(), id.to_string(), started));
                }
            }
            if !out.is_truncated().unwrap_or(false) {
                break;
            }
            key_marker = out.next_key_marker().map(str::to_string);
            id_marker = out.next_upload_id_marker().map(str::to_string);
            if key_marker.is_none() {
                break;
            }
        }
        Ok(found)
    }

    /// Aborts the multipart uploads under `prefix` started more than
    /// `older_than` ago (whoever started them: no upload takes that long).
    /// Returns how many.
    pub async fn abort_stale(
        &self,
        prefix: &str,
        older_than: std::time::Duration,
    ) -> Result<usize, StoreError> {
        let cutoff = std::time::SystemTime::now() - older_than;
        let cutoff_secs = cutoff
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let mut aborted = 0;
        for (key, id, started) in self.uploads(prefix).await? {
            if started < cutoff_secs {
                self.abort(&key, &id).await?;
                aborted += 1;
            }
        }
        Ok(aborted)
    }

    /// The parts of a multipart upload, `parallel` at a time, each streamed
    /// from its range of the file; any failure aborts the upload.
    async fn put_parts(&self, key: &str, path: &Path, size: u64) -> Result<(), StoreError> {
        use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
        use futures::{StreamExt, TryStreamExt};
        let created = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| classify(&format!("start upload of {key}"), e))?;
        let upload_id = created
            .upload_id()
            .ok_or_else(|| StoreError::Transient(format!("start upload of {key}: no upload id")))?
            .to_string();
        self.record(key, &upload_id);
        let parts = self.transfer.parts(size);
        let sent = futures::stream::iter(parts.into_iter().enumerate())
            .map(|(i, (offset, length))| {
                let upload_id = upload_id.clone();
                async move {
                    let number = i as i32 + 1;
                    let _slot = self.slot().await?;
                    let body = ByteStream::read_from()
                        .path(path)
                        .offset(offset)
                        .length(aws_sdk_s3::primitives::Length::Exact(length))
                        .build()
                        .await
                        .map_err(|e| unreadable(path, e))?;
                    let out = self
                        .client
                        .upload_part()
                        .bucket(&self.bucket)
                        .key(key)
                        .upload_id(&upload_id)
                        .part_number(number)
                        .content_length(length as i64)
                        .body(body)
                        .send()
                        .await
                        .map_err(|e| classify(&format!("upload part {number} of {key}"), e))?;
                    Ok::<_, StoreError>(
                        CompletedPart::builder()
                            .part_number(number)
                            .set_e_tag(out.e_tag().map(str::to_string))
                            .build(),
                    )
                }
            })
            .buffer_unordered(self.transfer.parallel.max(1))
            .try_collect::<Vec<_>>()
            .await;
        let mut done = match sent {
            Ok(done) => done,
            Err(e) => {
                let _ = self.abort(key, &upload_id).await;
                return Err(e);
            }
        };
        done.sort_by_key(|p| p.part_number());
        let completed = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(&upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(done))
                    .build(),
            )
            .send()
            .await;
        match completed {
            Ok(_) => {
                self.forget(&upload_id);
                Ok(())
            }
            Err(e) => {
                let _ = self.abort(key, &upload_id).await;
                Err(classify(&format!("complete upload of {key}"), e))
            }
        }
    }

    /// One range of an object into the same range of `file`, streamed.
    async fn get_range(
        &self,
        key: &str,
        path: &Path,
        range: Option<(u64, u64)>,
        progress: &Progress,
    ) -> Result<bool, StoreError> {
        use tokio::io::{AsyncSeekExt, AsyncWriteExt};
        let _slot = self.slot().await?;
        let request = self.client.get_object().bucket(&self.bucket).key(key);
        let request = match range {
            Some((offset, length)) if length > 0 => {
                request.range(format!("bytes={offset}-{}", offset + length - 1))
            }
            _ => request,
        };
        let mut out = match request.send().await {
            Ok(out) => out,
            Err(SdkError::ServiceError(e)) if e.err().is_no_such_key() => return Ok(false),
            Err(e) => return Err(classify(&format!("get {key}"), e)),
        };
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .await
            .map_err(|e| StoreError::file(path, "writing", &e))?;
        let offset = range.map_or(0, |r| r.0);
        file.seek(std::io::SeekFrom::Start(offset))
            .await
            .map_err(|e| StoreError::file(path, "writing", &e))?;
        let mut written = 0u64;
        while let Some(chunk) = out.body.next().await {
            let chunk =
                chunk.map_err(|e| StoreError::Transient(format!("get {key}: body: {e}")))?;
            file.write_all(&chunk)
                .await
                .map_err(|e| StoreError::file(path, "writing", &e))?;
            written += chunk.len() as u64;
            progress.add(chunk.len() as u64);
        }
        file.flush()
            .await
            .map_err(|e| StoreError::file(path, "writing", &e))?;
        if let Some((_, length)) = range {
            if written != length {
                return Err(StoreError::Transient(format!(
                    "get {key}: {written} bytes arrived of the {length} asked for"
                )));
            }
        }
        Ok(true)
    }
}

impl S3Store {
    /// Every key under `prefix`, each with what `value` reads off its
    /// listing entry, sorted (all pages).
    async fn list_with(
        &self,
        prefix: &str,
        value: impl Fn(&aws_sdk_s3::types::Object) -> u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let mut keys = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let out = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token.clone())
                .send()
                .await
                .map_err(|e| classify(&format!("list {prefix}"), e))?;
            keys.extend(
                out.contents()
                    .iter()
                    .filter_map(|o| o.key().map(|k| (k.to_string(), value(o)))),
            );
            match out.next_continuation_token() {
                Some(next) if out.is_truncated().unwrap_or(false) => token = Some(next.to_string()),
                _ => break,
            }
        }
        keys.sort();
        Ok(keys)
    }
}

impl ObjectStore for S3Store {
    async fn put(&self, key: &str, body: Vec<u8>) -> Result<(), StoreError> {
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(ByteStream::from(body))
            .send()
            .await
            .map_err(|e| classify(&format!("put {key}"), e))?;
        Ok(())
    }

    /// `If-None-Match: *` (AWS S3, MinIO and others refuse to overwrite:
    /// 412, or 409 while another conditional write of the key is in
    /// flight). A server that ignores the header would overwrite; the
    /// existence check before it narrows that window to the moment between
    /// the two requests (ADR 0007).
    async fn put_new(&self, key: &str, body: Vec<u8>) -> Result<bool, StoreError> {
        if self.exists(key).await? {
            return Ok(false);
        }
        let sent = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .if_none_match("*")
            .body(ByteStream::from(body))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(service))
                if matches!(service.raw().status().as_u16(), 409 | 412) =>
            {
                Ok(false)
            }
            Err(e) => Err(classify(&format!("put {key} if absent"), e)),
        }
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>, StoreError> {
        match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(out) => {
                let bytes = out
                    .body
                    .collect()
                    .await
                    .map_err(|e| StoreError::Transient(format!("get {key}: body: {e}")))?;
                Ok(Some(bytes.into_bytes().to_vec()))
            }
            Err(SdkError::ServiceError(e)) if e.err().is_no_such_key() => Ok(None),
            Err(e) => Err(classify(&format!("get {key}"), e)),
        }
    }

    async fn exists(&self, key: &str) -> Result<bool, StoreError> {
        match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if e.err().is_not_found() => Ok(false),
            Err(e) => Err(classify(&format!("head {key}"), e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        Ok(self
            .list_modified(prefix)
            .await?
            .into_iter()
            .map(|(key, _)| key)
            .collect())
    }

    async fn list_modified(&self, prefix: &str) -> Result<Vec<(String, u64)>, StoreError> {
        self.list_with(prefix, |o| {
            o.last_modified()
                .and_then(|t| t.to_millis().ok())
                .map_or(0, |ms| ms.max(0) as u64)
        })
        .await
    }

    async fn list_sizes(&self, prefix: &str) -> Result<Vec<(String, u64)>, StoreError> {
        self.list_with(prefix, |o| o.size().map_or(0, |s| s.max(0) as u64))
            .await
    }

    async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| classify(&format!("delete {key}"), e))?;
        Ok(())
    }

    async fn put_file(&self, key: &str, path: &Path, size: u64) -> Result<(), StoreError> {
        if self.transfer.multipart(size) {
            return self.put_parts(key, path, size).await;
        }
        let _slot = self.slot().await?;
        let body = ByteStream::from_path(path)
            .await
            .map_err(|e| unreadable(path, e))?;
        self.client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(body)
            .send()
            .await
            .map_err(|e| classify(&format!("put {key}"), e))?;
        Ok(())
    }

    async fn get_file(
        &self,
        key: &str,
        path: &Path,
        size: u64,
        progress: &Progress,
    ) -> Result<bool, StoreError> {
        use futures::{StreamExt, TryStreamExt};
        let file =
            std::fs::File::create(path).map_err(|e| StoreError::file(path, "creating", &e))?;
        file.set_len(size)
            .map_err(|e| StoreError::file(path, "creating", &e))?;
        drop(file);
        let parts = self.transfer.parts(size);
        let found = if parts.len() <= 1 {
            self.get_range(key, path, None, progress).await
        } else {
            futures::stream::iter(parts)
                .map(|range| self.get_range(key, path, Some(range), progress))
                .buffer_unordered(self.transfer.parallel.max(1))
                .try_collect::<Vec<bool>>()
                .await
                .map(|all| all.into_iter().all(|found| found))
        };
        if !matches!(found, Ok(true)) {
            let _ = std::fs::remove_file(path);
        }
        found
    }

    fn concurrency(&self) -> usize {
        self.transfer.parallel.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(bucket: &str, journal: &Path) -> S3Store {
        S3Store::new(&S3Config {
            // Nothing listens here: a test that reached S3 would fail.
            endpoint: Some("http://127.0.0.1:9".into()),
            region: "test".into(),
            access_key_id: "k".into(),
            secret_access_key: "s".into(),
            credentials: None,
            bucket: bucket.into(),
            force_path_style: true,
            transfer: Transfer::default(),
            journal: Some(journal.to_path_buf()),
        })
    }

    #[tokio::test]
    async fn the_journal_is_private_and_aborts_only_its_own_buckets_uploads() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("qm-journal-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let s = store("mine", &dir);
        s.record("q/job/blobs/abc", "upload/../../x");
        let mode = std::fs::metadata(&dir)
            .expect("created")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "only the service may add entries");
        // The server's upload id names the file only through safe characters.
        let names: Vec<String> = std::fs::read_dir(&dir)
            .expect("listed")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["upload_______x.upload.json"]);
        // Entries another bucket's store wrote, and files that are not
        // entries, are left alone: nothing is sent to S3 for them.
        std::fs::write(dir.join("junk.upload.json"), b"not json").expect("written");
        assert_eq!(store("theirs", &dir).abort_journaled().await, Ok(0));
        assert_eq!(std::fs::read_dir(&dir).expect("listed").count(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
