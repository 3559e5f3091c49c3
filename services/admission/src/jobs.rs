//! Job requests: submits (validated with the core's own rules, stored in
//! the log before the reply, idempotent by client token), executor
//! registrations, and the reads, priority updates and terminates relayed to
//! the scheduler leader with the caller.

use qm_core::{Cluster, Time};
use qm_service::api::{self, decode, invalid, respond};
use qm_service::now_ms;
use qm_tenancy::{authorize, Action};
use qm_wire::messages::{
    ApiError, Caller, ErrorCode, GetServiceJobLogs, JobRef, RegisterExecutor, ServiceJob,
    SubmitServiceJob, SubmitServiceJobResponse,
};
use qm_wire::subjects::{self, Operation};
use qm_wire::system::{LogEntry, QueueDocument, SchedOperation, SchedRequest};
use qm_wire::to_core as convert;
use tracing::Instrument;

use crate::errors::{denied, token_field, transient, Result};
use crate::ids::{new_job_id, token_key};
use crate::Admission;

impl Admission {
    pub(crate) async fn submit(
        &self,
        caller: &Caller,
        job: SubmitServiceJob,
    ) -> Result<SubmitServiceJobResponse> {
        let share = job.quota_share_name.clone().unwrap_or_default();
        self.validate_submit(caller, &job).await?;
        let mut entry = LogEntry::Submit {
            job_id: new_job_id(),
            job: job.clone(),
            principal: Some(caller.principal.clone()),
        };
        // When it was first submitted (a retry with the same token finds
        // the first time).
        let mut submitted_at = qm_service::now_ms();
        if let Some(token) = &job.client_token {
            if token.is_empty() || token.len() > 64 {
                return Err(invalid("clientToken: must be 1-64 characters", Vec::new()));
            }
            let key = token_key(&job.job_queue, token);
            let body = serde_json::to_vec(&entry)
                .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
            if self.tokens.create(&key, body.into()).await.is_err() {
                // Used before (or a concurrent retry won): the same job.
                let stored = self
                    .tokens
                    .entry(&key)
                    .await
                    .map_err(|e| transient("token store unavailable", e))?
                    .ok_or_else(|| transient("token store", "token vanished"))?;
                entry = serde_json::from_slice(&stored.value)
                    .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
                submitted_at = (stored.created.unix_timestamp_nanos() / 1_000_000).max(0) as u64;
            }
        }
        let LogEntry::Submit { job_id, job, .. } = &entry else {
            return Err(api::error(
                ErrorCode::Internal,
                "token maps to a non-submit",
            ));
        };
        let current = tracing::Span::current();
        current.record("qm.job_id", job_id.as_str());
        current.record("qm.queue", job.job_queue.as_str());
        current.record("qm.share", share.as_str());
        // The log entry carries the append's span: the scheduler continues
        // the job's trace from it (after a failover too).
        // The job id as message id: a retried append (same token) is
        // stored once within the stream's window; the scheduler ignores a
        // known job id too.
        let started = std::time::Instant::now();
        self.append_submit(&job.job_queue, &entry, job_id).await?;
        self.metrics
            .append
            .with_label_values(&["submit"])
            .observe(started.elapsed().as_secs_f64());
        self.metrics
            .submitted
            .with_label_values(&[job.job_queue.as_str(), share.as_str()])
            .inc();
        Ok(SubmitServiceJobResponse {
            job_id: job_id.clone(),
            job_name: job.job_name.clone(),
            submitted_at: Some(submitted_at),
        })
    }

    /// Appends a submit or a drill to its queue's submit log and waits for
    /// the stream to store it; `id` is its message id (a retried append is
    /// stored once). The append's span goes with it: the scheduler
    /// continues the job's trace from it.
    pub(crate) async fn append_submit(
        &self,
        queue: &str,
        entry: &LogEntry,
        id: &str,
    ) -> Result<()> {
        let subject = subjects::log_submit(queue)
            .map_err(|e| invalid(format!("jobQueue: {e}"), Vec::new()))?;
        let body = serde_json::to_vec(entry)
            .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
        let append = qm_service::trace::client_span("qm.v1.log.submit.{queue}", &subject, false);
        append.record("qm.job_id", id);
        async {
            let mut h = qm_service::trace::headers();
            h.insert(async_nats::header::NATS_MESSAGE_ID, id);
            let ack = self
                .js
                .publish_with_headers(subject, h, body.into())
                .await
                .map_err(|e| transient("job log unavailable", e))?;
            ack.await
                .map_err(|e| transient("job log did not store the entry", e))
        }
        .instrument(append)
        .await?;
        Ok(())
    }

