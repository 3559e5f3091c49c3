//! Executors and what they report: registrations and lost executors become
//! the core's node changes, reports become its rank calls. The core decides
//! what each means (`qm_core::nodes`); this file turns its answers into stop
//! commands and preemption events.

use qm_core::{CheckpointMark, Cluster, JobId, LostAttempt, RankEnd, RankExit, StopCause, Time};
use qm_wire::messages::RegisterExecutor;
use qm_wire::system::{AttemptKey, CheckpointCommit, EndCause, ExecCommand, Report, ReportPhase};

use super::{Effect, Effects, ExecutorState, QueueJob, State};

/// Registers an executor's instances as a node of its queue's cluster.
pub(super) fn add_node(cluster: &mut Cluster, r: &RegisterExecutor, now: u64) -> Vec<LostAttempt> {
    let offers: Vec<(&str, u32)> = r
        .instances
        .iter()
        .map(|i| (i.instance_type.as_str(), i.count))
        .collect();
    // Names a newer executor offers that this scheduler does not know are
    // left out: it never places a job on a runtime it cannot name.
    let runtimes = qm_wire::to_core::known_runtimes(&r.runtimes);
    cluster.register_node(&r.executor_id, &r.incarnation, &offers, runtimes, Time(now))
}

impl State {
    pub(super) fn register(&mut self, r: RegisterExecutor, now: u64, fx: &mut Effects) {
        // An executor that moves to another queue or environment leaves the
        // old one's queues.
        let moved = self.executors.get(&r.executor_id).is_some_and(|e| {
            (
                &e.registration.job_queue,
                &e.registration.service_environment,
            ) != (&r.job_queue, &r.service_environment)
        });
        if moved {
            self.lose_executor(&r.executor_id, now, fx);
        }
        // It is a node of every queue it serves.
        for queue in self.served_by(&r) {
            let cluster = &mut self.queues.get_mut(&queue).expect("listed").cluster;
            let lost = add_node(cluster, &r, now);
            self.lost_attempts(&queue, lost, fx);
        }
        self.executors.insert(
            r.executor_id.clone(),
            ExecutorState {
                registration: r,
                live: true,
            },
        );
    }

    /// The executor is gone: the core ends every attempt placed on it
    /// HOST_LOST and takes its instances out of the fleet.
    pub(super) fn lose_executor(&mut self, executor_id: &str, now: u64, fx: &mut Effects) {
        let Some(e) = self.executors.get_mut(executor_id) else {
            return;
        };
        e.live = false;
        let registration = e.registration.clone();
        for queue in self.served_by(&registration) {
            let cluster = &mut self.queues.get_mut(&queue).expect("listed").cluster;
            let lost = cluster.lose_node(executor_id, Time(now));
            self.lost_attempts(&queue, lost, fx);
        }
    }

    /// Ranks of lost attempts on other executors are told to stop (their
    /// executors' heartbeats would stop them anyway, later).
    fn lost_attempts(&mut self, q: &str, lost: Vec<LostAttempt>, fx: &mut Effects) {
        for l in lost {
            self.stopping.remove(&QueueJob::new(q, l.job));
            let qs = &self.queues[q];
            let (Some(job), Some(meta)) = (qs.cluster.job(l.job), qs.meta.get(&l.job)) else {
                continue;
            };
            let reason = job.status_reason.render(&|j| qs.public_id(j));
            for n in l.other_nodes {
                fx.push(Effect::Command(
                    qs.cluster.node(n).name.clone(),
                    Box::new(ExecCommand::Stop {
                        epoch: self.epoch,
                        job_id: meta.public_id.to_string(),
                        attempt: l.attempt,
                        grace_seconds: job.spec.grace_period_secs,
                        reason: reason.clone(),
                    }),
                ));
            }
        }
    }

