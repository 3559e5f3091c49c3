//! Several queues on one fleet: a service environment
//! (`qm_core::environment`). Each queue is a [`Simulation`] of its own
//! (its jobs, its report) over every node of the environment; after each
//! instant's events, the queues pass in `serve_order` (priority, then
//! name), each seeing the instances the others hold withheld, as the live
//! scheduler's passes do.

use serde::Serialize;

use super::{Options, Progress, SimError, Simulation, Time};
use crate::report::Report;
use crate::scenario::EnvironmentScenario;

/// A service environment's queues being simulated, in the order they are
/// served.
pub struct Environment {
    name: String,
    queues: Vec<(String, u32, Simulation)>,
    options: Options,
}

/// What happened in each queue of the environment.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EnvironmentReport {
    pub service_environment: String,
    /// In the order the queues are served.
    pub queues: Vec<QueueReport>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueReport {
    pub job_queue_name: String,
    pub priority: u32,
    pub report: Report,
}

impl Environment {
    /// Builds one simulation per queue (each validated whole); queue names
    /// must differ.
    pub fn new(scenario: EnvironmentScenario, options: Options) -> Result<Environment, SimError> {
        if scenario.queues.is_empty() {
            return Err(SimError::Parse(
                "queues: at least one queue is required".into(),
            ));
        }
        let mut queues = Vec::new();
        for (i, s) in scenario.scenarios().into_iter().enumerate() {
            let name = s.queue.job_queue_name.clone();
            if queues.iter().any(|(q, _, _)| *q == name) {
                return Err(SimError::Parse(format!(
                    "queues[{i}].queue.jobQueueName: {name:?} is given twice"
                )));
            }
            let priority = s.queue.priority.unwrap_or(0);
            let sim = Simulation::new(s, options)?;
            queues.push((name, priority, sim));
        }
        let order = qm_core::environment::serve_order(
            &queues
                .iter()
                .map(|(q, p, _)| (q.as_str(), *p))
                .collect::<Vec<_>>(),
        );
        queues.sort_by_key(|(q, _, _)| order.iter().position(|o| o == q));
        Ok(Environment {
            name: scenario.service_environment,
            queues,
            options,
        })
    }

    /// Withholds from each queue what the others hold.
    fn share_out(&mut self, now: Time) -> Result<(), SimError> {
        let mut clusters: Vec<(&str, &mut qm_core::Cluster)> = self
            .queues
            .iter_mut()
            .map(|(q, _, sim)| (q.as_str(), &mut sim.cluster))
            .collect();
        qm_core::environment::share_out(&mut clusters, now)
            .map(|_| ())
            .map_err(|message| SimError::Action {
                index: 0,
                at: now.as_secs_f64(),
                message: format!("an instance is held by two queues: {message}"),
            })
    }

    /// Runs every queue to the end (or `until`).
    pub fn run(
        mut self,
        progress: &mut dyn FnMut(Progress),
    ) -> Result<EnvironmentReport, SimError> {
        let mut since_progress = 0u32;
        while let Some(at) = self.queues.iter().filter_map(|(_, _, s)| s.next_at()).min() {
            let mut needs_pass = false;
            for (_, _, sim) in &mut self.queues {
                needs_pass |= sim.needs_pass_at(at)?;
            }
            if needs_pass {
                // An instance one queue frees may be any queue's: each
                // passes, in order, over what those before it left.
                for i in 0..self.queues.len() {
                    self.share_out(at)?;
                    self.queues[i].2.pass()?;
                }
                self.share_out(at)?;
            }
            since_progress += 1;
            if since_progress >= 50_000 {
                since_progress = 0;
                let mut p = self.queues[0].2.progress();
                for (_, _, s) in &self.queues[1..] {
                    let q = s.progress();
                    p.submitted += q.submitted;
                    p.finished += q.finished;
                    p.passes += q.passes;
                }
                progress(p);
            }
        }
        let last = self.queues.iter().map(|(_, _, s)| s.now()).max();
        let end = self
            .options
            .until
            .unwrap_or(last.unwrap_or(Time::ZERO))
            .max(last.unwrap_or(Time::ZERO));
        Ok(EnvironmentReport {
            service_environment: self.name,
            queues: self
                .queues
                .into_iter()
                .map(|(job_queue_name, priority, sim)| QueueReport {
                    job_queue_name,
                    priority,
                    report: sim.finish(end).0,
                })
                .collect(),
        })
    }
}

impl EnvironmentReport {
    /// Each queue's report as a table, in the order they are served.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        for q in &self.queues {
            out.push_str(&format!(
                "Service environment {}: queue {} (priority {})\n",
                self.service_environment, q.job_queue_name, q.priority
            ));
            out.push_str(&q.report.to_table());
            out.push('\n');
        }
        out
    }
}
