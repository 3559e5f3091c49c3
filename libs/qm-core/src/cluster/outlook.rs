//! When a waiting job is expected to start and what a share is exposed
//! to: the passes replayed on a copy of the state (`crate::outlook` holds
//! what they answer). Above the pass, which they run.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::dry_run::{JobOutlook, Victim};
use crate::ids::{JobId, ShareIdx, TypeIdx};
use crate::job::{JobSpec, JobStatus};
use crate::nodes::RankExit;
use crate::outlook::*;
use crate::time::Time;

use super::Cluster;

/// Passes at one instant of a projection (as the simulator's
/// `MAX_PASSES_PER_INSTANT`: a pass's preemptions free capacity the next
/// pass places).
const PASSES_PER_INSTANT: usize = 8;

impl Cluster {
    /// When the RUNNABLE job `id` is expected to start: the passes replayed
    /// on a copy of the cluster, each running job ending at its attempt's
    /// start plus its expected run, every stop taking effect at once, until
    /// a pass places `id`. None: `id` is not waiting.
    pub fn projected_start(&self, id: JobId, now: Time) -> Option<StartEstimate> {
        let job = self.job(id)?;
        if !matches!(job.status, JobStatus::Runnable | JobStatus::Submitted) {
            return None;
        }
        self.clone().project_start(id, now)
    }

    /// [`Cluster::projected_start`] on this copy, which it uses up (a
    /// caller that already holds a copy saves cloning another).
    pub(crate) fn project_start(self, id: JobId, now: Time) -> Option<StartEstimate> {
        self.project_start_from(id, now, None)
    }

    /// [`Cluster::project_start`], `first` the plan this copy's pass at
    /// `now` makes, if the caller has it already (saves computing it again).
    pub(crate) fn project_start_from(
        self,
        id: JobId,
        now: Time,
        mut first: Option<crate::pass::Plan>,
    ) -> Option<StartEstimate> {
        let mut c = self;
        let mut ends: BinaryHeap<Reverse<(Time, JobId, u32)>> = BinaryHeap::new();
        for j in c.jobs().filter(|j| j.status.holds_instances()) {
            if let Some(end) = expected_end(j, now) {
                ends.push(Reverse(end));
            }
        }
        let mut t = now;
        for _ in 0..PROJECTION_ENDS {
            let mut wake: Option<Time> = None;
            for _ in 0..PASSES_PER_INSTANT {
                let plan = match first.take() {
                    Some(plan) => plan,
                    None => c.schedule(t),
                };
                c.apply(&plan);
                wake = plan.wake_at;
                let placed = plan.starts.iter().any(|s| s.job == id);
                for start in &plan.starts {
                    c.run_all_ranks(start.job, t);
                    if let Some(end) = c.job(start.job).and_then(|j| expected_end(j, t)) {
                        ends.push(Reverse(end));
                    }
                }
                if placed {
                    return Some(if t == now {
                        StartEstimate::Now
                    } else {
                        StartEstimate::At(t)
                    });
                }
                let stops: Vec<JobId> = plan
                    .preemptions
                    .iter()
                    .map(|p| p.job)
                    .chain(plan.budget_stops.iter().copied())
                    .chain(plan.timeouts.iter().copied())
                    .chain(plan.checkpoint_deadlines.iter().copied())
                    .chain(plan.drill_stops.iter().copied())
                    .collect();
                for stopped in &stops {
                    c.end_all_ranks(*stopped, None, t);
                }
                if plan.is_empty() {
                    break;
                }
            }
            if !c
                .job(id)
                .is_some_and(|j| matches!(j.status, JobStatus::Runnable | JobStatus::Submitted))
            {
                return None;
            }
            // The next moment anything changes: a job's expected end, or a
            // time the pass asked to be woken at (a protection or budget).
            let next_end = loop {
                match ends.peek() {
                    Some(Reverse((_, j, n))) if !c.attempt_is_current(*j, *n) => {
                        ends.pop();
                    }
                    Some(Reverse(e)) => break Some(*e),
                    None => break None,
                }
            };
            let wake = wake.filter(|w| *w > t);
            match next_end {
                Some((end, j, _)) if wake.is_none_or(|w| end <= w) => {
                    t = end.max(t);
                    ends.pop();
                    c.end_all_ranks(j, Some(0), t);
                }
                _ => match wake {
                    Some(w) => t = w,
                    None => {
                        return Some(StartEstimate::Unknown {
                            without_estimate: c.running_without_estimate(),
                            beyond: None,
                        })
                    }
                },
            }
        }
        Some(StartEstimate::Unknown {
            without_estimate: c.running_without_estimate(),
            beyond: Some(t),
        })
    }

