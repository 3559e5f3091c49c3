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
        let name = |j: JobId| {
            qs.meta
                .get(&j)
                .map_or_else(|| j.to_string(), |m| m.public_id.clone())
        };
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
        };
        let preempted: Vec<AttemptDetail> = job
            .attempts
            .iter()
            .filter(|a| a.outcome.is_some_and(AttemptOutcome::is_preemption))
            .map(detail)
            .collect();
        ServiceJob {
            job_id: meta.public_id.clone(),
            job_name: meta.submit.job_name.clone(),
            job_queue: q.into(),
            quota_share_name: meta.submit.quota_share_name.clone().unwrap_or_default(),
            status: job.status.as_str().into(),
            status_reason: reason.render(&name),
            instance_type: meta.submit.instance_type.clone(),
            instance_count: job.spec.count,
            scheduling_priority: job.spec.priority,
            on_borrowed_capacity: qs.cluster.is_on_borrowed_capacity(id),
            created_at: job.submitted_at.as_millis(),
            attempts: job.attempts.iter().map(detail).collect(),
            preemption_summary: (!preempted.is_empty()).then(|| PreemptionSummary {
                preempted_attempt_count: preempted.len() as u32,
                recent_preempted_attempts: preempted.into_iter().rev().take(5).collect(),
            }),
            runnable_since: (job.status == JobStatus::Runnable)
                .then(|| job.runnable_since.as_millis()),
            tags: meta.submit.tags.clone(),
        }
    }
}
