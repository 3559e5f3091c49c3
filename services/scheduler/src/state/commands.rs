//! Commands to executors and the events users see: start and stop commands
//! for every rank of an attempt (sent, and resent until each rank reports),
//! job state changes and preemption events.

use qm_core::{Attempt, Job, JobId, JobStatus, PreemptionKind, RankState};
use qm_wire::messages::{JobStateChange, PreemptionEvent};
use qm_wire::system::ExecCommand;

use super::{Effect, Effects, JobMeta, QueueState, State};

impl State {
    /// A job's queue, record, metadata and current attempt, if it has one.
    fn current(&self, q: &str, id: JobId) -> Option<(&QueueState, &Job, &JobMeta, &Attempt)> {
        let qs = self.queues.get(q)?;
        let job = qs.cluster.job(id)?;
        Some((qs, job, qs.meta.get(&id)?, job.current_attempt()?))
    }

    /// The start commands of a placed attempt, one per rank (`unreported`:
    /// only the ranks that have not reported yet, for resending).
    pub fn start_commands(&self, q: &str, id: JobId, unreported: bool) -> Vec<Effect> {
        let Some((qs, job, meta, attempt)) = self.current(q, id) else {
            return Vec::new();
        };
        let submit = meta.submit.get();
        let node = |r: &qm_core::Rank| qs.cluster.node(r.node).name.clone();
        let hosts: Vec<String> = if attempt.placement.len() > 1 {
            attempt
                .placement
                .iter()
                .map(|r| {
                    let name = node(r);
                    self.executors
                        .get(&name)
                        .and_then(|e| e.registration.address.clone())
                        .unwrap_or(name)
                })
                .collect()
        } else {
            Vec::new()
        };
        attempt
            .placement
            .iter()
            .zip(&attempt.ranks)
            .enumerate()
            .filter(|(_, (_, state))| !unreported || **state == RankState::Commanded)
            .map(|(rank, (r, _))| {
                Effect::Command(
                    node(r),
                    Box::new(ExecCommand::Start {
                        epoch: self.epoch,
                        job_id: meta.public_id.to_string(),
                        attempt: attempt.number,
                        job_queue: q.to_string(),
                        quota_share_name: submit.quota_share_name.clone().unwrap_or_default(),
                        command: submit.command.clone(),
                        environment: submit.environment.clone(),
                        instance_type: submit.instance_type.clone(),
                        slots: r.slots.to_vec(),
                        checkpoints: submit.checkpoint_config.is_some(),
                        checkpoint_config: submit.checkpoint_config.clone(),
                        rank: rank as u32,
                        hosts: hosts.clone(),
                        grace_seconds: Some(job.spec.grace_period_secs),
                        container_image: submit.container_image.clone(),
                        output_s3_uri: submit
                            .output_data_config
                            .as_ref()
                            .map(|o| o.s3_output_path.clone()),
                        input_channels: submit.input_data_config.clone(),
                        run_as_non_root: submit
                            .quota_share_name
                            .as_ref()
                            .is_some_and(|s| qs.non_root_shares.contains(s)),
                    }),
                )
            })
            .collect()
    }

    /// The stop commands of a stopping attempt, one per rank still running
    /// (for sending and resending).
    pub fn stop_commands(&self, q: &str, id: JobId) -> Vec<Effect> {
        let Some((qs, job, meta, attempt)) = self.current(q, id) else {
            return Vec::new();
        };
        let reason = job.status_reason.render(&|j| qs.public_id(j));
        // Checkpoint-then-preempt: first asked to checkpoint (every rank
        // gets the signal); the stop follows the commit or the window's end.
        let signal = job.checkpoint_first.map(|_| {
            meta.submit
                .get()
                .checkpoint_config
                .as_ref()
                .and_then(|c| c.checkpoint_signal.clone())
                .unwrap_or_else(|| qm_wire::messages::DEFAULT_CHECKPOINT_SIGNAL.to_string())
        });
        attempt
            .placement
            .iter()
            .zip(&attempt.ranks)
            .filter(|(_, state)| !matches!(state, RankState::Ended(_)))
            .map(|(r, _)| {
                let command = match &signal {
                    Some(signal) => ExecCommand::Checkpoint {
                        epoch: self.epoch,
                        job_id: meta.public_id.to_string(),
                        attempt: attempt.number,
                        signal: signal.clone(),
                    },
                    None => ExecCommand::Stop {
                        epoch: self.epoch,
                        job_id: meta.public_id.to_string(),
                        attempt: attempt.number,
                        grace_seconds: job.spec.grace_period_secs,
                        reason: reason.clone(),
                    },
                };
                Effect::Command(qs.cluster.node(r.node).name.clone(), Box::new(command))
            })
            .collect()
    }