    /// Jobs holding instances whose end cannot be foreseen (no expected run).
    fn running_without_estimate(&self) -> u32 {
        self.jobs()
            .filter(|j| j.status.holds_instances() && expected_end(j, Time(0)).is_none())
            .count() as u32
    }

    fn attempt_is_current(&self, id: JobId, attempt: u32) -> bool {
        self.job(id)
            .and_then(|j| j.current_attempt())
            .is_some_and(|a| a.number == attempt)
    }

    /// Every rank of `id`'s current attempt starts and runs at `now`.
    fn run_all_ranks(&mut self, id: JobId, now: Time) {
        let Some((attempt, nodes)) = self.current_ranks(id) else {
            return;
        };
        for node in nodes {
            let _ = self.rank_starting(id, attempt, node, None.into(), now);
            let _ = self.rank_running(id, attempt, node, now);
        }
    }

    /// Every rank of `id`'s current attempt ends at `now` with `code`.
    fn end_all_ranks(&mut self, id: JobId, code: Option<i32>, now: Time) {
        let Some((attempt, nodes)) = self.current_ranks(id) else {
            return;
        };
        for node in nodes {
            let _ = self.rank_ended(id, attempt, node, RankExit::Exited(code), now);
        }
    }

    fn current_ranks(&self, id: JobId) -> Option<(u32, Vec<crate::nodes::NodeId>)> {
        let a = self.job(id)?.current_attempt()?;
        Some((a.number, a.placement.iter().map(|r| r.node).collect()))
    }

    /// Which of share `s`'s jobs on borrowed capacity each lender would
    /// stop if it submitted now: for every type `s` borrows and every share
    /// lending it some, the next pass after a submit of as many instances
    /// as that share lends (its default class, at the top of its class's
    /// band), on a copy of the cluster.
    pub fn reclaim_exposure(&self, s: ShareIdx, now: Time) -> Vec<Exposure> {
        let mut out = Vec::new();
        for t in (0..self.type_count()).map(|i| TypeIdx(i as u16)) {
            if self.borrowed_jobs(s, t).is_empty() {
                continue;
            }
            for (lender, usage) in self.usage_snapshot(t) {
                if lender == s || usage.lent == 0 {
                    continue;
                }
                let mut spec = JobSpec::new("reclaim-exposure", lender, t, usage.lent);
                spec.checkpoints = true;
                spec.priority = self.share_config(lender).rules(None).priority_max;
                let (victims, refused) = match self.dry_run_submit(spec, now) {
                    Ok(JobOutlook::Preempts { victims }) => (victims, None),
                    Ok(JobOutlook::Waits { reason, .. }) => (Vec::new(), Some(reason)),
                    Ok(_) => (Vec::new(), None),
                    Err(_) => continue,
                };
                let victims: Vec<Victim> = victims
                    .into_iter()
                    .filter(|v| self.job(v.job).is_some_and(|j| j.spec.share == s))
                    .collect();
                out.push(Exposure {
                    lender,
                    instance_type: t,
                    lent: usage.lent,
                    victims,
                    waits: refused,
                });
            }
        }
        out
    }
}

/// A running attempt's (time it is expected to end, job, attempt), if
/// its job declares an expected run; a job being stopped ends at once.
fn expected_end(job: &crate::job::Job, now: Time) -> Option<(Time, JobId, u32)> {
    let a = job.current_attempt()?;
    if job.stopping.is_some() {
        return Some((now, job.id, a.number));
    }
    let secs = job.spec.expected_runtime_secs()?;
    let from = a.running_at.or(a.started_at).unwrap_or(a.scheduled_at);
    Some((from.plus_secs(secs).max(now), job.id, a.number))
}