    /// Everything a submit checks before it is stored: the caller's right
    /// to submit to the share, the checkpoint location, and the job against
    /// the queue's configuration with the core's own rules. A dry run
    /// checks the same.
    pub(crate) async fn validate_submit(
        &self,
        caller: &Caller,
        job: &SubmitServiceJob,
    ) -> Result<()> {
        self.validate(caller, job, None).await
    }

    /// [`Admission::validate_submit`], or with `drill_seed` what the core
    /// asks of a resume drill of the job (`Cluster::start_drill`), which
    /// is a submit's rights and rules and more.
    pub(crate) async fn validate(
        &self,
        caller: &Caller,
        job: &SubmitServiceJob,
        drill_seed: Option<u64>,
    ) -> Result<()> {
        let share = job.quota_share_name.clone().unwrap_or_default();
        authorize(
            caller,
            Action::Submit {
                queue: &job.job_queue,
                share: &share,
            },
        )
        .map_err(denied)?;
        let (doc, revision) = self.existing(&job.job_queue).await?;
        self.check_s3_locations(&doc, job)?;
        check_image(&doc, job)?;
        let mut cluster = {
            let cached = self
                .scratch
                .lock()
                .map_err(|_| api::error(ErrorCode::Internal, "admission state is poisoned"))?;
            match cached.get(&job.job_queue) {
                Some((rev, c)) if *rev == revision => Some(c.clone()),
                _ => None,
            }
        };
        if cluster.is_none() {
            let config = convert::queue(&doc).map_err(|p| {
                invalid(
                    "the stored queue configuration is invalid",
                    api::problems(&p),
                )
            })?;
            let c = Cluster::new(config, &[]).map_err(|e| {
                invalid(
                    "the stored queue configuration is invalid",
                    api::problems(&e.0),
                )
            })?;
            if let Ok(mut cache) = self.scratch.lock() {
                cache.insert(job.job_queue.clone(), (revision, c.clone()));
            }
            cluster = Some(c);
        }
        let mut cluster = cluster.ok_or_else(|| api::error(ErrorCode::Internal, "no cluster"))?;
        let spec = convert::job_spec(job, &mut cluster)
            .map_err(|p| invalid("invalid job", api::problems(&p)))?;
        let checked = match drill_seed {
            None => cluster.submit(spec, Time(now_ms())).map(|_| ()),
            Some(seed) => cluster.start_drill(spec, seed, Time(now_ms())).map(|_| ()),
        };
        if let Err(e) = checked {
            let problems = match &e {
                qm_core::JobError::Invalid(p) => api::problems(p),
                _ => Vec::new(),
            };
            let what = if drill_seed.is_some() {
                "resume drill"
            } else {
                "job"
            };
            return Err(invalid(format!("{what} rejected: {e}"), problems));
        }
        Ok(())
    }

