//! What users read of the state: `DescribeServiceJob` and the job records
//! lists and snapshots are made of.

use qm_core::{AttemptOutcome, JobId, JobStatus, StatusReason, Time};
use qm_wire::messages::{AttemptDetail, PreemptionSummary, ServiceJob};

use super::State;

impl State {
    pub fn describe(&self, job_id: &str, now: u64) -> Option<ServiceJob> {
        if let Some(r) = self.rejected.get(job_id) {
            return Some(ServiceJob {
                job_id: job_id.into(),
                job_name: r.submit.job_name.clone(),
                job_queue: r.submit.job_queue.clone(),
                quota_share_name: r.submit.quota_share_name.clone().unwrap_or_default(),
                status: "FAILED".into(),
                status_reason: format!("REJECTED: {}", r.reason),
                instance_type: r.submit.instance_type.clone(),
                instance_count: r.submit.instance_count.unwrap_or(1),
                scheduling_priority: r.submit.scheduling_priority.unwrap_or(0),
                created_at: r.at,
                ..Default::default()
            });
        }
        let (q, id) = self.locate(job_id)?;
        Some(self.service_job(&q, id, now))
    }

    pub fn service_job(&self, q: &str, id: JobId, now: u64) -> ServiceJob {
        let qs = &self.queues[q];
        let job = qs.cluster.job(id).expect("known job");
        let meta = &qs.meta[&id];
        let submit = meta.submit.get();
        let name = |j: JobId| qs.public_id(j);
        let reason = match job.status {
            JobStatus::Runnable => qs
                .cluster
                .explain(id, Time(now))
                .map_or(job.status_reason, StatusReason::Waiting),
            _ => job.status_reason,
        };
        let detail = |a: &qm_core::Attempt| AttemptDetail {
            attempt: a.number,
            executor_id: a
                .placement
                .first()
                .map(|r| qs.cluster.node(r.node).name.clone()),
            scheduled_at: Some(a.scheduled_at.as_millis()),
            started_at: a.started_at.map(Time::as_millis),
            stopped_at: a.stopped_at.map(Time::as_millis),
            exit_code: a.exit_code,
            outcome: a.outcome.map(|o| o.as_str().into()),
            restored_checkpoint_step: a.restored.map(|c| c.step),
            last_checkpoint_step: a.last_checkpoint.map(|c| c.step),
            recomputed_ms: job.lost_work_ms(a.number),
            preempted_for_job_id: a.preempted_for.map(name),
            preempted_for_share: a.preempted_for.and_then(|b| {
                qs.cluster
                    .job(b)
                    .map(|b| qs.cluster.share_config(b.spec.share).name.clone())
            }),
            restored_bytes: (a.restored_bytes > 0).then_some(a.restored_bytes),
            restore_skipped: a.restore_skipped.clone(),
            checkpoint_upload_failing_since: a.checkpoint_lag.as_ref().map(|(t, _)| t.as_millis()),
            checkpoint_upload_error: a.checkpoint_lag.as_ref().map(|(_, e)| e.clone()),
            status_reason: meta.attempt_reason(a.number).cloned(),
            progress: meta
                .start_progress()
                .filter(|(n, _)| *n == a.number && a.running_at.is_none())
                .map(|(_, doing)| doing.clone()),
        };
        let preempted: Vec<AttemptDetail> = job
            .attempts
            .iter()
            .filter(|a| a.outcome.is_some_and(AttemptOutcome::is_preemption))
            .map(detail)
            .collect();
        ServiceJob {
            job_id: meta.public_id.to_string(),
            job_name: submit.job_name,
            job_queue: q.into(),
            quota_share_name: submit.quota_share_name.unwrap_or_default(),
            status: job.status.as_str().into(),
            status_reason: reason.render(&name),
            instance_type: submit.instance_type,
            instance_count: job.spec.count,
            scheduling_priority: job.spec.priority,
            workload_class: (!qs.cluster.share_config(job.spec.share).classes.is_empty()).then(
                || {
                    qs.cluster
                        .share_config(job.spec.share)
                        .class_name(job.spec.class.as_deref())
                        .to_string()
                },
            ),
            on_borrowed_capacity: qs.cluster.is_on_borrowed_capacity(id),
            created_at: job.submitted_at.as_millis(),
            attempts: job.attempts.iter().map(detail).collect(),
            preemption_summary: (!preempted.is_empty()).then(|| PreemptionSummary {
                preempted_attempt_count: preempted.len() as u32,
                recent_preempted_attempts: preempted.into_iter().rev().take(5).collect(),
            }),
            runnable_since: (job.status == JobStatus::Runnable)
                .then(|| job.runnable_since.as_millis()),
            tags: submit.tags,
            container_image: submit.container_image,
            trace_id: None,
        }
    }
}

