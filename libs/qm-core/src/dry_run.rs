//! Dry runs of configuration changes: what a change would do to running and
//! waiting work, computed on a copy of the cluster.

use crate::cluster::Cluster;
use crate::config::{ConfigError, QueueConfig};
use crate::ids::JobId;
use crate::pass::Plan;
use crate::reason::NeverFits;
use crate::time::Time;

/// What applying a queue configuration would do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DryRun {
    /// Running jobs that would be on borrowed capacity (preemptible by reclaim)
    /// and are not now.
    pub become_preemptible: Vec<JobId>,
    /// Running jobs that are preemptible now and would no longer be.
    pub become_protected: Vec<JobId>,
    /// RUNNABLE jobs that could never run under the new configuration.
    pub become_unfittable: Vec<(JobId, NeverFits)>,
    /// Jobs that deleting shares would stop or fail.
    pub terminated: Vec<JobId>,
    /// The pass that would follow the change at `now`.
    pub next_pass: Plan,
}

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
            next_pass: Plan::default(),
        };
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
                let (s, t, c, k) = (
                    job.spec.share,
                    job.spec.instance_type,
                    job.spec.count,
                    job.spec.checkpoints,
                );
                if let Some(limit) = after.never_fits(s, t, c, k) {
                    if self.never_fits(s, t, c, k).is_none() {
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
