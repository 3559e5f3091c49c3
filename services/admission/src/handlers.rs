//! The request dispatch: who asked (the principal in the subject), whether
//! they may, and which handler answers each operation.

use qm_service::api::{self, decode, invalid, respond};
use qm_tenancy::{authorize, authorize_read, Action};
use qm_wire::messages::{
    ApiError, Caller, Empty, ErrorCode, JobQueue, ListServiceJobs, QueueRef, QuotaShareList,
    ShareRef, SubmitServiceJob,
};
use qm_wire::subjects::{self, Operation};
use qm_wire::system::QueueDocument;
use tracing::Instrument;

use crate::queues::merge_share;
use crate::{audit, denied, Admission, Result};
use qm_wire::updates::SharePatch;

impl Admission {
    /// Answers one request inside its span (a child of the caller's trace
    /// when the request carries one), counted and timed per operation.
    pub(crate) async fn handle(&self, msg: async_nats::Message) {
        let span =
            qm_service::trace::process_span(&qm_service::trace::template(&msg.subject), &msg);
        let op = Operation::from_subject(&msg.subject).map_or("unknown", |(_, op)| op.name());
        let started = std::time::Instant::now();
        self.dispatch(msg).instrument(span).await;
        self.metrics.requests.with_label_values(&[op]).inc();
        self.metrics
            .duration
            .with_label_values(&[op])
            .observe(started.elapsed().as_secs_f64());
    }

    /// Who asked: the principal of the subject, or, on an AWS Batch
    /// gateway's subject only, the principal whose signature the gateway
    /// verified (its `Qm-Caller` header), if the tenancy lets the gateway
    /// speak for it (ADR 0012). A `Qm-Caller` header anywhere else is
    /// ignored: the subject is what the NATS server vouches for.
    fn caller(&self, principal: &str, msg: &async_nats::Message) -> Result<Caller> {
        let tenancy = self.tenancy.get();
        let relay = tenancy.role(principal);
        if matches!(
            relay,
            Some(qm_tenancy::Role::Gateway | qm_tenancy::Role::Console)
        ) {
            let named = msg
                .headers
                .as_ref()
                .and_then(|h| h.get(subjects::CALLER_HEADER))
                .map(|v| v.as_str().to_string());
            let Some(named) = named else {
                return Err(api::error(
                    ErrorCode::AccessDenied,
                    format!(
                        "{} {principal:?} sent a request without the {} header naming whom it acts for",
                        relay.as_ref().map_or_else(String::new, qm_tenancy::Role::label),
                        subjects::CALLER_HEADER
                    ),
                ));
            };
            return if relay == Some(qm_tenancy::Role::Console) {
                tenancy.console_speaks_for(&named).map_err(denied)
            } else {
                tenancy.spoken_for(&named).map_err(denied)
            };
        }
        tenancy.caller(principal).ok_or_else(|| {
            api::error(
                ErrorCode::AccessDenied,
                format!(
                    "principal {principal:?} is not in the tenancy file; ask an admin to add it"
                ),
            )
        })
    }

