//! Job queues.

use qm_wire::messages::{self as wire, Caller};
use qm_wire::subjects::Operation;
use qm_wire::system::QueueDocument;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::api::AwsError;
use crate::arn::Resource;
use crate::store::{self, EnvironmentRecord, PolicyRecord, QueueRecord};
use crate::Gateway;

use super::requests::{
    api_failed, check_tags, is_not_found, page, page_size, range, state_ok, store_failed, Answer,
    DeleteQueueIn, DescribeQueuesIn, JobQueueIn, JOB_TYPE,
};

impl Gateway {
    pub(super) async fn put_queue(&self, caller: &Caller, q: JobQueueIn, create: bool) -> Answer {
        let name = if create {
            let n = q.job_queue_name.clone().unwrap_or_default();
            qm_wire::subjects::token(&n).map_err(|e| self.bad(format!("jobQueueName: {e}")))?;
            n
        } else {
            self.arns
                .queue_name("jobQueue", q.job_queue.as_deref().unwrap_or_default())
                .map_err(|e| self.bad(e))?
        };
        // Only who may change the queue's configuration (admins) may: the
        // gateway's own fields (priority, scheduling policy) never reach
        // admission when nothing else changes, so it checks here itself.
        qm_tenancy::authorize(caller, qm_tenancy::Action::ChangeConfig { queue: &name }).map_err(
            |e| AwsError {
                status: 403,
                code: "AccessDeniedException",
                message: e.0,
            },
        )?;
        state_ok("state", &q.state)?;
        if !q.compute_environment_order.is_empty() {
            return Err(self.bad(
                "computeEnvironmentOrder: compute environments are not supported; give serviceEnvironmentOrder".into(),
            ));
        }
        if !q.job_state_time_limit_actions.is_empty() {
            return Err(self.bad("jobStateTimeLimitActions: is not supported".into()));
        }
        if q.job_queue_type.as_deref().is_some_and(|t| t != JOB_TYPE) {
            return Err(self.bad(format!(
                "jobQueueType: {:?} is not supported (only {JOB_TYPE})",
                q.job_queue_type.clone().unwrap_or_default()
            )));
        }
        if let Some(p) = q.priority {
            range("priority", p, 0, 1000)?;
        } else if create {
            return Err(self.bad("priority: is required".into()));
        }
        if let Some(arn) = &q.scheduling_policy_arn {
            self.check_scheduling_policy(arn).await?;
        }
        let environment = self.queue_environment(&q).await?;
        if let Some(t) = &q.tags {
            check_tags(t)?;
        }
        let key = store::queue_key(&name);
        // An update proves the queue exists (and reads its environment).
        let stored: Option<wire::JobQueue> = if create {
            None
        } else {
            let doc: QueueDocument = self
                .call(
                    caller,
                    Operation::DescribeJobQueue,
                    &wire::QueueRef {
                        job_queue: name.clone(),
                    },
                )
                .await?;
            Some(doc.job_queue)
        };
        // What admission holds (state, capacity limits, environment,
        // priority) is sent only when this request gives it, and only those
        // fields: an update is merged there into what is stored when it
        // lands, so a concurrent change of another field is kept.
        let mut fields = serde_json::Map::new();
        fields.insert("jobQueueName".into(), json!(name));
        if let Some(s) = &q.state {
            fields.insert("state".into(), json!(s));
        }
        if let Some(env) = &environment {
            // The queue draws on the environment's executors (those that
            // joined it by name), at most its capacityLimits.
            let limits = match env {
                Some((n, e)) => self.queue_limits(n, &e.capacity_limits)?,
                None => Vec::new(),
            };
            fields.insert("capacityLimits".into(), json!(limits));
            let wanted = env.as_ref().map(|(n, _)| n.clone());
            // A queue this gateway made before environments were scheduled
            // recorded its environment only here; naming it again changes
            // nothing (a queue's environment cannot change).
            let recorded_only = wanted.is_some()
                && stored
                    .as_ref()
                    .is_some_and(|s| s.service_environment.is_none())
                && {
                    let record: Option<QueueRecord> =
                        self.store.config.get(&key).await.map_err(store_failed)?;
                    record.and_then(|r| r.service_environment) == wanted
                };
            if !recorded_only {
                fields.insert("serviceEnvironment".into(), json!(wanted));
            }
        }
        if let Some(p) = q.priority {
            // Checked 0-1000 above.
            let p = u32::try_from(p)
                .map_err(|_| self.bad(format!("priority: {p} is not 0 to 1000")))?;
            fields.insert("priority".into(), json!(p));
        }
        if create || fields.len() > 1 {
            let op = if create {
                Operation::CreateJobQueue
            } else {
                Operation::UpdateJobQueue
            };
            let _: Value = self.call(caller, op, &Value::Object(fields)).await?;
        }
        if create {
            // Nothing of a queue once deleted under this name (outside the
            // gateway) comes back: its shares' records go.
            self.forget_queue(&name).await?;
        }
        // Only the fields this request gives change, on the record as
        // stored (under its revision: a concurrent update is never lost).
        self.store
            .config
            .update(&key, |record: Option<QueueRecord>| {
                // A queue made anew (after one of its name was deleted
                // elsewhere) keeps nothing of the old one's record.
                let mut record = if create {
                    QueueRecord::default()
                } else {
                    record.unwrap_or_default()
                };
                if let Some(env) = &environment {
                    record.service_environment = env.as_ref().map(|(n, _)| n.clone());
                }
                if let Some(p) = q.priority {
                    record.priority = p;
                }
                if q.scheduling_policy_arn.is_some() {
                    record.scheduling_policy_arn = q.scheduling_policy_arn.clone();
                }
                if create {
                    record.tags = q.tags.clone().unwrap_or_default();
                }
                Ok::<_, AwsError>(record)
            })
            .await?;
        Ok(json!({
            "jobQueueName": name,
            "jobQueueArn": self.arns.queue(&name),
        }))
    }

