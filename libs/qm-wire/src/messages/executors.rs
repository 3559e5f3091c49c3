//! Executors: registering one and the instances it offers.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorInstances {
    pub instance_type: String,
    pub count: u32,
    /// GPU indices per instance, when the node has GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<Vec<u32>>,
}

/// `RegisterExecutor`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RegisterExecutor {
    pub executor_id: String,
    /// The queue it serves (its environment is the queue's name); empty
    /// when it joins a `serviceEnvironment` instead.
    #[serde(default)]
    pub job_queue: String,
    /// The service environment it joins: it runs the jobs of every queue
    /// attached to it (`jobQueue` then is empty).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_environment: Option<String>,
    pub instances: Vec<ExecutorInstances>,
    /// Changes when the executor process restarts: the attempts of an
    /// earlier incarnation are gone (they end HOST_LOST).
    #[serde(default)]
    pub incarnation: String,
    /// The node's checkpoint service (`qm.v1.ckpt.<node>.*`); defaults to
    /// the executor id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_node: Option<String>,
    /// The address the node's processes are reached at by the other nodes
    /// of a multi-node job (`QM_HOSTS`); defaults to the executor id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// After how many seconds without an acknowledged heartbeat this
    /// executor stops its attempts on its own (self-fencing). The scheduler
    /// declares it lost only after that, the longest grace of its attempts
    /// and a margin (ADR 0007). Absent: an executor that does not fence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fence_after_seconds: Option<u64>,
    /// How it launches attempts: `process` (host commands) and/or
    /// `container` (images). Absent: `process` only, as every executor
    /// before runtimes existed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtimes: Vec<String>,
}

/// What an executor serves, checked (by the executor at start and by
/// admission on every registration): exactly one of a queue by name
/// (`jobQueue`, a subject token) and a service environment it joins
/// (`serviceEnvironment`, named as a queue's is); the problem, naming the
/// field, or None.
pub fn serving_problem(job_queue: &str, service_environment: &str) -> Option<String> {
    match (job_queue.is_empty(), service_environment.is_empty()) {
        (true, true) => Some(
            "jobQueue or serviceEnvironment is required: the queue it serves, or the service environment it joins".into(),
        ),
        (false, false) => Some(
            "give jobQueue or serviceEnvironment, not both: an executor serves one queue by name, or every queue of one service environment".into(),
        ),
        (false, true) => crate::subjects::token(job_queue)
            .err()
            .map(|e| format!("jobQueue: {e}")),
        (true, false) => (!qm_core::config::valid_name(service_environment)).then(|| {
            format!(
                "serviceEnvironment: {service_environment:?} must be 1-{} characters of letters, digits, '-' and '_'",
                qm_core::config::MAX_NAME_LEN
            )
        }),
    }
}

impl RegisterExecutor {
    /// The service environment it serves: the one it names, or its queue's
    /// own (a queue without `serviceEnvironment` is an environment of its
    /// own name).
    pub fn environment(&self) -> &str {
        self.service_environment
            .as_deref()
            .unwrap_or(&self.job_queue)
    }
}

#[cfg(test)]
mod tests {
    use super::serving_problem;

    #[test]
    fn an_executor_serves_one_queue_or_joins_one_environment() {
        assert_eq!(serving_problem("training", ""), None);
        assert_eq!(serving_problem("", "gpu-fleet"), None);
        for (queue, env, says) in [
            ("", "", "jobQueue or serviceEnvironment is required"),
            ("training", "gpu-fleet", "not both"),
            ("train.>", "", "jobQueue:"),
            ("", "gpu.>", "serviceEnvironment: \"gpu.>\" must be"),
            ("", "a b", "serviceEnvironment:"),
        ] {
            let p = serving_problem(queue, env).expect("a problem");
            assert!(p.contains(says), "{queue:?} {env:?}: {p}");
        }
    }
}
