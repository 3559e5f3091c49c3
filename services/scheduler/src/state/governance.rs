//! The policy-stability record: per share and week, what the log says
//! about how the arrangement worked once people depended on it. Counted as
//! the scheduler applies log entries (so a new leader, replaying the same
//! log, counts the same), and read back as `PolicyStabilityRecord`.

use std::collections::BTreeMap;

use qm_core::{JobId, PreemptionKind};
use qm_wire::messages::{
    ByPrincipal, PolicyStabilityRecord, PreemptionCount, ShareWeek, WaitPercentiles,
};
use serde::{Deserialize, Serialize};

use super::State;

const DAY_MS: u64 = 86_400_000;
/// Reclaim waits kept per share and week for the percentiles (the rest
/// are not kept): the record stays small in snapshots.
const MAX_WAITS: usize = 1_000;
/// Weeks kept per share: two years.
const KEPT_WEEKS: u64 = 104;
/// Weeks a read returns when it names no `since`: a year.
const DEFAULT_WEEKS: u64 = 52;
const WEEK_MS: u64 = 7 * DAY_MS;

/// One share's week, as counted.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WeekRecord {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub priority_changes: BTreeMap<String, u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub terminations: BTreeMap<String, u32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config_changes: BTreeMap<String, u32>,
    /// "KIND class" -> count.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub preemptions: BTreeMap<String, u32>,
    #[serde(default)]
    pub preempted_thrice: u32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reclaim_waits_ms: Vec<u64>,
    #[serde(default)]
    pub missing_proof: u32,
}

/// The Monday 00:00 UTC of the week holding `ms`.
pub fn week_start(ms: u64) -> u64 {
    let days = ms / DAY_MS;
    // 1970-01-01 was a Thursday: Monday-based weekday is (days + 3) % 7.
    // Before the first Monday (1970-01-05), the week of 1970-01-01 starts
    // at the epoch.
    days.saturating_sub((days + 3) % 7) * DAY_MS
}

/// `YYYY-MM-DD` of the day holding `ms`.
pub(crate) fn date(ms: u64) -> String {
    qm_wire::dates::utc_date(ms)
}

impl super::QueueState {
    /// The week record of `share` at `at`. Weeks older than the kept ones
    /// go as a new one starts.
    pub(super) fn week(&mut self, share: &str, at: u64) -> &mut WeekRecord {
        let weeks = self.governance.entry(share.to_string()).or_default();
        let this = week_start(at);
        if !weeks.contains_key(&this) {
            let oldest = this.saturating_sub((KEPT_WEEKS - 1) * WEEK_MS);
            weeks.retain(|start, _| *start >= oldest);
        }
        weeks.entry(this).or_default()
    }
}

impl State {
    /// The name of a job's share ("" if unknown).
    pub(super) fn share_name(&self, q: &str, id: JobId) -> String {
        self.queues
            .get(q)
            .and_then(|qs| {
                let job = qs.cluster.job(id)?;
                Some(qs.cluster.share_config(job.spec.share).name.clone())
            })
            .unwrap_or_default()
    }

    /// The week record of `share` in queue `q` at `at`.
    pub(super) fn week(&mut self, q: &str, share: &str, at: u64) -> Option<&mut WeekRecord> {
        Some(self.queues.get_mut(q)?.week(share, at))
    }

    /// A preemption started at `at`: counted for the victim's share by
    /// kind and class; a victim's third counts it as preempted more than
    /// twice; a reclaim starts its beneficiary's wait.
    pub(super) fn note_preemption(
        &mut self,
        q: &str,
        victim: JobId,
        kind: PreemptionKind,
        for_job: JobId,
        at: u64,
    ) {
        let Some(qs) = self.queues.get_mut(q) else {
            return;
        };
        let Some(job) = qs.cluster.job(victim) else {
            return;
        };
        let share = qs.cluster.share_config(job.spec.share);
        let (share_name, class) = (
            share.name.clone(),
            share.class_name(job.spec.class.as_deref()).to_string(),
        );
        let third = job.preempted_attempts + 1 == 3;
        if matches!(
            kind,
            PreemptionKind::CrossShare | PreemptionKind::LimitReduced
        ) {
            qs.reclaim_pending.entry(for_job).or_insert(at);
        }
        if let Some(w) = self.week(q, &share_name, at) {
            *w.preemptions
                .entry(format!("{} {class}", kind.as_str()))
                .or_default() += 1;
            w.preempted_thrice += u32::from(third);
        }
    }

    /// A job started at `at`: if lent capacity was being reclaimed for it,
    /// its owner's wait ends.
    pub(super) fn note_start(&mut self, q: &str, id: JobId, at: u64) {
        let Some(qs) = self.queues.get_mut(q) else {
            return;
        };
        let Some(since) = qs.reclaim_pending.remove(&id) else {
            return;
        };
        let Some(share) = qs
            .cluster
            .job(id)
            .map(|j| qs.cluster.share_config(j.spec.share).name.clone())
        else {
            return;
        };
        if let Some(w) = self.week(q, &share, at) {
            if w.reclaim_waits_ms.len() < MAX_WAITS {
                w.reclaim_waits_ms.push(at.saturating_sub(since));
            }
        }
    }

    /// A job ended up in a final state: its pending reclaim (if any) goes.
    pub(super) fn note_finished(&mut self, q: &str, id: JobId) {
        if let Some(qs) = self.queues.get_mut(q) {
            qs.reclaim_pending.remove(&id);
        }
    }