    /// Refuses a scheduling policy ARN that names no stored policy.
    async fn check_scheduling_policy(&self, arn: &str) -> Result<(), AwsError> {
        let policy = self
            .arns
            .named("schedulingPolicyArn", arn, true)
            .map_err(|e| self.bad(e))?;
        let key = format!("{}{policy}", store::POLICY_PREFIX);
        if self
            .store
            .config
            .get::<PolicyRecord>(&key)
            .await
            .map_err(store_failed)?
            .is_none()
        {
            return Err(self.bad(format!(
                "schedulingPolicyArn: no scheduling policy {policy:?}"
            )));
        }
        Ok(())
    }

    /// The queue's service environment as the request gives it: None when
    /// not given, Some(None) when given empty, else its name and record.
    async fn queue_environment(
        &self,
        q: &JobQueueIn,
    ) -> Result<Option<Option<(String, EnvironmentRecord)>>, AwsError> {
        Ok(match &q.service_environment_order {
            None => None,
            Some(order) if order.len() > 1 => {
                return Err(self.bad(
                    "serviceEnvironmentOrder: a job queue draws on one service environment here"
                        .into(),
                ))
            }
            Some(order) => match order.first() {
                None => Some(None),
                Some(o) => {
                    let _ = o.order;
                    let env = self
                        .arns
                        .named(
                            "serviceEnvironmentOrder[0].serviceEnvironment",
                            &o.service_environment,
                            false,
                        )
                        .map_err(|e| self.bad(e))?;
                    let key = format!("{}{env}", store::ENVIRONMENT_PREFIX);
                    let record: EnvironmentRecord = self
                        .store
                        .config
                        .get(&key)
                        .await
                        .map_err(store_failed)?
                        .ok_or_else(|| {
                            self.bad(format!(
                                "serviceEnvironmentOrder[0].serviceEnvironment: no service environment {env:?}"
                            ))
                        })?;
                    Some(Some((env, record)))
                }
            },
        })
    }

