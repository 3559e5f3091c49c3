//! Applying a plan: preemptions begin their stops (and give their
//! beneficiaries a claim), starts get their attempt and their slots,
//! timeouts stop, waiting reasons are recorded, settled types are marked.

use super::*;

impl Cluster {
    // ----- applying a pass --------------------------------------------------

    /// Applies a plan made by [`Cluster::schedule`] at `now`.
    pub fn apply(&mut self, plan: &crate::plan::Plan) {
        let now = plan.now;
        // A plan of waiting reasons only changes nothing the usage ledger
        // counts, and is not logged: it does not move the ledger's clock.
        if !(plan.starts.is_empty()
            && plan.preemptions.is_empty()
            && plan.timeouts.is_empty()
            && plan.drill_stops.is_empty()
            && plan.budget_stops.is_empty()
            && plan.checkpoint_deadlines.is_empty())
        {
            self.advance_usage(now);
        }
        for t in &plan.settled {
            self.settled[t.index()] = Settled::Until(plan.wake_at);
        }
        for id in &plan.checkpoint_deadlines {
            self.end_checkpoint_window(*id);
        }
        for stop in &plan.timeouts {
            self.begin_stop(
                *stop,
                StopCause::TimedOut,
                StatusReason::TimeoutInProgress,
                now,
            );
        }
        for stop in &plan.drill_stops {
            self.begin_drill_stop(*stop, now);
        }
        for &id in &plan.budget_stops {
            // For no other job: no claim, no cool-down (the budget bars
            // borrowing until it refills).
            let kind = crate::job::PreemptionKind::BudgetExhausted;
            let cause = StopCause::Preempted { kind, for_job: id };
            let reason = StatusReason::PreemptionInProgress { kind, for_job: id };
            self.begin_stop(id, cause, reason, now);
            self.ask_checkpoint_first(id, now);
        }
        for p in &plan.preemptions {
            self.claims.insert(p.for_job);
            let cause = StopCause::Preempted {
                kind: p.kind,
                for_job: p.for_job,
            };
            let reason = StatusReason::PreemptionInProgress {
                kind: p.kind,
                for_job: p.for_job,
            };
            self.begin_stop(p.job, cause, reason, now);
            self.ask_checkpoint_first(p.job, now);
            if p.kind != crate::job::PreemptionKind::InShare {
                let job = &self.jobs[&p.job];
                let (s, t) = (job.spec.share, job.spec.instance_type);
                self.st_mut(s, t).reclaimed_at = Some(now);
            }
        }
        for start in &plan.starts {
            let id = start.job;
            self.remove_runnable(id);
            let job = self.jobs.get_mut(&id).expect("planned job exists");
            debug_assert!(!plan.settled.contains(&job.spec.instance_type));
            let number = job.attempts.len() as u32 + 1;
            // Most jobs run once: room for exactly this attempt, not the
            // four a growing Vec would reserve (a million jobs' history).
            job.attempts.reserve_exact(1);
            job.attempts.push(Attempt {
                number,
                scheduled_at: now,
                started_at: None,
                running_at: None,
                stopped_at: None,
                exit_code: None,
                outcome: None,
                restored: None,
                last_checkpoint: None,
                ranks: smallvec::smallvec![RankState::Commanded; start.placement.len()],
                placement: start.placement.clone(),
                first_failure: None,
                preempted_for: None,
                restored_bytes: 0,
                restore_skipped: Vec::new(),
                checkpoint_lag: None,
                result: None,
            });
            let key = Self::run_key(job);
            let deadline = job
                .spec
                .attempt_timeout_secs
                .map(|secs| now.plus_secs(secs));
            let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
            if let Some(deadline) = deadline {
                self.deadlines.insert((deadline, id));
            }
            self.hold_slots(id, t, &start.placement);
            let st = self.st_mut(s, t);
            st.running.insert(key);
            st.running_usage += count;
            self.transition(
                id,
                JobStatus::Scheduled,
                StatusReason::Scheduled {
                    borrowed: start.borrowed,
                },
                now,
            );
        }
        // A changed waiting reason is an event too: it tells users why a job waits.
        for (id, wait) in &plan.reasons {
            self.unexplained.remove(id);
            let reason = StatusReason::Waiting(*wait);
            let changed = self.jobs.get(id).is_some_and(|job| {
                job.status == JobStatus::Runnable && job.status_reason != reason
            });
            if changed {
                self.transition(*id, JobStatus::Runnable, reason, now);
            }
        }
    }

    /// Checkpoint-then-preempt: a preempted job that runs, checkpoints and
    /// has a `checkpointBeforePreemptSeconds` (its own, its workload
    /// class's, or the queue's) is
    /// asked to checkpoint first; its stop waits for that commit or the
    /// window's end. Its instances stay held meanwhile (the beneficiary
    /// waits, `WAITING_FOR_RECLAIM`), and its work at risk ends at the commit.
    fn ask_checkpoint_first(&mut self, id: JobId, now: Time) {
        let queue_default = self.checkpoint_before_preempt_secs;
        let class_default = {
            let job = &self.jobs[&id];
            self.shares[job.spec.share.index()]
                .config
                .rules(job.spec.class.as_deref())
                .checkpoint_before_preempt_secs
        };
        let job = self.jobs.get_mut(&id).expect("known job");
        let secs = job
            .spec
            .checkpoint_before_preempt_secs
            .or(class_default)
            .unwrap_or(queue_default)
            .min(crate::job::MAX_CHECKPOINT_BEFORE_PREEMPT_SECS);
        if secs == 0 || !job.spec.checkpoints || job.status != JobStatus::Running {
            return;
        }
        let until = now.plus_secs(secs);
        job.checkpoint_first = Some(crate::job::CheckpointFirst {
            asked_at: now,
            until,
        });
        self.checkpoint_windows.insert((until, id));
    }

    /// Ends a job's checkpoint-first window (a commit came, the window ran
    /// out, the stop became another, or the attempt ended): its stop goes
    /// ahead. Returns whether it had one.
    pub(crate) fn end_checkpoint_window(&mut self, id: JobId) -> bool {
        let Some(job) = self.jobs.get_mut(&id) else {
            return false;
        };
        let Some(w) = job.checkpoint_first.take() else {
            return false;
        };
        self.checkpoint_windows.remove(&(w.until, id));
        true
    }

    /// The next attempt number a start of `id` would get.
    pub fn next_attempt(&self, id: JobId) -> u32 {
        self.jobs
            .get(&id)
            .map_or(1, |j| j.attempts.len() as u32 + 1)
    }
}
