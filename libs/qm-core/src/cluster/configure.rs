//! Configuration changes: a whole new queue configuration, validated whole
//! and applied by share name. Lowering a limit stops nothing (the excess
//! becomes borrowed and is reclaimed when another share needs it);
//! deleting a share needs it DISABLED and terminates its jobs. Jobs of a
//! workload class the change removes move to their share's default class,
//! and a priority a band no longer holds moves to the band's nearest end.

use super::*;

impl Cluster {
    // ----- configuration ----------------------------------------------------

    /// Applies a whole new queue configuration (validated whole first). Shares
    /// are matched by name: new ones are created, missing ones deleted (they
    /// must be DISABLED first; deleting terminates their jobs). Lowering a
    /// limit stops nothing: the excess becomes borrowed and is reclaimed when
    /// another share needs it. Returns the jobs that must be told to stop.
    pub fn update_queue(
        &mut self,
        queue: QueueConfig,
        now: Time,
    ) -> Result<Vec<JobId>, ConfigError> {
        crate::validate::validate_queue(&queue)?;
        let mut problems = Vec::new();
        if queue.name != self.queue_name {
            problems.push(ConfigProblem {
                field: "jobQueueName".into(),
                message: format!("is {:?}; this is queue {:?}", queue.name, self.queue_name),
            });
        }
        if queue.service_environment != self.service_environment {
            // Its running jobs hold instances of the environment it draws
            // on; moving them would free those instances for other queues
            // while their processes still run.
            let name = |e: &Option<String>| {
                e.clone()
                    .unwrap_or_else(|| format!("{} (its own)", self.queue_name))
            };
            problems.push(ConfigProblem {
                field: "serviceEnvironment".into(),
                message: format!(
                    "is {}; a queue's service environment is set when it is made and cannot change (it draws on {}): make a queue in the other environment, or delete this one (DISABLED, drained) and make it anew",
                    name(&queue.service_environment),
                    name(&self.service_environment)
                ),
            });
        }
        for slot in self.shares.iter().filter(|s| !s.deleted) {
            let kept = queue.shares.iter().any(|n| n.name == slot.config.name);
            if !kept && slot.config.state != State::Disabled {
                problems.push(ConfigProblem {
                    field: "quotaShares".into(),
                    message: format!(
                        "quota share {:?} would be deleted but is ENABLED; set its state to DISABLED first",
                        slot.config.name
                    ),
                });
            }
        }
        if !problems.is_empty() {
            return Err(ConfigError(problems));
        }
        Ok(self.install_queue(queue, now))
    }

    pub(crate) fn install_queue(&mut self, queue: QueueConfig, now: Time) -> Vec<JobId> {
        self.advance_usage(now);
        // Usage so far, at the old configuration (the queue's limits
        // included: they bound the fleet lending is attributed from);
        // classes may be resolved anew from here on.
        for limit in queue.shares.iter().flat_map(|s| s.capacity_limits.iter()) {
            self.intern_type(&limit.capacity_unit);
        }
        self.touch_all_usage();
        self.usage.counts.valid = false;
        self.settled.iter_mut().for_each(|s| *s = Settled::No);
        self.queue_state = queue.state;
        self.queueing = queue.queueing_strategy;
        self.queue_limits = queue.capacity_limits.clone();
        self.checkpoint_before_preempt_secs = queue.checkpoint_before_preempt_secs;
        if queue.idle_assignment != self.idle_assignment
            || queue.fair_share_half_life_hours != self.fair_share_half_life_hours
        {
            // FAIR_SHARE's memory starts afresh with its setting.
            self.fair_use.clear();
        }
        self.idle_assignment = queue.idle_assignment;
        self.fair_share_half_life_hours = queue.fair_share_half_life_hours;
        self.fair_share_rebalance_secs = queue.fair_share_rebalance_secs;
        self.groups.clone_from(&queue.groups);
        self.service_environment
            .clone_from(&queue.service_environment);
        self.priority = queue.priority;
        let mut to_delete = Vec::new();
        for (i, slot) in self.shares.iter().enumerate() {
            if !slot.deleted && !queue.shares.iter().any(|n| n.name == slot.config.name) {
                to_delete.push(ShareIdx(u16::try_from(i).expect("share slots fit in u16")));
            }
        }
        for share in queue.shares {
            let existing = self.share_idx(&share.name);
            let types: Vec<u32> = self.types.iter().map(|t| share.entitlement(t)).collect();
            match existing {
                Some(s) => {
                    let slot = &mut self.shares[s.index()];
                    for (st, e) in slot.types.iter_mut().zip(types) {
                        st.entitlement = e;
                    }
                    slot.config = share;
                }
                None => self.shares.push(ShareSlot {
                    config: share,
                    deleted: false,
                    types: types
                        .into_iter()
                        .map(|entitlement| ShareType {
                            entitlement,
                            ..ShareType::default()
                        })
                        .collect(),
                }),
            }
        }
        let mut stops = Vec::new();
        for s in to_delete {
            self.shares[s.index()].deleted = true;
            let ids: Vec<JobId> = self
                .jobs
                .values()
                .filter(|j| j.spec.share == s && !j.status.is_final())
                .map(|j| j.id)
                .collect();
            for id in ids {
                if self.jobs[&id].status == JobStatus::Runnable {
                    self.remove_runnable(id);
                    self.transition(id, JobStatus::Failed, StatusReason::ShareDeleted, now);
                } else if self.jobs[&id].status.holds_instances() {
                    if self.jobs[&id].stopping.is_none() {
                        stops.push(id);
                    }
                    self.begin_stop(
                        id,
                        StopCause::Cancelled,
                        StatusReason::CancelInProgress,
                        now,
                    );
                }
            }
        }
        // Jobs stay within their classes; classes, their borrowing and the
        // share's checkpoint rule may have changed which jobs may borrow.
        self.reconcile_classes();
        self.refresh_borrow_bars(None);
        self.ensure_usage_counts();
        self.reconcile_budgets();
        stops
    }
}
