//! Service environments: one fleet, several queues (issue 35).
//!
//! An executor joins a service environment; queues attach to it, each with
//! a priority (0-1000, higher first, as AWS Batch). The rules:
//!
//! 1. **Order.** Each round, the environment's queues are served in
//!    [`serve_order`]: priority descending, then name. A queue places its
//!    jobs on the instances left free by the queues served before it; what
//!    it leaves free, the next queue may take.
//! 2. **Within a queue**, shares, lending, borrowing, reclaim and in-share
//!    preemption work as in a queue of its own, over the instances the queue
//!    holds and those free on its turn: a share's entitlement is a claim
//!    within its queue, not on the environment.
//! 3. **Across queues, no preemption.** A queue never stops another
//!    queue's job, whatever their priorities (AWS Batch does not either); a
//!    higher-priority queue's job waits for an instance to free and gets it
//!    before a lower one's. A queue's `capacityLimits` cap what it may hold
//!    of the environment.
//!
//! Each queue is its own [`Cluster`] holding every node of the environment;
//! a slot another queue's job holds is *withheld* from it
//! ([`Cluster::withhold`]), so it is neither free nor in its fleet.
//! [`share_out`] sets that for every queue from the others' jobs (and the
//! slots their claims keep): called before each queue's turn (and after any
//! change of what runs), it is what makes the rules above hold. A queue alone in its environment
//! withholds nothing: nothing changes for single-queue deployments.
//!
//! | part | where |
//! |---|---|
//! | configuration | the queue's environment and priority (the services') |
//! | validation | the services' (queue priority bounds) |
//! | state | here: what other queues hold, withheld from each cluster |
//! | hooks | none in a pass: it runs between the passes of the environment's queues |

use std::collections::{BTreeMap, BTreeSet};

use crate::{Cluster, Time};

/// The order queues are served in: priority descending, then name.
pub fn serve_order(queues: &[(&str, u32)]) -> Vec<String> {
    let mut v: Vec<(&str, u32)> = queues.to_vec();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(b.0)));
    v.into_iter().map(|(q, _)| q.to_string()).collect()
}

/// Which queue (its index in `share_out`'s list) holds or keeps each slot:
/// node name -> type name -> slot -> queue.
type Owners = BTreeMap<String, BTreeMap<String, BTreeMap<u32, usize>>>;

/// The owners of node `node`'s slots of type `t` (names allocated only
/// the first time).
fn slots_of<'a>(owners: &'a mut Owners, node: &str, t: &str) -> &'a mut BTreeMap<u32, usize> {
    if !owners.contains_key(node) {
        owners.insert(node.to_string(), BTreeMap::new());
    }
    let types = owners.get_mut(node).expect("inserted");
    if !types.contains_key(t) {
        types.insert(t.to_string(), BTreeMap::new());
    }
    types.get_mut(t).expect("inserted")
}

/// Slots a queue keeps from the others for its claims: jobs for which it
/// started preemptions and that have not started yet (`Cluster::claims`).
/// The capacity their victims release is theirs; a higher-priority queue
/// served first must not take it (the queue would preempt again). Each
/// claim keeps as many slots of its type as it asks for, from those no
/// queue's job holds and no queue served before it keeps, lowest node and
/// slot first; they are marked in `owners` as queue `me`'s.
fn claim(c: &Cluster, me: usize, owners: &mut Owners) {
    let mut need: BTreeMap<crate::TypeIdx, u32> = BTreeMap::new();
    for id in &c.claims {
        if let Some(j) = c.job(*id) {
            if j.status == crate::JobStatus::Runnable {
                *need.entry(j.spec.instance_type).or_default() += j.spec.count;
            }
        }
    }
    for (t, mut n) in need {
        let type_name = c.type_name(t);
        for node in c.nodes_of_type[t.index()]
            .iter()
            .map(|n| &c.nodes[n.index()])
        {
            if n == 0 {
                break;
            }
            if !node.live {
                continue;
            }
            let len = node.slots.get(&t).map_or(0, Vec::len) as u32;
            let slots = slots_of(owners, &node.name, type_name);
            for slot in 0..len {
                if n == 0 {
                    break;
                }
                if let std::collections::btree_map::Entry::Vacant(e) = slots.entry(slot) {
                    e.insert(me);
                    n -= 1;
                }
            }
        }
    }
}

/// Withholds from each queue of an environment the slots the others' jobs
/// hold, and those they keep for their claims (and gives back those they no
/// longer hold). `queues` are the environment's queues, each with its
/// cluster. Returns the queues whose capacity changed (their next pass must
/// look again); a queue whose capacity could not be set (a slot its own job
/// holds is another's: never so) is named in the error, after every other
/// queue's was set.
pub fn share_out(queues: &mut [(&str, &mut Cluster)], now: Time) -> Result<Vec<String>, String> {
    // Who holds what: the queues' jobs, then their claims in serve order.
    let mut owners: Owners = BTreeMap::new();
    for (i, (_, c)) in queues.iter().enumerate() {
        for (_, node) in c.nodes() {
            for (t, slots) in &node.slots {
                if slots.iter().all(Option::is_none) {
                    continue;
                }
                let mine = slots_of(&mut owners, &node.name, c.type_name(*t));
                for (s, holder) in slots.iter().enumerate() {
                    if holder.is_some() {
                        mine.insert(s as u32, i);
                    }
                }
            }
        }
    }
    let order = serve_order(
        &queues
            .iter()
            .map(|(n, c)| (*n, c.priority()))
            .collect::<Vec<_>>(),
    );
    for name in &order {
        let i = queues.iter().position(|(n, _)| n == name).expect("listed");
        claim(queues[i].1, i, &mut owners);
    }
    let mut changed = Vec::new();
    let mut failed = Vec::new();
    for (i, (name, cluster)) in queues.iter_mut().enumerate() {
        // What this queue may not use on each of its nodes, where that is
        // not what it has withheld already (read first, then set).
        let mut updates: Vec<(String, String, BTreeSet<u32>)> = Vec::new();
        for (_, node) in cluster.nodes() {
            for t in node.slots.keys() {
                let type_name = cluster.type_name(*t);
                let others = owners
                    .get(node.name.as_str())
                    .and_then(|types| types.get(type_name))
                    .into_iter()
                    .flatten()
                    .filter(|(_, q)| **q != i)
                    .map(|(s, _)| *s);
                let current = node.withheld.get(t);
                let same = match current {
                    Some(w) => others.clone().eq(w.iter().copied()),
                    None => others.clone().next().is_none(),
                };
                if !same {
                    updates.push((node.name.clone(), type_name.to_string(), others.collect()));
                }
            }
        }
        let mut any = false;
        for (node, t, slots) in updates {
            match cluster.withhold(&node, &t, &slots, now) {
                Ok(c) => any |= c,
                Err(e) => failed.push(format!("queue {name}: {e}")),
            }
        }
        if any {
            changed.push(name.to_string());
        }
    }
    if failed.is_empty() {
        Ok(changed)
    } else {
        Err(failed.join("; "))
    }
}
