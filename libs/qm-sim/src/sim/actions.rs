//! The scenario's actions and the synthetic workload generator: what
//! they submit, change or cancel, fed into the core.

use qm_core::{ConfigError, ConfigProblem, JobError, JobId};
use qm_wire::messages as wire;
use qm_wire::{to_core, updates};

use crate::rng::SplitMix64;
use crate::scenario::{Generate, SubmitSpec};
use crate::trace::{Recorded, SubmittedJob};

use super::{ms, Ev, Generator, Phase, SimError, SimJob, Simulation, Time};

impl Simulation {
    fn job_id(&self, index: usize, name: &str) -> Result<JobId, SimError> {
        self.names
            .get(name)
            .copied()
            .ok_or_else(|| SimError::Action {
                index,
                at: self.actions[index].at,
                message: format!("no job named {name:?} was submitted before this action"),
            })
    }

    pub(super) fn action(&mut self, index: usize) -> Result<(), SimError> {
        let now = self.now;
        let action = self.actions[index].clone();
        let fail = |message: String| SimError::Action {
            index,
            at: action.at,
            message,
        };
        if action.verb_count() != 1 {
            return Err(fail("an action needs exactly one of submit, updateServiceJob, terminateServiceJob, createQuotaShare, updateQuotaShare, deleteQuotaShare, setFleet, addNodes, loseNode".into()));
        }
        if let Some(submit) = &action.submit {
            self.submit(submit).map_err(fail)?;
        } else if let Some(update) = &action.update_service_job {
            let id = self.job_id(index, &update.job_name)?;
            // It takes no time of its own: the ledger counts up to now first.
            self.cluster.advance_usage(now);
            self.cluster
                .update_priority(id, update.scheduling_priority)
                .map_err(|e| fail(e.to_string()))?;
            self.record(Recorded::Priority {
                at: now,
                job: update.job_name.clone(),
                priority: update.scheduling_priority,
            });
            self.recorder.policy_change();
        } else if let Some(job) = &action.terminate_service_job {
            let id = self.job_id(index, &job.job_name)?;
            self.record(Recorded::Terminate {
                at: now,
                job: job.job_name.clone(),
            });
            if self
                .cluster
                .terminate(id, now)
                .map_err(|e| fail(e.to_string()))?
            {
                self.request_stop(id);
            }
        } else if let Some(group) = &action.add_nodes {
            if group.count == 0 {
                return Err(fail("addNodes: count must be >= 1".into()));
            }
            let incarnation = now.as_millis().to_string();
            let runtimes = group
                .runtimes()
                .map_err(|e| fail(format!("addNodes: {e}")))?;
            for name in group.node_names() {
                let offer = [(group.instance_type.as_str(), group.instances)];
                for lost in self
                    .cluster
                    .register_node(&name, &incarnation, &offer, runtimes, now)
                {
                    self.lose(lost.job);
                }
                self.record(Recorded::Node {
                    at: now,
                    name,
                    incarnation: incarnation.clone(),
                    offers: vec![(group.instance_type.clone(), group.instances)],
                });
            }
        } else if let Some(name) = &action.lose_node {
            if self.cluster.node_id(name).is_none() {
                return Err(fail(format!("no node named {name:?}")));
            }
            for lost in self.cluster.lose_node(name, now) {
                self.lose(lost.job);
            }
            self.record(Recorded::NodeLost {
                at: now,
                name: name.clone(),
            });
        } else if let Some(fleet) = &action.set_fleet {
            for (instance_type, count) in fleet {
                for id in self.cluster.set_fleet(instance_type, *count, now) {
                    self.lose(id);
                }
                self.record(Recorded::Node {
                    at: now,
                    name: qm_core::pool_node_name(instance_type),
                    incarnation: String::new(),
                    offers: vec![(instance_type.clone(), *count)],
                });
            }
        } else {
            let mut config = self.cluster.queue_config();
            let mut problems: Vec<ConfigProblem> = Vec::new();
            let mut shares = self.shares.clone();
            if let Some(spec) = &action.create_quota_share {
                if config.share(&spec.quota_share_name).is_some() {
                    return Err(fail(format!(
                        "quota share {:?} already exists",
                        spec.quota_share_name
                    )));
                }
                config
                    .shares
                    .push(to_core::share(spec, "createQuotaShare", &mut problems));
                shares.push(spec.clone());
            } else if let Some(patch) = &action.update_quota_share {
                let name = &patch.share.quota_share_name;
                let (Some(share), Some(stored)) = (
                    config.shares.iter_mut().find(|s| &s.name == name),
                    shares.iter_mut().find(|s| &s.quota_share_name == name),
                ) else {
                    return Err(fail(format!("no quota share named {name:?}")));
                };
                *stored = updates::merge_share(stored, patch)
                    .map_err(|p| fail(format!("updateQuotaShare: {}", p.message)))?;
                *share = to_core::share(stored, "updateQuotaShare", &mut problems);
            } else if let Some(spec) = &action.delete_quota_share {
                let before = config.shares.len();
                config.shares.retain(|s| s.name != spec.quota_share_name);
                shares.retain(|s| s.quota_share_name != spec.quota_share_name);
                if config.shares.len() == before {
                    return Err(fail(format!(
                        "no quota share named {:?}",
                        spec.quota_share_name
                    )));
                }
            }
            if !problems.is_empty() {
                return Err(fail(ConfigError(problems).to_string()));
            }
            let stops = self
                .cluster
                .update_queue(config, now)
                .map_err(|e| fail(e.to_string()))?;
            self.shares = shares;
            self.record(Recorded::Config { at: now });
            for id in stops {
                self.request_stop(id);
            }
            self.recorder.policy_change();
        }
        Ok(())
    }

