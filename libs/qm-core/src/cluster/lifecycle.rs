//! A job's lifecycle: submit (validated whole), priority updates,
//! termination, the executor's reports (starting, running, checkpoint
//! committed, ended, host lost), and what an ended attempt means: requeue
//! (preemption and host loss spend their own budgets) or a final status
//! (success, failures spend `retryStrategy.attempts`, `evaluateOnExit`).
//!
//! Guarantees afterwards: every index (waiting queues, running sets, usage
//! counters, deadlines, claims) agrees with the jobs; every status change is
//! an event.

use super::*;

impl Cluster {
    // ----- submit and job updates ------------------------------------------

    /// Validates and queues a job; it is RUNNABLE when this returns. Every
    /// problem is reported at once. A job that the configuration alone forbids
    /// is rejected; one that only the current fleet forbids is accepted and
    /// waits with a `MISCONFIGURATION:` reason (executors may still register).
    pub fn submit(&mut self, mut spec: JobSpec, now: Time) -> Result<JobId, JobError> {
        self.advance_usage(now);
        let mut problems = Vec::new();
        let problem = |field: &str, message: String| ConfigProblem {
            field: field.into(),
            message,
        };
        if self.queue_state == State::Disabled {
            problems.push(problem(
                "jobQueue",
                format!(
                    "job queue {:?} is DISABLED and accepts no new jobs",
                    self.queue_name
                ),
            ));
        }
        let share_ok =
            spec.share.index() < self.shares.len() && !self.shares[spec.share.index()].deleted;
        if !share_ok {
            problems.push(problem(
                "quotaShareName",
                "no such quota share in this queue".into(),
            ));
        } else if self.shares[spec.share.index()].config.state == State::Disabled {
            problems.push(problem(
                "quotaShareName",
                format!(
                    "quota share {:?} is DISABLED and accepts no new jobs",
                    self.shares[spec.share.index()].config.name
                ),
            ));
        }
        if spec.instance_type.index() >= self.types.len() {
            problems.push(problem("instanceType", "unknown instance type".into()));
        }
        if spec.count == 0 {
            problems.push(problem("instanceCount", "must be >= 1".into()));
        }
        problems.extend(crate::validate::priority_problem(spec.priority));
        if spec.grace_period_secs > crate::job::MAX_GRACE_PERIOD_SECS {
            problems.push(problem(
                "terminationGracePeriodSeconds",
                format!(
                    "must be 0..={}, got {}",
                    crate::job::MAX_GRACE_PERIOD_SECS,
                    spec.grace_period_secs
                ),
            ));
        }
        if !(1..=10).contains(&spec.retry_attempts) {
            problems.push(problem(
                "retryStrategy.attempts",
                format!("must be 1..=10, got {}", spec.retry_attempts),
            ));
        }
        if spec.attempt_timeout_secs == Some(0) {
            problems.push(problem(
                "timeoutConfig.attemptDurationSeconds",
                "must be >= 1".into(),
            ));
        }
        let class_problems = if share_ok {
            self.class_problems_of(&mut spec)
        } else {
            Vec::new()
        };
        let class_ok = class_problems.is_empty();
        problems.extend(class_problems);
        if share_ok && class_ok && spec.instance_type.index() < self.types.len() && spec.count > 0 {
            let bar = self.borrow_bar_of(&spec);
            if let Some(limit) = self.never_fits(spec.share, spec.instance_type, spec.count, bar) {
                if limit.is_configuration_only() {
                    problems.push(problem(
                        "instanceCount",
                        format!("MISCONFIGURATION: {}", limit.describe()),
                    ));
                }
            }
        }
        if !problems.is_empty() {
            return Err(JobError::Invalid(problems));
        }
        let id = self.jobs.next_id();
        let mut job = Job::new(id, spec, now);
        job.borrow_bar = self.borrow_bar_of(&job.spec);
        self.jobs.insert(job);
        self.make_runnable(id, now, StatusReason::Waiting(WaitReason::Queued));
        Ok(id)
    }