    pub(super) fn stop_command(&self, q: &str, id: JobId, fx: &mut Effects) {
        fx.extend(self.stop_commands(q, id));
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn preemption_event(
        &self,
        q: &str,
        id: JobId,
        attempt: u32,
        kind: PreemptionKind,
        for_job: JobId,
        phase: &str,
        at: u64,
        fx: &mut Effects,
    ) {
        let Some(qs) = self.queues.get(q) else { return };
        let name = |j: JobId| {
            qs.meta
                .get(&j)
                .map_or_else(|| j.to_string(), |m| m.public_id.to_string())
        };
        let share = qs
            .cluster
            .job(id)
            .map(|j| qs.cluster.share_config(j.spec.share).name.clone())
            .unwrap_or_default();
        let event = PreemptionEvent {
            job_id: name(id),
            attempt,
            kind: kind.as_str().into(),
            // A budget stop is for no other job.
            for_job_id: if kind == PreemptionKind::BudgetExhausted {
                String::new()
            } else {
                name(for_job)
            },
            phase: phase.into(),
            at,
        };
        if let Ok(subject) = qm_wire::subjects::preemption_event(q, &share, &event.job_id, phase) {
            fx.push(Effect::Preemption(event, subject));
        }
    }

    pub(super) fn collect_events(&mut self, fx: &mut Effects) {
        for (q, qs) in self.queues.iter_mut() {
            let events = qs.cluster.drain_events();
            for e in events {
                let Some(meta) = qs.meta.get(&e.job) else {
                    continue;
                };
                let name = |j: JobId| {
                    qs.meta
                        .get(&j)
                        .map_or_else(|| j.to_string(), |m| m.public_id.to_string())
                };
                // The job's share as it was submitted (the core checked
                // that it exists); its name as submitted (a drill's jobs
                // are named apart from the core's spec).
                let Some(job) = qs.cluster.job(e.job) else {
                    continue;
                };
                let share = qs.cluster.share_config(job.spec.share).name.clone();
                let attempt = job.attempts.last().map(|a| a.number);
                let change = JobStateChange {
                    job_id: meta.public_id.to_string(),
                    job_name: meta.submit.job_name(),
                    job_queue: q.clone(),
                    quota_share_name: share.clone(),
                    from: e.from.as_str().into(),
                    to: e.to.as_str().into(),
                    status_reason: e.reason.render(&name),
                    attempt,
                    at: e.at.as_millis(),
                };
                if let Ok(subject) =
                    qm_wire::subjects::job_event(q, &share, &meta.public_id, e.to.as_str())
                {
                    fx.push(Effect::Job(change, subject));
                }
            }
        }
    }

    /// Ranks placed but not yet reported starting: their start commands.
    pub fn unstarted(&self) -> Vec<Effect> {
        let mut out = Vec::new();
        for (q, qs) in &self.queues {
            for id in qs.cluster.placed_jobs() {
                let waiting = qs.cluster.job(id).is_some_and(|j| {
                    matches!(j.status, JobStatus::Scheduled | JobStatus::Starting)
                        && j.stopping.is_none()
                });
                if waiting {
                    out.extend(self.start_commands(q, id, true));
                }
            }
        }
        out
    }

    /// Stop commands of every attempt being stopped.
    pub fn stops(&self) -> Vec<Effect> {
        self.stopping
            .iter()
            .flat_map(|k| self.stop_commands(&k.queue, k.job))
            .collect()
    }
}
