//! The job table: jobs by id in a dense ring. The core numbers jobs 1, 2,
//! 3, ... itself, so a lookup is an index, not a tree search (a pass looks
//! jobs up thousands of times). A finished job can be forgotten
//! ([`JobTable::remove`]): its slot is emptied, and empty slots at the front
//! are dropped, so the table holds the jobs from the oldest one still known
//! onwards (a forgotten job in the middle costs one pointer).

use std::collections::VecDeque;
use std::ops::Index;

use crate::ids::JobId;
use crate::job::Job;

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct JobTable {
    /// The id of `jobs[0]`: `jobs[i]` has id `first + i`.
    first: u64,
    /// None: the job was forgotten.
    jobs: VecDeque<Option<Box<Job>>>,
    /// Jobs known (slots that are not None).
    known: usize,
}

impl Default for JobTable {
    fn default() -> Self {
        JobTable {
            first: 1,
            jobs: VecDeque::new(),
            known: 0,
        }
    }
}

impl JobTable {
    fn slot(&self, id: JobId) -> Option<usize> {
        usize::try_from(id.0.checked_sub(self.first)?).ok()
    }

    /// The id the next inserted job must have.
    pub fn next_id(&self) -> JobId {
        JobId(self.first + self.jobs.len() as u64)
    }

    /// Jobs known (inserted and not forgotten).
    pub fn len(&self) -> usize {
        self.known
    }

    pub fn insert(&mut self, job: Job) {
        assert_eq!(job.id, self.next_id(), "jobs are inserted in id order");
        self.jobs.push_back(Some(Box::new(job)));
        self.known += 1;
    }

    pub fn get(&self, id: &JobId) -> Option<&Job> {
        self.jobs.get(self.slot(*id)?)?.as_deref()
    }

    pub fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let slot = self.slot(*id)?;
        self.jobs.get_mut(slot)?.as_deref_mut()
    }

    /// Forgets a job; its id is never used again.
    pub fn remove(&mut self, id: &JobId) -> Option<Job> {
        let slot = self.slot(*id)?;
        let job = self.jobs.get_mut(slot)?.take()?;
        self.known -= 1;
        while self.jobs.front().is_some_and(Option::is_none) {
            self.jobs.pop_front();
            self.first += 1;
        }
        Some(*job)
    }

    /// Every job known, in id order.
    pub fn values(&self) -> impl Iterator<Item = &Job> + '_ {
        self.jobs.iter().filter_map(|j| j.as_deref())
    }
}

impl Index<&JobId> for JobTable {
    type Output = Job;

    fn index(&self, id: &JobId) -> &Job {
        self.get(id).expect("a job the core knows")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobSpec, JobStatus};
    use crate::{ShareIdx, Time, TypeIdx};

    fn job(id: u64) -> Job {
        let spec = JobSpec::new("j", ShareIdx(0), TypeIdx(0), 1);
        Job {
            status: JobStatus::Succeeded,
            ..Job::new(JobId(id), spec, Time(0))
        }
    }

    #[test]
    fn forgotten_jobs_free_the_front_and_ids_are_never_reused() {
        let mut t = JobTable::default();
        for id in 1..=5 {
            t.insert(job(id));
        }
        assert_eq!(t.remove(&JobId(2)).map(|j| j.id), Some(JobId(2)));
        assert!(t.remove(&JobId(2)).is_none(), "forgotten once");
        assert_eq!(t.len(), 4);
        assert_eq!(t.jobs.len(), 5, "a hole in the middle keeps its slot");
        t.remove(&JobId(1));
        assert_eq!(
            (t.first, t.jobs.len()),
            (3, 3),
            "the empty front is dropped"
        );
        assert!(t.get(&JobId(1)).is_none() && t.get(&JobId(2)).is_none());
        assert_eq!(t.get(&JobId(4)).map(|j| j.id), Some(JobId(4)));
        assert_eq!(t.next_id(), JobId(6));
        t.insert(job(6));
        let ids: Vec<u64> = t.values().map(|j| j.id.0).collect();
        assert_eq!(ids, vec![3, 4, 5, 6]);
        for id in 3..=6 {
            t.remove(&JobId(id));
        }
        assert_eq!((t.len(), t.jobs.len(), t.next_id()), (0, 0, JobId(7)));
    }
}
