//! Workload classes in the state: which jobs may borrow (their
//! [`BorrowBar`], kept current as the configuration and resume proofs
//! change, with the indexes that file jobs by it), passed resume drills,
//! and the checks a configuration change must pass while jobs use classes.
//!
//! Guarantees afterwards: every unfinished job's `borrow_bar` is what its
//! share's configuration and the proofs say, and the waiting queues, the
//! running sets and the stopping counters file it by that.

use super::*;
use crate::policy::classes::BorrowBar;

impl Cluster {
    /// Why a job of `spec` may not run on borrowed capacity, if it may not.
    pub fn borrow_bar_of(&self, spec: &JobSpec) -> Option<BorrowBar> {
        let share = &self.shares.get(spec.share.index())?.config;
        if spec.drill.is_some() {
            return Some(BorrowBar::Drill);
        }
        let rules = share.rules(spec.class.as_deref());
        if !rules.may_borrow {
            return Some(BorrowBar::ClassNeverBorrows);
        }
        if share.protections.borrow_requires_checkpoint && !spec.checkpoints {
            return Some(BorrowBar::NoCheckpoint);
        }
        if rules.borrow_requires_resume_proof
            && !spec.artifact.as_deref().is_some_and(|artifact| {
                self.resume_proven(
                    &share.name,
                    share.class_name(spec.class.as_deref()),
                    artifact,
                )
            })
        {
            return Some(BorrowBar::ResumeNotVerified);
        }
        None
    }

    /// Whether a resume drill has passed for `artifact` in class `class`
    /// of share `share` (and no later one failed).
    pub fn resume_proven(&self, share: &str, class: &str, artifact: &str) -> bool {
        self.resume_proofs
            .get(share)
            .and_then(|classes| classes.get(class))
            .is_some_and(|artifacts| artifacts.contains(artifact))
    }

