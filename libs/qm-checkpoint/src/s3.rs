//! [`ObjectStore`] on S3-compatible storage (Garage, MinIO, AWS S3) through
//! the AWS SDK. Objects are sent whole; multipart upload of very large
//! checkpoint files is a later addition.

use std::fmt;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region, SharedCredentialsProvider};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;

use crate::store::{ObjectStore, StoreError};

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
            .finish()
    }
}

/// A bucket as an [`ObjectStore`].
#[derive(Clone, Debug)]
pub struct S3Store {
    client: Client,
    bucket: String,
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
            .force_path_style(config.force_path_style);
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
        }
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
                    .filter_map(|o| o.key().map(str::to_string)),
            );
            match out.next_continuation_token() {
                Some(next) if out.is_truncated().unwrap_or(false) => token = Some(next.to_string()),
                _ => break,
            }
        }
        keys.sort();
        Ok(keys)
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
}
