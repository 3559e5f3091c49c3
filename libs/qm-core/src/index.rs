//! Ordered per-share, per-type indexes the pass walks.
//!
//! Waiting jobs are kept in buckets by `(instanceCount, may borrow)`, each an
//! ordered set in the contract's order (priority desc, RUNNABLE-since asc, job
//! id). A pass asks for "the next job in order with count below N", which is a
//! few range lookups, so a queue of 100,000 jobs that cannot start costs a pass
//! almost nothing. Running jobs are ordered by (priority desc, start asc, job
//! id), the order that decides which of them are on borrowed capacity.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use crate::ids::JobId;
use crate::time::Time;

/// A waiting job's place in line.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct QueueKey {
    pub priority: Reverse<u32>,
    pub runnable_since: Time,
    pub job: JobId,
}

/// A running job's place in its share's (priority desc, start asc) order.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct RunKey {
    pub priority: Reverse<u32>,
    pub started: Time,
    pub job: JobId,
    /// Instances held; never decides order (job ids are unique).
    pub count: u32,
    /// Whether the job may run on borrowed capacity (no
    /// [`crate::BorrowBar`]); never decides order. Named `checkpoints` in
    /// snapshots, as it was when only checkpointing decided it.
    #[serde(rename = "checkpoints")]
    pub may_borrow: bool,
}

/// The waiting jobs of one share and one type.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RunnableQueue {
    buckets: BTreeMap<(u32, bool), BTreeSet<QueueKey>>,
    len: usize,
}

impl RunnableQueue {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn insert(&mut self, key: QueueKey, count: u32, may_borrow: bool) {
        if self
            .buckets
            .entry((count, may_borrow))
            .or_default()
            .insert(key)
        {
            self.len += 1;
        }
    }

    pub fn remove(&mut self, key: &QueueKey, count: u32, may_borrow: bool) -> bool {
        let Some(bucket) = self.buckets.get_mut(&(count, may_borrow)) else {
            return false;
        };
        let removed = bucket.remove(key);
        if bucket.is_empty() {
            self.buckets.remove(&(count, may_borrow));
        }
        if removed {
            self.len -= 1;
        }
        removed
    }

    /// The first job in line strictly after `after` (or from the front) whose
    /// count lies in `counts`, optionally only jobs that may borrow, and which
    /// `skip` does not reject. Returns its key and count.
    pub fn next_candidate(
        &self,
        after: Option<QueueKey>,
        counts: std::ops::RangeInclusive<u32>,
        may_borrow_only: bool,
        skip: &dyn Fn(JobId) -> bool,
    ) -> Option<(QueueKey, u32)> {
        let mut best: Option<(QueueKey, u32)> = None;
        if counts.is_empty() {
            return None;
        }
        let range = (*counts.start(), false)..=(*counts.end(), true);
        for (&(count, may_borrow), bucket) in self.buckets.range(range) {
            if may_borrow_only && !may_borrow {
                continue;
            }
            let lower = match after {
                Some(key) => Bound::Excluded(key),
                None => Bound::Unbounded,
            };
            let found = bucket
                .range((lower, Bound::Unbounded))
                .find(|key| !skip(key.job));
            if let Some(key) = found {
                if best.is_none_or(|(b, _)| *key < b) {
                    best = Some((*key, count));
                }
            }
        }
        best
    }

    /// Every waiting job, in line order.
    pub fn in_order(&self) -> Vec<(QueueKey, u32)> {
        let mut all: Vec<(QueueKey, u32)> = self
            .buckets
            .iter()
            .flat_map(|(&(count, _), bucket)| bucket.iter().map(move |k| (*k, count)))
            .collect();
        all.sort_unstable();
        all
    }
}

/// Instances a job of `count` makes its share borrow when the share holds
/// `used` of `entitlement`: what goes beyond the entitlement that was not
/// beyond it already.
pub fn newly_borrowed(used: u32, count: u32, entitlement: u32) -> u32 {
    (used + count).saturating_sub(used.max(entitlement))
}