    /// Every S3 location a job names must lie where its share may use
    /// it (the checkpoint service checks again before it moves a byte):
    /// `checkpointConfig.s3Uri` and `outputDataConfig.s3OutputPath` where
    /// it may write (`checkpointS3Prefixes`), each `inputDataConfig[].s3Uri`
    /// where it may read (`inputS3Prefixes`); every problem at once.
    pub(crate) fn check_s3_locations(
        &self,
        doc: &QueueDocument,
        job: &SubmitServiceJob,
    ) -> Result<()> {
        let share_name = job.quota_share_name.as_deref().unwrap_or("");
        let share = doc
            .quota_shares
            .iter()
            .find(|s| s.quota_share_name == share_name);
        let writes = share.and_then(|s| s.checkpoint_s3_prefixes.as_deref());
        let reads = share.and_then(|s| s.input_s3_prefixes.as_deref());
        let bucket = Some(self.settings.checkpoint_bucket.as_str()).filter(|b| !b.is_empty());
        type Rule = fn(
            &str,
            Option<&[String]>,
            Option<&str>,
            &str,
            &str,
        ) -> std::result::Result<(), String>;
        let mut places: Vec<(String, &str, Option<&[String]>, Rule)> = Vec::new();
        if let Some(uri) = job
            .checkpoint_config
            .as_ref()
            .and_then(|c| c.s3_uri.as_deref())
        {
            places.push((
                "checkpointConfig.s3Uri".into(),
                uri,
                writes,
                qm_tenancy::checkpoint_uri_allowed,
            ));
        }
        if let Some(o) = &job.output_data_config {
            places.push((
                "outputDataConfig.s3OutputPath".into(),
                &o.s3_output_path,
                writes,
                qm_tenancy::checkpoint_uri_allowed,
            ));
        }
        for (i, c) in job.input_data_config.iter().enumerate() {
            places.push((
                format!("inputDataConfig[{i}].s3Uri"),
                &c.s3_uri,
                reads,
                qm_tenancy::input_uri_allowed,
            ));
        }
        let problems: Vec<qm_wire::messages::Problem> = places
            .into_iter()
            .filter_map(|(field, uri, allowed, rule)| {
                rule(uri, allowed, bucket, &job.job_queue, share_name)
                    .err()
                    .map(|message| qm_wire::messages::Problem { field, message })
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(invalid("invalid job", problems))
        }
    }

    pub(crate) async fn register(
        &self,
        principal: &str,
        r: RegisterExecutor,
    ) -> Result<serde_json::Value> {
        token_field("executorId", &r.executor_id)?;
        let tenancy = self.tenancy.get();
        tenancy
            .may_register(principal, &r.executor_id)
            .map_err(denied)?;
        if let Some(node) = &r.checkpoint_node {
            token_field("checkpointNode", node)?;
        }
        let node = r.checkpoint_node.as_deref().unwrap_or(&r.executor_id);
        tenancy
            .may_use_checkpoint_node(principal, node)
            .map_err(denied)?;
        // A queue it serves by name (which must exist), or a service
        // environment it joins (which may have no queue yet: queues attach
        // to it later).
        let env = r.service_environment.as_deref().unwrap_or_default();
        if let Some(problem) = qm_wire::messages::serving_problem(&r.job_queue, env) {
            return Err(invalid(problem, Vec::new()));
        }
        if !r.job_queue.is_empty() {
            self.existing(&r.job_queue).await?;
        }
        let mut problems = Vec::new();
        for (i, inst) in r.instances.iter().enumerate() {
            if inst.instance_type.is_empty() {
                problems.push(qm_wire::messages::Problem {
                    field: format!("instances[{i}].instanceType"),
                    message: "is required".into(),
                });
            }
            if !inst.gpus.is_empty() && inst.gpus.len() != inst.count as usize {
                problems.push(qm_wire::messages::Problem {
                    field: format!("instances[{i}].gpus"),
                    message: format!(
                        "lists {} instances' GPUs but count is {}",
                        inst.gpus.len(),
                        inst.count
                    ),
                });
            }
        }
        if !problems.is_empty() {
            return Err(invalid("invalid executor registration", problems));
        }
        let subject = subjects::log_register(&r.executor_id)
            .map_err(|e| invalid(format!("executorId: {e}"), Vec::new()))?;
        let payload = serde_json::to_vec(&LogEntry::Register(r))
            .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
        let ack = self
            .js
            .publish(subject, payload.into())
            .await
            .map_err(|e| transient("log unavailable", e))?;
        ack.await
            .map_err(|e| transient("log did not store the registration", e))?;
        Ok(serde_json::json!({}))
    }

    /// Relays an operation to the scheduler leader and returns its raw reply.
    pub(crate) async fn relay(
        &self,
        caller: &Caller,
        op: Operation,
        payload: &[u8],
    ) -> std::result::Result<bytes::Bytes, ApiError> {
        let operation = match op {
            Operation::DescribeServiceJob => SchedOperation::DescribeServiceJob(decode(payload)?),
            Operation::ListServiceJobs => SchedOperation::ListServiceJobs(decode(payload)?),
            Operation::GetJobQueueSnapshot => SchedOperation::GetJobQueueSnapshot(decode(payload)?),
            Operation::UpdateServiceJob => SchedOperation::UpdateServiceJob(decode(payload)?),
            Operation::TerminateServiceJob => SchedOperation::TerminateServiceJob(decode(payload)?),
            Operation::DryRunServiceJob => SchedOperation::DryRunServiceJob(decode(payload)?),
            Operation::ExplainServiceJob => SchedOperation::ExplainServiceJob(decode(payload)?),
            Operation::ListResumeDrills => SchedOperation::ListResumeDrills(decode(payload)?),
            Operation::GetPolicyStabilityRecord => {
                SchedOperation::GetPolicyStabilityRecord(decode(payload)?)
            }
            Operation::GetUsage => SchedOperation::GetUsage(decode(payload)?),
            Operation::GetReclaimExposure => SchedOperation::GetReclaimExposure(decode(payload)?),
            Operation::DryRunUpdateQuotaShare => SchedOperation::DryRunJobQueue(decode(payload)?),
            other => {
                return Err(api::error(
                    ErrorCode::Internal,
                    format!("{} is not an operation of the scheduler", other.name()),
                ))
            }
        };
        self.ask_scheduler(caller, operation).await
    }

    /// Sends `operation` to the scheduler leader; its raw reply.
    pub(crate) async fn ask_scheduler(
        &self,
        caller: &Caller,
        operation: SchedOperation,
    ) -> std::result::Result<bytes::Bytes, ApiError> {
        let request = SchedRequest {
            operation,
            caller: caller.clone(),
        };
        let payload = serde_json::to_vec(&request)
            .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
        let timeout = std::time::Duration::from_millis(self.settings.scheduler_timeout_ms);
        match tokio::time::timeout(
            timeout,
            self.client.request(subjects::SCHED_REQUEST, payload.into()),
        )
        .await
        {
            Ok(Ok(msg)) => Ok(msg.payload),
            Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                Err(api::error(
                    ErrorCode::Transient,
                    "no scheduler leader is running; try again",
                ))
            }
            Ok(Err(e)) => Err(transient("scheduler unreachable", e)),
            Err(_) => Err(api::error(
                ErrorCode::Transient,
                "the scheduler did not answer in time; try again",
            )),
        }
    }

