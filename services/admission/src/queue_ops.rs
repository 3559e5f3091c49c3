//! The configuration operations on queues and shares: each decodes
//! nothing (the dispatch does), checks the document it would store and
//! changes it through `Admission::change` (validated whole, stored with
//! compare-and-set, appended to the log), or reads it for a caller that
//! may.

use qm_service::api::{self, invalid};
use qm_wire::messages::{Caller, Empty, ErrorCode, JobQueue, QueueRef, QuotaShareList, ShareRef};
use qm_wire::subjects::Operation;
use qm_wire::system::QueueDocument;
use qm_wire::updates::SharePatch;

use crate::errors::Result;
use crate::queues::merge_share;
use crate::Admission;

/// `UpdateJobQueue`'s request: `jobQueueName` and the fields to change.
pub(crate) type QueuePatch = serde_json::Map<String, serde_json::Value>;

impl Admission {
    /// `ApplyJobQueue`: the queue and its shares, replaced whole.
    pub(crate) async fn apply_queue(
        &self,
        caller: &Caller,
        doc: QueueDocument,
    ) -> Result<QueueDocument> {
        let name = doc.job_queue.job_queue_name.clone();
        self.change(caller, Operation::ApplyJobQueue, &name, move |_| {
            Ok(doc.clone())
        })
        .await
    }

    /// `CreateJobQueue`: a new queue without shares.
    pub(crate) async fn create_queue(&self, caller: &Caller, q: JobQueue) -> Result<JobQueue> {
        let name = q.job_queue_name.clone();
        self.change(
            caller,
            Operation::CreateJobQueue,
            &name,
            move |old| match old {
                Some(_) => Err(api::error(
                    ErrorCode::Conflict,
                    format!("job queue {:?} already exists", q.job_queue_name),
                )),
                None => Ok(QueueDocument {
                    job_queue: q.clone(),
                    quota_shares: Vec::new(),
                }),
            },
        )
        .await
        .map(|d| d.job_queue)
    }

    /// `UpdateJobQueue`, as AWS's: the fields given change, the others stay
    /// as stored when the change lands (merged inside the compare-and-set,
    /// so concurrent updates of different fields all land). A field given
    /// as null is cleared.
    pub(crate) async fn update_queue(
        &self,
        caller: &Caller,
        patch: QueuePatch,
    ) -> Result<JobQueue> {
        let Some(name) = patch.get("jobQueueName").and_then(|v| v.as_str()) else {
            return Err(invalid("jobQueueName: is required", Vec::new()));
        };
        let name = name.to_string();
        let queue = name.clone();
        self.change(caller, Operation::UpdateJobQueue, &name, move |old| {
            let Some(old) = old else {
                return Err(api::error(
                    ErrorCode::NotFound,
                    format!("no job queue {queue:?}"),
                ));
            };
            let job_queue = merged(&old.job_queue, &patch)?;
            Ok(QueueDocument {
                job_queue,
                quota_shares: old.quota_shares,
            })
        })
        .await
        .map(|d| d.job_queue)
    }

    /// `CreateQuotaShare` (`create`) or `UpdateQuotaShare` (the update
    /// merged into the stored share, `qm_wire::updates`).
    pub(crate) async fn put_share(
        &self,
        caller: &Caller,
        create: bool,
        patch: SharePatch,
    ) -> Result<qm_wire::messages::QuotaShare> {
        let op = if create {
            Operation::CreateQuotaShare
        } else {
            Operation::UpdateQuotaShare
        };
        let s = patch.share.clone();
        let queue = s.job_queue.clone();
        let name = s.quota_share_name.clone();
        self.change(caller, op, &queue, move |old| {
            let mut doc = old.ok_or_else(|| no_queue(&s.job_queue))?;
            let pos = doc
                .quota_shares
                .iter()
                .position(|x| x.quota_share_name == s.quota_share_name);
            match (pos, create) {
                (Some(_), true) => Err(api::error(
                    ErrorCode::Conflict,
                    format!("quota share {:?} already exists", s.quota_share_name),
                )),
                (None, false) => Err(no_share(&s.quota_share_name)),
                (None, true) => {
                    doc.quota_shares.push(s.clone());
                    Ok(doc)
                }
                (Some(i), false) => {
                    doc.quota_shares[i] = merge_share(&doc.quota_shares[i], &patch)?;
                    Ok(doc)
                }
            }
        })
        .await
        .and_then(|d| {
            d.quota_shares
                .into_iter()
                .find(|x| x.quota_share_name == name)
                .ok_or_else(|| api::error(ErrorCode::Internal, "share vanished"))
        })
    }

    /// `DeleteQuotaShare`.
    pub(crate) async fn delete_share(&self, caller: &Caller, s: ShareRef) -> Result<Empty> {
        let queue = s.job_queue.clone();
        self.change(caller, Operation::DeleteQuotaShare, &queue, move |old| {
            let mut doc = old.ok_or_else(|| no_queue(&s.job_queue))?;
            let before = doc.quota_shares.len();
            doc.quota_shares
                .retain(|x| x.quota_share_name != s.quota_share_name);
            if doc.quota_shares.len() == before {
                return Err(no_share(&s.quota_share_name));
            }
            Ok(doc)
        })
        .await
        .map(|_| Empty {})
    }

    /// `DescribeQuotaShare`.
    pub(crate) async fn describe_share(
        &self,
        caller: &Caller,
        s: ShareRef,
    ) -> Result<qm_wire::messages::QuotaShare> {
        let (doc, _) = self.readable(caller, &s.job_queue).await?;
        doc.quota_shares
            .into_iter()
            .find(|x| x.quota_share_name == s.quota_share_name)
            .ok_or_else(|| no_share(&s.quota_share_name))
    }

    /// `ListQuotaShares`.
    pub(crate) async fn list_shares(&self, caller: &Caller, q: QueueRef) -> Result<QuotaShareList> {
        let (doc, _) = self.readable(caller, &q.job_queue).await?;
        Ok(QuotaShareList {
            quota_shares: doc.quota_shares,
        })
    }

    /// `DescribeJobQueue`: the queue with its shares.
    pub(crate) async fn describe_queue(
        &self,
        caller: &Caller,
        q: QueueRef,
    ) -> Result<QueueDocument> {
        self.readable(caller, &q.job_queue)
            .await
            .map(|(doc, _)| doc)
    }

    /// `DeleteJobQueue`.
    pub(crate) async fn delete_queue_op(&self, caller: &Caller, q: QueueRef) -> Result<Empty> {
        self.delete_queue(caller, &q.job_queue)
            .await
            .map(|()| Empty {})
    }
}

fn no_queue(queue: &str) -> qm_wire::messages::ApiError {
    api::error(ErrorCode::NotFound, format!("no job queue {queue:?}"))
}

fn no_share(share: &str) -> qm_wire::messages::ApiError {
    api::error(ErrorCode::NotFound, format!("no quota share {share:?}"))
}

/// `stored` with the fields of `patch` (camelCase, as the API names them)
/// replacing its own; a field given as null is cleared.
fn merged(stored: &JobQueue, patch: &QueuePatch) -> Result<JobQueue> {
    let mut value =
        serde_json::to_value(stored).map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
    let fields = value.as_object_mut().expect("a job queue is an object");
    for (k, v) in patch {
        if v.is_null() {
            fields.remove(k);
        } else {
            fields.insert(k.clone(), v.clone());
        }
    }
    serde_json::from_value(value)
        .map_err(|e| invalid(format!("invalid job queue: {e}"), Vec::new()))
}
