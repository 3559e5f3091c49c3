//! Service jobs: submit, describe, list, update and terminate.

use qm_wire::messages::{
    self as wire, Caller, ListServiceJobs, ListServiceJobsResponse, ServiceJob, TimeoutConfig,
};
use qm_wire::subjects::Operation;
use serde_json::{json, Value};

use crate::api::AwsError;
use crate::store::{self, JobRecord, QueueRecord};
use crate::Gateway;

use super::requests::{
    check_tags, is_admin, is_not_found, page_size, range, status_ok, store_failed, Answer, JobIdIn,
    ListJobsIn, ListToken, SubmitIn, TerminateManyIn, UpdateJobIn, JOB_TYPE, PAGE,
};

/// The tag that names a job's workload class through the AWS API.
pub(crate) const WORKLOAD_CLASS_TAG: &str = "qm:workloadClass";

impl Gateway {
    pub(super) async fn submit(&self, caller: &Caller, s: SubmitIn) -> Answer {
        if s.service_job_type != JOB_TYPE {
            return Err(self.bad(format!(
                "serviceJobType: {:?} is not supported (only {JOB_TYPE})",
                s.service_job_type
            )));
        }
        if s.share_identifier.is_some() {
            return Err(self.bad(
                "shareIdentifier: fair-share scheduling is not supported; give quotaShareName"
                    .into(),
            ));
        }
        let queue = self
            .arns
            .queue_name("jobQueue", &s.job_queue)
            .map_err(|e| self.bad(e))?;
        let priority = match s.scheduling_priority {
            Some(p) => Some(range("schedulingPriority", p, 0, 9999)? as u32),
            None => None,
        };
        let t = crate::payload::parse(
            &s.service_request_payload,
            &self.settings.host_command_images,
        )
        .map_err(|e| self.bad(e))?;
        let mut tags = t.tags.clone();
        tags.extend(s.tags.clone().unwrap_or_default());
        check_tags(&tags)?;
        let timeout = match (s.timeout_config.clone(), t.max_runtime_seconds) {
            (Some(a), Some(b)) => Some(TimeoutConfig {
                attempt_duration_seconds: a.attempt_duration_seconds.min(b),
            }),
            (a, b) => a.or(b.map(|b| TimeoutConfig {
                attempt_duration_seconds: b,
            })),
        };
        let job = wire::SubmitServiceJob {
            job_name: s.job_name.clone(),
            job_queue: queue,
            quota_share_name: s.quota_share_name.clone(),
            instance_type: t.instance_type,
            instance_count: Some(t.instance_count),
            scheduling_priority: priority,
            preemption_configuration: s.preemption_configuration.clone(),
            retry_strategy: s.retry_strategy.clone(),
            timeout_config: timeout,
            termination_grace_period_seconds: None,
            checkpoint_config: t.checkpoint,
            command: t.command,
            container_image: t.container_image,
            output_data_config: t
                .output_path
                .map(|p| wire::OutputDataConfig { s3_output_path: p }),
            input_data_config: t.channels,
            environment: t.environment,
            // AWS has no field for a workload class; boto3 sends only the
            // fields its model knows, so the class rides on a tag.
            workload_class: tags.get(WORKLOAD_CLASS_TAG).cloned(),
            // MaxRuntimeInSeconds (the timeout) is the expected run a
            // borrowing budget holds back.
            estimated_runtime_seconds: None,
            tags: tags.clone(),
            client_token: s.client_token.clone(),
        };
        let done: wire::SubmitServiceJobResponse =
            self.call(caller, Operation::SubmitServiceJob, &job).await?;
        let mut request = json!({
            "jobName": s.job_name,
            "jobQueue": s.job_queue,
            "serviceRequestPayload": s.service_request_payload,
            "serviceJobType": s.service_job_type,
        });
        if let Some(o) = request.as_object_mut() {
            let mut add = |k: &str, v: Option<Value>| {
                if let Some(v) = v {
                    o.insert(k.into(), v);
                }
            };
            add("retryStrategy", s.retry_strategy.map(|r| json!(r)));
            add("timeoutConfig", s.timeout_config.map(|r| json!(r)));
            add(
                "preemptionConfiguration",
                s.preemption_configuration.map(|r| json!(r)),
            );
        }
        // The job is stored; a record that cannot be is only a loss of
        // what DescribeServiceJob shows, so the submit still succeeds.
        let record = JobRecord { request, tags };
        if let Err(e) = self
            .store
            .jobs
            .put(&store::job_key(&done.job_id), &record)
            .await
        {
            tracing::warn!(job = %done.job_id, error = %e, "the job's AWS request was not recorded");
        }
        Ok(json!({
            "jobArn": self.arns.job(&done.job_id),
            "jobName": done.job_name,
            "jobId": done.job_id,
        }))
    }

