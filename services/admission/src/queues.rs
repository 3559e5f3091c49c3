//! Queue configuration: documents in the configuration bucket, changed by
//! compare-and-set, validated whole with the core's rules and transition
//! checks, stored in the log; and the reads of queues and shares.

use futures::StreamExt;
use qm_core::{Cluster, Time};
use qm_service::api::{self, invalid};
use qm_service::{nats, now_ms};
use qm_tenancy::{authorize, Action};
use qm_wire::messages::{Caller, ErrorCode, JobQueueNames, QuotaShare};
use qm_wire::subjects::{self, Operation};
use qm_wire::system::{LogEntry, QueueDocument};
use qm_wire::to_core as convert;
use qm_wire::updates::SharePatch;

use crate::errors::{denied, token_field, transient, Result};
use crate::Admission;

pub(crate) fn config_key(queue: &str) -> String {
    format!("queue.{queue}")
}

/// `UpdateQuotaShare` merged onto the stored share: the one merge
/// (`qm_wire::updates`, where the rule is written), as an API error naming
/// the problem when the result is not a share.
pub(crate) fn merge_share(share: &QuotaShare, update: &SharePatch) -> Result<QuotaShare> {
    qm_wire::updates::merge_share(share, update)
        .map_err(|p| invalid("invalid quota share update", vec![p]))
}

/// Everything a queue change must pass before it is stored (or foreseen):
/// every share's name and prefixes, the whole configuration as the core
/// reads it, and the core's transition rules from `old`.
pub(crate) fn check_change(old: Option<&QueueDocument>, new: &QueueDocument) -> Result<()> {
    for (i, s) in new.quota_shares.iter().enumerate() {
        token_field(
            &format!("quotaShares[{i}].quotaShareName"),
            &s.quota_share_name,
        )?;
        type Check = fn(&str) -> std::result::Result<(), String>;
        let s3: Check = |p| qm_wire::messages::parse_s3_uri(p).map(|_| ());
        let lists: [(&str, &Option<Vec<String>>, Check); 3] = [
            (
                "imagePrefixes",
                &s.image_prefixes,
                qm_tenancy::check_image_prefix,
            ),
            ("inputS3Prefixes", &s.input_s3_prefixes, s3),
            ("checkpointS3Prefixes", &s.checkpoint_s3_prefixes, s3),
        ];
        for (key, list, check) in lists {
            for (j, entry) in list.iter().flatten().enumerate() {
                check(entry).map_err(|e| {
                    invalid(
                        "invalid queue configuration",
                        vec![qm_wire::messages::Problem {
                            field: format!("quotaShares[{i}].{key}[{j}]"),
                            message: e,
                        }],
                    )
                })?;
            }
        }
    }
    let config = convert::queue(new)
        .map_err(|p| invalid("invalid queue configuration", api::problems(&p)))?;
    if let Some(old) = old {
        // The transition rules (e.g. a share must be DISABLED before
        // it is deleted) are the core's.
        let old_config = convert::queue(old)
            .map_err(|p| invalid("the stored configuration is invalid", api::problems(&p)))?;
        let mut c = Cluster::new(old_config, &[])
            .map_err(|e| invalid("the stored configuration is invalid", api::problems(&e.0)))?;
        c.update_queue(config, Time(now_ms()))
            .map_err(|e| invalid("configuration change refused", api::problems(&e.0)))?;
    }
    Ok(())
}

impl Admission {
    pub(crate) async fn document(&self, queue: &str) -> Result<Option<(QueueDocument, u64)>> {
        let entry = self
            .config
            .entry(config_key(queue))
            .await
            .map_err(|e| transient("configuration store unavailable", e))?;
        match entry {
            Some(e) if e.operation == async_nats::jetstream::kv::Operation::Put => {
                let doc = serde_json::from_slice(&e.value).map_err(|err| {
                    api::error(
                        ErrorCode::Internal,
                        format!("stored configuration of {queue:?} is unreadable: {err}"),
                    )
                })?;
                Ok(Some((doc, e.revision)))
            }
            _ => Ok(None),
        }
    }

    pub(crate) async fn existing(&self, queue: &str) -> Result<(QueueDocument, u64)> {
        token_field("jobQueue", queue)?;
        self.document(queue).await?.ok_or_else(|| {
            api::error(
                ErrorCode::NotFound,
                format!("no job queue {queue:?} (create it with `qm apply -f`)"),
            )
        })
    }