    /// `DeleteJobQueue`: a DISABLED queue whose jobs have all finished
    /// (admission and the scheduler decide; the error names what is left),
    /// then the gateway's own records of it and its shares. While a large
    /// queue's finished jobs are archived, it asks again for a while.
    pub(super) async fn delete_queue(&self, caller: &Caller, d: DeleteQueueIn) -> Answer {
        let name = self
            .arns
            .queue_name("jobQueue", d.job_queue.as_deref().unwrap_or_default())
            .map_err(|e| self.bad(e))?;
        let request = wire::QueueRef {
            job_queue: name.clone(),
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(25);
        loop {
            match self
                .api(caller)
                .call::<_, Value>(Operation::DeleteJobQueue, &request)
                .await
            {
                Ok(_) => break,
                Err(e)
                    if e.code() == Some(qm_wire::messages::ErrorCode::Transient)
                        && std::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                Err(e) if is_not_found(&e) => {
                    // Deleted already (elsewhere, or this request's answer
                    // was lost before its records went): they go now.
                    self.forget_queue(&name).await?;
                    return Err(api_failed(e));
                }
                Err(e) => return Err(api_failed(e)),
            }
        }
        self.forget_queue(&name).await?;
        Ok(json!({}))
    }

    /// The gateway's records of a deleted queue and its shares.
    pub(super) async fn forget_queue(&self, name: &str) -> Result<(), AwsError> {
        let config = &self.store.config;
        for share in config
            .names(&format!("share.{name}."))
            .await
            .map_err(store_failed)?
        {
            config
                .delete(&store::share_key(name, &share))
                .await
                .map_err(store_failed)?;
        }
        config
            .delete(&store::queue_key(name))
            .await
            .map_err(store_failed)
    }

    pub(super) async fn describe_queues(&self, caller: &Caller, d: DescribeQueuesIn) -> Answer {
        let names: Vec<String> = if d.job_queues.is_empty() {
            #[derive(Deserialize)]
            #[serde(rename_all = "camelCase")]
            struct Names {
                job_queues: Vec<String>,
            }
            let all: Names = self
                .call(caller, Operation::ListJobQueues, &json!({}))
                .await?;
            all.job_queues
        } else {
            d.job_queues
                .iter()
                .map(|q| self.arns.queue_name("jobQueues", q))
                .collect::<Result<_, _>>()
                .map_err(|e| self.bad(e))?
        };
        let (names, next) = page(&names, page_size(d.max_results)?, d.next_token.as_deref())?;
        let mut out = Vec::new();
        for name in names {
            let doc: QueueDocument = match self
                .api(caller)
                .call(
                    Operation::DescribeJobQueue,
                    &wire::QueueRef {
                        job_queue: name.clone(),
                    },
                )
                .await
            {
                Ok(d) => d,
                // AWS leaves out the queues that do not exist.
                Err(e) if is_not_found(&e) => continue,
                Err(e) => return Err(api_failed(e)),
            };
            let record: QueueRecord = self
                .store
                .config
                .get(&store::queue_key(&name))
                .await
                .map_err(store_failed)?
                .unwrap_or_default();
            let mut v = json!({
                "jobQueueName": name,
                "jobQueueArn": self.arns.queue(&name),
                "state": doc.job_queue.state.clone().unwrap_or_else(|| "ENABLED".into()),
                "status": "VALID",
                "priority": doc.job_queue.priority.map_or(record.priority, i64::from),
                "computeEnvironmentOrder": [],
                "jobQueueType": JOB_TYPE,
                "tags": record.tags,
                "jobStateTimeLimitActions": [],
            });
            if let Some(p) = &record.scheduling_policy_arn {
                v["schedulingPolicyArn"] = json!(p);
            }
            // The environment it draws on, as admission holds it (a queue
            // the gateway made before environments were scheduled kept one
            // only in its own record: it runs on the executors named for it,
            // and says so by naming none).
            if let Some(e) = &doc.job_queue.service_environment {
                v["serviceEnvironmentOrder"] = json!([{
                    "order": 1,
                    "serviceEnvironment": self.arns.of(&Resource::ServiceEnvironment(e.clone())),
                }]);
            }
            out.push(v);
        }
        let mut v = json!({ "jobQueues": out });
        if let Some(n) = next {
            v["nextToken"] = json!(n);
        }
        Ok(v)
    }
}