    /// Relays a request to the scheduler and answers with its reply.
    pub(crate) async fn relay_reply(
        &self,
        caller: &Caller,
        op: Operation,
        msg: &async_nats::Message,
    ) {
        let c = &self.client;
        match self.relay(caller, op, &msg.payload).await {
            Ok(raw) => {
                if let Some(to) = &msg.reply {
                    let _ = c.publish(to.clone(), raw).await;
                }
            }
            Err(e) => respond::<()>(c, msg, &Err(e)).await,
        }
    }

    /// Relays a read of one job to the scheduler, which checks that the
    /// caller may read it.
    pub(crate) async fn describe_job(&self, caller: &Caller, job_id: &str) -> Result<ServiceJob> {
        let body = serde_json::to_vec(&JobRef {
            job_id: job_id.to_string(),
        })
        .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
        let raw = self
            .relay(caller, Operation::DescribeServiceJob, &body)
            .await?;
        match serde_json::from_slice::<qm_wire::messages::Reply<ServiceJob>>(&raw) {
            Ok(qm_wire::messages::Reply::Ok(job)) => Ok(job),
            Ok(qm_wire::messages::Reply::Error(e)) => Err(e),
            Err(e) => Err(api::error(
                ErrorCode::Internal,
                format!("unreadable scheduler reply: {e}"),
            )),
        }
    }

    /// An attempt's output, from the executor that ran it (rank 0's).
    pub(crate) async fn logs(
        &self,
        caller: &Caller,
        req: GetServiceJobLogs,
    ) -> Result<qm_wire::system::LogsResponse> {
        token_field("jobId", &req.job_id)?;
        let job = self.describe_job(caller, &req.job_id).await?;
        let attempt = match req.attempt {
            Some(n) => job.attempts.iter().find(|a| a.attempt == n),
            None => job.attempts.last(),
        }
        .ok_or_else(|| {
            api::error(
                ErrorCode::NotFound,
                match req.attempt {
                    Some(n) => format!("job {} has no attempt {n}", req.job_id),
                    None => format!("job {} has not started yet", req.job_id),
                },
            )
        })?;
        let executor = attempt.executor_id.clone().ok_or_else(|| {
            api::error(
                ErrorCode::NotFound,
                format!(
                    "attempt {} of job {} ran on no executor",
                    attempt.attempt, req.job_id
                ),
            )
        })?;
        let subject = subjects::executor_logs(&executor)
            .map_err(|e| api::error(ErrorCode::Internal, format!("executorId: {e}")))?;
        let body = serde_json::to_vec(&qm_wire::system::LogsRequest {
            job_id: req.job_id.clone(),
            attempt: attempt.attempt,
            tail_bytes: req.tail_bytes,
        })
        .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
        let client = qm_service::client::Client::new(self.client.clone(), "admission");
        client
            .request_raw(subject, body.into(), "executor")
            .await
            .map_err(|e| match e {
                qm_service::client::CallError::Api(e) => e,
                other => api::error(
                    ErrorCode::Transient,
                    format!("executor {executor} did not send the logs: {other}"),
                ),
            })
    }
}

/// A `containerImage` must be one the job's share may run (`imagePrefixes`).
fn check_image(doc: &QueueDocument, job: &SubmitServiceJob) -> Result<()> {
    let Some(image) = &job.container_image else {
        return Ok(());
    };
    let share = job.quota_share_name.as_deref().unwrap_or("");
    let allowed = doc
        .quota_shares
        .iter()
        .find(|s| s.quota_share_name == share)
        .and_then(|s| s.image_prefixes.as_deref());
    qm_tenancy::image_allowed(image, allowed, &job.job_queue, share).map_err(|e| {
        invalid(
            "invalid job",
            vec![qm_wire::messages::Problem {
                field: "containerImage".into(),
                message: e,
            }],
        )
    })
}
