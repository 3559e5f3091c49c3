//! Resume drills in the scheduler's state: a stored `Drill` entry becomes
//! the core's drill (its two jobs get the ids admission gave them), and a
//! queue's drills are read back as `ResumeDrill`s.

use qm_core::Time;
use qm_wire::messages::{ResumeDrill, SubmitServiceJob};
use qm_wire::to_core as convert;

use serde::{Deserialize, Serialize};

use super::State;

/// A drill's public id and its two jobs'.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrillNames {
    pub drill: String,
    pub resumed: String,
    pub uninterrupted: String,
}

impl State {
    /// Applies a stored drill: `ids` are the resumed and the uninterrupted
    /// copy's public ids. A drill the core refuses rejects both (describe
    /// says why).
    pub(super) fn drill(
        &mut self,
        drill_id: String,
        ids: [String; 2],
        job: SubmitServiceJob,
        seed: u64,
        now: u64,
    ) {
        if ids
            .iter()
            .any(|id| self.knows(id) || self.rejected.contains_key(id))
        {
            return; // a retried append of a drill we already have
        }
        let refuse = |state: &mut State, reason: String| {
            tracing::warn!(drill = %drill_id, %reason, "stored resume drill refused");
            for (id, suffix) in ids.iter().zip(["-resumed", "-uninterrupted"]) {
                let mut copy = job.clone();
                copy.job_name.push_str(suffix);
                state.reject(id.clone(), copy, reason.clone(), now);
            }
        };
        let Some(qs) = self.queues.get_mut(&job.job_queue) else {
            return refuse(self, "the job queue no longer exists".into());
        };
        let spec = match convert::job_spec(&job, &mut qs.cluster) {
            Ok(spec) => spec,
            Err(problems) => {
                let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
                return refuse(self, text.join("; "));
            }
        };
        let d = match qs.cluster.start_drill(spec, seed, Time(now)) {
            Ok(d) => d,
            Err(e) => return refuse(self, e.to_string()),
        };
        let drill = qs.cluster.drill(d).expect("just started");
        let copies = [
            (ids[0].clone(), drill.subject, "-resumed"),
            (ids[1].clone(), drill.reference, "-uninterrupted"),
        ];
        for (public, core, suffix) in copies {
            let mut submit = job.clone();
            submit.job_name.push_str(suffix);
            qs.insert(core, &public, &submit);
        }
        qs.drill_ids.insert(
            d,
            DrillNames {
                drill: drill_id,
                resumed: ids[0].clone(),
                uninterrupted: ids[1].clone(),
            },
        );
        // The core keeps only the newest decided drills: so do their names.
        let kept: std::collections::BTreeSet<u64> = qs.cluster.drills().map(|d| d.id).collect();
        qs.drill_ids.retain(|id, _| kept.contains(id));
    }

    /// A queue's drills in shares `may_read` allows (all of them with
    /// `share` None, else that share's), newest first.
    pub fn drills(
        &self,
        queue: &str,
        share: Option<&str>,
        may_read: &dyn Fn(&str) -> bool,
    ) -> Vec<ResumeDrill> {
        let Some(qs) = self.queues.get(queue) else {
            return Vec::new();
        };
        qs.cluster
            .drills()
            .rev()
            .filter(|d| share.is_none_or(|s| s == d.share) && may_read(&d.share))
            .map(|d| {
                let names = qs
                    .drill_ids
                    .get(&d.id)
                    .cloned()
                    .unwrap_or_else(|| DrillNames {
                        drill: d.id.to_string(),
                        resumed: qs.public_id(d.subject),
                        uninterrupted: qs.public_id(d.reference),
                    });
                ResumeDrill {
                    drill_id: names.drill,
                    job_queue: queue.to_string(),
                    quota_share_name: d.share.clone(),
                    workload_class: d.class.clone(),
                    artifact: d.artifact.clone(),
                    status: d.state.as_str().to_string(),
                    status_reason: match &d.state {
                        qm_core::DrillState::Failed(why) => why.clone(),
                        _ => String::new(),
                    },
                    resumed_job_id: names.resumed,
                    uninterrupted_job_id: names.uninterrupted,
                    started_at: d.started_at.as_millis(),
                    stopped_at: d.stopped_at.map(Time::as_millis),
                    finished_at: d.finished_at.map(Time::as_millis),
                    recomputed_ms: d.recomputed_ms,
                    restored_step: d.restored_step,
                    restore_ms: d.restore_ms,
                }
            })
            .collect()
    }
}
