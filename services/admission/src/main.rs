//! `qm-admission`: the front door. Answers every `qm.v1.api.*` subject:
//! validates submissions and configuration changes against the queue's
//! configuration (JetStream KV), stores them durably (the `QM_LOG` stream)
//! before replying, and relays job reads, priority updates and terminates
//! to the scheduler leader. Stateless: run as many as you like (queue group).
//!
//! Who asked is the principal in the request's subject
//! (`qm.v1.api.<principal>.<Operation>`): the NATS server lets only that
//! principal publish there. Every request is checked against the tenancy
//! file before anything is stored, and every accepted write is recorded in
//! the log with its principal (`qm audit`).

mod audit;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use qm_core::{Cluster, Time};
use qm_service::api::{self, decode, invalid, respond};
use qm_service::{convert, nats, now_ms, settings};
use qm_tenancy::{authorize, Action, Tenancy};
use qm_wire::messages::{
    ApiError, Caller, ErrorCode, GetServiceJobLogs, JobQueue, JobRef, ListServiceJobs, QueueRef,
    QuotaShare, RegisterExecutor, ServiceJob, ShareRef, SubmitServiceJob, SubmitServiceJobResponse,
};
use qm_wire::subjects::{self, Operation};
use qm_wire::system::{LogEntry, QueueDocument, SchedRequest};
use serde::{Deserialize, Serialize};

const USAGE: &str = "qm-admission [--config FILE]

Answers the Quartermaster API (qm.v1.api.<principal>.*), checking every
request against the tenancy file. Settings (file keys, or environment
variables):
  tenancy            QM_ADMISSION_TENANCY            required: the tenancy file (teams,
                                                     admins, readers, services)
  checkpointBucket   QM_ADMISSION_CHECKPOINT_BUCKET  the checkpoint services' bucket, to
                                                     check checkpointConfig.s3Uri at submit
  schedulerTimeoutMs QM_ADMISSION_SCHEDULER_TIMEOUT_MS  default 5000
  insecureAllowUnauthenticatedNats  QM_ADMISSION_INSECURE_ALLOW_UNAUTHENTICATED_NATS
                     default false: refuse to serve when the NATS server lets
                     anyone connect (then any client could claim any principal)
NATS connection (QM_NATS_<KEY> or QM_ADMISSION_NATS_<KEY>):
  natsUrl natsPrincipal natsNkeyFile natsCreds natsUser natsPassword
  natsCaFile natsCertFile natsKeyFile";

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    tenancy: String,
    checkpoint_bucket: String,
    scheduler_timeout_ms: u64,
    insecure_allow_unauthenticated_nats: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            tenancy: String::new(),
            checkpoint_bucket: String::new(),
            scheduler_timeout_ms: 5000,
            insecure_allow_unauthenticated_nats: false,
        }
    }
}

impl settings::Validate for Settings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.tenancy.is_empty() {
            p.push(
                "tenancy: is required (a tenancy file; `qm auth --help` shows the format)".into(),
            );
        }
        if self.scheduler_timeout_ms == 0 {
            p.push("schedulerTimeoutMs: must be >= 1".into());
        }
        p
    }
}

struct Admission {
    client: async_nats::Client,
    js: async_nats::jetstream::Context,
    log: async_nats::jetstream::stream::Stream,
    config: async_nats::jetstream::kv::Store,
    tokens: async_nats::jetstream::kv::Store,
    settings: Settings,
    tenancy: Tenancy,
    /// Per queue: the configuration revision and an empty cluster of it,
    /// cloned to validate each submit with the core's own rules.
    scratch: Mutex<HashMap<String, (u64, Cluster)>>,
}

type Result<T> = std::result::Result<T, ApiError>;

fn config_key(queue: &str) -> String {
    format!("queue.{queue}")
}

fn transient(what: &str, e: impl std::fmt::Display) -> ApiError {
    api::error(ErrorCode::Transient, format!("{what}: {e}; try again"))
}

fn token_field(field: &str, value: &str) -> Result<()> {
    subjects::token(value)
        .map(|_| ())
        .map_err(|e| invalid(format!("{field}: {e}"), Vec::new()))
}

fn denied(e: qm_tenancy::Denied) -> ApiError {
    api::error(ErrorCode::AccessDenied, e.0)
}