    fn submit(&mut self, spec: &SubmitSpec) -> Result<JobId, String> {
        if self.names.contains_key(&spec.job_name) {
            return Err(format!(
                "job name {:?} is already used in this scenario",
                spec.job_name
            ));
        }
        // The API's submission, converted as admission converts it.
        let interval = spec
            .checkpoint_interval_seconds
            .or(self.defaults.checkpoint_interval_seconds);
        let job = wire::SubmitServiceJob {
            job_name: spec.job_name.clone(),
            job_queue: self.cluster.queue_name().to_string(),
            quota_share_name: Some(spec.quota_share_name.clone()),
            instance_type: spec.instance_type.clone(),
            instance_count: Some(spec.instance_count),
            scheduling_priority: spec.scheduling_priority,
            workload_class: spec.workload_class.clone(),
            preemption_configuration: Some(wire::JobPreemptionConfiguration {
                preemption_retries_before_termination: spec.preemption_retries_before_termination,
            }),
            retry_strategy: spec.retry_strategy.clone(),
            timeout_config: spec.timeout_config.clone(),
            estimated_runtime_seconds: spec.estimated_runtime_seconds,
            termination_grace_period_seconds: spec.termination_grace_period_seconds,
            checkpoint_config: interval.map(|_| wire::CheckpointConfig {
                checkpoint_before_preempt_seconds: spec.checkpoint_before_preempt_seconds,
                ..Default::default()
            }),
            command: vec!["simulated".into()],
            container_image: spec.container_image.clone(),
            ..Default::default()
        };
        let mut core = to_core::job_spec(&job, &mut self.cluster)
            .map_err(|problems| JobError::Invalid(problems).to_string())?;
        let mut problems = Vec::new();
        core.checkpoints = interval.is_some();
        if !(spec.duration_seconds.is_finite() && spec.duration_seconds > 0.0) {
            problems.push(ConfigProblem {
                field: "durationSeconds".into(),
                message: "must be > 0".into(),
            });
        }
        if spec
            .checkpoint_seconds
            .is_some_and(|i| !(i.is_finite() && i >= 0.0))
        {
            problems.push(ConfigProblem {
                field: "checkpointSeconds".into(),
                message: "must be >= 0".into(),
            });
        }
        if interval.is_some_and(|i| !(i.is_finite() && i > 0.0)) {
            problems.push(ConfigProblem {
                field: "checkpointIntervalSeconds".into(),
                message: "must be > 0".into(),
            });
        }
        if !problems.is_empty() {
            return Err(JobError::Invalid(problems).to_string());
        }
        let grace_ms = core.grace_period_secs * 1000;
        let submitted = SubmittedJob {
            name: spec.job_name.clone(),
            share: spec.quota_share_name.clone(),
            instance_type: spec.instance_type.clone(),
            count: core.count,
            priority: core.priority,
            checkpoints: core.checkpoints,
            grace_seconds: core.grace_period_secs,
            retry_attempts: core.retry_attempts,
            timeout_seconds: core.attempt_timeout_secs,
            preemption_retries: core.preemption_retries,
        };
        let id = self
            .cluster
            .submit(core, self.now)
            .map_err(|e| e.to_string())?;
        self.record(Recorded::Submit {
            at: self.now,
            job: submitted,
        });
        assert_eq!(
            id.0 as usize,
            self.jobs.len() + 1,
            "the core numbers jobs 1, 2, 3, ..."
        );
        self.jobs.push(SimJob {
            name: spec.job_name.clone(),
            duration: ms(spec.duration_seconds).max(1),
            interval: interval.map(|i| ms(i).max(1)),
            startup: ms(spec
                .startup_seconds
                .or(self.defaults.startup_seconds)
                .unwrap_or(0.0)),
            stop: ms(spec
                .stop_seconds
                .or(self.defaults.stop_seconds)
                .unwrap_or(0.0))
            .min(grace_ms),
            checkpoint_on_stop: spec
                .checkpoint_on_stop
                .or(self.defaults.checkpoint_on_stop)
                .unwrap_or(false),
            checkpoint_when_asked: spec
                .checkpoint_seconds
                .or(self.defaults.checkpoint_seconds)
                .map(ms),
            failures: spec
                .failures
                .iter()
                .map(|f| (f.attempt, ms(f.after_seconds), f.exit_code))
                .collect(),
            phase: Phase::Waiting,
            committed: 0,
            committed_at: None,
            run_from: None,
            recomputed: 0,
        });
        self.names.insert(spec.job_name.clone(), id);
        self.recorder.submitted(id, self.now);
        Ok(id)
    }

