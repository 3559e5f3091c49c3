//! Quota shares, and a job queue's snapshot.

use std::collections::BTreeMap;

use qm_wire::messages::{self as wire, Caller, JobQueueSnapshot, ServiceJob};
use qm_wire::subjects::Operation;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::AwsError;
use crate::store::{self, Tags, TagsRecord};
use crate::Gateway;

use super::requests::{
    check_tags, page, page_size, state_ok, store_failed, Answer, QueueIn, ShareIn,
};

impl Gateway {
    fn share_view(&self, queue: &str, s: &wire::QuotaShare, tags: Option<&Tags>) -> Value {
        let mut v = json!({
            "quotaShareName": s.quota_share_name,
            "quotaShareArn": self.arns.share(queue, &s.quota_share_name),
            "jobQueueArn": self.arns.queue(queue),
            "capacityLimits": s.capacity_limits.clone().unwrap_or_default(),
            "resourceSharingConfiguration": s.resource_sharing_configuration.clone().unwrap_or_else(|| wire::ResourceSharingConfiguration { strategy: "RESERVE".into(), borrow_limit: None }),
            "preemptionConfiguration": s.preemption_configuration.clone().unwrap_or_else(|| wire::SharePreemptionConfiguration { in_share_preemption: "DISABLED".into() }),
            "state": s.state.clone().unwrap_or_else(|| "ENABLED".into()),
            "status": "VALID",
        });
        if let Some(t) = tags {
            v["tags"] = json!(t);
        }
        v
    }

    async fn share_tags(&self, queue: &str, share: &str) -> Result<Tags, AwsError> {
        let r: Option<TagsRecord> = self
            .store
            .config
            .get(&store::share_key(queue, share))
            .await
            .map_err(store_failed)?;
        Ok(r.map(|r| r.tags).unwrap_or_default())
    }

    pub(super) async fn put_share(&self, caller: &Caller, s: ShareIn, create: bool) -> Answer {
        let (queue, name) = if create {
            let queue = self
                .arns
                .queue_name("jobQueue", s.job_queue.as_deref().unwrap_or_default())
                .map_err(|e| self.bad(e))?;
            let name = s.quota_share_name.clone().unwrap_or_default();
            qm_wire::subjects::token(&name)
                .map_err(|e| self.bad(format!("quotaShareName: {e}")))?;
            (queue, name)
        } else {
            self.arns
                .share_of(
                    "quotaShareArn",
                    s.quota_share_arn.as_deref().unwrap_or_default(),
                )
                .map_err(|e| self.bad(e))?
        };
        state_ok("state", &s.state)?;
        if let Some(t) = &s.tags {
            check_tags(t)?;
        }
        let share = wire::QuotaShare {
            job_queue: queue.clone(),
            quota_share_name: name.clone(),
            state: s.state.clone(),
            capacity_limits: s.capacity_limits.clone(),
            resource_sharing_configuration: s.resource_sharing_configuration.clone(),
            preemption_configuration: s.preemption_configuration.clone(),
            protections: None,
            checkpoint_s3_prefixes: None,
            image_prefixes: None,
            input_s3_prefixes: None,
            run_as_non_root: None,
            workload_classes: None,
            default_workload_class: None,
            // Quartermaster's own: set over the NATS API or `qm apply`.
            borrow_budget: None,
            on_budget_exhausted: None,
            fair_share_weight: None,
            share_group: None,
        };
        let op = if create {
            Operation::CreateQuotaShare
        } else {
            Operation::UpdateQuotaShare
        };
        let _: wire::QuotaShare = self.call(caller, op, &share).await?;
        if create {
            let record = TagsRecord {
                tags: s.tags.unwrap_or_default(),
            };
            self.store
                .config
                .put(&store::share_key(&queue, &name), &record)
                .await
                .map_err(store_failed)?;
        }
        Ok(json!({
            "quotaShareName": name,
            "quotaShareArn": self.arns.share(&queue, &name),
        }))
    }

    pub(super) async fn describe_share(&self, caller: &Caller, s: ShareIn) -> Answer {
        let (queue, name) = self
            .arns
            .share_of(
                "quotaShareArn",
                s.quota_share_arn.as_deref().unwrap_or_default(),
            )
            .map_err(|e| self.bad(e))?;
        let share: wire::QuotaShare = self
            .call(
                caller,
                Operation::DescribeQuotaShare,
                &wire::ShareRef {
                    job_queue: queue.clone(),
                    quota_share_name: name.clone(),
                },
            )
            .await?;
        let tags = self.share_tags(&queue, &name).await?;
        Ok(self.share_view(&queue, &share, Some(&tags)))
    }

    pub(super) async fn list_shares(&self, caller: &Caller, q: QueueIn) -> Answer {
        let queue = self
            .arns
            .queue_name("jobQueue", q.job_queue.as_deref().unwrap_or_default())
            .map_err(|e| self.bad(e))?;
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Shares {
            quota_shares: Vec<wire::QuotaShare>,
        }
        let all: Shares = self
            .call(
                caller,
                Operation::ListQuotaShares,
                &wire::QueueRef {
                    job_queue: queue.clone(),
                },
            )
            .await?;
        let (shares, next) = page(
            &all.quota_shares,
            page_size(q.max_results)?,
            q.next_token.as_deref(),
        )?;
        let mut v = json!({
            "quotaShares": shares.iter().map(|s| self.share_view(&queue, s, None)).collect::<Vec<_>>(),
        });
        if let Some(n) = next {
            v["nextToken"] = json!(n);
        }
        Ok(v)
    }

    pub(super) async fn snapshot(&self, caller: &Caller, q: QueueIn) -> Answer {
        let queue = self
            .arns
            .queue_name("jobQueue", q.job_queue.as_deref().unwrap_or_default())
            .map_err(|e| self.bad(e))?;
        let s: JobQueueSnapshot = self
            .call(
                caller,
                Operation::GetJobQueueSnapshot,
                &wire::QueueRef { job_queue: queue },
            )
            .await?;
        let now = qm_service::now_ms();
        let position = |j: &ServiceJob| {
            json!({
                "jobArn": self.arns.job(&j.job_id),
                "earliestTimeAtPosition": j.runnable_since.unwrap_or(j.created_at),
            })
        };
        let mut fronts: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for j in &s.front_of_quota_shares {
            fronts
                .entry(j.quota_share_name.clone())
                .or_default()
                .push(position(j));
        }
        let mut total: BTreeMap<String, u32> = BTreeMap::new();
        let mut per_share: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for u in &s.shares {
            *total.entry(u.instance_type.clone()).or_default() += u.used;
            per_share
                .entry(u.quota_share_name.clone())
                .or_default()
                .push(json!({"capacityUnit": u.instance_type, "quantity": f64::from(u.used)}));
        }
        Ok(json!({
            "frontOfQueue": {
                "jobs": s.front_of_queue.iter().map(position).collect::<Vec<_>>(),
                "lastUpdatedAt": now,
            },
            "frontOfQuotaShares": {
                "quotaShares": fronts,
                "lastUpdatedAt": now,
            },
            "queueUtilization": {
                "totalCapacityUsage": total.iter().map(|(t, n)| json!({"capacityUnit": t, "quantity": f64::from(*n)})).collect::<Vec<_>>(),
                "quotaShareUtilization": {
                    "topCapacityUtilization": per_share.iter().map(|(s, u)| json!({"quotaShareName": s, "capacityUsage": u})).collect::<Vec<_>>(),
                },
                "lastUpdatedAt": now,
            },
        }))
    }
}
