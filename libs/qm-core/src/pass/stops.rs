//! The first phase of a pass: stops that are due. Checkpoint-first windows
//! that ran out, attempt timeouts, resume drills' subjects
//! (`crate::policy::drills`) and, for `CHECKPOINT_AND_STOP` shares whose
//! borrowing budget is spent (`crate::policy::budgets`), their jobs on
//! borrowed capacity.
//!
//! Guarantees afterwards: every stopped job's instances count as released
//! in the projection, and the pass wakes when the next stop is due.

use super::*;
use crate::policy::drills;

impl Pass<'_> {
    pub(super) fn stops_due(&mut self) {
        // Checkpoint-first windows that ran out: those stops go ahead (their
        // instances already count as released in the projection).
        for &(until, id) in &self.c.checkpoint_windows {
            if until > self.now {
                self.wake(until);
                break;
            }
            self.checkpoint_deadlines.push(id);
        }
        // Timeouts first: their instances count as released in the projection.
        for &(deadline, id) in &self.c.deadlines {
            if deadline > self.now {
                self.wake(deadline);
                break;
            }
            self.timeouts.push(id);
            self.release(id);
        }
        // Resume drills' subjects due to stop: released like timeouts.
        let (due, next) = drills::hooks::due(self.c, self.now);
        if let Some(at) = next {
            self.wake(at);
        }
        for id in due {
            if self.removed.contains(&id) {
                continue;
            }
            self.drill_stops.push(id);
            self.release(id);
        }
        let wakes: Vec<Time> = self.hooks.budgets.wakes().collect();
        for at in wakes {
            self.wake(at);
        }
        let spent: Vec<ShareIdx> = self.hooks.budgets.spent().collect();
        for s in spent {
            self.stop_borrowed(s);
        }
    }

    /// Takes a job out of the projection: it is being stopped.
    fn release(&mut self, id: JobId) {
        let job = self.job(id);
        self.removed.insert(id);
        self.views[job.spec.instance_type.index()].used[job.spec.share.index()] -= job.spec.count;
    }

    /// Share `s`'s jobs on borrowed capacity stop (its budget is spent):
    /// only as many as bring it within its entitlement, in every type.
    fn stop_borrowed(&mut self, s: ShareIdx) {
        let i = s.index();
        for t in 0..self.c.types.len() {
            let t = TypeIdx(t as u16);
            let view = &self.views[t.index()];
            let entitlement = view.entitlement[i];
            if view.used[i] <= entitlement {
                continue;
            }
            let mut stopped: Vec<RunKey> = Vec::new();
            for key in borrowed_jobs(&self.projected_running(s, t), entitlement) {
                let job = self.job(key.job);
                if job.stopping.is_some() || !job.status.holds_instances() {
                    continue;
                }
                self.views[t.index()].used[i] -= key.count;
                stopped.push(key);
            }
            // Only what brings the share within its entitlement: a job
            // that fits once the others are gone keeps running (the
            // higher-priority ones first).
            stopped.retain(|key| {
                let used = &mut self.views[t.index()].used[i];
                if *used + key.count <= entitlement {
                    *used += key.count;
                    false
                } else {
                    true
                }
            });
            for key in stopped {
                self.budget_stops.push(key.job);
                self.removed.insert(key.job);
            }
        }
    }
}
