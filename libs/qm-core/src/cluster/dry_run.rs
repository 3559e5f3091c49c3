//! What-ifs on the state: a configuration change or a job foreseen on a
//! copy of the cluster (`crate::dry_run` holds what they answer). Above the
//! pass, which they run (`tests/layers.rs`).

use crate::config::{ConfigError, QueueConfig};
use crate::dry_run::*;
use crate::ids::JobId;
use crate::plan::Plan;
use crate::time::Time;

use super::Cluster;

impl Cluster {
    /// Validates `queue` and reports what applying it at `now` would do,
    /// changing nothing.
    pub fn dry_run_queue(&self, queue: QueueConfig, now: Time) -> Result<DryRun, ConfigError> {
        let mut after = self.clone();
        let stops = after.update_queue(queue, now)?;
        let borrowed_before: Vec<JobId> = self
            .jobs()
            .filter(|j| self.is_on_borrowed_capacity(j.id))
            .map(|j| j.id)
            .collect();
        let mut report = DryRun {
            become_preemptible: Vec::new(),
            become_protected: Vec::new(),
            become_unfittable: Vec::new(),
            terminated: stops,
            reclassified: Vec::new(),
            next_pass: Plan::default(),
        };
        for job in after.jobs().filter(|j| !j.status.is_final()) {
            let Some(was) = self.jobs.get(&job.id) else {
                continue;
            };
            if was.spec.class != job.spec.class || was.spec.priority != job.spec.priority {
                report
                    .reclassified
                    .push((job.id, job.spec.class.clone(), job.spec.priority));
            }
        }
        for job in after.jobs() {
            let was = borrowed_before.contains(&job.id);
            let is = after.is_on_borrowed_capacity(job.id);
            if is && !was {
                report.become_preemptible.push(job.id);
            }
            if was && !is && job.status.holds_instances() && job.stopping.is_none() {
                report.become_protected.push(job.id);
            }
            if job.status == crate::job::JobStatus::Runnable {
                let (s, t, c) = (job.spec.share, job.spec.instance_type, job.spec.count);
                let before = self.jobs.get(&job.id).and_then(|j| j.borrow_bar);
                if let Some(limit) = after.never_fits(s, t, c, job.borrow_bar) {
                    if self.never_fits(s, t, c, before).is_none() {
                        report.become_unfittable.push((job.id, limit));
                    }
                }
            }
        }
        for event in after.drain_events() {
            if event.to == crate::job::JobStatus::Failed && !report.terminated.contains(&event.job)
            {
                report.terminated.push(event.job);
            }
        }
        report.terminated.sort();
        report.next_pass = after.schedule(now);
        Ok(report)
    }
}

impl Cluster {
    /// What submitting `spec` at `now` would do, changing nothing: its
    /// validation (the error a submit would get) and the next pass's
    /// decision for it.
    pub fn dry_run_submit(
        &self,
        spec: crate::job::JobSpec,
        now: Time,
    ) -> Result<JobOutlook, crate::cluster::JobError> {
        let mut after = self.clone();
        let id = after.submit(spec, now)?;
        Ok(after.into_outlook(id, now))
    }

    /// What the next pass would do for job `id` (`qm explain`), changing
    /// nothing.
    pub fn outlook(&self, id: JobId, now: Time) -> Option<JobOutlook> {
        let status = self.job(id)?.status;
        if !matches!(
            status,
            crate::job::JobStatus::Runnable | crate::job::JobStatus::Submitted
        ) {
            // Nothing to foresee, and no copy to make.
            return Some(JobOutlook::NotWaiting(status));
        }
        Some(self.clone().into_outlook(id, now))
    }

    /// The outlook of `id` on this copy of the cluster, which the
    /// projection of its start then uses up.
    fn into_outlook(self, id: JobId, now: Time) -> JobOutlook {
        let Some(job) = self.job(id) else {
            return JobOutlook::NotWaiting(crate::job::JobStatus::Failed);
        };
        if job.status != crate::job::JobStatus::Runnable
            && job.status != crate::job::JobStatus::Submitted
        {
            return JobOutlook::NotWaiting(job.status);
        }
        let (s, t) = (job.spec.share, job.spec.instance_type);
        let plan = self.schedule(now);
        if let Some(start) = plan.starts.iter().find(|st| st.job == id) {
            let lenders = self
                .usage_snapshot(t)
                .into_iter()
                .filter(|(share, u)| {
                    *share != s && u.idle > 0 && self.share_config(*share).strategy.lends()
                })
                .map(|(share, _)| share)
                .collect();
            return JobOutlook::Starts {
                borrowed: start.borrowed,
                own: start.count - start.borrowed,
                lenders: if start.borrowed > 0 {
                    lenders
                } else {
                    Vec::new()
                },
            };
        }
        let victims: Vec<Victim> = plan
            .preemptions
            .iter()
            .filter(|p| p.for_job == id)
            .map(|p| Victim {
                job: p.job,
                kind: p.kind,
                work_at_risk_ms: self.job(p.job).map_or(0, |j| j.work_at_risk(now)),
            })
            .collect();
        if !victims.is_empty() {
            return JobOutlook::Preempts { victims };
        }
        let reason = plan
            .reasons
            .iter()
            .find(|(j, _)| *j == id)
            .map(|(_, r)| *r)
            .or_else(|| self.explain(id, now))
            .unwrap_or(crate::reason::WaitReason::Queued);
        let line: Vec<JobId> = self
            .runnable_in_order(s, t)
            .into_iter()
            .take_while(|j| *j != id)
            .collect();
        let position = line.len();
        let ahead = line.into_iter().take(AHEAD_SHOWN).collect();
        // The projection uses up this copy, and starts from the plan made.
        let estimate =
            self.project_start_from(id, now, Some(plan))
                .unwrap_or(StartEstimate::Unknown {
                    without_estimate: 0,
                    beyond: None,
                });
        JobOutlook::Waits {
            reason,
            position,
            ahead,
            estimate,
        }
    }
}