    /// Changes a queue's document with `change`, validated whole, stored with
    /// compare-and-set, then appended to the log for the scheduler.
    pub(crate) async fn change<F>(
        &self,
        caller: &Caller,
        op: Operation,
        queue: &str,
        change: F,
    ) -> Result<QueueDocument>
    where
        F: Fn(Option<QueueDocument>) -> Result<QueueDocument>,
    {
        token_field("jobQueueName", queue)?;
        authorize(caller, Action::ChangeConfig { queue }).map_err(denied)?;
        for _ in 0..10 {
            let current = self.document(queue).await?;
            let old = current.as_ref().map(|(d, _)| d.clone());
            let new = change(old.clone())?;
            check_change(old.as_ref(), &new)?;
            let body = serde_json::to_vec(&new)
                .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
            let key = config_key(queue);
            let stored = match &current {
                None => self.config.create(&key, body.into()).await.ok(),
                Some((_, rev)) => self.config.update(&key, body.into(), *rev).await.ok(),
            };
            let Some(revision) = stored else {
                continue; // someone else changed it first: redo on the new one
            };
            let entry = LogEntry::Config {
                queue: new.clone(),
                revision,
                principal: Some(caller.principal.clone()),
                operation: Some(op.name().to_string()),
            };
            let subject = subjects::log_config(queue)
                .map_err(|e| invalid(format!("jobQueueName: {e}"), Vec::new()))?;
            let payload = serde_json::to_vec(&entry)
                .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
            nats::append_durably(
                &self.js,
                subject,
                payload.into(),
                Some(format!("config-{queue}-{revision}")),
            )
            .await;
            return Ok(new);
        }
        Err(api::error(
            ErrorCode::Conflict,
            format!("job queue {queue:?} is being changed concurrently; try again"),
        ))
    }

    /// `DryRunUpdateQuotaShare`: the update merged and checked exactly as
    /// `UpdateQuotaShare` would be, then foreseen by the scheduler on a
    /// copy of its state; nothing is stored. The scheduler's raw reply.
    pub(crate) async fn foresee_share_update(
        &self,
        caller: &Caller,
        update: &SharePatch,
    ) -> Result<bytes::Bytes> {
        let queue = update.share.job_queue.as_str();
        token_field("jobQueue", queue)?;
        authorize(caller, Action::ChangeConfig { queue }).map_err(denied)?;
        let (old, _) = self.existing(queue).await?;
        let mut new = old.clone();
        let share = new
            .quota_shares
            .iter_mut()
            .find(|s| s.quota_share_name == update.share.quota_share_name)
            .ok_or_else(|| {
                api::error(
                    ErrorCode::NotFound,
                    format!("no quota share {:?}", update.share.quota_share_name),
                )
            })?;
        *share = merge_share(share, update)?;
        check_change(Some(&old), &new)?;
        let body =
            serde_json::to_vec(&new).map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
        self.relay(caller, Operation::DryRunUpdateQuotaShare, &body)
            .await
    }

    /// `DeleteJobQueue`: a DISABLED queue whose jobs have all finished is
    /// deleted by the scheduler leader (its finished jobs archived, where
    /// `DescribeServiceJob` still finds them), then its configuration is
    /// removed. Refused, naming why, while it is ENABLED or a job of it
    /// has not finished; asked again after an answer was lost, it finishes
    /// the deletion.
    pub(crate) async fn delete_queue(&self, caller: &Caller, queue: &str) -> Result<()> {
        token_field("jobQueue", queue)?;
        authorize(caller, Action::ChangeConfig { queue }).map_err(denied)?;
        // Whether it may go (DISABLED, drained) is the core's rule, which
        // the scheduler applies to the revision read here.
        let (_, revision) = self.existing(queue).await?;
        let ask = qm_wire::system::SchedOperation::DeleteJobQueue(
            qm_wire::system::DeleteJobQueueRequest {
                job_queue: queue.to_string(),
                revision,
            },
        );
        let raw = self.ask_scheduler(caller, ask).await?;
        match serde_json::from_slice::<qm_wire::messages::Reply<serde_json::Value>>(&raw) {
            Ok(qm_wire::messages::Reply::Ok(_)) => {}
            Ok(qm_wire::messages::Reply::Error(e)) => return Err(e),
            Err(e) => {
                return Err(api::error(
                    ErrorCode::Internal,
                    format!("unreadable answer of the scheduler: {e}"),
                ))
            }
        }
        // The scheduler has let it go: its configuration goes too, unless
        // it was changed meanwhile (then the queue exists, as changed).
        let key = config_key(queue);
        match self.config.delete_expect_revision(&key, Some(revision)).await {
            Ok(()) => Ok(()),
            Err(e) => match self.document(queue).await? {
                None => Ok(()), // deleted by a retry meanwhile
                Some((_, now)) if now != revision => Err(api::error(
                    ErrorCode::Conflict,
                    format!("job queue {queue:?} was changed while being deleted (revision {now}): it exists anew as changed, empty (its finished jobs were archived)"),
                )),
                Some(_) => Err(transient("the configuration store did not delete it", e)),
            },
        }
    }

