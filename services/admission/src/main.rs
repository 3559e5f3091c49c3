//! `qm-admission`: the front door. Answers every `qm.v1.api.*` subject:
//! validates submissions and configuration changes against the queue's
//! configuration (JetStream KV), stores them durably (the `QM_LOG` stream)
//! before replying, and relays job reads, priority updates and terminates
//! to the scheduler leader. Stateless: run as many as you like (queue group).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use qm_core::{Cluster, Time};
use qm_service::api::{self, decode, invalid, respond};
use qm_service::{convert, nats, now_ms, settings};
use qm_wire::messages::{
    ApiError, ErrorCode, JobQueue, QueueRef, QuotaShare, RegisterExecutor, ShareRef,
    SubmitServiceJob, SubmitServiceJobResponse,
};
use qm_wire::subjects::{self, Operation};
use qm_wire::system::{LogEntry, QueueDocument, SchedRequest};
use serde::{Deserialize, Serialize};

const USAGE: &str = "qm-admission [--config FILE]

Answers the Quartermaster API (qm.v1.api.*). Settings (file keys, or
environment variables):
  natsUrl          QM_NATS_URL                 default nats://127.0.0.1:4222
  schedulerTimeoutMs QM_ADMISSION_SCHEDULER_TIMEOUT_MS  default 5000";

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Settings {
    nats_url: String,
    scheduler_timeout_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            nats_url: "nats://127.0.0.1:4222".into(),
            scheduler_timeout_ms: 5000,
        }
    }
}

impl settings::Validate for Settings {
    fn problems(&self) -> Vec<String> {
        let mut p = Vec::new();
        if self.nats_url.is_empty() {
            p.push("natsUrl: is required".into());
        }
        if self.scheduler_timeout_ms == 0 {
            p.push("schedulerTimeoutMs: must be >= 1".into());
        }
        p
    }
}

struct Admission {
    client: async_nats::Client,
    storage: nats::Storage,
    settings: Settings,
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
            .storage
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

