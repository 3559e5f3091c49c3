//! Resume drills in a pass (`crate::policy::drills`).
//!
//! Hook: [`due`] (the pass's phase of stops due: drill subjects whose stop
//! point has come), with the moment of the next one.

use crate::cluster::Cluster;
use crate::ids::JobId;
use crate::time::Time;

/// The drill subjects due to stop at `now` that still hold instances and
/// are not being stopped, and when the next one is due.
pub fn due(c: &Cluster, now: Time) -> (Vec<JobId>, Option<Time>) {
    let mut due = Vec::new();
    for &(at, id) in &c.drill_stops {
        if at > now {
            return (due, Some(at));
        }
        let job = &c.jobs[&id];
        if job.stopping.is_some() || !job.status.holds_instances() {
            continue;
        }
        due.push(id);
    }
    (due, None)
}