    async fn dispatch(&self, msg: async_nats::Message) {
        let Some((principal, op)) = Operation::from_subject(&msg.subject) else {
            let reply: Result<()> = Err(invalid(
                format!("unknown operation subject {:?}", msg.subject.as_str()),
                Vec::new(),
            ));
            return respond(&self.client, &msg, &reply).await;
        };
        let caller = match self.caller(&principal, &msg) {
            Ok(caller) => caller,
            Err(e) => return respond::<()>(&self.client, &msg, &Err(e)).await,
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
            Operation::CreateJobQueue => {
                let r = match decode::<JobQueue>(p) {
                    Ok(q) => {
                        let name = q.job_queue_name.clone();
                        self.change(caller, op, &name, move |old| match old {
                            Some(_) => Err(api::error(
                                ErrorCode::Conflict,
                                format!("job queue {:?} already exists", q.job_queue_name),
                            )),
                            None => Ok(QueueDocument {
                                job_queue: q.clone(),
                                quota_shares: Vec::new(),
                            }),
                        })
                        .await
                        .map(|d| d.job_queue)
                    }
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::UpdateJobQueue => {
                // As AWS's: the fields given change, the others stay as
                // stored when the change lands (merged inside the
                // compare-and-set, so concurrent updates of different
                // fields all land). A field given as null is cleared.
                let r = match decode::<serde_json::Map<String, serde_json::Value>>(p) {
                    Ok(patch) => match patch.get("jobQueueName").and_then(|v| v.as_str()) {
                        Some(name) => {
                            let name = name.to_string();
                            let queue = name.clone();
                            self.change(caller, op, &name, move |old| {
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
                        None => Err(invalid("jobQueueName: is required", Vec::new())),
                    },
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::CreateQuotaShare | Operation::UpdateQuotaShare => {
                let create = op == Operation::CreateQuotaShare;
                let r = match decode::<SharePatch>(p) {
                    Ok(patch) => {
                        let s = patch.share.clone();
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
                                    doc.quota_shares[i] =
                                        merge_share(&doc.quota_shares[i], &patch)?;
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
                        .map(|_| Empty {}),
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
                let r =
                    match decode::<QueueRef>(p) {
                        Ok(q) => self.readable(caller, &q.job_queue).await.map(|(doc, _)| {
                            QuotaShareList {
                                quota_shares: doc.quota_shares,
                            }
                        }),
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
            Operation::DeleteJobQueue => {
                let r = match decode::<QueueRef>(p) {
                    Ok(q) => self
                        .delete_queue(caller, &q.job_queue)
                        .await
                        .map(|()| Empty {}),
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
                    Ok(reg) => self.register(&caller.principal, reg).await,
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
            Operation::ApplyTenancy => {
                let r = match decode(p) {
                    Ok(req) => {
                        let relayed = caller.principal != principal;
                        self.apply_tenancy(caller, relayed, req).await
                    }
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::DescribeTenancy => {
                let r = match decode(p) {
                    Ok(req) => self.describe_tenancy(caller, req).await,
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ListTenancyRevisions => {
                let r = match decode::<qm_tenancy::live::ListTenancyRevisions>(p) {
                    Ok(_) => self.list_tenancy_revisions(caller).await,
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ListEvents => {
                let r = match decode(p) {
                    Ok(req) => {
                        crate::events::list(&self.events, &self.event_reads, caller, req).await
                    }
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ListAuditEvents => {
                let r = match decode(p) {
                    Ok(req) => audit::list(&self.log, &self.audit, caller, req).await,
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ListServiceJobs | Operation::GetJobQueueSnapshot => {
                // Checked here first (the queue and share are in the
                // request), and again by the scheduler.
                let check = match op {
                    Operation::ListServiceJobs => decode::<ListServiceJobs>(p).and_then(|l| {
                        authorize_read(caller, &l.job_queue, l.quota_share_name.as_deref())
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
            Operation::StartResumeDrill => {
                let r = match decode(p) {
                    Ok(request) => self.start_drill(caller, request).await,
                    Err(e) => Err(e),
                };
                respond(c, &msg, &r).await
            }
            Operation::ListResumeDrills
            | Operation::GetPolicyStabilityRecord
            | Operation::GetUsage => {
                // Checked here first, and again (share by share) by the
                // scheduler (both name a queue and perhaps a share).
                let check = decode::<qm_wire::messages::ListResumeDrills>(p).and_then(|l| {
                    authorize_read(caller, &l.job_queue, l.quota_share_name.as_deref())
                        .map_err(denied)
                });
                match check {
                    Ok(()) => self.relay_reply(caller, op, &msg).await,
                    Err(e) => respond::<()>(c, &msg, &Err(e)).await,
                }
            }
            Operation::DryRunUpdateQuotaShare => {
                let r = match decode::<SharePatch>(p) {
                    Ok(s) => self.foresee_share_update(caller, &s).await,
                    Err(e) => Err(e),
                };
                match r {
                    Ok(raw) => {
                        if let Some(to) = &msg.reply {
                            let _ = c.publish(to.clone(), raw).await;
                        }
                    }
                    Err(e) => respond::<()>(c, &msg, &Err(e)).await,
                }
            }
            Operation::GetReclaimExposure => {
                // Checked here first, and again by the scheduler.
                let check = decode::<qm_wire::messages::GetReclaimExposure>(p).and_then(|g| {
                    authorize_read(caller, &g.job_queue, Some(&g.quota_share_name)).map_err(denied)
                });
                match check {
                    Ok(()) => self.relay_reply(caller, op, &msg).await,
                    Err(e) => respond::<()>(c, &msg, &Err(e)).await,
                }
            }
            Operation::DryRunServiceJob => {
                // Checked as a submit is, then foreseen by the scheduler
                // (which checks the caller again); nothing is stored.
                match decode::<SubmitServiceJob>(p) {
                    Ok(job) => match self.validate_submit(caller, &job).await {
                        Ok(()) => self.relay_reply(caller, op, &msg).await,
                        Err(e) => respond::<()>(c, &msg, &Err(e)).await,
                    },
                    Err(e) => respond::<()>(c, &msg, &Err(e)).await,
                }
            }
            Operation::DescribeServiceJob
            | Operation::ExplainServiceJob
            | Operation::UpdateServiceJob
            | Operation::TerminateServiceJob => self.relay_reply(caller, op, &msg).await,
        }
    }
}

/// `stored` with the fields of `patch` (camelCase, as the API names them)
/// replacing its own; a field given as null is cleared.
fn merged(
    stored: &JobQueue,
    patch: &serde_json::Map<String, serde_json::Value>,
) -> crate::Result<JobQueue> {
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
