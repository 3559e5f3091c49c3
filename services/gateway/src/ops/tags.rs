//! Tags on every kind of resource.

use qm_tenancy::{authorize, Action};
use qm_wire::messages::{self as wire};
use qm_wire::subjects::Operation;
use qm_wire::system::QueueDocument;
use serde_json::{json, Value};

use crate::api::{AwsError, Op};
use crate::arn::Resource;
use crate::store::{self, Tags};
use crate::Gateway;

use super::requests::{check_tags, input, is_admin, store_failed, Answer, Call, TagIn};

impl Gateway {
    /// Tag, untag or list a resource's tags: reading them needs the right
    /// to read the resource, changing them the right to change it.
    pub(super) async fn tags(&self, op: Op, c: Call<'_>) -> Answer {
        let arn = c.arn.unwrap_or_default();
        let resource = self
            .arns
            .parse("resourceArn", arn)
            .map_err(|e| self.bad(e))?;
        let write = op != Op::ListTagsForResource;
        let denied = |e: qm_tenancy::Denied| AwsError {
            status: 403,
            code: "AccessDeniedException",
            message: e.0,
        };
        let (bucket, key) = match &resource {
            Resource::JobQueue(q) => {
                let action = if write {
                    Action::ChangeConfig { queue: q }
                } else {
                    Action::ReadQueue { queue: q }
                };
                authorize(c.caller, action).map_err(denied)?;
                let _: QueueDocument = self
                    .call(
                        c.caller,
                        Operation::DescribeJobQueue,
                        &wire::QueueRef {
                            job_queue: q.clone(),
                        },
                    )
                    .await?;
                (&self.store.config, store::queue_key(q))
            }
            Resource::QuotaShare { queue, share } => {
                let action = if write {
                    Action::ChangeConfig { queue }
                } else {
                    Action::ReadQueue { queue }
                };
                authorize(c.caller, action).map_err(denied)?;
                let _: wire::QuotaShare = self
                    .call(
                        c.caller,
                        Operation::DescribeQuotaShare,
                        &wire::ShareRef {
                            job_queue: queue.clone(),
                            quota_share_name: share.clone(),
                        },
                    )
                    .await?;
                (&self.store.config, store::share_key(queue, share))
            }
            Resource::ServiceJob(id) => {
                // Reading the job checks the caller may read it.
                let j = self.job(c.caller, id).await?;
                if write {
                    authorize(
                        c.caller,
                        Action::ChangeJob {
                            queue: &j.job_queue,
                            share: &j.quota_share_name,
                        },
                    )
                    .map_err(denied)?;
                }
                (&self.store.jobs, store::job_key(id))
            }
            Resource::SchedulingPolicy(n) | Resource::ServiceEnvironment(n) => {
                if write {
                    is_admin(c.caller)?;
                }
                let prefix = if matches!(resource, Resource::SchedulingPolicy(_)) {
                    store::POLICY_PREFIX
                } else {
                    store::ENVIRONMENT_PREFIX
                };
                (&self.store.config, format!("{prefix}{n}"))
            }
        };
        let mut record: Value = match bucket.get(&key).await.map_err(store_failed)? {
            Some(v) => v,
            None if matches!(
                resource,
                Resource::SchedulingPolicy(_) | Resource::ServiceEnvironment(_)
            ) =>
            {
                return Err(self.bad(format!("resourceArn: no such resource {arn:?}")))
            }
            None => json!({}),
        };
        // A job submitted on NATS has no record: its submitted tags.
        if record.get("tags").is_none() {
            if let Resource::ServiceJob(id) = &resource {
                let j = self.job(c.caller, id).await?;
                record = json!({"request": {}, "tags": j.tags});
            }
        }
        let tags_of = |record: &Value| -> Tags {
            serde_json::from_value(record["tags"].clone()).unwrap_or_default()
        };
        enum Change {
            Add(Tags),
            Remove(Vec<String>),
        }
        let change = match op {
            Op::ListTagsForResource => return Ok(json!({ "tags": tags_of(&record) })),
            Op::TagResource => {
                let t: TagIn = input(c.body)?;
                if t.tags.is_empty() {
                    return Err(self.bad("tags: give at least one tag".into()));
                }
                Change::Add(t.tags)
            }
            _ => {
                let keys = crate::api::query_values(c.query, "tagKeys");
                if keys.is_empty() {
                    return Err(self.bad("tagKeys: give at least one key".into()));
                }
                Change::Remove(keys)
            }
        };
        // Applied to the record as stored, under its revision: two
        // concurrent tag changes both land.
        let first = record;
        bucket
            .update(&key, |stored: Option<Value>| {
                let mut record = match stored {
                    Some(r) if r.get("tags").is_some() => r,
                    _ => first.clone(),
                };
                let mut tags = tags_of(&record);
                match &change {
                    Change::Add(t) => tags.extend(t.clone()),
                    Change::Remove(keys) => {
                        for k in keys {
                            tags.remove(k);
                        }
                    }
                }
                check_tags(&tags)?;
                record["tags"] = json!(tags);
                Ok::<_, AwsError>(record)
            })
            .await?;
        Ok(json!({}))
    }
}