    /// `TerminateServiceJobs`: up to 50, each answered on its own.
    pub(super) async fn terminate_jobs(&self, caller: &Caller, t: TerminateManyIn) -> Answer {
        if t.jobs.is_empty() || t.jobs.len() > 50 {
            return Err(self.bad(format!("jobs: {} job ids; give 1 to 50", t.jobs.len())));
        }
        let mut successful = Vec::new();
        let mut errors = Vec::new();
        for job in t.jobs {
            let r: Result<Value, AwsError> = self
                .call(
                    caller,
                    Operation::TerminateServiceJob,
                    &wire::TerminateServiceJob {
                        job_id: job.clone(),
                        reason: t.reason.clone(),
                    },
                )
                .await;
            match r {
                Ok(_) => successful.push(job),
                Err(e) => errors.push(json!({"job": job, "code": e.code, "message": e.message})),
            }
        }
        Ok(json!({ "successful": successful, "errors": errors }))
    }

    /// Deletes a scheduling policy (`policy`) or a service environment: an
    /// admin's, and only when no job queue uses it (an environment must be
    /// DISABLED first, as in AWS).
    pub(super) async fn delete_named(&self, caller: &Caller, given: &str, policy: bool) -> Answer {
        is_admin(caller)?;
        let field = if policy { "arn" } else { "serviceEnvironment" };
        let name = self
            .arns
            .named(field, given, policy)
            .map_err(|e| self.bad(e))?;
        let prefix = if policy {
            store::POLICY_PREFIX
        } else {
            store::ENVIRONMENT_PREFIX
        };
        let key = format!("{prefix}{name}");
        let Some(record) = self
            .store
            .config
            .get::<Value>(&key)
            .await
            .map_err(store_failed)?
        else {
            return Err(self.bad(format!("{field}: no such resource {name:?}")));
        };
        if !policy && record["state"] != "DISABLED" {
            return Err(self.bad(format!(
                "service environment {name:?} is ENABLED: disable it with UpdateServiceEnvironment first"
            )));
        }
        for (queue, q) in self.queue_records().await? {
            let uses = if policy {
                q.scheduling_policy_arn
                    .as_deref()
                    .and_then(|a| self.arns.named("arn", a, true).ok())
                    .as_deref()
                    == Some(name.as_str())
            } else {
                q.service_environment.as_deref() == Some(name.as_str())
            };
            // A queue deleted other than through the gateway (`qm queue
            // delete`) left its record: it uses nothing.
            let gone = uses
                && self
                    .api(caller)
                    .call::<_, Value>(
                        Operation::DescribeJobQueue,
                        &wire::QueueRef {
                            job_queue: queue.clone(),
                        },
                    )
                    .await
                    .is_err_and(|e| is_not_found(&e));
            if gone {
                self.forget_queue(&queue).await?;
            } else if uses {
                return Err(self.bad(format!(
                    "job queue {queue:?} uses {name:?}; update the queue first"
                )));
            }
        }
        self.store.config.delete(&key).await.map_err(store_failed)?;
        Ok(json!({}))
    }

    /// Every job queue's AWS-only record.
    pub(super) async fn queue_records(&self) -> Result<Vec<(String, QueueRecord)>, AwsError> {
        let mut out = Vec::new();
        for queue in self
            .store
            .config
            .names("queue.")
            .await
            .map_err(store_failed)?
        {
            let record: Option<QueueRecord> = self
                .store
                .config
                .get(&store::queue_key(&queue))
                .await
                .map_err(store_failed)?;
            if let Some(r) = record {
                out.push((queue, r));
            }
        }
        Ok(out)
    }

    pub(super) async fn job(&self, caller: &Caller, id: &str) -> Result<ServiceJob, AwsError> {
        self.call(
            caller,
            Operation::DescribeServiceJob,
            &wire::JobRef { job_id: id.into() },
        )
        .await
    }