    /// The artifacts proven to resume, per share and class.
    pub fn resume_proofs(&self) -> &BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
        &self.resume_proofs
    }

    /// Records a resume drill's outcome: a pass proves `artifact` for the
    /// class (its jobs may borrow where the class asks for a proof); a
    /// failure withdraws an earlier proof. Jobs it concerns are refiled at
    /// once. Returns whether anything changed.
    pub fn record_resume_drill(
        &mut self,
        share: &str,
        class: &str,
        artifact: &str,
        passed: bool,
    ) -> bool {
        let changed = if passed {
            self.resume_proofs
                .entry(share.to_string())
                .or_default()
                .entry(class.to_string())
                .or_default()
                .insert(artifact.to_string())
        } else {
            let removed = self
                .resume_proofs
                .get_mut(share)
                .and_then(|classes| classes.get_mut(class))
                .is_some_and(|artifacts| artifacts.remove(artifact));
            if let Some(classes) = self.resume_proofs.get_mut(share) {
                classes.retain(|_, artifacts| !artifacts.is_empty());
            }
            self.resume_proofs.retain(|_, classes| !classes.is_empty());
            removed
        };
        if changed {
            if let Some(s) = self.share_idx(share) {
                self.refresh_borrow_bars(Some(s));
            }
        }
        changed
    }

    /// Recomputes the borrow bar of every unfinished job (of share `only`,
    /// or of all) and refiles those whose bar appeared or went.
    pub(crate) fn refresh_borrow_bars(&mut self, only: Option<ShareIdx>) {
        let ids: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| !j.status.is_final() && only.is_none_or(|s| j.spec.share == s))
            .map(|j| j.id)
            .collect();
        for id in ids {
            let job = &self.jobs[&id];
            let bar = self.borrow_bar_of(&job.spec);
            if bar.is_none() == job.borrow_bar.is_none() {
                self.jobs.get_mut(&id).expect("listed").borrow_bar = bar;
                continue;
            }
            self.unfile(id);
            self.jobs.get_mut(&id).expect("listed").borrow_bar = bar;
            self.file(id);
            self.unsettle(self.jobs[&id].spec.instance_type);
        }
    }

    /// Takes a job out of the indexes that file it by its borrow bar.
    fn unfile(&mut self, id: JobId) {
        self.filing(id, false);
    }

    /// Puts a job into the indexes that file it by its borrow bar.
    fn file(&mut self, id: JobId) {
        self.filing(id, true);
    }

    /// Files (`add`) or unfiles a job by its borrow bar: a waiting job in
    /// its queue's bucket, a running one by its run key, a stopping one in
    /// its share's stopping counter of jobs that may not borrow.
    fn filing(&mut self, id: JobId, add: bool) {
        let job = &self.jobs[&id];
        let (s, t, count, may) = (
            job.spec.share,
            job.spec.instance_type,
            job.spec.count,
            job.borrow_bar.is_none(),
        );
        let (qkey, rkey) = (Self::queue_key(job), Self::run_key(job));
        let (status, stopping) = (job.status, job.stopping.is_some());
        let st = self.st_mut(s, t);
        match (status, stopping) {
            (JobStatus::Runnable, _) if add => st.runnable.insert(qkey, count, may),
            (JobStatus::Runnable, _) => {
                st.runnable.remove(&qkey, count, may);
            }
            (status, false) if status.holds_instances() && add => {
                st.running.insert(rkey);
            }
            (status, false) if status.holds_instances() => {
                st.running.remove(&rkey);
            }
            (status, true) if status.holds_instances() && !may && add => {
                st.stopping_barred += count
            }
            (status, true) if status.holds_instances() && !may => st.stopping_barred -= count,
            _ => {}
        }
    }

    /// Rebuilds every index that files jobs by their borrow bar from the
    /// jobs themselves, with every bar recomputed. For a state read from a
    /// snapshot: one written before workload classes filed jobs by
    /// whether they checkpoint.
    pub fn refile_all(&mut self) {
        // Refiling rebuilds indexes; it changes nothing the usage ledger
        // counts, so the ledger is not touched (a state read from a
        // snapshot stays equal to the one written).
        let clock = self.usage.now.take();
        self.refile_indexes();
        self.usage.now = clock;
        // The per-class counts are derived too: known before any report.
        self.usage.counts.valid = false;
        self.ensure_usage_counts();
    }

    fn refile_indexes(&mut self) {
        let before: Vec<Vec<(RunnableQueue, BTreeSet<RunKey>, u32)>> = self
            .shares
            .iter_mut()
            .map(|slot| {
                slot.types
                    .iter_mut()
                    .map(|st| {
                        (
                            std::mem::take(&mut st.runnable),
                            std::mem::take(&mut st.running),
                            std::mem::take(&mut st.stopping_barred),
                        )
                    })
                    .collect()
            })
            .collect();
        let ids: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| !j.status.is_final())
            .map(|j| j.id)
            .collect();
        for id in ids {
            let bar = self.borrow_bar_of(&self.jobs[&id].spec);
            self.jobs.get_mut(&id).expect("listed").borrow_bar = bar;
            self.file(id);
        }
        // Passes may skip settled types only if nothing they look at moved.
        let mut t_changed = vec![false; self.types.len()];
        for (slot, old) in self.shares.iter().zip(&before) {
            for (t, (st, (runnable, running, barred))) in slot.types.iter().zip(old).enumerate() {
                if st.runnable != *runnable
                    || st.running != *running
                    || st.stopping_barred != *barred
                {
                    t_changed[t] = true;
                }
            }
        }
        for (t, changed) in t_changed.into_iter().enumerate() {
            if changed {
                self.settled[t] = Settled::No;
            }
        }
    }

    /// After a configuration change, brings every unfinished job within
    /// its class: a job whose class the change removed moves to its
    /// share's default class, and a job whose priority lies outside its
    /// class's band is moved to the band's nearest end. Returns the jobs
    /// changed. (Refusing such a change instead would need every service
    /// that validates configurations to know the jobs; this rule is the
    /// same everywhere, and a dry run shows who it moves.)
    pub(crate) fn reconcile_classes(&mut self) -> Vec<JobId> {
        let mut moved = Vec::new();
        let ids: Vec<JobId> = self
            .jobs
            .values()
            .filter(|j| !j.status.is_final())
            .map(|j| j.id)
            .collect();
        for id in ids {
            let job = &self.jobs[&id];
            let share = &self.shares[job.spec.share.index()].config;
            let declared = match job.spec.class.as_deref() {
                None => true,
                Some(name) => share.classes.iter().any(|c| c.name == name),
            };
            let class = if declared {
                job.spec.class.clone()
            } else {
                share.class(None).map(|c| c.name.clone())
            };
            let rules = share.rules(class.as_deref());
            let priority = job
                .spec
                .priority
                .clamp(rules.priority_min, rules.priority_max);
            if declared && priority == job.spec.priority {
                continue;
            }
            self.jobs.get_mut(&id).expect("listed").spec.class = class;
            if priority != self.jobs[&id].spec.priority {
                self.update_priority(id, priority)
                    .expect("an unfinished job, in its band");
            }
            moved.push(id);
        }
        moved
    }

    /// The problems with a submitted job's class, and the spec with the
    /// class resolved (the share's default when it names none).
    pub(crate) fn class_problems_of(&self, spec: &mut JobSpec) -> Vec<ConfigProblem> {
        let mut out = Vec::new();
        let Some(slot) = self.shares.get(spec.share.index()) else {
            return out;
        };
        let share = &slot.config;
        let problem = |field: &str, message: String| ConfigProblem {
            field: field.into(),
            message,
        };
        if share.classes.is_empty() {
            match spec.class.as_deref() {
                None | Some(crate::policy::classes::IMPLICIT_CLASS) => spec.class = None,
                Some(other) => out.push(problem(
                    "workloadClass",
                    format!(
                        "quota share {:?} declares no workload classes, so there is no class {other:?} (leave workloadClass out)",
                        share.name
                    ),
                )),
            }
            return out;
        }
        let Some(class) = share.class(spec.class.as_deref()) else {
            let names: Vec<&str> = share.classes.iter().map(|c| c.name.as_str()).collect();
            out.push(problem(
                "workloadClass",
                format!(
                    "quota share {:?} has no class {:?} (it declares {})",
                    share.name,
                    spec.class.as_deref().unwrap_or_default(),
                    names.join(", ")
                ),
            ));
            return out;
        };
        if !(class.priority_min..=class.priority_max).contains(&spec.priority) {
            out.push(problem(
                "schedulingPriority",
                format!(
                    "must lie in class {:?}'s band {}..={}, got {}",
                    class.name, class.priority_min, class.priority_max, spec.priority
                ),
            ));
        }
        if class.requires_checkpoint && !spec.checkpoints {
            out.push(problem(
                "checkpointConfig",
                format!(
                    "is required: class {:?} runs only jobs that checkpoint",
                    class.name
                ),
            ));
        }
        spec.class = Some(class.name.clone());
        out
    }

    /// The priority band of a job's class.
    pub fn priority_band(&self, id: JobId) -> Option<(String, u32, u32)> {
        let job = self.jobs.get(&id)?;
        let share = &self.shares[job.spec.share.index()].config;
        let rules = share.rules(job.spec.class.as_deref());
        Some((
            share.class_name(job.spec.class.as_deref()).to_string(),
            rules.priority_min,
            rules.priority_max,
        ))
    }
}
