//! What AWS Batch keeps and Quartermaster's API does not: tags, scheduling
//! policies, service environments, a job queue's priority and service
//! environment, and the request a job was submitted with. Two JetStream KV
//! buckets only the gateway may write (`qm_gateway`, and `qm_gateway_jobs`
//! whose entries age out); no scheduling rule reads them.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use futures::StreamExt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub type Tags = BTreeMap<String, String>;

/// Per job: the AWS request (without its tags) and the tags.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobRecord {
    pub request: Value,
    #[serde(default)]
    pub tags: Tags,
}

/// A job queue's AWS-only settings (a queue made on NATS, or only tagged
/// here, has just some of them).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct QueueRecord {
    pub priority: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy_arn: Option<String>,
    /// The one service environment it draws capacity from (by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_environment: Option<String>,
    #[serde(default)]
    pub tags: Tags,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TagsRecord {
    #[serde(default)]
    pub tags: Tags,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRecord {
    pub quota_share_policy: Value,
    #[serde(default)]
    pub tags: Tags,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentRecord {
    pub state: String,
    /// `[{capacityUnit, maxCapacity}]`, as given.
    pub capacity_limits: Vec<Value>,
    #[serde(default)]
    pub tags: Tags,
}

pub fn job_key(id: &str) -> String {
    format!("job.{id}")
}
pub fn queue_key(q: &str) -> String {
    format!("queue.{q}")
}
pub fn share_key(q: &str, s: &str) -> String {
    format!("share.{q}.{s}")
}
pub const POLICY_PREFIX: &str = "policy.";
pub const ENVIRONMENT_PREFIX: &str = "env.";

/// A storage failure, for a `ServerException`.
#[derive(Debug)]
pub struct StoreError(pub String);

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "the gateway's storage: {}", self.0)
    }
}

fn failed(e: impl std::fmt::Display) -> StoreError {
    StoreError(e.to_string())
}

/// How many times [`Bucket::update`] tries before it gives up.
pub const UPDATE_TRIES: usize = 16;

/// One bucket of JSON records.
#[derive(Clone)]
pub struct Bucket(kv::Store);

impl Bucket {
    pub async fn get<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, StoreError> {
        match self.0.get(key).await.map_err(failed)? {
            None => Ok(None),
            Some(raw) => serde_json::from_slice(&raw)
                .map(Some)
                .map_err(|e| StoreError(format!("record {key} is unreadable: {e}"))),
        }
    }

    pub async fn put<T: Serialize>(&self, key: &str, value: &T) -> Result<(), StoreError> {
        let raw = serde_json::to_vec(value).map_err(failed)?;
        self.0.put(key, raw.into()).await.map(drop).map_err(failed)
    }

    /// Read-modify-write under the record's revision: `change` gets the
    /// record as stored (None: there is none) and returns the one to store;
    /// if another writer stored the record in between, `change` runs again
    /// on what that writer stored, so no concurrent change is lost (up to
    /// [`UPDATE_TRIES`] times, then a storage error).
    pub async fn update<T, E, F>(&self, key: &str, mut change: F) -> Result<T, E>
    where
        T: Serialize + DeserializeOwned,
        E: From<StoreError>,
        F: FnMut(Option<T>) -> Result<T, E>,
    {
        for _ in 0..UPDATE_TRIES {
            let entry = self.0.entry(key).await.map_err(failed)?;
            let (current, revision) =
                match entry {
                    Some(e) if e.operation == kv::Operation::Put => (
                        Some(serde_json::from_slice(&e.value).map_err(|err| {
                            StoreError(format!("record {key} is unreadable: {err}"))
                        })?),
                        Some(e.revision),
                    ),
                    _ => (None, None),
                };
            let next = change(current)?;
            let raw = serde_json::to_vec(&next).map_err(failed)?;
            let stored = match revision {
                Some(r) => match self.0.update(key, raw.into(), r).await {
                    Ok(_) => true,
                    Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => false,
                    Err(e) => return Err(failed(e).into()),
                },
                None => match self.0.create(key, raw.into()).await {
                    Ok(_) => true,
                    Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => false,
                    Err(e) => return Err(failed(e).into()),
                },
            };
            if stored {
                return Ok(next);
            }
        }
        Err(StoreError(format!(
            "record {key} changed under every one of {UPDATE_TRIES} tries: retry"
        ))
        .into())
    }

    /// Stores `value` only if `key` holds nothing: false when it does.
    pub async fn create<T: Serialize>(&self, key: &str, value: &T) -> Result<bool, StoreError> {
        let raw = serde_json::to_vec(value).map_err(failed)?;
        match self.0.create(key, raw.into()).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(failed(e)),
        }
    }

    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.0.delete(key).await.map_err(failed)
    }

    /// The names under `prefix` (`prefix` taken off), sorted.
    pub async fn names(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let mut keys = self.0.keys().await.map_err(failed)?;
        let mut out = Vec::new();
        while let Some(k) = keys.next().await {
            let k = k.map_err(failed)?;
            if let Some(name) = k.strip_prefix(prefix) {
                out.push(name.to_string());
            }
        }
        out.sort();
        Ok(out)
    }
}

/// The gateway's two buckets.
#[derive(Clone)]
pub struct Store {
    pub config: Bucket,
    pub jobs: Bucket,
}

impl Store {
    /// Opens the buckets, creating them when they are not there.
    pub async fn open(
        js: &jetstream::Context,
        replicas: usize,
        job_record_age: Duration,
    ) -> Result<Store, String> {
        let open = |name: &str, history: i64, max_age: Duration| kv::Config {
            bucket: name.into(),
            history,
            max_age,
            storage: jetstream::stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        };
        let config = qm_service::nats::bucket(
            js,
            open(qm_wire::subjects::GATEWAY_BUCKET, 1, Duration::ZERO),
        )
        .await
        .map_err(|e| e.to_string())?;
        let jobs = qm_service::nats::bucket(
            js,
            open(qm_wire::subjects::GATEWAY_JOBS_BUCKET, 1, job_record_age),
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(Store {
            config: Bucket(config),
            jobs: Bucket(jobs),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_tagged_before_any_aws_setting_reads_back() {
        let r: QueueRecord = serde_json::from_str(r#"{"tags": {"team": "ml"}}"#).expect("reads");
        assert_eq!(r.priority, 0);
        assert_eq!(r.tags["team"], "ml");
        let j: JobRecord = serde_json::from_str(r#"{"request": {}, "tags": {}}"#).expect("reads");
        assert!(j.tags.is_empty());
    }
}
