//! The writes: priority updates and terminates, queued by the loop and
//! validated against the current state before their entry is appended.

use qm_service::api::{self};
use qm_service::now_ms;
use qm_tenancy::Action;
use qm_wire::messages::{ApiError, Caller, ErrorCode};
use qm_wire::system::{DeleteJobQueueRequest, LogEntry, SchedOperation, SchedRequest};

use super::{allowed, Runner};

impl Runner<'_> {
    /// Priority updates and terminates: validated on the current state,
    /// appended fenced, applied, answered. A refused append leaves the
    /// request queued until the new entries are read.
    pub(super) async fn do_writes(&mut self) {
        while let Some((req, reply)) = self.writes.pop_front() {
            let now = self.state.clock.max(now_ms());
            if let SchedOperation::DeleteJobQueue(d) = &req.operation {
                let entry = match self.deletion(&req.caller, d, now) {
                    Deletion::Answer(r) => {
                        if r.is_err() {
                            // Refused: its finished jobs keep their retention.
                            self.retiring.remove(&d.job_queue);
                        }
                        self.reply(reply, r).await;
                        continue;
                    }
                    Deletion::Archiving(n) => {
                        if self
                            .retiring
                            .insert(d.job_queue.clone(), d.revision)
                            .is_none()
                        {
                            tracing::info!(queue = %d.job_queue, jobs = n, "archiving a deleted queue's finished jobs first");
                        }
                        if n <= ANSWER_AFTER_ARCHIVING {
                            self.deleting.push((req, reply));
                        } else {
                            // Longer than a caller waits: archiving goes on,
                            // and the caller asks again.
                            let e = api::error(
                                ErrorCode::Transient,
                                format!(
                                    "job queue {:?}: archiving its {n} finished jobs before it is deleted; ask again in a few seconds",
                                    d.job_queue
                                ),
                            );
                            self.reply::<()>(reply, Err(e)).await;
                        }
                        continue;
                    }
                    Deletion::Entry(entry) => *entry,
                };
                if self.append(&entry).await.is_none() {
                    self.writes.push_front((req, reply));
                    return;
                }
                tracing::info!(queue = %d.job_queue, revision = d.revision, by = %req.caller.principal, "job queue deleted");
                self.retiring.remove(&d.job_queue);
                let fx = self.state.apply(entry, now);
                self.publish(fx).await;
                self.dirty = true;
                self.reply(reply, Ok(serde_json::json!({}))).await;
                continue;
            }
            let entry = match self.write_entry(&req, now) {
                Ok(Some(entry)) => entry,
                Ok(None) => {
                    // Nothing to change (a terminate of a job already
                    // over): the job as it is, as every update answers.
                    let job_id = match &req.operation {
                        SchedOperation::UpdateServiceJob(u) => u.job_id.as_str(),
                        SchedOperation::TerminateServiceJob(t) => t.job_id.as_str(),
                        _ => "",
                    };
                    let r = self
                        .state
                        .describe(job_id, now)
                        .ok_or_else(|| not_found(job_id));
                    self.reply(reply, r).await;
                    continue;
                }
                Err(e) => {
                    self.reply::<()>(reply, Err(e)).await;
                    continue;
                }
            };
            if self.append(&entry).await.is_none() {
                self.writes.push_front((req, reply));
                return;
            }
            let job_id = match &entry {
                LogEntry::Priority { job_id, .. } | LogEntry::Terminate { job_id, .. } => {
                    job_id.clone()
                }
                _ => String::new(),
            };
            let fx = self.state.apply(entry, now);
            self.publish(fx).await;
            self.dirty = true;
            let r = self
                .state
                .describe(&job_id, now)
                .ok_or_else(|| not_found(&job_id));
            self.reply(reply, r).await;
        }
    }

    /// What `DeleteJobQueue` of `d` comes to now: the queue must be the
    /// one admission read (DISABLED at `d.revision`) and hold no job that
    /// has not finished; its finished jobs are archived before it goes.
    fn deletion(&self, caller: &Caller, d: &DeleteJobQueueRequest, now: u64) -> Deletion {
        let queue = d.job_queue.as_str();
        if let Err(e) = allowed(caller, Action::ChangeConfig { queue }) {
            return Deletion::Answer(Err(e));
        }
        let Some(qs) = self.state.queues.get(queue) else {
            // Deleted at this revision already (an answer lost, or a retry).
            return Deletion::Answer(match self.state.deleted_queues.get(queue) {
                Some(&r) if r >= d.revision => Ok(serde_json::json!({})),
                _ => Err(api::error(
                    ErrorCode::Transient,
                    format!("the scheduler does not know job queue {queue:?} yet; try again"),
                )),
            });
        };
        match qs.config_revision.cmp(&d.revision) {
            std::cmp::Ordering::Less => {
                return Deletion::Answer(Err(api::error(
                    ErrorCode::Transient,
                    format!(
                    "the scheduler has not read revision {} of job queue {queue:?} yet; try again",
                    d.revision
                ),
                )))
            }
            std::cmp::Ordering::Greater => {
                return Deletion::Answer(Err(api::error(
                    ErrorCode::Conflict,
                    format!(
                        "job queue {queue:?} was changed while being deleted; look at it again"
                    ),
                )))
            }
            std::cmp::Ordering::Equal => {}
        }
        if let Some(b) = qs.cluster.deletion_blockers() {
            if b.enabled {
                return Deletion::Answer(Err(api::error(
                    ErrorCode::Conflict,
                    format!(
                        "job queue {queue:?} is ENABLED: disable it first (`qm queue disable {queue}`, or UpdateJobQueue with state DISABLED); it is deleted once its jobs have finished"
                    ),
                )));
            }
            let mut why = Vec::new();
            for (status, ids) in &b.unfinished {
                const SHOWN: usize = 5;
                let mut names: Vec<String> =
                    ids.iter().take(SHOWN).map(|&id| qs.public_id(id)).collect();
                if ids.len() > SHOWN {
                    names.push(format!("and {} more", ids.len() - SHOWN));
                }
                why.push(format!(
                    "{} {} job{} ({})",
                    ids.len(),
                    status,
                    if ids.len() == 1 { "" } else { "s" },
                    names.join(", ")
                ));
            }
            return Deletion::Answer(Err(api::error(
                ErrorCode::Conflict,
                format!(
                    "job queue {queue:?} cannot be deleted yet: {} (wait for its jobs to finish, or terminate them)",
                    why.join("; ")
                ),
            )));
        }
        if let Some(stopping) = self.state.stopping.iter().find(|qj| qj.queue == queue) {
            return Deletion::Answer(Err(api::error(
                ErrorCode::Conflict,
                format!(
                    "job queue {queue:?} cannot be deleted yet: job {} is still stopping; try again shortly",
                    qs.public_id(stopping.job)
                ),
            )));
        }
        let finished = qs.cluster.jobs().count();
        if finished > 0 {
            return Deletion::Archiving(finished);
        }
        Deletion::Entry(Box::new(LogEntry::QueueDeleted {
            job_queue: queue.to_string(),
            revision: d.revision,
            at: now,
            principal: Some(caller.principal.clone()),
        }))
    }

    /// The job's queue, share and state, if `caller` may change it.
    fn changeable(
        &self,
        caller: &Caller,
        job_id: &str,
    ) -> Result<(String, String, &qm_core::Job), ApiError> {
        let (q, id) = self.state.locate(job_id).ok_or_else(|| not_found(job_id))?;
        let cluster = &self.state.queues[&q].cluster;
        let job = cluster.job(id).ok_or_else(|| not_found(job_id))?;
        let share = cluster.share_config(job.spec.share).name.clone();
        allowed(
            caller,
            Action::ChangeJob {
                queue: &q,
                share: &share,
            },
        )?;
        Ok((q, share, job))
    }

    fn write_entry(&self, req: &SchedRequest, now: u64) -> Result<Option<LogEntry>, ApiError> {
        match &req.operation {
            SchedOperation::UpdateServiceJob(u) => {
                let (q, share, job) = self.changeable(&req.caller, &u.job_id)?;
                if job.status.is_final() {
                    return Err(api::error(
                        ErrorCode::Conflict,
                        format!(
                            "job {} is {}; its priority can no longer change",
                            u.job_id, job.status
                        ),
                    ));
                }
                if let Some(p) = qm_core::priority_problem(u.scheduling_priority) {
                    return Err(api::invalid(
                        "invalid update",
                        vec![qm_wire::messages::Problem {
                            field: p.field,
                            message: p.message,
                        }],
                    ));
                }
                Ok(Some(LogEntry::Priority {
                    job_id: u.job_id.clone(),
                    scheduling_priority: u.scheduling_priority,
                    at: now,
                    principal: Some(req.caller.principal.clone()),
                    job_queue: Some(q),
                    quota_share_name: Some(share),
                }))
            }
            SchedOperation::TerminateServiceJob(t) => {
                let (q, share, job) = self.changeable(&req.caller, &t.job_id)?;
                if job.status.is_final() || job.stopping == Some(qm_core::StopCause::Cancelled) {
                    return Ok(None); // already over (or being cancelled): nothing to do
                }
                Ok(Some(LogEntry::Terminate {
                    job_id: t.job_id.clone(),
                    reason: t.reason.clone(),
                    at: now,
                    principal: Some(req.caller.principal.clone()),
                    job_queue: Some(q),
                    quota_share_name: Some(share),
                }))
            }
            other => Err(api::error(
                ErrorCode::Internal,
                format!("{} does not write", other.name()),
            )),
        }
    }
}

/// Most finished jobs a `DeleteJobQueue` waits to see archived before it
/// is answered (about 2.5 s of archiving); with more, the caller is told
/// to ask again while the archiving goes on.
const ANSWER_AFTER_ARCHIVING: usize = 10_000;

/// What a `DeleteJobQueue` comes to ([`Runner::deletion`]).
enum Deletion {
    /// Answered now: already deleted, or refused.
    Answer(Result<serde_json::Value, ApiError>),
    /// This many finished jobs are archived first.
    Archiving(usize),
    /// Deleted by this entry.
    Entry(Box<LogEntry>),
}

fn not_found(job_id: &str) -> ApiError {
    api::error(ErrorCode::NotFound, format!("no job {job_id:?}"))
}
