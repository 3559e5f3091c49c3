//! Resume drills in the state (`policy::drills`): starting one (two jobs of the
//! same spec), stopping its subject after its first committed checkpoint,
//! and deciding it once both jobs have ended.
//!
//! Guarantees afterwards: a drill's subject is stopped at most once, by
//! the drill; a decided drill has recorded its outcome as a resume proof
//! (or withdrawn one) for its share, class and artifact.

use super::*;
use crate::policy::drills::{compare_results, delay_for, Drill, DrillRole, DrillState};

impl Cluster {
    /// Starts a resume drill of `spec` (a job of a share that declares
    /// workload classes, that checkpoints): submits its subject (named
    /// `<name>-resumed`) and its reference (`<name>-uninterrupted`).
    /// `seed` draws when the subject is stopped. Returns the drill's id.
    pub fn start_drill(&mut self, spec: JobSpec, seed: u64, now: Time) -> Result<u64, JobError> {
        let mut problems = Vec::new();
        let problem = |field: &str, message: &str| ConfigProblem {
            field: field.into(),
            message: message.into(),
        };
        if !spec.checkpoints {
            problems.push(problem(
                "checkpointConfig",
                "is required: a drill stops the job after a committed checkpoint and resumes it from there",
            ));
        }
        let share = self.shares.get(spec.share.index()).map(|s| &s.config);
        if share.is_some_and(|s| s.classes.is_empty()) {
            problems.push(problem(
                "workloadClass",
                "a drill proves a workload class's resume path, and this quota share declares no classes",
            ));
        }
        if spec.artifact.is_none() && share.is_some_and(|s| !s.classes.is_empty()) {
            problems.push(problem(
                "command",
                "a drill needs to know what the job runs (its image or command)",
            ));
        }
        if !problems.is_empty() {
            return Err(JobError::Invalid(problems));
        }
        let id = self.drills.keys().next_back().map_or(1, |last| last + 1);
        let mut subject = spec.clone();
        subject.name = format!("{}-resumed", spec.name);
        subject.drill = Some(DrillRole {
            drill: id,
            reference: false,
        });
        let mut reference = spec;
        reference.name = format!("{}-uninterrupted", reference.name);
        reference.drill = Some(DrillRole {
            drill: id,
            reference: true,
        });
        // The two jobs differ only in name and role: one submit's
        // validation speaks for both.
        let subject_id = self.submit(subject, now)?;
        self.count_drill(&self.jobs[&subject_id].spec.clone(), now);
        let reference_id = self
            .submit(reference, now)
            .expect("the same spec as the subject, which was accepted");
        let job = &self.jobs[&subject_id];
        let share = &self.shares[job.spec.share.index()].config;
        let drill = Drill {
            id,
            share: share.name.clone(),
            class: share.class_name(job.spec.class.as_deref()).to_string(),
            artifact: job.spec.artifact.clone().unwrap_or_default(),
            subject: subject_id,
            reference: reference_id,
            started_at: now,
            delay_ms: delay_for(seed),
            stop_at: None,
            stopped_at: None,
            state: DrillState::Running,
            finished_at: None,
            recomputed_ms: None,
            restored_step: None,
            restore_ms: None,
        };
        self.drills.insert(id, drill);
        Ok(id)
    }

    /// Keeps at most [`crate::policy::drills::KEPT_DECIDED_DRILLS`] decided drills,
    /// the newest: the state stays bounded however many drills run, and a
    /// drill's outcome lives on as its resume proof.
    fn forget_old_drills(&mut self) {
        let decided: Vec<u64> = self
            .drills
            .values()
            .filter(|d| d.state != DrillState::Running)
            .map(|d| d.id)
            .collect();
        let excess = decided
            .len()
            .saturating_sub(crate::policy::drills::KEPT_DECIDED_DRILLS);
        for id in decided.into_iter().take(excess) {
            self.drills.remove(&id);
        }
    }

    /// Every drill, running and kept decided ones, by id.
    pub fn drills(&self) -> impl DoubleEndedIterator<Item = &Drill> {
        self.drills.values()
    }

    pub fn drill(&self, id: u64) -> Option<&Drill> {
        self.drills.get(&id)
    }

    /// The subject's first committed checkpoint sets when it is stopped.
    pub(crate) fn drill_checkpoint(&mut self, id: JobId, at: Time) {
        let Some(role) = self.jobs.get(&id).and_then(|j| j.spec.drill) else {
            return;
        };
        if role.reference {
            return;
        }
        let Some(drill) = self.drills.get_mut(&role.drill) else {
            return;
        };
        if drill.stop_at.is_some() || drill.state != DrillState::Running {
            return;
        }
        let stop_at = at.plus_millis(drill.delay_ms);
        drill.stop_at = Some(stop_at);
        self.drill_stops.insert((stop_at, id));
        self.unsettle(self.jobs[&id].spec.instance_type);
    }