/// `DryRunServiceJob` and `ExplainServiceJob`: what the next pass would do
/// for a job, from the core's own pass on a copy of the state.
impl State {
    /// Foresees a submit (validated by admission); the job is not stored.
    pub fn dry_run(
        &self,
        job: &qm_wire::messages::SubmitServiceJob,
        may_read: &dyn Fn(&str) -> bool,
        now: u64,
    ) -> Result<qm_wire::messages::JobOutlook, String> {
        let qs = self
            .queues
            .get(&job.job_queue)
            .ok_or_else(|| format!("no job queue {:?}", job.job_queue))?;
        let mut cluster = qs.cluster.clone();
        let spec = qm_wire::to_core::job_spec(job, &mut cluster).map_err(|problems| {
            problems
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        })?;
        let outlook = cluster
            .dry_run_submit(spec, Time(now))
            .map_err(|e| format!("job rejected: {e}"))?;
        Ok(self.outlook_view(&job.job_queue, &cluster, outlook, may_read, now))
    }

    /// A known job's queue and share.
    pub fn share_of(&self, job_id: &str) -> Option<(String, String)> {
        let (q, id) = self.locate(job_id)?;
        let c = &self.queues[&q].cluster;
        let share = c.share_config(c.job(id)?.spec.share).name.clone();
        Some((q, share))
    }

    /// Explains a known job (None: not in the state).
    pub fn explain_job(
        &self,
        job_id: &str,
        may_read: &dyn Fn(&str) -> bool,
        now: u64,
    ) -> Option<qm_wire::messages::JobOutlook> {
        let (q, id) = self.locate(job_id)?;
        let qs = &self.queues[&q];
        let outlook = qs.cluster.outlook(id, Time(now))?;
        let mut view = self.outlook_view(&q, &qs.cluster, outlook, may_read, now);
        view.job_id = Some(job_id.to_string());
        Some(view)
    }

    /// A job a placement would stop, named only as far as the caller may
    /// read it.
    fn victim_view(
        &self,
        q: &str,
        cluster: &qm_core::Cluster,
        v: qm_core::dry_run::Victim,
        may_read: &dyn Fn(&str) -> bool,
    ) -> qm_wire::messages::OutlookVictim {
        let qs = &self.queues[q];
        let share = cluster
            .job(v.job)
            .map(|job| cluster.share_config(job.spec.share).name.clone())
            .unwrap_or_default();
        qm_wire::messages::OutlookVictim {
            job_id: qs
                .meta
                .get(&v.job)
                .map_or_else(|| v.job.to_string(), |m| m.public_id.to_string()),
            job_name: may_read(&share)
                .then(|| qs.meta.get(&v.job).map(|m| m.submit.job_name()))
                .flatten(),
            quota_share_name: share,
            kind: v.kind.as_str().into(),
            work_at_risk_seconds: v.work_at_risk_ms as f64 / 1000.0,
        }
    }

    /// `DryRunUpdateQuotaShare`: what a configuration admission checked
    /// (and did not store) would do now (`qm_core::dry_run`).
    pub fn dry_run_queue(
        &self,
        doc: &qm_wire::system::QueueDocument,
        may_read: &dyn Fn(&str) -> bool,
        now: u64,
    ) -> Result<qm_wire::messages::QueueChangeOutlook, qm_wire::messages::ApiError> {
        use qm_wire::messages::{AffectedJob, ErrorCode};
        let q = doc.job_queue.job_queue_name.as_str();
        let qs = self.queues.get(q).ok_or_else(|| {
            qm_service::api::error(ErrorCode::NotFound, format!("no job queue {q:?}"))
        })?;
        let config = qm_wire::to_core::queue(doc).map_err(|p| {
            qm_service::api::invalid("invalid queue configuration", qm_service::api::problems(&p))
        })?;
        let c = &qs.cluster;
        let report = c.dry_run_queue(config, Time(now)).map_err(|e| {
            qm_service::api::invalid(
                "configuration change refused",
                qm_service::api::problems(&e.0),
            )
        })?;
        let affected = |id: JobId, detail: String| {
            let share = c
                .job(id)
                .map(|j| c.share_config(j.spec.share).name.clone())
                .unwrap_or_default();
            let meta = qs.meta.get(&id);
            AffectedJob {
                job_id: meta.map_or_else(|| id.to_string(), |m| m.public_id.to_string()),
                job_name: may_read(&share)
                    .then(|| meta.map(|m| m.submit.job_name()))
                    .flatten(),
                quota_share_name: share,
                detail,
            }
        };
        let plain = |ids: &[JobId]| ids.iter().map(|id| affected(*id, String::new())).collect();
        Ok(qm_wire::messages::QueueChangeOutlook {
            job_queue: q.to_string(),
            become_preemptible: plain(&report.become_preemptible),
            become_protected: plain(&report.become_protected),
            become_unfittable: report
                .become_unfittable
                .iter()
                .map(|(id, why)| affected(*id, why.describe()))
                .collect(),
            reclassified: report
                .reclassified
                .iter()
                .map(|(id, class, priority)| {
                    let class = class.as_deref().unwrap_or("default");
                    affected(*id, format!("class {class}, priority {priority}"))
                })
                .collect(),
            terminated: plain(&report.terminated),
            next_pass_starts: report
                .next_pass
                .starts
                .iter()
                .map(|s| {
                    affected(
                        s.job,
                        format!("{} instance(s), {} borrowed", s.count, s.borrowed),
                    )
                })
                .collect(),
            next_pass_preemptions: report
                .next_pass
                .preemptions
                .iter()
                .map(|p| {
                    let v = qm_core::dry_run::Victim {
                        job: p.job,
                        kind: p.kind,
                        work_at_risk_ms: c.job(p.job).map_or(0, |j| j.work_at_risk(Time(now))),
                    };
                    self.victim_view(q, c, v, may_read)
                })
                .collect(),
        })
    }