    /// A queue's configuration, for a caller that may read it.
    pub(crate) async fn readable(
        &self,
        caller: &Caller,
        queue: &str,
    ) -> Result<(QueueDocument, u64)> {
        authorize(caller, Action::ReadQueue { queue }).map_err(denied)?;
        self.existing(queue).await
    }

    /// The queues the caller may read.
    pub(crate) async fn queue_names(&self, caller: &Caller) -> Result<JobQueueNames> {
        let mut keys = self
            .config
            .keys()
            .await
            .map_err(|e| transient("configuration store unavailable", e))?;
        let mut names = Vec::new();
        while let Some(k) = keys.next().await {
            if let Some(name) = k.ok().as_deref().and_then(|k| k.strip_prefix("queue.")) {
                if authorize(caller, Action::ReadQueue { queue: name }).is_ok() {
                    names.push(name.to_string());
                }
            }
        }
        names.sort();
        Ok(JobQueueNames { job_queues: names })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_keeps_what_it_does_not_name_and_null_removes_a_budget() {
        let mut share: QuotaShare = serde_json::from_str(
            r#"{"quotaShareName":"QS1","capacityLimits":[{"capacityUnit":"t","maxCapacity":1}],
               "resourceSharingConfiguration":{"strategy":"LEND_AND_BORROW"},"workloadClasses":[{"name":"a","priorityBand":{"min":0,"max":9}}],
               "borrowBudget":{"instanceHours":5,"windowHours":24},"shareGroup":"dept"}"#,
        )
        .expect("a share");
        let update: QuotaShare = serde_json::from_str(
            r#"{"quotaShareName":"QS1","state":"DISABLED","fairShareWeight":3,"onBudgetExhausted":"CHECKPOINT_AND_STOP"}"#,
        )
        .expect("an update");
        share = merge_share(&share, &SharePatch::from_share(update)).expect("merged");
        assert_eq!(share.fair_share_weight, Some(3));
        assert_eq!(share.state.as_deref(), Some("DISABLED"));
        assert_eq!(
            share.capacity_limits.as_ref().map(Vec::len),
            Some(1),
            "kept"
        );
        assert_eq!(share.quota_share_name, "QS1");
        assert_eq!(
            share.on_budget_exhausted.as_deref(),
            Some("CHECKPOINT_AND_STOP")
        );
        assert!(share.workload_classes.is_some(), "kept");
        assert!(matches!(share.borrow_budget, Some(Some(_))), "kept");
        assert_eq!(share.share_group, Some(Some("dept".into())));
        let remove: QuotaShare = serde_json::from_str(
            r#"{"quotaShareName":"QS1","borrowBudget":null,"shareGroup":null}"#,
        )
        .expect("null");
        share = merge_share(&share, &SharePatch::from_share(remove)).expect("merged");
        assert_eq!(share.borrow_budget, None);
        assert_eq!(share.on_budget_exhausted, None, "went with the budget");
        assert_eq!(share.share_group, None);
        let stored = serde_json::to_value(&share).expect("json");
        assert!(stored.get("borrowBudget").is_none(), "{stored}");
        assert!(stored.get("shareGroup").is_none(), "{stored}");
        // What is stored converts: no onBudgetExhausted without a budget.
        let mut problems = Vec::new();
        let core = qm_wire::to_core::share(&share, "quotaShares[0]", &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(core.group, None);
        let problems = qm_core::validate::share_problems("quotaShares[0]", &core);
        assert!(problems.is_empty(), "{problems:?}");
    }
}