    /// A rank's report. Only an executor the attempt was placed on may
    /// report it (the core refuses others as stale).
    pub(super) fn report(&mut self, r: Report, now: u64, fx: &mut Effects) {
        let Some((q, id)) = self.locate(&r.job_id) else {
            return;
        };
        let t = Time(now);
        if let (ReportPhase::Starting, Some(doing)) = (r.phase, &r.progress) {
            // A step of the attempt's preparation: kept for describe; the
            // attempt's state does not change.
            let qs = self.queues.get_mut(&q).expect("located");
            let current = qs
                .cluster
                .job(id)
                .and_then(|j| j.attempts.last())
                .is_some_and(|a| a.number == r.attempt && a.outcome.is_none());
            if let (true, Some(meta)) = (current, qs.meta.get_mut(&id)) {
                meta.notes_mut().start_progress =
                    Some((r.attempt, doing.chars().take(512).collect()));
            }
            return;
        }
        let cluster = &mut self.queues.get_mut(&q).expect("located").cluster;
        let stopping = cluster.job(id).and_then(|j| j.stopping);
        let Some(node) = cluster.node_id(&r.executor_id) else {
            tracing::debug!(job = %r.job_id, executor = %r.executor_id, "report from an unknown executor ignored");
            return;
        };
        let result = match r.phase {
            ReportPhase::Starting => {
                let restore = qm_core::Restore {
                    mark: r.restored.map(|c| CheckpointMark {
                        at: Time(c.created_at),
                        step: c.step.unwrap_or(0),
                    }),
                    bytes: r.restored_bytes.unwrap_or(0),
                    skipped: r.restore_skipped,
                };
                cluster
                    .rank_starting(id, r.attempt, node, restore, t)
                    .map(|()| RankEnd::Waiting)
            }
            ReportPhase::Running => cluster
                .rank_running(id, r.attempt, node, t)
                .map(|()| RankEnd::Waiting),
            ReportPhase::Ended => {
                // Why it failed, kept once per attempt (the first failing
                // rank's words), for describe.
                let why = r.reason.clone().or_else(|| r.error.clone());
                let current = cluster
                    .job(id)
                    .and_then(|j| j.attempts.last())
                    .is_some_and(|a| a.number == r.attempt && a.outcome.is_none());
                if let (Some(why), true) = (why, current) {
                    if let Some(meta) = self.queues.get_mut(&q).and_then(|qs| qs.meta.get_mut(&id))
                    {
                        meta.notes_mut()
                            .attempt_reasons
                            .entry(r.attempt)
                            .or_insert(why);
                    }
                }
                let cluster = &mut self.queues.get_mut(&q).expect("located").cluster;
                // What it declared as its result, for resume drills
                // (recorded before the end decides the drill).
                if let (Some(result), true) = (&r.result, current) {
                    let _ = cluster.attempt_result(id, r.attempt, result.clone());
                }
                let exit = match (r.cause, &r.error) {
                    (Some(EndCause::Fenced), _) => RankExit::Fenced,
                    (Some(EndCause::NotStarted), _) => RankExit::NotStarted,
                    (None, Some(_)) => RankExit::LaunchFailed,
                    (None, None) => RankExit::Exited(r.exit_code),
                };
                cluster.rank_ended(id, r.attempt, node, exit, t)
            }
        };
        let key = QueueJob::new(&q, id);
        match result {
            Err(e) => {
                tracing::debug!(job = %r.job_id, attempt = r.attempt, executor = %r.executor_id, error = %e, "stale report ignored")
            }
            Ok(RankEnd::Waiting) => {}
            Ok(RankEnd::Lost(lost)) => {
                tracing::warn!(job = %r.job_id, attempt = r.attempt, executor = %r.executor_id, "the executor fenced itself; the attempt lost its host");
                self.lost_attempts(&q, vec![lost], fx);
            }
            Ok(RankEnd::StopOthers) => {
                tracing::info!(job = %r.job_id, attempt = r.attempt, executor = %r.executor_id, "a rank failed; stopping the others");
                self.stopping.insert(key);
                self.stop_command(&q, id, fx);
            }
            Ok(RankEnd::Ended(outcome)) => {
                self.stopping.remove(&key);
                if let Some(StopCause::Preempted { kind, for_job }) = stopping {
                    if outcome.is_preemption() {
                        self.preemption_event(
                            &q,
                            id,
                            r.attempt,
                            kind,
                            for_job,
                            "completed",
                            now,
                            fx,
                        );
                    }
                }
            }
        }
    }

