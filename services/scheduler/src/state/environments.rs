//! Service environments (issue 35): an executor joins one, and each queue
//! attached to it holds every one of its executors as a node of its own
//! cluster. What one queue's jobs hold is withheld from the others
//! (`qm_core::environment`), after every entry that may change it, live
//! and replaying alike; the leader's passes serve the queues in
//! [`qm_core::environment::serve_order`]. A queue without
//! `serviceEnvironment` is an environment of its own name: alone in it, it
//! withholds nothing and nothing here changes what it does.

use std::collections::BTreeMap;

use qm_core::{environment, Time};
use qm_wire::system::{LogEntry, ReportPhase};

use qm_wire::messages::RegisterExecutor;

use super::{executors, State};

/// Whether an executor serves queue `queue` of environment `env`: one that
/// joined a service environment serves its queues; one registered for a
/// queue by name serves that queue (whatever its environment), as before
/// environments existed.
pub(super) fn serves(r: &RegisterExecutor, queue: &str, env: &str) -> bool {
    match &r.service_environment {
        Some(joined) => joined == env,
        None => r.job_queue == queue,
    }
}

/// Which environments an entry may change the holdings of.
pub(super) enum Touched {
    None,
    Some(Vec<String>),
    All,
}

impl State {
    /// The other queues of `queue`'s environment that hold instances of
    /// `instance_type`: the environment, and each queue's name, priority
    /// and how many it holds. What a reason that waits on them
    /// (`WAITING_FOR_ENVIRONMENT_CAPACITY`) names, to a reader who may read
    /// those queues.
    pub(super) fn holders(
        &self,
        queue: &str,
        instance_type: &str,
    ) -> (String, Vec<(String, u32, u32)>) {
        let Some(env) = self.environment_of(queue) else {
            return (String::new(), Vec::new());
        };
        let holders = self
            .queues_of(&env)
            .into_iter()
            .filter(|q| q != queue)
            .filter_map(|q| {
                let cluster = &self.queues[&q].cluster;
                let held = cluster
                    .type_idx(instance_type)
                    .map_or(0, |t| cluster.accounting(t).in_use);
                (held > 0).then(|| (q, cluster.priority(), held))
            })
            .collect();
        (env, holders)
    }

    /// The queues an executor serves: the one it registered for by name, or
    /// every queue attached to the environment it joined.
    pub fn served_by(&self, r: &RegisterExecutor) -> Vec<String> {
        self.queues
            .iter()
            .filter(|(q, qs)| serves(r, q, qs.cluster.environment()))
            .map(|(q, _)| q.clone())
            .collect()
    }

    /// The queues attached to `env`, by name.
    pub fn queues_of(&self, env: &str) -> Vec<String> {
        self.queues
            .iter()
            .filter(|(_, qs)| qs.cluster.environment() == env)
            .map(|(q, _)| q.clone())
            .collect()
    }

    /// The environment of a queue (None if the queue does not exist).
    pub fn environment_of(&self, queue: &str) -> Option<String> {
        self.queues
            .get(queue)
            .map(|qs| qs.cluster.environment().to_string())
    }

    /// Every queue, in the order the leader's passes serve them: within an
    /// environment by priority, then name (across environments the order
    /// changes nothing).
    pub fn pass_order(&self) -> Vec<String> {
        let queues: Vec<(&str, u32)> = self
            .queues
            .iter()
            .map(|(q, qs)| (q.as_str(), qs.cluster.priority()))
            .collect();
        environment::serve_order(&queues)
    }