/// Which running jobs are on borrowed capacity (`semantics.md` section 3):
/// walking them in (priority desc, start asc) order, jobs are within quota
/// until the first one that no longer fits in what is left of `entitlement`;
/// that job and every job after it are borrowed. A prefix, not first fit: a
/// lower-priority or newer job is never kept within quota while a
/// higher-priority or older one is borrowed (and so reclaimable). Returns the
/// borrowed ones in that order.
///
/// Jobs that may not borrow (a [`crate::BorrowBar`]: they do not
/// checkpoint under `borrowRequiresCheckpoint`, or their workload class
/// never borrows or lacks a resume proof) are walked first, then the ones
/// that may, each in that order: whenever possible the jobs on borrowed
/// capacity (the reclaim victims) are ones that can resume. When every job
/// may borrow this is the plain walk.
pub fn borrowed_jobs(running_in_order: &[RunKey], entitlement: u32) -> Vec<RunKey> {
    let mut left = entitlement;
    let mut full = false;
    let mut borrowed = Vec::new();
    let mut walk = |key: &RunKey| {
        if !full && key.count <= left {
            left -= key.count;
        } else {
            full = true;
            borrowed.push(*key);
        }
    };
    if running_in_order.iter().all(|k| k.may_borrow) {
        running_in_order.iter().for_each(walk);
        return borrowed;
    }
    running_in_order
        .iter()
        .filter(|k| !k.may_borrow)
        .for_each(&mut walk);
    running_in_order
        .iter()
        .filter(|k| k.may_borrow)
        .for_each(&mut walk);
    borrowed.sort_unstable();
    borrowed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(priority: u32, since: u64, job: u64) -> QueueKey {
        QueueKey {
            priority: Reverse(priority),
            runnable_since: Time(since),
            job: JobId(job),
        }
    }

    #[test]
    fn next_candidate_respects_order_count_and_cursor() {
        let mut q = RunnableQueue::default();
        q.insert(key(5, 10, 1), 4, true);
        q.insert(key(5, 20, 2), 1, false);
        q.insert(key(1, 0, 3), 2, true);
        q.insert(key(9, 30, 4), 8, true);
        let none = |_| false;
        assert_eq!(
            q.next_candidate(None, 0..=u32::MAX, false, &none)
                .map(|c| c.0.job),
            Some(JobId(4))
        );
        assert_eq!(
            q.next_candidate(None, 0..=4, false, &none).map(|c| c.0.job),
            Some(JobId(1))
        );
        assert_eq!(
            q.next_candidate(Some(key(5, 10, 1)), 0..=4, false, &none)
                .map(|c| c.0.job),
            Some(JobId(2))
        );
        assert_eq!(
            q.next_candidate(Some(key(5, 10, 1)), 0..=4, true, &none)
                .map(|c| c.0.job),
            Some(JobId(3))
        );
        assert_eq!(q.next_candidate(None, 0..=0, false, &none), None);
        assert_eq!(
            q.next_candidate(None, 5..=8, false, &none).map(|c| c.0.job),
            Some(JobId(4))
        );
        let skip_one = |j: JobId| j == JobId(1);
        assert_eq!(
            q.next_candidate(None, 0..=4, false, &skip_one)
                .map(|c| c.0.job),
            Some(JobId(2))
        );
        assert!(q.remove(&key(5, 10, 1), 4, true));
        assert!(!q.remove(&key(5, 10, 1), 4, true));
        assert_eq!(q.len(), 3);
    }

    #[test]
    fn borrowed_jobs_are_a_prefix_of_the_order() {
        let run = |p: u32, s: u64, j: u64, c: u32| RunKey {
            priority: Reverse(p),
            started: Time(s),
            job: JobId(j),
            count: c,
            may_borrow: j != 1,
        };
        let mut order = vec![run(5, 0, 1, 3), run(4, 0, 2, 2), run(3, 0, 3, 1)];
        order.sort();
        // Entitlement 4: job 1 (3) fits, job 2 (2) does not; job 3 (1)
        // would fit first fit, but comes after the first that does not.
        let borrowed = borrowed_jobs(&order, 4);
        assert_eq!(
            borrowed.iter().map(|k| k.job).collect::<Vec<_>>(),
            vec![JobId(2), JobId(3)]
        );
        assert!(borrowed_jobs(&order, 6).is_empty());
        assert_eq!(borrowed_jobs(&order, 0).len(), 3);
        // Job 1 may not borrow: it is fitted first and stays within quota
        // whatever its priority.
        let mut order = vec![run(1, 0, 1, 2), run(5, 0, 2, 3)];
        order.sort();
        let jobs = |v: Vec<RunKey>| v.iter().map(|k| k.job).collect::<Vec<_>>();
        assert_eq!(jobs(borrowed_jobs(&order, 3)), vec![JobId(2)]);
        for k in &mut order {
            k.may_borrow = true;
        }
        assert_eq!(jobs(borrowed_jobs(&order, 3)), vec![JobId(1)]);
    }
}