    pub(super) fn start_generator(&mut self, gen: Generate) -> Result<(), SimError> {
        let bad = |message: &str| SimError::Action {
            index: 0,
            at: 0.0,
            message: format!("generate: {message}"),
        };
        if gen.mean_interarrival_seconds <= 0.0
            || gen.min_duration_seconds <= 0.0
            || gen.max_duration_seconds < gen.min_duration_seconds
        {
            return Err(bad("needs meanInterarrivalSeconds > 0 and 0 < minDurationSeconds <= maxDurationSeconds"));
        }
        if gen.instance_counts.is_empty() || gen.instance_counts.contains(&0) {
            return Err(bad("instanceCounts must list counts >= 1"));
        }
        // Shares weighted by entitlement, one (type, weight) per limit.
        let mut targets = Vec::new();
        for s in self.cluster.share_indices() {
            let share = self.cluster.share_config(s);
            for limit in &share.capacity_limits {
                if limit.max_capacity > 0 {
                    let weight = u32::try_from(limit.max_capacity).unwrap_or(u32::MAX);
                    targets.push(((share.name.clone(), limit.capacity_unit.clone()), weight));
                }
            }
        }
        if targets.is_empty() {
            return Err(bad("no share has capacity to submit to"));
        }
        let rng = SplitMix64::new(gen.seed);
        self.generator = Some(Generator {
            spec: gen,
            rng,
            made: 0,
            targets,
        });
        self.push(Time::ZERO, Ev::Generate);
        Ok(())
    }

    pub(super) fn generate(&mut self) -> Result<(), SimError> {
        let Some(mut g) = self.generator.take() else {
            return Ok(());
        };
        let total_weight: u64 = g.targets.iter().map(|(_, w)| u64::from(*w)).sum();
        let mut pick = g.rng.below(total_weight);
        let ((share, instance_type), _) = g
            .targets
            .iter()
            .find(|(_, w)| {
                if pick < u64::from(*w) {
                    true
                } else {
                    pick -= u64::from(*w);
                    false
                }
            })
            .expect("pick is below the total weight");
        let gen = &g.spec;
        let (lo, hi) = (gen.min_duration_seconds.ln(), gen.max_duration_seconds.ln());
        let duration = (lo + (hi - lo) * g.rng.unit()).exp();
        let count = gen.instance_counts[g.rng.below(gen.instance_counts.len() as u64) as usize];
        let checkpoints = g.rng.unit() < gen.checkpointing_fraction;
        let spec = SubmitSpec {
            job_name: format!("gen-{:07}", g.made + 1),
            quota_share_name: share.clone(),
            instance_type: instance_type.clone(),
            instance_count: count,
            scheduling_priority: Some(g.rng.below(u64::from(gen.max_priority) + 1) as u32),
            workload_class: None,
            preemption_retries_before_termination: None,
            retry_strategy: None,
            timeout_config: None,
            estimated_runtime_seconds: None,
            termination_grace_period_seconds: None,
            duration_seconds: (duration * 1000.0).round() / 1000.0,
            checkpoint_interval_seconds: checkpoints.then_some(gen.checkpoint_interval_seconds),
            startup_seconds: None,
            stop_seconds: None,
            checkpoint_on_stop: None,
            checkpoint_before_preempt_seconds: None,
            checkpoint_seconds: None,
            failures: Vec::new(),
            container_image: None,
        };
        if self.submit(&spec).is_err() {
            // A generated job that the configuration forbids is counted, not fatal.
            self.recorder.rejected += 1;
        }
        g.made += 1;
        if g.made < g.spec.jobs {
            let gap = -g.spec.mean_interarrival_seconds * (1.0 - g.rng.unit()).ln();
            let next = self.now.plus_millis(ms(gap));
            self.push(next, Ev::Generate);
            self.generator = Some(g);
        }
        Ok(())
    }
}