    /// `GetReclaimExposure`: which of a share's borrowed jobs each lender's
    /// submit would stop now (`qm_core::outlook`).
    pub fn reclaim_exposure(
        &self,
        g: &qm_wire::messages::GetReclaimExposure,
        may_read: &dyn Fn(&str) -> bool,
        now: u64,
    ) -> Result<qm_wire::messages::ReclaimExposure, qm_wire::messages::ApiError> {
        use qm_wire::messages::ErrorCode;
        let not_found = |what: String| qm_service::api::error(ErrorCode::NotFound, what);
        let qs = self
            .queues
            .get(&g.job_queue)
            .ok_or_else(|| not_found(format!("no job queue {:?}", g.job_queue)))?;
        let c = &qs.cluster;
        let s = c.share_idx(&g.quota_share_name).ok_or_else(|| {
            not_found(format!(
                "no quota share {:?} in job queue {:?}",
                g.quota_share_name, g.job_queue
            ))
        })?;
        let public = |j: JobId| {
            qs.meta
                .get(&j)
                .map_or_else(|| j.to_string(), |m| m.public_id.to_string())
        };
        let exposures = c
            .reclaim_exposure(s, Time(now))
            .into_iter()
            .map(|e| qm_wire::messages::LenderExposure {
                lending_share: c.share_config(e.lender).name.clone(),
                instance_type: c.type_name(e.instance_type).to_string(),
                lent: e.lent,
                victims: e
                    .victims
                    .into_iter()
                    .map(|v| self.victim_view(&g.job_queue, c, v, may_read))
                    .collect(),
                waits: e.waits.map(|r| StatusReason::Waiting(r).render(&public)),
            })
            .collect();
        Ok(qm_wire::messages::ReclaimExposure {
            job_queue: g.job_queue.clone(),
            quota_share_name: g.quota_share_name.clone(),
            exposures,
        })
    }

    fn outlook_view(
        &self,
        q: &str,
        cluster: &qm_core::Cluster,
        outlook: qm_core::dry_run::JobOutlook,
        may_read: &dyn Fn(&str) -> bool,
        now: u64,
    ) -> qm_wire::messages::JobOutlook {
        use qm_core::dry_run::JobOutlook as O;
        let qs = &self.queues[q];
        let public = |j: JobId| {
            qs.meta
                .get(&j)
                .map_or_else(|| j.to_string(), |m| m.public_id.to_string())
        };
        let mut view = qm_wire::messages::JobOutlook::default();
        match outlook {
            O::Starts {
                borrowed,
                own,
                lenders,
            } => {
                view.outcome = "STARTS".into();
                view.own_instances = own;
                view.borrowed_instances = borrowed;
                view.lending_shares = lenders
                    .into_iter()
                    .map(|s| cluster.share_config(s).name.clone())
                    .collect();
            }
            O::Preempts { victims } => {
                view.outcome = "PREEMPTS".into();
                view.victims = victims
                    .into_iter()
                    .map(|v| self.victim_view(q, cluster, v, may_read))
                    .collect();
            }
            O::Waits {
                reason,
                ahead,
                position,
                estimate,
            } => {
                use qm_core::outlook::StartEstimate as E;
                view.outcome = "WAITS".into();
                view.status_reason = Some(StatusReason::Waiting(reason).render(&public));
                view.unblock = Some(reason.unblock());
                view.ahead = ahead.into_iter().map(public).collect();
                view.position_in_line = Some(u32::try_from(position).unwrap_or(u32::MAX));
                match estimate {
                    E::Now => view.estimated_start = Some(now),
                    E::At(t) => view.estimated_start = Some(t.as_millis()),
                    E::Unknown {
                        without_estimate,
                        beyond,
                    } => {
                        view.estimate_note = Some(match beyond {
                            Some(t) => format!(
                                "not before {} ms: more than {} jobs end before it starts",
                                t.as_millis(),
                                qm_core::outlook::PROJECTION_ENDS
                            ),
                            None => format!(
                                "unknown: {without_estimate} running job(s) hold what it needs and declare no estimatedRuntimeSeconds or attempt timeout"
                            ),
                        })
                    }
                }
            }
            O::NotWaiting(status) => {
                view.outcome = "NOT_WAITING".into();
                view.status = Some(status.as_str().into());
            }
        }
        view
    }
}