    /// A job as `DescribeServiceJob` (`full`) or a `ListServiceJobs`
    /// summary shows it.
    fn job_view(&self, j: &ServiceJob, record: Option<&JobRecord>, full: bool) -> Value {
        let attempt = |a: &wire::AttemptDetail| {
            let mut v = json!({
                "serviceResourceId": {
                    "name": "TrainingJobArn",
                    "value": self.arns.training_job(&j.job_id, a.attempt),
                },
            });
            if let Some(o) = v.as_object_mut() {
                if let Some(t) = a.started_at {
                    o.insert("startedAt".into(), json!(t));
                }
                if let Some(t) = a.stopped_at {
                    o.insert("stoppedAt".into(), json!(t));
                }
                if let Some(r) = &a.outcome {
                    o.insert("statusReason".into(), json!(r));
                }
            }
            v
        };
        let finished = matches!(j.status.as_str(), "SUCCEEDED" | "FAILED");
        let mut v = json!({
            "jobArn": self.arns.job(&j.job_id),
            "jobId": j.job_id,
            "jobName": j.job_name,
            "serviceJobType": JOB_TYPE,
            "quotaShareName": j.quota_share_name,
            "status": j.status,
            "statusReason": j.status_reason,
            "createdAt": j.created_at,
            "isTerminated": j.status_reason.starts_with("CANCELLED"),
            "capacityUsage": [{"capacityUnit": j.instance_type, "quantity": f64::from(j.instance_count)}],
        });
        let Some(o) = v.as_object_mut() else {
            return v;
        };
        if let Some(last) = j.attempts.last() {
            o.insert(
                "latestAttempt".into(),
                json!({"serviceResourceId": attempt(last)["serviceResourceId"]}),
            );
            if finished {
                if let Some(t) = last.stopped_at {
                    o.insert("stoppedAt".into(), json!(t));
                }
            }
        }
        if let Some(t) = j.attempts.iter().find_map(|a| a.started_at) {
            o.insert("startedAt".into(), json!(t));
        }
        if !full {
            return v;
        }
        o.insert("jobQueue".into(), json!(self.arns.queue(&j.job_queue)));
        o.insert("schedulingPriority".into(), json!(j.scheduling_priority));
        o.insert(
            "attempts".into(),
            Value::Array(j.attempts.iter().map(attempt).collect()),
        );
        if let Some(p) = &j.preemption_summary {
            o.insert(
                "preemptionSummary".into(),
                json!({
                    "preemptedAttemptCount": p.preempted_attempt_count,
                    "recentPreemptedAttempts": p.recent_preempted_attempts.iter().map(attempt).collect::<Vec<_>>(),
                }),
            );
        }
        let tags = record.map_or_else(|| j.tags.clone(), |r| r.tags.clone());
        o.insert("tags".into(), json!(tags));
        if let Some(Value::Object(req)) = record.map(|r| &r.request) {
            for k in [
                "serviceRequestPayload",
                "retryStrategy",
                "timeoutConfig",
                "preemptionConfiguration",
            ] {
                if let Some(x) = req.get(k) {
                    o.insert(k.into(), x.clone());
                }
            }
        }
        v
    }

    pub(super) async fn describe_job(&self, caller: &Caller, r: JobIdIn) -> Answer {
        let j = self.job(caller, &r.job_id).await?;
        let record: Option<JobRecord> = self
            .store
            .jobs
            .get(&store::job_key(&j.job_id))
            .await
            .map_err(store_failed)?;
        Ok(self.job_view(&j, record.as_ref(), true))
    }

    pub(super) async fn update_job(&self, caller: &Caller, u: UpdateJobIn) -> Answer {
        let priority = range("schedulingPriority", u.scheduling_priority, 0, 9999)? as u32;
        let _: Value = self
            .call(
                caller,
                Operation::UpdateServiceJob,
                &wire::UpdateServiceJob {
                    job_id: u.job_id.clone(),
                    scheduling_priority: priority,
                },
            )
            .await?;
        let j = self.job(caller, &u.job_id).await?;
        Ok(json!({
            "jobArn": self.arns.job(&j.job_id),
            "jobName": j.job_name,
            "jobId": j.job_id,
        }))
    }

