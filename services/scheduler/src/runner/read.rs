//! The read API: requests relayed by admission that the loop answers from
//! its state (describe, list, snapshot, dry run, explain), reading the
//! archive beside the loop for finished jobs it no longer holds.

use qm_service::api::{self, decode, encode};
use qm_service::now_ms;
use qm_tenancy::{authorize, Action};
use qm_wire::messages::{
    ApiError, Caller, ErrorCode, JobQueueSnapshot, ListServiceJobs, ListServiceJobsResponse,
    LostWorkTotal, ShareLostWork, ShareUsage,
};
use qm_wire::system::{SchedOperation, SchedRequest};

use super::{allowed, allowed_read, Runner};

impl Runner<'_> {
    // ----- requests relayed by admission -------------------------------------
    pub(super) async fn request(&mut self, msg: async_nats::Message) {
        if !self.tenure.current() {
            // Possibly deposed (paused or cut off past the lease): its state
            // may be stale. The current leader answers; a caller with no
            // answer retries.
            tracing::warn!("request not answered: the lease is not surely held");
            return;
        }
        let req = match decode::<SchedRequest>(&msg.payload) {
            Ok(r) => r,
            Err(e) => return self.reply::<()>(msg.reply, Err(e)).await,
        };
        let now = self.state.clock.max(now_ms());
        if req.operation.writes() {
            self.writes.push_back((req, msg.reply));
            return;
        }
        let caller = &req.caller;
        match &req.operation {
            SchedOperation::DescribeServiceJob(j) => {
                self.describe_job(caller, j, now, msg.reply).await;
            }
            SchedOperation::ListServiceJobs(l) => self.list_jobs(caller, l, now, msg.reply).await,
            SchedOperation::GetJobQueueSnapshot(q) => {
                let r = allowed(
                    caller,
                    Action::ReadQueue {
                        queue: &q.job_queue,
                    },
                )
                .and_then(|()| self.snapshot(caller, &q.job_queue, now));
                self.reply(msg.reply, r).await
            }
            SchedOperation::DryRunServiceJob(job) => {
                let share = job.quota_share_name.clone().unwrap_or_default();
                let may_read = |s: &str| readable(caller, &job.job_queue, s);
                let r = allowed(
                    caller,
                    Action::Submit {
                        queue: &job.job_queue,
                        share: &share,
                    },
                )
                .and_then(|()| {
                    self.state
                        .dry_run(job, &may_read, now)
                        .map_err(|e| api::error(ErrorCode::Invalid, e))
                });
                self.reply(msg.reply, r).await
            }
            SchedOperation::GetPolicyStabilityRecord(g) => {
                let r =
                    allowed_read(caller, &g.job_queue, g.quota_share_name.as_deref()).map(|()| {
                        let may_read = |s: &str| readable(caller, &g.job_queue, s);
                        self.state.governance(
                            &g.job_queue,
                            g.quota_share_name.as_deref(),
                            g.since,
                            &may_read,
                        )
                    });
                self.reply(msg.reply, r).await
            }
            SchedOperation::GetUsage(g) => {
                let r = allowed_read(caller, &g.job_queue, g.quota_share_name.as_deref()).and_then(
                    |()| {
                        let may_read = |s: &str| readable(caller, &g.job_queue, s);
                        self.state.usage(g, &may_read, now)
                    },
                );
                self.reply(msg.reply, r).await
            }
            SchedOperation::DryRunJobQueue(doc) => {
                let queue = doc.job_queue.job_queue_name.clone();
                let r = allowed(caller, Action::ChangeConfig { queue: &queue }).and_then(|()| {
                    let may_read = |s: &str| readable(caller, &queue, s);
                    self.state.dry_run_queue(doc, &may_read, now)
                });
                self.reply(msg.reply, r).await
            }
            SchedOperation::GetReclaimExposure(g) => {
                let r =
                    allowed_read(caller, &g.job_queue, Some(&g.quota_share_name)).and_then(|()| {
                        let may_read = |s: &str| readable(caller, &g.job_queue, s);
                        self.state.reclaim_exposure(g, &may_read, now)
                    });
                self.reply(msg.reply, r).await
            }
            SchedOperation::ListResumeDrills(l) => {
                let r =
                    allowed_read(caller, &l.job_queue, l.quota_share_name.as_deref()).map(|()| {
                        let may_read = |s: &str| readable(caller, &l.job_queue, s);
                        qm_wire::messages::ListResumeDrillsResponse {
                            drills: self.state.drills(
                                &l.job_queue,
                                l.quota_share_name.as_deref(),
                                &may_read,
                            ),
                        }
                    });
                self.reply(msg.reply, r).await
            }
            SchedOperation::ExplainServiceJob(j) => {
                // Who may read it is checked before anything is computed.
                let r = match self.state.share_of(&j.job_id) {
                    None => Err(api::error(
                        ErrorCode::NotFound,
                        format!(
                            "no waiting or running job {:?} (a finished job has nothing to explain: describe it)",
                            j.job_id
                        ),
                    )),
                    Some((q, share)) => allowed(
                        caller,
                        Action::ReadJob {
                            queue: &q,
                            share: &share,
                        },
                    )
                    .and_then(|()| {
                        let may_read = |s: &str| readable(caller, &q, s);
                        self.state
                            .explain_job(&j.job_id, &may_read, now)
                            .ok_or_else(|| {
                                api::error(ErrorCode::NotFound, format!("no job {:?}", j.job_id))
                            })
                    }),
                };
                self.reply(msg.reply, r).await
            }
            SchedOperation::UpdateServiceJob(_)
            | SchedOperation::TerminateServiceJob(_)
            | SchedOperation::DeleteJobQueue(_) => {
                unreachable!("writes are queued above")
            }
        }
    }

    /// DescribeServiceJob: from the state, or (read beside the loop) from
    /// the archive for a finished job it no longer holds.
    async fn describe_job(
        &self,
        caller: &Caller,
        j: &qm_wire::messages::JobRef,
        now: u64,
        reply: Option<async_nats::Subject>,
    ) {
        let Some(job) = self.state.describe(&j.job_id, now) else {
            // Not in the state: perhaps archived (read beside the loop).
            let (archive, client) = (self.storage.archive.clone(), self.client.clone());
            let (caller, job_id) = (caller.clone(), j.job_id.clone());
            tokio::spawn(async move {
                let r = match crate::archive::describe(&archive, &job_id).await {
                    Ok(Some(job)) => readable_job(&caller, job),
                    Ok(None) => {
                        let kept = crate::upkeep::archive_retention(&archive).await;
                        Err(crate::archive::not_found(&job_id, kept))
                    }
                    Err(e) => Err(e),
                };
                reply_to(&client, reply, r).await;
            });
            return;
        };
        let mut job = job;
        let may_read = |q: &str| qm_tenancy::authorize_read(caller, q, None).is_ok();
        if let Some(holders) = self.state.holders_of(&j.job_id, &may_read) {
            job.status_reason = format!("{}; {holders}", job.status_reason);
        }
        job.trace_id = self
            .traces
            .of(&j.job_id)
            .filter(|cx| cx.is_valid())
            .map(|cx| cx.trace_id().to_string());
        let r = readable_job(caller, job);
        self.reply(reply, r).await;
    }

    /// ListServiceJobs: the live jobs, then (read beside the loop) the
    /// archive's.
    async fn list_jobs(
        &self,
        caller: &Caller,
        l: &ListServiceJobs,
        now: u64,
        reply: Option<async_nats::Subject>,
    ) {
        match self.list(caller, l, now) {
            Ok(Listed::Done(page)) => self.reply(reply, Ok(page)).await,
            Ok(Listed::Archive { page, from }) => {
                // The live jobs are all listed: the archive's follow.
                let (archive, client) = (self.storage.archive.clone(), self.client.clone());
                let (caller, l) = (caller.clone(), l.clone());
                tokio::spawn(async move {
                    let max = page_size(&l);
                    let r = crate::archive::list(&archive, &caller, &l, from, max - page.len())
                        .await
                        .map(|(archived, next)| {
                            let mut page = page;
                            page.extend(archived);
                            ListServiceJobsResponse {
                                job_summary_list: page,
                                next_token: next
                                    .map(|seq| format!("{}{seq}", crate::archive::TOKEN_PREFIX)),
                            }
                        });
                    reply_to(&client, reply, r).await;
                });
            }
            Err(e) => self.reply::<()>(reply, Err(e)).await,
        }
    }

    pub(super) async fn reply<T: serde::Serialize>(
        &self,
        to: Option<async_nats::Subject>,
        r: Result<T, ApiError>,
    ) {
        reply_to(self.client, to, r).await;
    }

    /// A page of `ListServiceJobs`: the jobs in the state first, then
    /// (for a status a finished job can have) the archive's, which are
    /// read beside the loop.
    fn list(&self, caller: &Caller, l: &ListServiceJobs, now: u64) -> Result<Listed, ApiError> {
        allowed_read(caller, &l.job_queue, l.quota_share_name.as_deref())?;
        let qs = self.state.queues.get(&l.job_queue).ok_or_else(|| {
            api::error(
                ErrorCode::NotFound,
                format!("no job queue {:?}", l.job_queue),
            )
        })?;
        let bad_token = |t: &str| {
            api::error(
                ErrorCode::Invalid,
                format!("nextToken {t:?} is not one this API returned"),
            )
        };
        let max = page_size(l);
        let archived_too = l
            .job_status
            .as_deref()
            .is_none_or(|s| s == "SUCCEEDED" || s == "FAILED");
        let start: usize = match &l.next_token {
            Some(t) => match t.strip_prefix(crate::archive::TOKEN_PREFIX) {
                Some(seq) => {
                    let from = seq.parse().map_err(|_| bad_token(t))?;
                    return Ok(Listed::Archive {
                        page: Vec::new(),
                        from,
                    });
                }
                None => t.parse().map_err(|_| bad_token(t))?,
            },
            None => 0,
        };
        let mut matching = qs.cluster.jobs().filter(|j| {
            l.job_status
                .as_deref()
                .is_none_or(|s| j.status.as_str() == s)
                && l.quota_share_name
                    .as_deref()
                    .is_none_or(|s| qs.cluster.share_config(j.spec.share).name == s)
                && readable(
                    caller,
                    &l.job_queue,
                    &qs.cluster.share_config(j.spec.share).name,
                )
        });
        let page: Vec<_> = matching
            .by_ref()
            .skip(start)
            .take(max)
            .map(|j| self.state.service_job(&l.job_queue, j.id, now))
            .collect();
        let more = matching.next().is_some();
        if more {
            return Ok(Listed::Done(ListServiceJobsResponse {
                next_token: Some((start + page.len()).to_string()),
                job_summary_list: page,
            }));
        }
        if !archived_too {
            return Ok(Listed::Done(ListServiceJobsResponse {
                next_token: None,
                job_summary_list: page,
            }));
        }
        if page.len() == max {
            // Full: the next page starts in the archive.
            return Ok(Listed::Done(ListServiceJobsResponse {
                next_token: Some(format!("{}1", crate::archive::TOKEN_PREFIX)),
                job_summary_list: page,
            }));
        }
        Ok(Listed::Archive { page, from: 1 })
    }

    /// A queue's usage per share, and the front of its queue (only the jobs
    /// the caller may read: another team's jobs carry its commands).
    fn snapshot(
        &self,
        caller: &Caller,
        queue: &str,
        now: u64,
    ) -> Result<JobQueueSnapshot, ApiError> {
        let qs =
            self.state.queues.get(queue).ok_or_else(|| {
                api::error(ErrorCode::NotFound, format!("no job queue {queue:?}"))
            })?;
        let c = &qs.cluster;
        let mut front = Vec::new();
        let mut share_fronts = Vec::new();
        let mut shares = Vec::new();
        let mut lost_work = Vec::new();
        let mut budgets = Vec::new();
        for s in c.share_indices() {
            let mine = readable(caller, queue, &c.share_config(s).name);
            if mine {
                budgets.extend(crate::state::usage::burn_down(c, s, now));
            }
            if let Some(lost) = lost_work_of(c, s) {
                lost_work.push(lost);
            }
            let mut first: Option<(std::cmp::Reverse<u32>, qm_core::Time, qm_core::JobId)> = None;
            for t in 0..c.type_count() {
                let t = qm_core::TypeIdx(t as u16);
                if mine {
                    let line = c.runnable_in_order(s, t);
                    let head = line
                        .first()
                        .and_then(|id| c.job(*id))
                        .map(|j| (std::cmp::Reverse(j.spec.priority), j.runnable_since, j.id));
                    first = match (first, head) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    front.extend(line.into_iter().take(SNAPSHOT_FRONT));
                }
                let u = c.share_usage(s, t);
                if u.entitlement > 0 || u.used > 0 {
                    shares.push(ShareUsage {
                        quota_share_name: c.share_config(s).name.clone(),
                        instance_type: c.type_name(t).to_string(),
                        entitlement: u.entitlement,
                        used: u.used,
                        borrowed: u.borrowed,
                        lent: u.lent,
                        idle: u.idle,
                    });
                }
            }
            if let Some((_, _, id)) = first {
                share_fronts.push(id);
            }
        }
        let mut front: Vec<_> = front
            .into_iter()
            .filter_map(|id| c.job(id))
            .map(|j| (std::cmp::Reverse(j.spec.priority), j.runnable_since, j.id))
            .collect();
        front.sort();
        Ok(JobQueueSnapshot {
            job_queue: queue.into(),
            front_of_queue: front
                .into_iter()
                .take(SNAPSHOT_FRONT)
                .map(|(_, _, id)| self.state.service_job(queue, id, now))
                .collect(),
            shares,
            front_of_quota_shares: share_fronts
                .into_iter()
                .map(|id| self.state.service_job(queue, id, now))
                .collect(),
            lost_work,
            budgets,
        })
    }
}

