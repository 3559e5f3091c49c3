//! Events in virtual time: the simulated executor's reports (ranks
//! running, checkpoints, exits, stops done) and the scheduler's stop
//! requests, applied to the jobs and the core.

use qm_core::{CheckpointMark, JobId, NodeId, RankExit};

use crate::trace::{RankPhase, Recorded};

use super::{Ev, Phase, SimError, Simulation};

impl Simulation {
    pub(super) fn handle(&mut self, ev: Ev) -> Result<(), SimError> {
        let now = self.now;
        match ev {
            Ev::Action(i) => match self.action(i) {
                Err(SimError::Action { index, at, message })
                    if !self.options.strict && self.actions[index].verb_count() == 1 =>
                {
                    let a = &self.actions[index];
                    self.recorder
                        .rejected_actions
                        .push(crate::report::RejectedOut {
                            t: at,
                            action: index,
                            verb: a.verb().into(),
                            job_name: a.job_name().map(str::to_string),
                            error_code: "ClientException".into(),
                            message,
                        });
                }
                other => other?,
            },
            Ev::Generate => self.generate()?,
            Ev::Wake => {
                self.wakes.remove(&now);
            }
            Ev::Running(id, n) => {
                if self.jobs[(id.0 - 1) as usize].phase != Phase::Starting(n) {
                    return Ok(());
                }
                for node in self.rank_nodes(id) {
                    self.cluster
                        .rank_running(id, n, node, now)
                        .expect("attempt is current");
                    self.record_rank(id, n, node, RankPhase::Running);
                }
                let job = self.job(id);
                job.phase = Phase::Running(n);
                job.run_from = Some((now, job.committed));
                let left = job.duration - job.committed;
                let next_mark = job
                    .interval
                    .map(|i| (job.committed / i + 1) * i)
                    .filter(|m| *m < job.duration);
                let failure = job.failures.iter().find(|f| f.0 == n).map(|f| (f.1, f.2));
                let committed = job.committed;
                match failure {
                    Some((after, code)) if after < left => {
                        self.push(now.plus_millis(after), Ev::Fail(id, n, code))
                    }
                    _ => self.push(now.plus_millis(left), Ev::Complete(id, n)),
                }
                if let Some(mark) = next_mark {
                    self.push(
                        now.plus_millis(mark - committed),
                        Ev::Checkpoint(id, n, mark),
                    );
                }
            }
            Ev::Asked(id, n) => {
                if !self.live(id, n) || self.cluster.checkpoint_first(id).is_none() {
                    return Ok(());
                }
                let mark = self.job(id).progress(now);
                self.commit(id, n, mark);
            }
            Ev::Checkpoint(id, n, mark) => {
                if !self.live(id, n) {
                    return Ok(());
                }
                self.commit(id, n, mark);
                let job = self.job(id);
                if let Some(next) = job.interval.map(|i| mark + i).filter(|m| *m < job.duration) {
                    self.push(now.plus_millis(next - mark), Ev::Checkpoint(id, n, next));
                }
            }
            Ev::Complete(id, n) => {
                if !self.live(id, n) {
                    return Ok(());
                }
                let job = self.job(id);
                job.committed = job.duration;
                job.run_from = None;
                self.end_ranks(id, n, Some(0), Some(0));
            }
            Ev::Fail(id, n, code) => {
                if !self.live(id, n) {
                    return Ok(());
                }
                let job = self.job(id);
                job.recomputed += job.progress(now) - job.committed;
                job.run_from = None;
                job.phase = Phase::Waiting;
                // Rank 0 fails; the core has the others stopped (by signal).
                self.end_ranks(id, n, Some(code), None);
            }
            Ev::StopDone(id, n) => {
                if self.jobs[(id.0 - 1) as usize].phase != Phase::Stopping(n) {
                    return Ok(());
                }
                self.job(id).phase = Phase::Waiting;
                let code = if self.jobs[(id.0 - 1) as usize].checkpoint_on_stop {
                    Some(0)
                } else {
                    None
                };
                self.end_ranks(id, n, code, code);
            }
        }
        self.record_events();
        Ok(())
    }

    /// The scheduler asked a running job to stop: its work stops now.
    pub(super) fn request_stop(&mut self, id: JobId) {
        let now = self.now;
        let cancelled = self
            .cluster
            .job(id)
            .is_some_and(|j| j.stopping == Some(qm_core::StopCause::Cancelled));
        let job = self.job(id);
        let attempt = match job.phase {
            Phase::Starting(n) | Phase::Running(n) => n,
            _ => return,
        };
        let progress = job.progress(now);
        if job.checkpoint_on_stop {
            job.committed = progress;
            job.committed_at = Some(now);
        } else if !cancelled {
            // Lost work is recomputed by the next attempt; a cancelled job has none.
            job.recomputed += progress - job.committed;
        }
        job.run_from = None;
        job.phase = Phase::Stopping(attempt);
        let stop = job.stop;
        self.push(now.plus_millis(stop), Ev::StopDone(id, attempt));
    }

    /// The nodes of the job's current attempt, in rank order.
    pub(super) fn rank_nodes(&self, id: JobId) -> Vec<NodeId> {
        self.cluster
            .job(id)
            .and_then(|j| j.current_attempt())
            .map(|a| a.placement.iter().map(|r| r.node).collect())
            .unwrap_or_default()
    }

    /// Every rank of the attempt ends, the first with `first` and the
    /// others with `rest` (the core then ends the attempt by its gang rules).
    fn end_ranks(&mut self, id: JobId, n: u32, first: Option<i32>, rest: Option<i32>) {
        let now = self.now;
        for (i, node) in self.rank_nodes(id).into_iter().enumerate() {
            let code = if i == 0 { first } else { rest };
            self.cluster
                .rank_ended(id, n, node, RankExit::Exited(code), now)
                .expect("attempt is current");
            self.record_rank(id, n, node, RankPhase::Ended(code));
        }
    }

    /// The job's host is gone: its uncommitted work is lost.
    pub(super) fn lose(&mut self, id: JobId) {
        let now = self.now;
        let job = self.job(id);
        job.recomputed += job.progress(now) - job.committed;
        job.run_from = None;
        job.phase = Phase::Waiting;
    }

    /// The attempt commits a checkpoint holding `mark` ms of work; one a
    /// checkpoint-first window waited for lets the stop go ahead.
    fn commit(&mut self, id: JobId, n: u32, mark: u64) {
        let now = self.now;
        let step = mark / 1000;
        let answered = self
            .cluster
            .checkpoint_committed(id, n, CheckpointMark { at: now, step })
            .expect("attempt is current");
        if self.trace.is_some() {
            let job = self.job_name(id);
            self.record(Recorded::Checkpoint {
                at: now,
                job,
                attempt: n,
                step,
            });
        }
        let job = self.job(id);
        job.committed = mark;
        job.committed_at = Some(now);
        if answered {
            self.request_stop(id);
        }
    }

    fn live(&self, id: JobId, attempt: u32) -> bool {
        matches!(self.jobs[(id.0 - 1) as usize].phase, Phase::Running(n) if n == attempt)
    }
}
