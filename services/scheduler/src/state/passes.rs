//! Scheduling passes: the core's plan (what starts where, what is
//! preempted, what timed out) becomes a `Pass` log record, and a stored
//! record becomes the core's state again, live or replaying.

use qm_core::{schedule, JobId, Plan, Preemption, PreemptionKind, Rank, Start, Time};
use qm_wire::system::{PassRecord, Placement, PreemptionRecord, StartRecord};

use super::{kind_of, Effects, QueueJob, QueueState, State};

/// The wire form of a core placement (executor ids instead of node indexes).
fn wire_placement(qs: &QueueState, placement: &[Rank]) -> Vec<Placement> {
    placement
        .iter()
        .map(|r| Placement {
            executor_id: qs.cluster.node(r.node).name.clone(),
            slots: r.slots.to_vec(),
        })
        .collect()
}

/// The core placement of a stored one (None if an executor is unknown).
fn core_placement(qs: &QueueState, placement: &[Placement]) -> Option<qm_core::Ranks> {
    placement
        .iter()
        .map(|p| {
            Some(Rank {
                node: qs.cluster.node_id(&p.executor_id)?,
                slots: p.slots.iter().copied().collect(),
            })
        })
        .collect()
}

impl State {
    /// Runs one scheduling pass of `queue` at `now`. Returns the record to
    /// append and the plan to apply once the record is stored.
    pub fn plan(&self, queue: &str, now: u64) -> Option<(PassRecord, Plan)> {
        let qs = self.queues.get(queue)?;
        let plan = schedule(&qs.cluster, Time(now));
        let name = |id: JobId| qs.public_id(id);
        let record = PassRecord {
            job_queue: queue.to_string(),
            now,
            starts: plan
                .starts
                .iter()
                .map(|s| StartRecord {
                    job_id: name(s.job),
                    attempt: qs.cluster.next_attempt(s.job),
                    borrowed: s.borrowed,
                    placement: wire_placement(qs, &s.placement),
                })
                .collect(),
            preemptions: plan
                .preemptions
                .iter()
                .map(|p| PreemptionRecord {
                    job_id: name(p.job),
                    kind: p.kind.as_str().into(),
                    for_job_id: name(p.for_job),
                })
                .collect(),
            timeouts: plan.timeouts.iter().map(|id| name(*id)).collect(),
            checkpoint_deadlines: plan
                .checkpoint_deadlines
                .iter()
                .map(|id| name(*id))
                .collect(),
            drill_stops: plan.drill_stops.iter().map(|id| name(*id)).collect(),
            budget_stops: plan.budget_stops.iter().map(|id| name(*id)).collect(),
        };
        Some((record, plan))
    }

    /// The plan a stored pass record stands for.
    fn plan_of(qs: &QueueState, record: &PassRecord) -> Plan {
        let id = |s: &str| qs.ids.get(s).copied();
        let mut p = Plan {
            now: Time(record.now),
            ..Default::default()
        };
        for s in &record.starts {
            let Some(job) = id(&s.job_id).and_then(|j| qs.cluster.job(j)) else {
                continue;
            };
            let Some(placement) = core_placement(qs, &s.placement) else {
                tracing::error!(job = %s.job_id, "a stored start names an unknown executor; skipped");
                continue;
            };
            p.starts.push(Start {
                job: job.id,
                share: job.spec.share,
                instance_type: job.spec.instance_type,
                count: job.spec.count,
                borrowed: s.borrowed,
                placement,
            });
        }
        for pr in &record.preemptions {
            if let (Some(job), Some(for_job), Some(kind)) =
                (id(&pr.job_id), id(&pr.for_job_id), kind_of(&pr.kind))
            {
                p.preemptions.push(Preemption { job, kind, for_job });
            }
        }
        p.timeouts = record.timeouts.iter().filter_map(|s| id(s)).collect();
        p.checkpoint_deadlines = record
            .checkpoint_deadlines
            .iter()
            .filter_map(|s| id(s))
            .collect();
        p.drill_stops = record.drill_stops.iter().filter_map(|s| id(s)).collect();
        p.budget_stops = record.budget_stops.iter().filter_map(|s| id(s)).collect();
        p
    }

    /// Applies a stored pass. Live, `plan` is the plan the record came from
    /// (it also carries waiting reasons); replaying, the plan is rebuilt
    /// from the record.
    pub fn apply_pass(&mut self, record: &PassRecord, plan: Option<Plan>, fx: &mut Effects) {
        let q = record.job_queue.clone();
        let Some(qs) = self.queues.get(&q) else {
            return;
        };
        let plan = plan.unwrap_or_else(|| Self::plan_of(qs, record));
        for p in &plan.preemptions {
            self.note_preemption(&q, p.job, p.kind, p.for_job, record.now);
        }
        let budget = PreemptionKind::BudgetExhausted;
        for id in &plan.budget_stops {
            self.note_preemption(&q, *id, budget, *id, record.now);
        }
        self.queue_mut(&q).cluster.apply(&plan);
        for s in &plan.starts {
            self.note_start(&q, s.job, record.now);
            fx.extend(self.start_commands(&q, s.job, false));
        }
        let mut stops: Vec<JobId> = plan.timeouts.clone();
        stops.extend(plan.drill_stops.iter().copied());
        for id in &plan.budget_stops {
            stops.push(*id);
            let attempt = self.queues[&q]
                .cluster
                .job(*id)
                .and_then(|j| j.current_attempt())
                .map_or(0, |a| a.number);
            self.preemption_event(&q, *id, attempt, budget, *id, "started", record.now, fx);
        }
        for p in &plan.preemptions {
            stops.push(p.job);
            let attempt = self.queues[&q]
                .cluster
                .job(p.job)
                .and_then(|j| j.current_attempt())
                .map_or(0, |a| a.number);
            self.preemption_event(
                &q, p.job, attempt, p.kind, p.for_job, "started", record.now, fx,
            );
        }
        for id in stops {
            self.stopping.insert(QueueJob::new(&q, id));
            self.stop_command(&q, id, fx);
        }
        // Checkpoint-first windows that ran out: stopped now.
        for id in &plan.checkpoint_deadlines {
            self.stop_command(&q, *id, fx);
        }
    }

    /// Applies a pass this leader planned and stored: the live counterpart
    /// of applying a `Pass` entry.
    pub fn apply_planned(&mut self, record: &PassRecord, plan: Plan) -> Effects {
        self.clock = self.clock.max(record.now);
        let mut fx = Vec::new();
        let touched = super::environments::Touched::Some(
            self.environment_of(&record.job_queue).into_iter().collect(),
        );
        self.apply_pass(record, Some(plan), &mut fx);
        self.share_environments(touched, self.clock);
        self.collect_events(&mut fx);
        fx
    }

    /// Applies a pass that decided nothing to log (waiting reasons only).
    pub fn apply_reasons(&mut self, queue: &str, plan: &Plan) -> Effects {
        let mut fx = Vec::new();
        if let Some(qs) = self.queues.get_mut(queue) {
            qs.cluster.apply(plan);
        }
        self.collect_events(&mut fx);
        fx
    }
}