    async fn submit(&self, job: SubmitServiceJob) -> Result<SubmitServiceJobResponse> {
        let (doc, revision) = self.existing(&job.job_queue).await?;
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
        };
        if let Some(token) = &job.client_token {
            if token.is_empty() || token.len() > 64 {
                return Err(invalid("clientToken: must be 1-64 characters", Vec::new()));
            }
            let key = token_key(&job.job_queue, token);
            let body = serde_json::to_vec(&entry)
                .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
            if self.storage.tokens.create(&key, body.into()).await.is_err() {
                // Used before (or a concurrent retry won): the same job.
                let stored = self
                    .storage
                    .tokens
                    .get(&key)
                    .await
                    .map_err(|e| transient("token store unavailable", e))?
                    .ok_or_else(|| transient("token store", "token vanished"))?;
                entry = serde_json::from_slice(&stored)
                    .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
            }
        }
        let LogEntry::Submit { job_id, job } = &entry else {
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
            .storage
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

    /// Changes a queue's document with `change`, validated whole, stored with
    /// compare-and-set, then appended to the log for the scheduler.
    async fn change<F>(&self, queue: &str, change: F) -> Result<QueueDocument>
    where
        F: Fn(Option<QueueDocument>) -> Result<QueueDocument>,
    {
        token_field("jobQueueName", queue)?;
        for _ in 0..10 {
            let current = self.document(queue).await?;
            let old = current.as_ref().map(|(d, _)| d.clone());
            let new = change(old.clone())?;
            for (i, s) in new.quota_shares.iter().enumerate() {
                token_field(
                    &format!("quotaShares[{i}].quotaShareName"),
                    &s.quota_share_name,
                )?;
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
                None => self.storage.config.create(&key, body.into()).await.ok(),
                Some((_, rev)) => self
                    .storage
                    .config
                    .update(&key, body.into(), *rev)
                    .await
                    .ok(),
            };
            let Some(revision) = stored else {
                continue; // someone else changed it first: redo on the new one
            };
            let entry = LogEntry::Config {
                queue: new.clone(),
                revision,
            };
            let subject = subjects::log_config(queue)
                .map_err(|e| invalid(format!("jobQueueName: {e}"), Vec::new()))?;
            let payload = serde_json::to_vec(&entry)
                .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
            nats::append_durably(
                &self.storage.js,
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

    async fn register(&self, r: RegisterExecutor) -> Result<serde_json::Value> {
        token_field("executorId", &r.executor_id)?;
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
        let subject = subjects::log_executor(&r.executor_id)
            .map_err(|e| invalid(format!("executorId: {e}"), Vec::new()))?;
        let payload = serde_json::to_vec(&LogEntry::Register(r))
            .map_err(|e| api::error(ErrorCode::Internal, e.to_string()))?;
        let ack = self
            .storage
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
        op: Operation,
        payload: &[u8],
    ) -> std::result::Result<bytes::Bytes, ApiError> {
        let body: serde_json::Value = decode(payload)?;
        let request = SchedRequest {
            operation: op.name().into(),
            body,
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

    async fn handle(&self, msg: async_nats::Message) {
        let Some(op) = Operation::from_subject(&msg.subject) else {
            let reply: Result<()> = Err(invalid(
                format!("unknown operation subject {:?}", msg.subject.as_str()),
                Vec::new(),
            ));
            return respond(&self.client, &msg, &reply).await;
        };
        let p = &msg.payload;
        let c = &self.client;
        match op {
            Operation::SubmitServiceJob => {
                let r = match decode(p) {
                    Ok(job) => self.submit(job).await,
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ApplyJobQueue => {
                let r = match decode::<QueueDocument>(p) {
                    Ok(doc) => {
                        let name = doc.job_queue.job_queue_name.clone();
                        self.change(&name, move |_| Ok(doc.clone())).await
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
                        self.change(&name, move |old| match (old, create) {
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
                        self.change(&queue, move |old| {
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
                        .change(&s.job_queue.clone(), move |old| {
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
                    Ok(s) => self.existing(&s.job_queue).await.and_then(|(doc, _)| {
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
                        .existing(&q.job_queue)
                        .await
                        .map(|(doc, _)| serde_json::json!({ "quotaShares": doc.quota_shares })),
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::DescribeJobQueue => {
                let r = match decode::<QueueRef>(p) {
                    Ok(q) => self.existing(&q.job_queue).await.map(|(doc, _)| doc),
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ListJobQueues => {
                let r = self.queue_names().await;
                respond(c, &msg, &r).await
            }
            Operation::RegisterExecutor => {
                let r = match decode(p) {
                    Ok(reg) => self.register(reg).await,
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::DescribeServiceJob
            | Operation::ListServiceJobs
            | Operation::UpdateServiceJob
            | Operation::TerminateServiceJob
            | Operation::GetJobQueueSnapshot => match self.relay(op, p).await {
                Ok(raw) => {
                    if let Some(to) = &msg.reply {
                        let _ = c.publish(to.clone(), raw).await;
                    }
                }
                Err(e) => respond::<()>(c, &msg, &Err(e)).await,
            },
        }
    }

    async fn queue_names(&self) -> Result<serde_json::Value> {
        let mut keys = self
            .storage
            .config
            .keys()
            .await
            .map_err(|e| transient("configuration store unavailable", e))?;
        let mut names = Vec::new();
        while let Some(k) = keys.next().await {
            if let Some(name) = k.ok().as_deref().and_then(|k| k.strip_prefix("queue.")) {
                names.push(name.to_string());
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
    let settings = match qm_service::start::<Settings>("admission", USAGE) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let client = match qm_service::connect(&settings.nats_url, "admission").await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let storage = nats::storage_with_retry(&client).await;
    let mut requests = match client
        .queue_subscribe(format!("{}.>", subjects::API_PREFIX), "qm-admission".into())
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
        storage,
        settings,
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
