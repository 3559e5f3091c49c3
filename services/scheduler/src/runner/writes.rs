//! The writes: priority updates and terminates, queued by the loop and
//! validated against the current state before their entry is appended.

use qm_service::api::{self};
use qm_service::now_ms;
use qm_tenancy::Action;
use qm_wire::messages::{ApiError, Caller, ErrorCode};
use qm_wire::system::{LogEntry, SchedOperation, SchedRequest};

use super::{allowed, Runner};

impl Runner<'_> {
    /// Priority updates and terminates: validated on the current state,
    /// appended fenced, applied, answered. A refused append leaves the
    /// request queued until the new entries are read.
    pub(super) async fn do_writes(&mut self) {
        while let Some((req, reply)) = self.writes.pop_front() {
            let now = self.state.clock.max(now_ms());
            let entry = match self.write_entry(&req, now) {
                Ok(Some(entry)) => entry,
                Ok(None) => {
                    self.reply(reply, Ok(serde_json::json!({}))).await;
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

fn not_found(job_id: &str) -> ApiError {
    api::error(ErrorCode::NotFound, format!("no job {job_id:?}"))
}
