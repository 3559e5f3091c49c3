//! The job table: jobs by id in a dense vector. The core numbers jobs 1, 2,
//! 3, ... itself, so a lookup is an index, not a tree search (a pass looks
//! jobs up thousands of times).

use std::ops::Index;

use crate::ids::JobId;
use crate::job::Job;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct JobTable {
    /// `jobs[i]` has id `i + 1`.
    jobs: Vec<Job>,
}

impl JobTable {
    fn slot(id: JobId) -> Option<usize> {
        usize::try_from(id.0).ok()?.checked_sub(1)
    }

    /// The id the next inserted job must have.
    pub fn next_id(&self) -> JobId {
        JobId(self.jobs.len() as u64 + 1)
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn insert(&mut self, job: Job) {
        assert_eq!(job.id, self.next_id(), "jobs are inserted in id order");
        self.jobs.push(job);
    }

    pub fn get(&self, id: &JobId) -> Option<&Job> {
        self.jobs.get(Self::slot(*id)?)
    }

    pub fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        let slot = Self::slot(*id)?;
        self.jobs.get_mut(slot)
    }

    /// Every job, in id order.
    pub fn values(&self) -> std::slice::Iter<'_, Job> {
        self.jobs.iter()
    }
}

impl Index<&JobId> for JobTable {
    type Output = Job;

    fn index(&self, id: &JobId) -> &Job {
        self.get(id).expect("a job the core knows")
    }
}