    pub(crate) fn job_mut(&mut self, id: JobId) -> Result<&mut Job, JobError> {
        self.jobs.get_mut(&id).ok_or(JobError::NotFound(id))
    }

    /// Something about type `t` changed: the next pass must look at it.
    pub(crate) fn unsettle(&mut self, t: TypeIdx) {
        self.settled[t.index()] = Settled::No;
    }

    pub(crate) fn transition(&mut self, id: JobId, to: JobStatus, reason: StatusReason, now: Time) {
        let (t, from) = (self.jobs[&id].spec.instance_type, self.jobs[&id].status);
        if from != to {
            // (A new reason alone changes nothing the usage ledger counts.)
            self.touch_usage(self.jobs[&id].spec.share, t);
        }
        // Reason updates and SCHEDULED -> STARTING -> RUNNING change nothing
        // a pass looks at.
        if from != to && !(from.holds_instances() && to.holds_instances()) {
            self.unsettle(t);
        }
        if to != JobStatus::Runnable {
            self.claims.remove(&id);
        }
        let job = self.jobs.get_mut(&id).expect("transition of a known job");
        let from = job.status;
        job.status = to;
        job.status_reason = reason;
        if to.is_final() && job.finished_at.is_none() {
            job.finished_at = Some(now);
        }
        self.events.push(JobEvent {
            at: now,
            job: id,
            from,
            to,
            reason,
        });
        self.count_transition(id, from, to);
        if to.is_final() && from != to {
            self.drill_job_finished(id, now);
        }
    }

    pub(crate) fn queue_key(job: &Job) -> QueueKey {
        QueueKey {
            priority: Reverse(job.spec.priority),
            runnable_since: job.runnable_since,
            job: job.id,
        }
    }

    pub(crate) fn run_key(job: &Job) -> RunKey {
        RunKey {
            priority: Reverse(job.spec.priority),
            started: job.started_at().unwrap_or(job.runnable_since),
            job: job.id,
            count: job.spec.count,
            may_borrow: job.borrow_bar.is_none(),
        }
    }

    pub(crate) fn make_runnable(&mut self, id: JobId, now: Time, reason: StatusReason) {
        let job = self.jobs.get_mut(&id).expect("known job");
        job.runnable_since = now;
        job.stopping = None;
        let key = Self::queue_key(job);
        let (s, t, count, ckpt) = (
            job.spec.share,
            job.spec.instance_type,
            job.spec.count,
            job.borrow_bar.is_none(),
        );
        self.st_mut(s, t).runnable.insert(key, count, ckpt);
        self.unexplained.insert(id);
        self.transition(id, JobStatus::Runnable, reason, now);
    }

    /// `UpdateServiceJob`: a new `schedulingPriority` for a RUNNABLE or running
    /// job, used from the next pass on (which may preempt).
    pub fn update_priority(&mut self, id: JobId, priority: u32) -> Result<u32, JobError> {
        if let Some(problem) = crate::validate::priority_problem(priority) {
            return Err(JobError::Invalid(vec![problem]));
        }
        let job = self.jobs.get(&id).ok_or(JobError::NotFound(id))?;
        if job.status.is_final() {
            return Err(JobError::WrongState {
                job: id,
                status: job.status,
                action: "updating the priority",
                needs: "RUNNABLE, SCHEDULED, STARTING or RUNNING",
            });
        }
        if let Some((class, min, max)) = self.priority_band(id) {
            if !(min..=max).contains(&priority) {
                return Err(JobError::Invalid(vec![ConfigProblem {
                    field: "schedulingPriority".into(),
                    message: format!(
                        "must lie in class {class:?}'s band {min}..={max}, got {priority}"
                    ),
                }]));
            }
        }
        let old = job.spec.priority;
        let (s, t, count, ckpt) = (
            job.spec.share,
            job.spec.instance_type,
            job.spec.count,
            job.borrow_bar.is_none(),
        );
        let (qkey, rkey, status, stopping) = (
            Self::queue_key(job),
            Self::run_key(job),
            job.status,
            job.stopping,
        );
        self.unsettle(t);
        let job = self.jobs.get_mut(&id).expect("checked above");
        job.spec.priority = priority;
        let (new_q, new_r) = (Self::queue_key(job), Self::run_key(job));
        let st = self.st_mut(s, t);
        if status == JobStatus::Runnable && st.runnable.remove(&qkey, count, ckpt) {
            st.runnable.insert(new_q, count, ckpt);
        } else if status.holds_instances() && stopping.is_none() && st.running.remove(&rkey) {
            st.running.insert(new_r);
        }
        Ok(old)
    }

