//! Executors: registering one and the instances it offers.

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutorInstances {
    pub instance_type: String,
    pub count: u32,
    /// GPU indices per instance, when the node has GPUs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<Vec<u32>>,
}

/// `RegisterExecutor`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
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