    /// Stops a drill's subject (a pass found it due).
    pub(crate) fn begin_drill_stop(&mut self, id: JobId, now: Time) {
        let Some(role) = self.jobs.get(&id).and_then(|j| j.spec.drill) else {
            return;
        };
        if let Some(drill) = self.drills.get_mut(&role.drill) {
            if let Some(at) = drill.stop_at {
                self.drill_stops.remove(&(at, id));
            }
            drill.stopped_at = Some(now);
        }
        self.begin_stop(id, StopCause::Drill, StatusReason::DrillStopInProgress, now);
    }

    /// Records what an attempt's process declared as its result (read from
    /// `$QM_RESULT_FILE` by its executor), cut to
    /// [`crate::policy::drills::MAX_RESULT_BYTES`].
    pub fn attempt_result(
        &mut self,
        id: JobId,
        attempt: u32,
        mut text: String,
    ) -> Result<(), JobError> {
        let job = self.job_mut(id)?;
        let a = job
            .attempts
            .iter_mut()
            .find(|a| a.number == attempt)
            .ok_or(JobError::StaleAttempt { job: id, attempt })?;
        if text.len() > crate::policy::drills::MAX_RESULT_BYTES {
            let mut end = crate::policy::drills::MAX_RESULT_BYTES;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        a.result = Some(text);
        Ok(())
    }

    /// A drill job reached a final status: once both have, the drill is
    /// decided and its outcome recorded.
    pub(crate) fn drill_job_finished(&mut self, id: JobId, now: Time) {
        let Some(role) = self.jobs.get(&id).and_then(|j| j.spec.drill) else {
            return;
        };
        let Some(drill) = self.drills.get(&role.drill) else {
            return;
        };
        if drill.state != DrillState::Running {
            return;
        }
        let (subject, reference) = (&self.jobs[&drill.subject], &self.jobs[&drill.reference]);
        // A failed job decides at once (the other runs to its end, and its
        // result is not looked at); else both must have succeeded.
        let failed = |j: &Job| j.status == JobStatus::Failed;
        let done = |j: &Job| j.status.is_final();
        if !(failed(subject) || failed(reference) || (done(subject) && done(reference))) {
            return;
        }
        let verdict = if failed(reference) {
            Err(
                "the uninterrupted run failed: the job does not succeed even without a stop"
                    .to_string(),
            )
        } else if failed(subject) {
            Err("the resumed run failed after the drill's stop".to_string())
        } else if drill.stopped_at.is_none() {
            Err(format!(
                "inconclusive: the job ended before the drill could stop it ({} s after its first committed checkpoint{}); give it more work",
                drill.delay_ms / 1000,
                if drill.stop_at.is_none() { ", and it committed none" } else { "" }
            ))
        } else {
            let tolerance = self.shares[subject.spec.share.index()]
                .config
                .class(subject.spec.class.as_deref())
                .map_or(0, |c| c.result_tolerance_ppm);
            let last = |j: &Job| j.attempts.last().and_then(|a| a.result.clone());
            compare_results(
                last(reference).as_deref(),
                last(subject).as_deref(),
                tolerance,
            )
        };
        // What the stop cost: the stopped attempt's work since its last
        // checkpoint, and the resumed attempt's restore.
        let stopped = subject
            .attempts
            .iter()
            .find(|a| a.outcome == Some(AttemptOutcome::PreemptedDrill));
        let recomputed_ms = stopped.and_then(|a| {
            let since = a.last_checkpoint.map(|c| c.at).or(a.running_at)?;
            Some(a.stopped_at?.millis_since(since))
        });
        let resumed =
            stopped.and_then(|s| subject.attempts.iter().find(|a| a.number == s.number + 1));
        let restored_step = resumed.and_then(|a| a.restored.map(|m| m.step));
        let restore_ms = resumed.and_then(|a| Some(a.running_at?.millis_since(a.scheduled_at)));
        let (share, class, artifact) = (
            drill.share.clone(),
            drill.class.clone(),
            drill.artifact.clone(),
        );
        let passed = verdict.is_ok();
        let drill = self.drills.get_mut(&role.drill).expect("checked above");
        drill.state = match verdict {
            Ok(()) => DrillState::Passed,
            Err(why) => DrillState::Failed(why),
        };
        drill.finished_at = Some(now);
        drill.recomputed_ms = recomputed_ms;
        drill.restored_step = restored_step;
        drill.restore_ms = restore_ms;
        if let Some(at) = drill.stop_at.filter(|_| drill.stopped_at.is_none()) {
            self.drill_stops.remove(&(at, drill.subject));
        }
        self.forget_old_drills();
        self.record_resume_drill(&share, &class, &artifact, passed);
    }
}