    /// `TerminateServiceJob`: a RUNNABLE job fails at once; a running one is
    /// asked to stop (with its grace period) and ends FAILED, `CANCELLED`.
    /// Returns true when a stop must be sent to the executor.
    pub fn terminate(&mut self, id: JobId, now: Time) -> Result<bool, JobError> {
        self.advance_usage(now);
        let job = self.jobs.get(&id).ok_or(JobError::NotFound(id))?;
        match job.status {
            JobStatus::Submitted | JobStatus::Runnable => {
                self.remove_runnable(id);
                self.transition(id, JobStatus::Failed, StatusReason::Cancelled, now);
                Ok(false)
            }
            s if s.holds_instances() => {
                if job.stopping.is_some_and(|c| c == StopCause::Cancelled) {
                    return Ok(false);
                }
                self.begin_stop(
                    id,
                    StopCause::Cancelled,
                    StatusReason::CancelInProgress,
                    now,
                );
                Ok(true)
            }
            status => Err(JobError::WrongState {
                job: id,
                status,
                action: "terminating",
                needs: "not yet SUCCEEDED or FAILED",
            }),
        }
    }

    /// Finished (SUCCEEDED or FAILED) jobs that finished at or before
    /// `cutoff`, oldest id first, at most `limit`: what a retention of
    /// finished jobs lets go.
    pub fn finished_before(&self, cutoff: Time, limit: usize) -> Vec<JobId> {
        self.jobs
            .values()
            .filter(|j| j.status.is_final() && j.finished_at.is_some_and(|at| at <= cutoff))
            .map(|j| j.id)
            .take(limit)
            .collect()
    }

    /// What stands in the way of deleting this queue (`DeleteJobQueue`),
    /// every reason at once; `None`: it may be deleted. A queue is deleted
    /// only once DISABLED (no new job enters) and drained: every job in it
    /// SUCCEEDED or FAILED. Its finished jobs do not stand in the way (they
    /// are archived as the queue goes).
    pub fn deletion_blockers(&self) -> Option<DeletionBlockers> {
        let mut unfinished: std::collections::BTreeMap<JobStatus, Vec<JobId>> =
            std::collections::BTreeMap::new();
        for job in self.jobs.values().filter(|j| !j.status.is_final()) {
            unfinished.entry(job.status).or_default().push(job.id);
        }
        let enabled = self.queue_state != State::Disabled;
        (enabled || !unfinished.is_empty()).then_some(DeletionBlockers {
            enabled,
            unfinished,
        })
    }

    /// Forgets a finished job (its record leaves the state; its id is never
    /// reused). Nothing a pass looks at refers to a finished job, so this
    /// changes no decision.
    pub fn forget(&mut self, id: JobId) -> Result<Job, JobError> {
        let job = self.jobs.get(&id).ok_or(JobError::NotFound(id))?;
        if !job.status.is_final() {
            return Err(JobError::WrongState {
                job: id,
                status: job.status,
                action: "forgetting",
                needs: "SUCCEEDED or FAILED",
            });
        }
        self.unexplained.remove(&id);
        self.claims.remove(&id);
        Ok(self.jobs.remove(&id).expect("checked above"))
    }

    pub(crate) fn remove_runnable(&mut self, id: JobId) {
        let job = &self.jobs[&id];
        let (key, s, t, count, ckpt) = (
            Self::queue_key(job),
            job.spec.share,
            job.spec.instance_type,
            job.spec.count,
            job.borrow_bar.is_none(),
        );
        self.st_mut(s, t).runnable.remove(&key, count, ckpt);
        self.unexplained.remove(&id);
    }