    /// `ListServiceJobs`: AWS's defaults (RUNNING when no status and no
    /// filter), its filters (one at a time; a share filter may go with a
    /// status), and pages of at most 100.
    pub(super) async fn list_jobs(&self, caller: &Caller, l: ListJobsIn) -> Answer {
        let queue = self
            .arns
            .queue_name("jobQueue", l.job_queue.as_deref().unwrap_or_default())
            .map_err(|e| self.bad(format!("{e} (jobQueue is required)")))?;
        let max = page_size(l.max_results)?;
        if l.filters.len() > 1 {
            return Err(self.bad("filters: only one filter can be used at a time".into()));
        }
        if let Some(s) = &l.job_status {
            status_ok(s)?;
        }
        let filter = l.filters.first();
        let mut status = l.job_status.clone();
        let mut share = None;
        let mut keep: Box<dyn Fn(&ServiceJob) -> bool + Send> = Box::new(|_| true);
        match filter {
            None => {
                status.get_or_insert_with(|| "RUNNING".into());
            }
            Some(f) => {
                let [value] = &f.values[..] else {
                    return Err(self.bad(format!("filters: {:?} takes exactly one value", f.name)));
                };
                match f.name.as_str() {
                    "QUOTA_SHARE_NAME" => share = Some(value.clone()),
                    "SHARE_IDENTIFIER" => {
                        return Err(self.bad(
                            "filters: SHARE_IDENTIFIER is fair-share scheduling, which is not supported; use QUOTA_SHARE_NAME".into(),
                        ))
                    }
                    "JOB_NAME" => {
                        status = None;
                        let want = value.to_lowercase();
                        keep = match want.strip_suffix('*') {
                            Some(prefix) => {
                                let prefix = prefix.to_string();
                                Box::new(move |j| j.job_name.to_lowercase().starts_with(&prefix))
                            }
                            None => Box::new(move |j| j.job_name.to_lowercase() == want),
                        };
                    }
                    "BEFORE_CREATED_AT" | "AFTER_CREATED_AT" => {
                        status = None;
                        let at: u64 = value.parse().map_err(|_| {
                            self.bad(format!(
                                "filters: {}: {value:?} is not milliseconds since the epoch",
                                f.name
                            ))
                        })?;
                        keep = if f.name == "BEFORE_CREATED_AT" {
                            Box::new(move |j| j.created_at < at)
                        } else {
                            Box::new(move |j| j.created_at > at)
                        };
                    }
                    other => {
                        return Err(self.bad(format!(
                            "filters: {other:?} is not JOB_NAME, BEFORE_CREATED_AT, AFTER_CREATED_AT or QUOTA_SHARE_NAME"
                        )))
                    }
                }
            }
        }
        let mut token: ListToken = match &l.next_token {
            None => ListToken { t: None, s: 0 },
            Some(t) => {
                serde_json::from_slice(&hex::decode(t).unwrap_or_default()).map_err(|_| {
                    self.bad(format!("nextToken {t:?} is not one this endpoint returned"))
                })?
            }
        };
        let mut out = Vec::new();
        loop {
            let request = ListServiceJobs {
                job_queue: queue.clone(),
                job_status: status.clone(),
                quota_share_name: share.clone(),
                max_results: Some(PAGE as u32),
                next_token: token.t.clone(),
            };
            let got: ListServiceJobsResponse = self
                .call(caller, Operation::ListServiceJobs, &request)
                .await?;
            let mut served = token.s;
            for j in got.job_summary_list.iter().skip(token.s) {
                served += 1;
                if keep(j) {
                    out.push(self.job_view(j, None, false));
                    if out.len() == max {
                        break;
                    }
                }
            }
            let page_done = served >= got.job_summary_list.len();
            if out.len() == max || got.next_token.is_none() {
                let next = match (page_done, got.next_token) {
                    (false, _) => Some(ListToken {
                        t: token.t,
                        s: served,
                    }),
                    (true, Some(t)) => Some(ListToken { t: Some(t), s: 0 }),
                    (true, None) => None,
                };
                let mut v = json!({ "jobSummaryList": out });
                if let Some(n) = next {
                    let raw = serde_json::to_vec(&n).unwrap_or_default();
                    v["nextToken"] = json!(hex::encode(&raw));
                }
                return Ok(v);
            }
            token = ListToken {
                t: got.next_token,
                s: 0,
            };
        }
    }
}