    /// The environments whose holdings `entry` may change (before it is
    /// applied: a lost executor's or a deleted queue's are still known).
    pub(super) fn touched_by(&self, entry: &LogEntry) -> Touched {
        let of_job = |job_id: &str| {
            self.locate(job_id)
                .and_then(|(q, _)| self.environment_of(&q))
        };
        let envs_served = |r: &RegisterExecutor| -> Vec<String> {
            self.served_by(r)
                .iter()
                .filter_map(|q| self.environment_of(q))
                .collect()
        };
        let of_executor = |id: &str| -> Vec<String> {
            self.executors
                .get(id)
                .map(|e| envs_served(&e.registration))
                .unwrap_or_default()
        };
        let envs: Vec<String> = match entry {
            LogEntry::Pass(record) => self.environment_of(&record.job_queue).into_iter().collect(),
            // A rank starting or running holds what the pass gave it; only
            // an end gives slots back.
            LogEntry::Report(r) if r.phase == ReportPhase::Ended => {
                of_job(&r.job_id).into_iter().collect()
            }
            LogEntry::Reports { reports } => reports
                .iter()
                .filter(|r| r.phase == ReportPhase::Ended)
                .filter_map(|r| of_job(&r.job_id))
                .collect(),
            LogEntry::Terminate { job_id, .. } => of_job(job_id).into_iter().collect(),
            LogEntry::Register(r) => of_executor(&r.executor_id)
                .into_iter()
                .chain(envs_served(r))
                .collect(),
            LogEntry::ExecutorLost { executor_id, .. } => of_executor(executor_id),
            // A queue made, changed (its priority orders its claims) or
            // deleted: its environment (fixed once made).
            LogEntry::Config { queue, .. } => {
                let name = &queue.job_queue.job_queue_name;
                vec![self.environment_of(name).unwrap_or_else(|| {
                    queue
                        .job_queue
                        .service_environment
                        .clone()
                        .unwrap_or_else(|| name.clone())
                })]
            }
            LogEntry::QueueDeleted { job_queue, .. } => {
                self.environment_of(job_queue).into_iter().collect()
            }
            _ => return Touched::None,
        };
        Touched::Some(envs)
    }

    /// Withholds from each queue of the touched environments what the
    /// others hold. An environment of one queue is left alone unless it
    /// still withholds something (its other queues were deleted or moved).
    pub(super) fn share_environments(&mut self, touched: Touched, now: u64) {
        let wanted: Option<std::collections::BTreeSet<String>> = match touched {
            Touched::None => return,
            Touched::Some(envs) => Some(envs.into_iter().collect()),
            Touched::All => None,
        };
        let mut by_env: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (q, qs) in &self.queues {
            let env = qs.cluster.environment();
            if wanted.as_ref().is_none_or(|w| w.contains(env)) {
                by_env.entry(env.to_string()).or_default().push(q.clone());
            }
        }
        for (env, names) in by_env {
            let alone_and_clear =
                names.len() == 1 && !self.queues[&names[0]].cluster.withholds_any();
            if alone_and_clear {
                continue;
            }
            let mut clusters: Vec<(&str, &mut qm_core::Cluster)> = self
                .queues
                .iter_mut()
                .filter(|(q, _)| names.contains(q))
                .map(|(q, qs)| (q.as_str(), &mut qs.cluster))
                .collect();
            if let Err(e) = environment::share_out(&mut clusters, Time(now)) {
                // Never so: a slot is placed only where it was free.
                tracing::error!(environment = %env, error = %e, "an instance is held by two queues");
            }
        }
    }

    /// A queue just made: the live executors that already serve it (those
    /// that joined its environment, or registered for it by name) become
    /// its nodes. (Its environment never changes afterwards: the core
    /// refuses that.)
    pub(super) fn add_serving_executors(&mut self, queue: &str, now: u64) {
        let Some(env) = self.environment_of(queue) else {
            return;
        };
        let cluster = &mut self.queues.get_mut(queue).expect("exists").cluster;
        for e in self.executors.values() {
            if e.live && serves(&e.registration, queue, &env) {
                executors::add_node(cluster, &e.registration, now);
            }
        }
    }

    /// The tail `DescribeServiceJob` adds to the reason of a job that waits
    /// on instances other queues of its service environment hold
    /// (`WAITING_FOR_ENVIRONMENT_CAPACITY`): those queues the reader may
    /// read (`may_read`), with their priority and how many they hold. None
    /// for any other job, or when the reader may read none of them.
    pub fn holders_of(&self, job_id: &str, may_read: &dyn Fn(&str) -> bool) -> Option<String> {
        let (q, id) = self.locate(job_id)?;
        let cluster = &self.queues[&q].cluster;
        let job = cluster.job(id)?;
        let qm_core::StatusReason::Waiting(qm_core::WaitReason::EnvironmentCapacityHeld { .. }) =
            job.status_reason
        else {
            return None;
        };
        let (env, holders) = self.holders(&q, cluster.type_name(job.spec.instance_type));
        let named: Vec<String> = holders
            .into_iter()
            .filter(|(holder, _, _)| may_read(holder))
            .map(|(holder, priority, held)| {
                format!("queue {holder} (priority {priority}) holds {held}")
            })
            .collect();
        (!named.is_empty()).then(|| format!("in service environment {env}, {}", named.join(", ")))
    }
}