    /// Moves a running job to "being stopped": it keeps its instances (and its
    /// status) until the executor reports the attempt ended.
    pub(crate) fn begin_stop(
        &mut self,
        id: JobId,
        cause: StopCause,
        reason: StatusReason,
        now: Time,
    ) {
        let t = self.jobs[&id].spec.instance_type;
        self.unsettle(t);
        let job = self.jobs.get_mut(&id).expect("known job");
        let already = job.stopping.is_some();
        job.stopping = Some(cause);
        if !matches!(cause, StopCause::Preempted { .. }) {
            // A cancel or a timeout does not wait for a checkpoint.
            self.end_checkpoint_window(id);
        }
        let job = self.jobs.get_mut(&id).expect("known job");
        let status = job.status;
        self.transition(id, status, reason, now);
        let job = &self.jobs[&id];
        if already {
            return;
        }
        let key = Self::run_key(job);
        let deadline = job
            .spec
            .attempt_timeout_secs
            .and_then(|secs| job.started_at().map(|t| t.plus_secs(secs)));
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        if let Some(deadline) = deadline {
            self.deadlines.remove(&(deadline, id));
        }
        let may_borrow = self.jobs[&id].borrow_bar.is_none();
        let st = self.st_mut(s, t);
        st.running.remove(&key);
        st.running_usage -= count;
        st.stopping_usage += count;
        if !may_borrow {
            st.stopping_barred += count;
        }
    }

    // ----- executor reports -------------------------------------------------

    pub(crate) fn current_attempt_mut(
        &mut self,
        id: JobId,
        attempt: u32,
    ) -> Result<&mut Attempt, JobError> {
        let job = self.job_mut(id)?;
        match job.attempts.last_mut() {
            Some(a) if a.number == attempt && a.outcome.is_none() => Ok(a),
            _ => Err(JobError::StaleAttempt { job: id, attempt }),
        }
    }

    /// The executor is restoring the checkpoint and launching the process.
    pub fn attempt_starting(
        &mut self,
        id: JobId,
        attempt: u32,
        restored: Option<CheckpointMark>,
        now: Time,
    ) -> Result<(), JobError> {
        let a = self.current_attempt_mut(id, attempt)?;
        a.started_at = Some(now);
        a.restored = restored;
        let reason = self.jobs[&id].status_reason;
        if self.jobs[&id].status == JobStatus::Scheduled {
            self.transition(id, JobStatus::Starting, reason, now);
        }
        Ok(())
    }

    /// The process is up.
    pub fn attempt_running(&mut self, id: JobId, attempt: u32, now: Time) -> Result<(), JobError> {
        let a = self.current_attempt_mut(id, attempt)?;
        a.running_at = Some(now);
        a.started_at.get_or_insert(now);
        let reason = self.jobs[&id].status_reason;
        if matches!(
            self.jobs[&id].status,
            JobStatus::Scheduled | JobStatus::Starting
        ) {
            self.transition(id, JobStatus::Running, reason, now);
        }
        Ok(())
    }

    /// A checkpoint of the attempt was committed (its manifest written).
    /// Returns true when it ends the job's checkpoint-first window (it was
    /// committed at or after the request): the job's stop goes ahead now.
    pub fn checkpoint_committed(
        &mut self,
        id: JobId,
        attempt: u32,
        mark: CheckpointMark,
    ) -> Result<bool, JobError> {
        let a = self.current_attempt_mut(id, attempt)?;
        a.last_checkpoint = Some(mark);
        a.checkpoint_lag = None;
        let job = self.job_mut(id)?;
        job.last_checkpoint = Some(mark);
        let answered = job.checkpoint_first.is_some_and(|w| mark.at >= w.asked_at);
        self.drill_checkpoint(id, mark.at);
        Ok(answered && self.end_checkpoint_window(id))
    }

