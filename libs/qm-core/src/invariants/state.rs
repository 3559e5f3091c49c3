//! The state agrees with itself: nodes with jobs, indexes with the table.

use std::collections::BTreeSet;

use crate::cluster::Cluster;
use crate::ids::{ShareIdx, TypeIdx};
use crate::job::JobStatus;

use super::{violation, Violation};

/// Nodes agree with the jobs: every held slot belongs to an attempt that
/// holds instances and whose placement names it, every such attempt's
/// placement is held by it (one rank per node, its count in all), and each
/// type's fleet is what its live nodes offer.
pub fn check_nodes(c: &Cluster) -> Result<(), Violation> {
    for t in 0..c.types.len() {
        let t = TypeIdx(t as u16);
        let offered: u32 = c
            .nodes
            .iter()
            .filter(|n| n.live)
            .map(|n| n.offered(t))
            .sum();
        if offered != c.fleet[t.index()] {
            return violation(
                "fleet is what live nodes offer",
                format!("{} offered, fleet {}", offered, c.fleet[t.index()]),
            );
        }
    }
    for (i, node) in c.nodes.iter().enumerate() {
        for (t, slots) in &node.slots {
            let withheld = node.withheld(*t);
            let free: BTreeSet<u32> = (0..slots.len() as u32)
                .filter(|s| slots[*s as usize].is_none() && !withheld.contains(s))
                .collect();
            if let Some(s) = withheld
                .iter()
                .find(|s| slots.get(**s as usize).is_some_and(Option::is_some))
            {
                return violation(
                    "a withheld slot is held by no job of this queue",
                    format!("node {} type {t:?} slot {s}", node.name),
                );
            }
            if node.free.get(t).cloned().unwrap_or_default() != free {
                return violation(
                    "free slots are the unheld ones",
                    format!("node {} type {t:?}", node.name),
                );
            }
            for (slot, holder) in slots.iter().enumerate() {
                let Some(job) = holder else { continue };
                let ok = c.jobs.get(job).is_some_and(|j| {
                    j.status.holds_instances()
                        && j.spec.instance_type == *t
                        && j.attempts.last().is_some_and(|a| {
                            a.placement
                                .iter()
                                .any(|r| r.node.index() == i && r.slots.contains(&(slot as u32)))
                        })
                });
                if !ok {
                    return violation(
                        "slots are held by placed attempts",
                        format!("slot {slot} of node {} held by {job}", node.name),
                    );
                }
            }
        }
    }
    for job in c.jobs().filter(|j| j.status.holds_instances()) {
        let Some(a) = job.attempts.last() else {
            return violation("holders have an attempt", format!("{}", job.id));
        };
        let nodes: BTreeSet<_> = a.placement.iter().map(|r| r.node).collect();
        let count: usize = a.placement.iter().map(|r| r.slots.len()).sum();
        if nodes.len() != a.placement.len() || count != job.spec.count as usize {
            return violation(
                "a placement is one rank per node, its count in all",
                format!(
                    "{}: {:?} for {} instances",
                    job.id, a.placement, job.spec.count
                ),
            );
        }
        for r in &a.placement {
            if !c.nodes[r.node.index()].runtimes.contains(job.spec.runtime) {
                return violation(
                    "a job runs only on nodes offering its runtime",
                    format!(
                        "{} ({}) on node {}",
                        job.id,
                        job.spec.runtime,
                        c.nodes[r.node.index()].name
                    ),
                );
            }
            let held = r.slots.iter().all(|i| {
                c.nodes[r.node.index()]
                    .slots
                    .get(&job.spec.instance_type)
                    .and_then(|s| s.get(*i as usize))
                    == Some(&Some(job.id))
            });
            if !held {
                return violation(
                    "placed slots are held",
                    format!("{}: slots {:?} of node {:?}", job.id, r.slots, r.node),
                );
            }
        }
    }
    Ok(())
}

/// Every index agrees with the jobs: each job is in exactly one place, and
/// usage counters equal what the jobs hold.
pub fn check_indexes(c: &Cluster) -> Result<(), Violation> {
    check_nodes(c)?;
    // Checkpoint-first windows: exactly the preempted jobs that still
    // hold their instances and wait for a checkpoint, each once.
    let windows: Vec<(crate::time::Time, crate::ids::JobId)> = c
        .jobs()
        .filter_map(|j| j.checkpoint_first.map(|w| (w.until, j.id)))
        .collect();
    for (until, id) in &windows {
        let job = c.job(*id).expect("listed");
        if !matches!(job.stopping, Some(crate::job::StopCause::Preempted { .. }))
            || !job.status.holds_instances()
        {
            return violation(
                "indexes",
                format!("{id} waits for a checkpoint but is not being preempted"),
            );
        }
        if !c.checkpoint_windows.contains(&(*until, *id)) {
            return violation(
                "indexes",
                format!("{id}'s checkpoint window is not indexed"),
            );
        }
    }
    if windows.len() != c.checkpoint_windows.len() {
        return violation(
            "indexes",
            format!(
                "{} checkpoint windows indexed, {} jobs wait for a checkpoint",
                c.checkpoint_windows.len(),
                windows.len()
            ),
        );
    }
    for s in 0..c.shares.len() {
        for t in 0..c.types.len() {
            let (s, t) = (ShareIdx(s as u16), TypeIdx(t as u16));
            let st = c.st(s, t);
            let mut running = 0u32;
            let mut stopping = 0u32;
            let mut stopping_barred = 0u32;
            let mut runnable = 0usize;
            for job in c
                .jobs()
                .filter(|j| j.spec.share == s && j.spec.instance_type == t)
            {
                if !job.status.is_final() && job.borrow_bar != c.borrow_bar_of(&job.spec) {
                    return violation(
                        "indexes",
                        format!(
                            "{}'s borrow bar is {:?}, its class and share say {:?}",
                            job.id,
                            job.borrow_bar,
                            c.borrow_bar_of(&job.spec)
                        ),
                    );
                }
                match job.status {
                    JobStatus::Runnable => runnable += 1,
                    status if status.holds_instances() => {
                        if job.stopping.is_some() {
                            stopping += job.spec.count;
                            if job.borrow_bar.is_some() {
                                stopping_barred += job.spec.count;
                            }
                        } else {
                            running += job.spec.count;
                            let key = Cluster::run_key(job);
                            if !st.running.contains(&key) {
                                return violation(
                                    "indexes",
                                    format!(
                                        "running {} missing from its share's running set",
                                        job.id
                                    ),
                                );
                            }
                        }
                    }
                    _ => {}
                }
            }
            if stopping_barred != st.stopping_barred {
                return violation(
                    "indexes",
                    format!(
                        "stopping counter of jobs that may not borrow {} != {stopping_barred}",
                        st.stopping_barred
                    ),
                );
            }
            if running != st.running_usage
                || stopping != st.stopping_usage
                || runnable != st.runnable.len()
            {
                return violation(
                    "indexes",
                    format!(
                        "share {} type {}: counters running {}/{} stopping {}/{} runnable {}/{}",
                        c.share_config(s).name,
                        c.type_name(t),
                        st.running_usage,
                        running,
                        st.stopping_usage,
                        stopping,
                        st.runnable.len(),
                        runnable
                    ),
                );
            }
            let set_sum: u32 = st.running.iter().map(|k| k.count).sum();
            if set_sum != st.running_usage {
                return violation(
                    "indexes",
                    format!(
                        "running set holds {set_sum}, counter says {}",
                        st.running_usage
                    ),
                );
            }
        }
    }
    Ok(())
}