fn new_job_id() -> String {
    format!("j-{}", qm_service::random_hex())
}

/// A KV-safe key for a client token (any string) within a queue.
fn token_key(queue: &str, token: &str) -> String {
    // Two independent 64-bit FNV-1a hashes of the token, plus its length:
    // distinct tokens colliding is not a practical concern.
    let fnv = |seed: u64| {
        token.bytes().fold(seed, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    };
    format!(
        "{queue}.{:016x}{:016x}{:x}",
        fnv(0xcbf2_9ce4_8422_2325),
        fnv(0x6c62_272e_07bb_0142),
        token.len()
    )
}

impl Admission {
    async fn document(&self, queue: &str) -> Result<Option<(QueueDocument, u64)>> {
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

    async fn existing(&self, queue: &str) -> Result<(QueueDocument, u64)> {
        token_field("jobQueue", queue)?;
        self.document(queue).await?.ok_or_else(|| {
            api::error(
                ErrorCode::NotFound,
                format!("no job queue {queue:?} (create it with `qm apply -f`)"),
            )
        })
    }

    async fn submit(
        &self,
        caller: &Caller,
        job: SubmitServiceJob,
    ) -> Result<SubmitServiceJobResponse> {
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
        self.check_checkpoint_uri(&doc, &job)?;
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
        let spec = convert::job_spec(&job, &mut cluster)
            .map_err(|p| invalid("invalid job", api::problems(&p)))?;
        if let Err(e) = cluster.submit(spec, Time(now_ms())) {
            let problems = match &e {
                qm_core::JobError::Invalid(p) => api::problems(p),
                _ => Vec::new(),
            };
            return Err(invalid(format!("job rejected: {e}"), problems));
        }
        let mut entry = LogEntry::Submit {
            job_id: new_job_id(),
            job: job.clone(),
            principal: Some(caller.principal.clone()),
        };
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
                    .get(&key)
                    .await
                    .map_err(|e| transient("token store unavailable", e))?
                    .ok_or_else(|| transient("token store", "token vanished"))?;
                entry = serde_json::from_slice(&stored)
                    .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
            }
        }
        let LogEntry::Submit { job_id, job, .. } = &entry else {
            return Err(api::error(
                ErrorCode::Internal,
                "token maps to a non-submit",
            ));
        };
        let subject = subjects::log_submit(&job.job_queue)
            .map_err(|e| invalid(format!("jobQueue: {e}"), Vec::new()))?;
        let body = serde_json::to_vec(&entry)
            .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
        // The job id as message id: a retried append (same token) is stored once
        // within the stream's window; the scheduler ignores a known job id too.
        let ack = self
            .js
            .publish_with_headers(
                subject,
                {
                    let mut h = async_nats::HeaderMap::new();
                    h.insert("Nats-Msg-Id", job_id.as_str());
                    h
                },
                body.into(),
            )
            .await
            .map_err(|e| transient("job log unavailable", e))?;
        ack.await
            .map_err(|e| transient("job log did not store the job", e))?;
        Ok(SubmitServiceJobResponse {
            job_id: job_id.clone(),
            job_name: job.job_name.clone(),
        })
    }

    /// `checkpointConfig.s3Uri` must lie where the job's share may keep
    /// checkpoints (the checkpoint service checks it again).
    fn check_checkpoint_uri(&self, doc: &QueueDocument, job: &SubmitServiceJob) -> Result<()> {
        let Some(uri) = job
            .checkpoint_config
            .as_ref()
            .and_then(|c| c.s3_uri.as_deref())
        else {
            return Ok(());
        };
        let share = job.quota_share_name.as_deref().unwrap_or("");
        let allowed = doc
            .quota_shares
            .iter()
            .find(|s| s.quota_share_name == share)
            .and_then(|s| s.checkpoint_s3_prefixes.as_deref());
        let bucket = Some(self.settings.checkpoint_bucket.as_str()).filter(|b| !b.is_empty());
        qm_tenancy::checkpoint_uri_allowed(uri, allowed, bucket, &job.job_queue, share).map_err(
            |e| {
                invalid(
                    "invalid job",
                    vec![qm_wire::messages::Problem {
                        field: "checkpointConfig.s3Uri".into(),
                        message: e,
                    }],
                )
            },
        )
    }

    /// Changes a queue's document with `change`, validated whole, stored with
    /// compare-and-set, then appended to the log for the scheduler.
    async fn change<F>(
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
            for (i, s) in new.quota_shares.iter().enumerate() {
                token_field(
                    &format!("quotaShares[{i}].quotaShareName"),
                    &s.quota_share_name,
                )?;
                for (j, prefix) in s.checkpoint_s3_prefixes.iter().flatten().enumerate() {
                    qm_wire::messages::parse_s3_uri(prefix).map_err(|e| {
                        invalid(
                            "invalid queue configuration",
                            vec![qm_wire::messages::Problem {
                                field: format!("quotaShares[{i}].checkpointS3Prefixes[{j}]"),
                                message: e,
                            }],
                        )
                    })?;
                }
            }
            let config = convert::queue(&new)
                .map_err(|p| invalid("invalid queue configuration", api::problems(&p)))?;
            if let Some(old) = &old {
                // The transition rules (e.g. a share must be DISABLED before
                // it is deleted) are the core's.
                let old_config = convert::queue(old).map_err(|p| {
                    invalid("the stored configuration is invalid", api::problems(&p))
                })?;
                let mut c = Cluster::new(old_config, &[]).map_err(|e| {
                    invalid("the stored configuration is invalid", api::problems(&e.0))
                })?;
                c.update_queue(config, Time(now_ms()))
                    .map_err(|e| invalid("configuration change refused", api::problems(&e.0)))?;
            }
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

    async fn register(&self, principal: &str, r: RegisterExecutor) -> Result<serde_json::Value> {
        token_field("executorId", &r.executor_id)?;
        self.tenancy
            .may_register(principal, &r.executor_id)
            .map_err(denied)?;
        if let Some(node) = &r.checkpoint_node {
            token_field("checkpointNode", node)?;
        }
        self.existing(&r.job_queue).await?;
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
    async fn relay(
        &self,
        caller: &Caller,
        op: Operation,
        payload: &[u8],
    ) -> std::result::Result<bytes::Bytes, ApiError> {
        let body: serde_json::Value = decode(payload)?;
        let request = SchedRequest {
            operation: op.name().into(),
            body,
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

    /// Relays a read of one job to the scheduler, which checks that the
    /// caller may read it.
    async fn describe_job(&self, caller: &Caller, job_id: &str) -> Result<ServiceJob> {
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
    async fn logs(
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

    async fn handle(&self, msg: async_nats::Message) {
        let Some((principal, op)) = Operation::from_subject(&msg.subject) else {
            let reply: Result<()> = Err(invalid(
                format!("unknown operation subject {:?}", msg.subject.as_str()),
                Vec::new(),
            ));
            return respond(&self.client, &msg, &reply).await;
        };
        let Some(caller) = self.tenancy.caller(&principal) else {
            let reply: Result<()> = Err(api::error(
                ErrorCode::AccessDenied,
                format!(
                    "principal {principal:?} is not in the tenancy file; ask an admin to add it"
                ),
            ));
            return respond(&self.client, &msg, &reply).await;
        };
        let caller = &caller;
        let p = &msg.payload;
        let c = &self.client;
        match op {
            Operation::WhoAmI => respond(c, &msg, &Ok::<_, ApiError>(caller.clone())).await,
            Operation::SubmitServiceJob => {
                let r = match decode(p) {
                    Ok(job) => self.submit(caller, job).await,
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ApplyJobQueue => {
                let r = match decode::<QueueDocument>(p) {
                    Ok(doc) => {
                        let name = doc.job_queue.job_queue_name.clone();
                        self.change(caller, op, &name, move |_| Ok(doc.clone()))
                            .await
                    }
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::CreateJobQueue | Operation::UpdateJobQueue => {
                let create = op == Operation::CreateJobQueue;
                let r = match decode::<JobQueue>(p) {
                    Ok(q) => {
                        let name = q.job_queue_name.clone();
                        self.change(caller, op, &name, move |old| match (old, create) {
                            (Some(_), true) => Err(api::error(
                                ErrorCode::Conflict,
                                format!("job queue {:?} already exists", q.job_queue_name),
                            )),
                            (None, false) => Err(api::error(
                                ErrorCode::NotFound,
                                format!("no job queue {:?}", q.job_queue_name),
                            )),
                            (old, _) => Ok(QueueDocument {
                                job_queue: q.clone(),
                                quota_shares: old.map(|d| d.quota_shares).unwrap_or_default(),
                            }),
                        })
                        .await
                        .map(|d| d.job_queue)
                    }
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::CreateQuotaShare | Operation::UpdateQuotaShare => {
                let create = op == Operation::CreateQuotaShare;
                let r = match decode::<QuotaShare>(p) {
                    Ok(s) => {
                        let queue = s.job_queue.clone();
                        let name = s.quota_share_name.clone();
                        self.change(caller, op, &queue, move |old| {
                            let mut doc = old.ok_or_else(|| {
                                api::error(
                                    ErrorCode::NotFound,
                                    format!("no job queue {:?}", s.job_queue),
                                )
                            })?;
                            let pos = doc
                                .quota_shares
                                .iter()
                                .position(|x| x.quota_share_name == s.quota_share_name);
                            match (pos, create) {
                                (Some(_), true) => Err(api::error(
                                    ErrorCode::Conflict,
                                    format!("quota share {:?} already exists", s.quota_share_name),
                                )),
                                (None, false) => Err(api::error(
                                    ErrorCode::NotFound,
                                    format!("no quota share {:?}", s.quota_share_name),
                                )),
                                (None, true) => {
                                    doc.quota_shares.push(s.clone());
                                    Ok(doc)
                                }
                                (Some(i), false) => {
                                    merge_share(&mut doc.quota_shares[i], &s);
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
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::DeleteQuotaShare => {
                let r = match decode::<ShareRef>(p) {
                    Ok(s) => self
                        .change(caller, op, &s.job_queue.clone(), move |old| {
                            let mut doc = old.ok_or_else(|| {
                                api::error(
                                    ErrorCode::NotFound,
                                    format!("no job queue {:?}", s.job_queue),
                                )
                            })?;
                            let before = doc.quota_shares.len();
                            doc.quota_shares
                                .retain(|x| x.quota_share_name != s.quota_share_name);
                            if doc.quota_shares.len() == before {
                                return Err(api::error(
                                    ErrorCode::NotFound,
                                    format!("no quota share {:?}", s.quota_share_name),
                                ));
                            }
                            Ok(doc)
                        })
                        .await
                        .map(|_| serde_json::json!({})),
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::DescribeQuotaShare => {
                let r = match decode::<ShareRef>(p) {
                    Ok(s) => self
                        .readable(caller, &s.job_queue)
                        .await
                        .and_then(|(doc, _)| {
                            doc.quota_shares
                                .into_iter()
                                .find(|x| x.quota_share_name == s.quota_share_name)
                                .ok_or_else(|| {
                                    api::error(
                                        ErrorCode::NotFound,
                                        format!("no quota share {:?}", s.quota_share_name),
                                    )
                                })
                        }),
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ListQuotaShares => {
                let r = match decode::<QueueRef>(p) {
                    Ok(q) => self
                        .readable(caller, &q.job_queue)
                        .await
                        .map(|(doc, _)| serde_json::json!({ "quotaShares": doc.quota_shares })),
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::DescribeJobQueue => {
                let r = match decode::<QueueRef>(p) {
                    Ok(q) => self
                        .readable(caller, &q.job_queue)
                        .await
                        .map(|(doc, _)| doc),
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ListJobQueues => {
                let r = self.queue_names(caller).await;
                respond(c, &msg, &r).await
            }
            Operation::RegisterExecutor => {
                let r = match decode(p) {
                    Ok(reg) => self.register(&principal, reg).await,
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::GetServiceJobLogs => {
                let r = match decode(p) {
                    Ok(req) => self.logs(caller, req).await,
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ListAuditEvents => {
                let r = match decode(p) {
                    Ok(req) => audit::list(&self.log, caller, req).await,
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ListServiceJobs | Operation::GetJobQueueSnapshot => {
                // Checked here first (the queue and share are in the
                // request), and again by the scheduler.
                let check = match op {
                    Operation::ListServiceJobs => decode::<ListServiceJobs>(p).and_then(|l| {
                        match &l.quota_share_name {
                            Some(share) => authorize(
                                caller,
                                Action::ReadJob {
                                    queue: &l.job_queue,
                                    share,
                                },
                            ),
                            None => authorize(
                                caller,
                                Action::ReadQueue {
                                    queue: &l.job_queue,
                                },
                            ),
                        }
                        .map_err(denied)
                    }),
                    _ => decode::<QueueRef>(p).and_then(|q| {
                        authorize(
                            caller,
                            Action::ReadQueue {
                                queue: &q.job_queue,
                            },
                        )
                        .map_err(denied)
                    }),
                };
                match check {
                    Ok(()) => self.relay_reply(caller, op, &msg).await,
                    Err(e) => respond::<()>(c, &msg, &Err(e)).await,
                }
            }
            Operation::DescribeServiceJob
            | Operation::UpdateServiceJob
            | Operation::TerminateServiceJob => self.relay_reply(caller, op, &msg).await,
        }
    }

    /// Relays a request to the scheduler and answers with its reply.
    async fn relay_reply(&self, caller: &Caller, op: Operation, msg: &async_nats::Message) {
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

    /// A queue's configuration, for a caller that may read it.
    async fn readable(&self, caller: &Caller, queue: &str) -> Result<(QueueDocument, u64)> {
        authorize(caller, Action::ReadQueue { queue }).map_err(denied)?;
        self.existing(queue).await
    }

    /// The queues the caller may read.
    async fn queue_names(&self, caller: &Caller) -> Result<serde_json::Value> {
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
        Ok(serde_json::json!({ "jobQueues": names }))
    }
}

/// `UpdateQuotaShare`: only the fields given change.
fn merge_share(share: &mut QuotaShare, update: &QuotaShare) {
    if update.state.is_some() {
        share.state.clone_from(&update.state);
    }
    if update.capacity_limits.is_some() {
        share.capacity_limits.clone_from(&update.capacity_limits);
    }
    if update.resource_sharing_configuration.is_some() {
        share
            .resource_sharing_configuration
            .clone_from(&update.resource_sharing_configuration);
    }
    if update.preemption_configuration.is_some() {
        share
            .preemption_configuration
            .clone_from(&update.preemption_configuration);
    }
    if update.protections.is_some() {
        share.protections.clone_from(&update.protections);
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let (settings, nats_settings) = match qm_service::start::<Settings>("admission", USAGE) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let tenancy = match Tenancy::load(std::path::Path::new(&settings.tenancy)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("qm-admission: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    let (client, principal) = match qm_service::connect(&nats_settings, "admission").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !client.server_info().auth_required && !settings.insecure_allow_unauthenticated_nats {
        eprintln!(
            "qm-admission: the NATS server at {} lets anyone connect, so any client could claim any principal; run it with the configuration `qm auth` generates (or set insecureAllowUnauthenticatedNats for a throwaway test setup)",
            nats_settings.nats_url
        );
        return std::process::ExitCode::from(2);
    }
    tracing::info!(%principal, teams = tenancy.teams.len(), principals = tenancy.principals().len(), "tenancy loaded");
    nats::create_storage_with_retry(&client).await;
    let js = async_nats::jetstream::new(client.clone());
    let log = nats::open_stream(&js, subjects::LOG_STREAM).await;
    let config = nats::open_bucket(&js, subjects::CONFIG_BUCKET).await;
    let tokens = nats::open_bucket(&js, subjects::TOKENS_BUCKET).await;
    let mut requests = match client
        .queue_subscribe(
            format!("{}.*.*", subjects::API_PREFIX),
            "qm-admission".into(),
        )
        .await
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("qm-admission: cannot subscribe: {e}");
            return std::process::ExitCode::from(1);
        }
    };
    let admission = Arc::new(Admission {
        client: client.clone(),
        js,
        log,
        config,
        tokens,
        settings,
        tenancy,
        scratch: Mutex::new(HashMap::new()),
    });
    tracing::info!("admission ready");
    let shutdown = nats::shutdown_signal();
    tokio::pin!(shutdown);
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            msg = requests.next() => match msg {
                Some(msg) => {
                    let a = Arc::clone(&admission);
                    tasks.spawn(async move { a.handle(msg).await });
                }
                None => break,
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    // Finish the requests in hand (they are durable once acknowledged).
    let _ = requests.unsubscribe().await;
    while tasks.join_next().await.is_some() {}
    let _ = client.flush().await;
    tracing::info!("admission stopped");
    std::process::ExitCode::SUCCESS
}