/// Front-of-queue jobs a snapshot shows.
const SNAPSHOT_FRONT: usize = 20;

/// Share `s`'s lost-work totals as `GetJobQueueSnapshot` shows them (None
/// when it has neither lost work nor been the beneficiary of others').
fn lost_work_of(c: &qm_core::Cluster, s: qm_core::ShareIdx) -> Option<ShareLostWork> {
    let ledger = c.lost_work(s);
    let total = |w: &qm_core::LostWork| LostWorkTotal {
        attempts: w.attempts,
        recomputed_instance_ms: w.recomputed_instance_ms,
    };
    if ledger.is_empty() {
        return None;
    }
    Some(ShareLostWork {
        quota_share_name: c.share_config(s).name.clone(),
        by_cause: ledger
            .lost_by_cause()
            .map(|(cause, w)| (cause.as_str().to_string(), total(&w)))
            .collect(),
        lost_for_this_share: total(&ledger.lost_for_this_share),
        restored_bytes: ledger.restored_bytes,
    })
}

fn readable(caller: &Caller, queue: &str, share: &str) -> bool {
    authorize(caller, Action::ReadJob { queue, share }).is_ok()
}

/// What the loop could answer of a listing by itself.
enum Listed {
    Done(ListServiceJobsResponse),
    /// The live part (`page`), to be completed from the archive, from
    /// stream sequence `from`.
    Archive {
        page: Vec<qm_wire::messages::ServiceJob>,
        from: u64,
    },
}

fn page_size(l: &ListServiceJobs) -> usize {
    l.max_results.unwrap_or(100).clamp(1, 1000) as usize
}

/// The job, if `caller` may read it.
fn readable_job(
    caller: &Caller,
    job: qm_wire::messages::ServiceJob,
) -> Result<qm_wire::messages::ServiceJob, ApiError> {
    allowed(
        caller,
        Action::ReadJob {
            queue: &job.job_queue,
            share: &job.quota_share_name,
        },
    )?;
    Ok(job)
}

async fn reply_to<T: serde::Serialize>(
    client: &async_nats::Client,
    to: Option<async_nats::Subject>,
    r: Result<T, ApiError>,
) {
    if let Some(to) = to {
        let _ = client.publish(to, encode(&r)).await;
    }
}