    /// The attempt's checkpoints are not being uploaded since `since`
    /// (`error` says why); its next commit clears it.
    pub fn checkpoint_lagging(
        &mut self,
        id: JobId,
        attempt: u32,
        since: Time,
        error: String,
    ) -> Result<(), JobError> {
        let a = self.current_attempt_mut(id, attempt)?;
        let since = a
            .checkpoint_lag
            .as_ref()
            .map_or(since, |(s, _)| (*s).min(since));
        a.checkpoint_lag = Some((since, error));
        Ok(())
    }

    /// The job's checkpoint-first window, while its stop waits for a
    /// checkpoint (see [`crate::job::CheckpointFirst`]).
    pub fn checkpoint_first(&self, id: JobId) -> Option<crate::job::CheckpointFirst> {
        self.jobs.get(&id).and_then(|j| j.checkpoint_first)
    }

    /// The attempt's process ended (exit code, or None if killed by a signal).
    /// If the scheduler had asked it to stop, the stop decides the outcome
    /// (a trainer exits 0 after saving on SIGTERM; that is not success).
    pub fn attempt_ended(
        &mut self,
        id: JobId,
        attempt: u32,
        exit_code: Option<i32>,
        now: Time,
    ) -> Result<AttemptOutcome, JobError> {
        self.advance_usage(now);
        self.current_attempt_mut(id, attempt)?;
        let job = &self.jobs[&id];
        let outcome = match job.stopping {
            Some(StopCause::Preempted { kind, .. }) => kind.outcome(),
            Some(StopCause::TimedOut) => AttemptOutcome::TimedOut,
            Some(StopCause::Cancelled) => AttemptOutcome::Cancelled,
            Some(StopCause::Drill) => AttemptOutcome::PreemptedDrill,
            None if exit_code == Some(0) => AttemptOutcome::Succeeded,
            None => AttemptOutcome::Failed,
        };
        self.end_attempt(id, exit_code, outcome, now);
        Ok(outcome)
    }

    /// The attempt's executor stopped heartbeating: the attempt ends HOST_LOST.
    pub fn attempt_lost(&mut self, id: JobId, attempt: u32, now: Time) -> Result<(), JobError> {
        self.advance_usage(now);
        self.current_attempt_mut(id, attempt)?;
        self.end_attempt(id, None, AttemptOutcome::HostLost, now);
        Ok(())
    }