    /// The record of queue `q`: the shares `may_read` allows (`share` only,
    /// if given), weeks ending after `since` (default: the last
    /// [`DEFAULT_WEEKS`] weeks of the scheduler's clock).
    pub fn governance(
        &self,
        q: &str,
        share: Option<&str>,
        since: Option<u64>,
        may_read: &dyn Fn(&str) -> bool,
    ) -> PolicyStabilityRecord {
        let mut record = PolicyStabilityRecord {
            job_queue: q.to_string(),
            weeks: Vec::new(),
        };
        let Some(qs) = self.queues.get(q) else {
            return record;
        };
        // Drills are kept by the core: counted by the week they ended in.
        let mut drills: BTreeMap<(u64, String), (u32, u32)> = BTreeMap::new();
        for d in qs.cluster.drills() {
            if let Some(at) = d.finished_at {
                let e = drills
                    .entry((week_start(at.as_millis()), d.share.clone()))
                    .or_default();
                match d.state {
                    qm_core::DrillState::Passed => e.0 += 1,
                    _ => e.1 += 1,
                }
            }
        }
        let mut weeks: BTreeMap<(u64, String), WeekRecord> = BTreeMap::new();
        for (name, by_week) in &qs.governance {
            for (start, w) in by_week {
                weeks.insert((*start, name.clone()), w.clone());
            }
        }
        for key in drills.keys() {
            weeks.entry(key.clone()).or_default();
        }
        let by = |m: &BTreeMap<String, u32>| -> Vec<ByPrincipal> {
            m.iter()
                .map(|(p, c)| ByPrincipal {
                    principal: p.clone(),
                    count: *c,
                })
                .collect()
        };
        for ((start, name), w) in weeks {
            if share.is_some_and(|s| s != name) || !may_read(&name) {
                continue;
            }
            let since = since.unwrap_or_else(|| {
                week_start(self.clock).saturating_sub((DEFAULT_WEEKS - 1) * WEEK_MS)
            });
            if start + WEEK_MS <= since {
                continue;
            }
            let (passed, failed) = drills
                .get(&(start, name.clone()))
                .copied()
                .unwrap_or_default();
            record.weeks.push(ShareWeek {
                quota_share_name: name,
                week: date(start),
                week_start: start,
                priority_changes: by(&w.priority_changes),
                terminations: by(&w.terminations),
                configuration_changes: by(&w.config_changes),
                preemptions: w
                    .preemptions
                    .iter()
                    .map(|(k, c)| {
                        let (kind, class) = k.split_once(' ').unwrap_or((k.as_str(), ""));
                        PreemptionCount {
                            kind: kind.to_string(),
                            workload_class: class.to_string(),
                            count: *c,
                        }
                    })
                    .collect(),
                jobs_preempted_more_than_twice: w.preempted_thrice,
                reclaim_wait_seconds: percentiles(&w.reclaim_waits_ms),
                drills_passed: passed,
                drills_failed: failed,
                borrow_refusals_missing_proof: w.missing_proof,
            });
        }
        record
    }
}

fn percentiles(waits_ms: &[u64]) -> Option<WaitPercentiles> {
    if waits_ms.is_empty() {
        return None;
    }
    let mut sorted = waits_ms.to_vec();
    sorted.sort_unstable();
    let at = |p: f64| qm_core::stats::nearest_rank(&sorted, p).unwrap_or(0) as f64 / 1000.0;
    Some(WaitPercentiles {
        count: sorted.len() as u32,
        p50: at(0.50),
        p90: at(0.90),
        p99: at(0.99),
        max: *sorted.last().expect("not empty") as f64 / 1000.0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weeks_start_on_monday_and_are_named_by_their_date() {
        // 2026-12-03 (a Thursday) 09:00 UTC.
        let thursday = 1_796_288_400_000;
        assert_eq!(date(thursday), "2026-12-03");
        let monday = week_start(thursday);
        assert_eq!(date(monday), "2026-11-30");
        assert_eq!(week_start(monday), monday);
        assert_eq!(week_start(monday - 1), monday - 7 * DAY_MS);
        assert_eq!(week_start(1_000), 0, "the epoch's first days");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = percentiles(&(1..=100).map(|s| s * 1000).collect::<Vec<_>>()).expect("some");
        assert_eq!(
            (p.count, p.p50, p.p90, p.p99, p.max),
            (100, 50.0, 90.0, 99.0, 100.0)
        );
        assert!(percentiles(&[]).is_none());
    }

    #[test]
    fn two_years_of_weeks_are_kept_and_a_year_is_read_by_default() {
        let mut state = State::default();
        state.queues.insert(
            "q".into(),
            super::super::QueueState {
                cluster: qm_core::Cluster::new(qm_core::QueueConfig::new("q", Vec::new()), &[])
                    .expect("a queue"),
                ids: Default::default(),
                meta: Default::default(),
                config_revision: 1,
                non_root_shares: Default::default(),
                drill_ids: Default::default(),
                governance: Default::default(),
                reclaim_pending: Default::default(),
            },
        );
        let monday = week_start(1_796_288_400_000);
        for w in 0..150 {
            let at = monday + w * WEEK_MS;
            state.week("q", "QS1", at).expect("the queue").missing_proof += 1;
            state.clock = at;
        }
        assert_eq!(
            state.queues["q"].governance["QS1"].len(),
            KEPT_WEEKS as usize
        );
        let all = |_: &str| true;
        let record = state.governance("q", None, None, &all);
        assert_eq!(record.weeks.len(), DEFAULT_WEEKS as usize);
        let since = state.governance("q", None, Some(0), &all);
        assert_eq!(since.weeks.len(), KEPT_WEEKS as usize);
    }
}