    /// A checkpoint commit, accepted only from the checkpoint service of
    /// the node that syncs the attempt's checkpoints (its rank 0's): a
    /// commit stored by any other node's checkpoint identity is refused.
    pub(super) fn checkpoint(&mut self, c: CheckpointCommit, fx: &mut Effects) {
        if let Some((q, id)) = self.locate(&c.job_id) {
            let syncing = self.syncing_node(&q, id, c.attempt);
            if syncing.is_none() || syncing != c.node {
                tracing::warn!(
                    job = %c.job_id,
                    attempt = c.attempt,
                    from = ?c.node,
                    expected = ?syncing,
                    "checkpoint commit refused: not from the node that syncs the attempt's checkpoints"
                );
                return;
            }
            let mark = CheckpointMark {
                at: Time(c.created_at),
                step: c.step.unwrap_or(0),
            };
            let answered = self
                .queue_mut(&q)
                .cluster
                .checkpoint_committed(id, c.attempt, mark);
            // Checkpoint-then-preempt: the checkpoint it was asked for is
            // in; now it is stopped.
            if answered == Ok(true) {
                self.stop_command(&q, id, fx);
            }
        }
    }

    /// The checkpoint node that syncs attempt `attempt` of job `id`: its
    /// rank 0's executor's (that executor's own name unless it registered
    /// another checkpoint node).
    pub(super) fn syncing_node(&self, q: &str, id: qm_core::JobId, attempt: u32) -> Option<String> {
        let cluster = &self.queues.get(q)?.cluster;
        let a = cluster
            .job(id)?
            .attempts
            .iter()
            .find(|a| a.number == attempt)?;
        let executor = &cluster.node(a.placement.first()?.node).name;
        Some(
            self.executors
                .get(executor)
                .and_then(|e| e.registration.checkpoint_node.clone())
                .unwrap_or_else(|| executor.clone()),
        )
    }

    /// How long the executor may be silent before it is declared lost:
    /// `default_secs`, or for an executor that fences itself, at least
    /// until its fencing deadline and its attempts' grace have passed
    /// (the core's rule, ADR 0007).
    pub fn silence_allowed(&self, executor_id: &str, default_secs: u64) -> u64 {
        let Some(e) = self.executors.get(executor_id) else {
            return default_secs;
        };
        let Some(fence_after) = e.registration.fence_after_seconds else {
            return default_secs;
        };
        let longest_grace = self
            .served_by(&e.registration)
            .iter()
            .map(|q| self.queues[q].cluster.longest_grace_on(executor_id))
            .max()
            .unwrap_or(0);
        default_secs.max(qm_core::silence_before_lost(fence_after, longest_grace))
    }

    /// The attempts an executor reported starting or running and should
    /// still hold (see `qm_core::SETTLE_MISSING_AFTER_SECS`).
    pub fn reported_on(&self, executor_id: &str) -> std::collections::BTreeSet<AttemptKey> {
        self.attempt_keys(executor_id, Cluster::reported_attempts_on)
    }

    /// The attempts an executor should hold.
    pub fn expected_on(&self, executor_id: &str) -> std::collections::BTreeSet<AttemptKey> {
        self.attempt_keys(executor_id, Cluster::attempts_on)
    }

    /// Attempts of the executor's environment's queues that `pick` lists
    /// for it, named as on the wire.
    fn attempt_keys(
        &self,
        executor_id: &str,
        pick: fn(&Cluster, &str) -> Vec<(JobId, u32)>,
    ) -> std::collections::BTreeSet<AttemptKey> {
        let Some(e) = self.executors.get(executor_id) else {
            return Default::default();
        };
        self.served_by(&e.registration)
            .iter()
            .flat_map(|q| {
                let qs = &self.queues[q];
                pick(&qs.cluster, executor_id)
                    .into_iter()
                    .map(|(id, attempt)| AttemptKey::new(qs.public_id(id), attempt))
            })
            .collect()
    }
}