    pub(crate) fn end_attempt(
        &mut self,
        id: JobId,
        exit_code: Option<i32>,
        outcome: AttemptOutcome,
        now: Time,
    ) {
        self.end_checkpoint_window(id);
        // Release the instances.
        let job = &self.jobs[&id];
        let (s, t, count) = (job.spec.share, job.spec.instance_type, job.spec.count);
        if job.stopping.is_some() {
            let may_borrow = job.borrow_bar.is_none();
            let st = self.st_mut(s, t);
            st.stopping_usage -= count;
            if !may_borrow {
                st.stopping_barred -= count;
            }
        } else {
            let key = Self::run_key(job);
            let deadline = job
                .spec
                .attempt_timeout_secs
                .and_then(|secs| job.started_at().map(|t| t.plus_secs(secs)));
            if let Some(deadline) = deadline {
                self.deadlines.remove(&(deadline, id));
            }
            let st = self.st_mut(s, t);
            st.running.remove(&key);
            st.running_usage -= count;
        }
        let job = self.jobs.get_mut(&id).expect("known job");
        let beneficiary = match job.stopping {
            // A budget stop is for no other job.
            Some(StopCause::Preempted { kind, for_job })
                if outcome.is_preemption()
                    && kind != crate::job::PreemptionKind::BudgetExhausted =>
            {
                Some(for_job)
            }
            _ => None,
        };
        let a = job.attempts.last_mut().expect("current attempt exists");
        // The placement is kept: where the attempt ran.
        let placement = std::mem::take(&mut a.placement);
        a.stopped_at = Some(now);
        a.exit_code = exit_code;
        a.outcome = Some(outcome);
        a.preempted_for = beneficiary;
        let number = a.number;
        self.release_slots(id, t, &placement);
        if let Some(a) = self.jobs.get_mut(&id).and_then(|j| j.attempts.last_mut()) {
            a.placement = placement;
        }
        if let Some(ms) = self.jobs[&id].lost_work_ms(number) {
            let for_share = beneficiary
                .and_then(|b| self.jobs.get(&b))
                .map(|b| b.spec.share);
            if let Some(w) = self.ledger_mut(s).cause_mut(outcome) {
                w.add(ms, count);
            }
            self.count_recomputed(id, outcome, ms.saturating_mul(u64::from(count)), now);
            if let Some(b) = for_share {
                self.ledger_mut(b).lost_for_this_share.add(ms, count);
            }
        }
        let job = self.jobs.get_mut(&id).expect("known job");
        let share_deleted = self.shares[s.index()].deleted;
        let next = match outcome {
            AttemptOutcome::Succeeded => (JobStatus::Succeeded, StatusReason::Succeeded),
            AttemptOutcome::Cancelled if share_deleted => {
                (JobStatus::Failed, StatusReason::ShareDeleted)
            }
            AttemptOutcome::Cancelled => (JobStatus::Failed, StatusReason::Cancelled),
            // A drill's stop spends no budget: it is the drill's, not the
            // job's.
            AttemptOutcome::PreemptedDrill => {
                (JobStatus::Runnable, StatusReason::Requeued(outcome))
            }
            // A budget stop (its share's policy) and a rebalancing move
            // (fairness between borrowers) are preemptions, counted as
            // such, but spend no retry: neither may fail a job.
            AttemptOutcome::PreemptedBudget | AttemptOutcome::PreemptedRebalance => {
                job.preempted_attempts += 1;
                job.free_preemptions += 1;
                (JobStatus::Runnable, StatusReason::Requeued(outcome))
            }
            o if o.is_preemption() => {
                job.preempted_attempts += 1;
                let spent = job.spec.preemption_retries.is_some_and(|max| {
                    job.preempted_attempts.saturating_sub(job.free_preemptions) > max
                });
                if spent {
                    (
                        JobStatus::Failed,
                        StatusReason::PreemptionRetriesExhausted(o),
                    )
                } else {
                    (JobStatus::Runnable, StatusReason::Requeued(o))
                }
            }
            AttemptOutcome::HostLost => {
                job.host_lost_attempts += 1;
                if job.host_lost_attempts > self.host_lost_cap {
                    (JobStatus::Failed, StatusReason::HostLostCapExceeded)
                } else {
                    (JobStatus::Runnable, StatusReason::Requeued(outcome))
                }
            }
            _ => {
                // Failed or timed out: spends retryStrategy.attempts.
                job.failed_attempts += 1;
                let reason_text = outcome.as_str();
                let rule = job
                    .spec
                    .evaluate_on_exit
                    .iter()
                    .find(|r| r.matches(exit_code, reason_text));
                let action = rule.map_or(RetryAction::Retry, |r| r.action);
                if action == RetryAction::Retry && job.failed_attempts < job.spec.retry_attempts {
                    (JobStatus::Runnable, StatusReason::Requeued(outcome))
                } else {
                    (JobStatus::Failed, StatusReason::AttemptsExhausted(outcome))
                }
            }
        };
        match next {
            (JobStatus::Runnable, reason) => self.make_runnable(id, now, reason),
            (status, reason) => {
                self.jobs.get_mut(&id).expect("known job").stopping = None;
                self.transition(id, status, reason, now);
            }
        }
    }
}

/// Why a queue may not be deleted yet ([`Cluster::deletion_blockers`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeletionBlockers {
    /// The queue is ENABLED: it must be DISABLED first.
    pub enabled: bool,
    /// Jobs not yet SUCCEEDED or FAILED, by status, in id order.
    pub unfinished: std::collections::BTreeMap<JobStatus, Vec<JobId>>,
}
