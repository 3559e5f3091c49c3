//! A small world for table tests: names in, decisions out, and the core's
//! invariants checked after every pass.

#![allow(dead_code)]

use std::collections::BTreeMap;

use qm_core::invariants::check_plan;
use qm_core::{
    AttemptOutcome, Cluster, JobId, JobSpec, JobStatus, Plan, PreemptionKind, QueueConfig,
    QuotaShare, StatusReason, Strategy, Time, WaitReason,
};

pub const T: &str = "ml.g5.xlarge";

pub fn share(name: &str, strategy: Strategy, entitlement: i64) -> QuotaShare {
    let mut s = QuotaShare::new(name, &[(T, entitlement)]);
    s.strategy = strategy;
    s
}

pub fn lab(name: &str, entitlement: i64, borrow_limit: i64) -> QuotaShare {
    let mut s = share(name, Strategy::LendAndBorrow, entitlement);
    s.borrow_limit = borrow_limit;
    s
}

pub struct World {
    pub c: Cluster,
    pub now: Time,
    names: BTreeMap<String, JobId>,
    ids: BTreeMap<JobId, String>,
}

impl World {
    pub fn new(fleet: u32, shares: Vec<QuotaShare>) -> World {
        World::with_queue(fleet, QueueConfig::new("q", shares))
    }

    /// A world whose fleet is the given nodes (name, instances of `T`).
    pub fn with_nodes(nodes: &[(&str, u32)], shares: Vec<QuotaShare>) -> World {
        let mut w = World::new(0, shares);
        for (name, count) in nodes {
            w.c.register_node(
                name,
                "1",
                &[(T, *count)],
                qm_core::Runtimes::default(),
                Time::ZERO,
            );
        }
        w
    }

    /// A world whose fleet is the given nodes (name, instances of `T`, the
    /// runtimes they offer).
    pub fn with_runtime_nodes(
        nodes: &[(&str, u32, qm_core::Runtimes)],
        shares: Vec<QuotaShare>,
    ) -> World {
        let mut w = World::new(0, shares);
        for (name, count, runtimes) in nodes {
            w.c.register_node(name, "1", &[(T, *count)], *runtimes, Time::ZERO);
        }
        w
    }

    pub fn node(&self, name: &str) -> qm_core::NodeId {
        self.c.node_id(name).expect("test node exists")
    }

    /// Where the job's current attempt runs: (node, slots) per rank.
    pub fn placed(&self, name: &str) -> Vec<(String, Vec<u32>)> {
        let job = self.c.job(self.id(name)).expect("job");
        job.attempts
            .last()
            .map(|a| {
                a.placement
                    .iter()
                    .map(|r| (self.c.node(r.node).name.clone(), r.slots.to_vec()))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn with_queue(fleet: u32, queue: QueueConfig) -> World {
        World {
            c: Cluster::new(queue, &[(T, fleet)]).expect("valid test queue"),
            now: Time::ZERO,
            names: BTreeMap::new(),
            ids: BTreeMap::new(),
        }
    }

    pub fn at(&mut self, secs: u64) -> &mut Self {
        self.now = Time::from_secs(secs);
        self
    }

    pub fn spec(&self, name: &str, share: &str, count: u32, priority: u32) -> JobSpec {
        let s = self.c.share_idx(share).expect("test share exists");
        let t = self.c.type_idx(T).expect("test type exists");
        let mut spec = JobSpec::new(name, s, t, count);
        spec.priority = priority;
        spec.checkpoints = true;
        spec
    }

    pub fn submit_spec(&mut self, spec: JobSpec) -> JobId {
        let name = spec.name.clone();
        let id = self.c.submit(spec, self.now).expect("test job is valid");
        self.names.insert(name.clone(), id);
        self.ids.insert(id, name);
        id
    }

    pub fn submit(&mut self, name: &str, share: &str, count: u32, priority: u32) -> JobId {
        let spec = self.spec(name, share, count, priority);
        self.submit_spec(spec)
    }

    pub fn id(&self, name: &str) -> JobId {
        self.names[name]
    }

    pub fn name(&self, id: JobId) -> String {
        self.ids[&id].clone()
    }

    /// Runs a pass, checks the invariants, applies it, and reports the
    /// started jobs as RUNNING.
    pub fn step(&mut self) -> Plan {
        let plan = self.c.schedule(self.now);
        if let Err(v) = check_plan(&self.c, &plan) {
            panic!("{v}\nplan: {plan:?}");
        }
        assert_eq!(plan, self.c.schedule(self.now), "passes are deterministic");
        self.c.apply(&plan);
        for s in &plan.starts {
            let attempt = self.c.next_attempt(s.job) - 1;
            self.c
                .attempt_starting(s.job, attempt, None, self.now)
                .expect("started");
            self.c
                .attempt_running(s.job, attempt, self.now)
                .expect("running");
        }
        plan
    }

    pub fn started(&self, plan: &Plan) -> Vec<String> {
        plan.starts.iter().map(|s| self.name(s.job)).collect()
    }

    pub fn preempted(&self, plan: &Plan) -> Vec<(String, PreemptionKind, String)> {
        plan.preemptions
            .iter()
            .map(|p| (self.name(p.job), p.kind, self.name(p.for_job)))
            .collect()
    }

    fn attempt(&self, name: &str) -> u32 {
        self.c.job(self.id(name)).expect("job").attempts.len() as u32
    }

    /// The job's process exits with `code`.
    pub fn exit(&mut self, name: &str, code: i32) -> AttemptOutcome {
        let (id, attempt) = (self.id(name), self.attempt(name));
        self.c
            .attempt_ended(id, attempt, Some(code), self.now)
            .expect("current attempt")
    }

    pub fn lose_host(&mut self, name: &str) {
        let (id, attempt) = (self.id(name), self.attempt(name));
        self.c
            .attempt_lost(id, attempt, self.now)
            .expect("current attempt");
    }

    pub fn checkpoint(&mut self, name: &str, step: u64) {
        let (id, attempt) = (self.id(name), self.attempt(name));
        self.c
            .checkpoint_committed(id, attempt, qm_core::CheckpointMark { at: self.now, step })
            .expect("current attempt");
    }

    pub fn status(&self, name: &str) -> JobStatus {
        self.c.job(self.id(name)).expect("job").status
    }

    pub fn reason(&self, name: &str) -> StatusReason {
        self.c.job(self.id(name)).expect("job").status_reason
    }

    pub fn wait(&self, name: &str) -> Option<WaitReason> {
        self.reason(name).wait()
    }

    pub fn stopping(&self, name: &str) -> bool {
        self.c.job(self.id(name)).expect("job").stopping.is_some()
    }
}

pub fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}
