//! The cluster's nodes: executors registering and heartbeating, lost and
//! withheld instances, and where the ranks of a start land (`crate::nodes`
//! holds the node types and the placement rule).

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{JobId, TypeIdx};
use crate::job::JobStatus;
use crate::nodes::*;
use crate::time::Time;

use super::{Cluster, JobError};

impl Cluster {
    // ----- the node table ---------------------------------------------------

    pub fn node_id(&self, name: &str) -> Option<NodeId> {
        self.node_index.get(name).copied()
    }

    pub fn node(&self, n: NodeId) -> &Node {
        &self.nodes[n.index()]
    }

    /// Every node ever registered, live or not, in name order.
    pub fn nodes(&self) -> impl Iterator<Item = (NodeId, &Node)> {
        self.node_index
            .values()
            .map(|n| (*n, &self.nodes[n.index()]))
    }

    /// Free slots per live node offering `t`, as a pass hands them out
    /// (slots of attempts being stopped are not free).
    pub(crate) fn free_cursors(&self, t: TypeIdx) -> BTreeMap<NodeId, FreeCursor<'_>> {
        self.nodes_of_type[t.index()]
            .iter()
            .map(|n| (*n, &self.nodes[n.index()]))
            .filter(|(_, node)| node.live)
            .filter_map(|(n, node)| {
                let free = node.free.get(&t)?;
                let left = free.len() as u32;
                (left > 0).then(|| {
                    (
                        n,
                        FreeCursor {
                            left,
                            slots: free.iter(),
                        },
                    )
                })
            })
            .collect()
    }

    fn recount_fleet(&mut self) {
        let mut withheld_of_type = vec![0; self.types.len()];
        for t in 0..self.types.len() {
            let t = TypeIdx(t as u16);
            let (n, withheld) = self.nodes_of_type[t.index()]
                .iter()
                .map(|n| &self.nodes[n.index()])
                .filter(|n| n.live)
                .fold((0u32, 0u32), |(n, w), node| {
                    let held = node.withheld.get(&t).map_or(0, |s| s.len() as u32);
                    (n + node.offered(t), w + held)
                });
            withheld_of_type[t.index()] = withheld;
            if self.fleet[t.index()] != n {
                self.touch_lending(t, None);
                self.fleet[t.index()] = n;
                self.unsettle(t);
            }
        }
        // Kept empty while nothing is withheld (as a queue alone is).
        if withheld_of_type.iter().all(|n| *n == 0) {
            self.withheld.clear();
        } else {
            self.withheld = withheld_of_type;
        }
    }

    /// A node (executor) registers, offering `offers` (instances per type)
    /// and launching attempts with `runtimes`. The same incarnation with the
    /// same offer changes nothing (a repeated registration); a new
    /// incarnation (the executor restarted) or another offer ends what ran
    /// there `HOST_LOST` first. Returns those attempts.
    pub fn register_node(
        &mut self,
        name: &str,
        incarnation: &str,
        offers: &[(&str, u32)],
        runtimes: crate::Runtimes,
        now: Time,
    ) -> Vec<LostAttempt> {
        self.advance_usage(now);
        let mut wanted: BTreeMap<TypeIdx, u32> = BTreeMap::new();
        for (t, count) in offers {
            let t = self.intern_type(t);
            *wanted.entry(t).or_default() += *count;
        }
        wanted.retain(|_, n| *n > 0);
        if let Some(n) = self.node_id(name) {
            let node = &self.nodes[n.index()];
            let same_offer = node.slots.len() == wanted.len()
                // What it offers, withheld slots included (another queue's
                // jobs holding some changes nothing of the offer).
                && wanted
                    .iter()
                    .all(|(t, c)| node.slots.get(t).map_or(0, Vec::len) == *c as usize)
                && node.runtimes == runtimes;
            if node.live && node.incarnation == incarnation && same_offer {
                return Vec::new();
            }
        }
        let lost = self.lose_node(name, now);
        let n = match self.node_id(name) {
            Some(n) => n,
            None => {
                let n = NodeId(u32::try_from(self.nodes.len()).expect("nodes fit in u32"));
                self.nodes.push(Node {
                    name: name.to_string(),
                    incarnation: String::new(),
                    live: false,
                    runtimes,
                    slots: BTreeMap::new(),
                    free: BTreeMap::new(),
                    withheld: BTreeMap::new(),
                });
                self.node_index.insert(name.to_string(), n);
                n
            }
        };
        for list in &mut self.nodes_of_type {
            list.retain(|x| *x != n);
        }
        let node = &mut self.nodes[n.index()];
        node.incarnation = incarnation.to_string();
        node.live = true;
        node.runtimes = runtimes;
        node.slots = wanted
            .iter()
            .map(|(t, c)| (*t, vec![None; *c as usize]))
            .collect();
        // A new offer: what other queues hold is set afresh.
        node.withheld.clear();
        node.recount_free();
        for t in wanted.keys() {
            self.nodes_of_type[t.index()].push(n);
            self.nodes_of_type[t.index()].sort_unstable();
        }
        self.recount_fleet();
        lost
    }

    /// Sets the slots of `instance_type` on node `name` that this queue may
    /// not use because another queue of its service environment holds them
    /// ([`crate::policy::environments`]). A slot this queue's own job holds cannot
    /// be withheld (the environment never gives one slot to two queues).
    /// Returns whether anything changed; an unknown node or type changes
    /// nothing.
    pub fn withhold(
        &mut self,
        name: &str,
        instance_type: &str,
        slots: &BTreeSet<u32>,
        now: Time,
    ) -> Result<bool, String> {
        let (Some(n), Some(t)) = (self.node_id(name), self.type_idx(instance_type)) else {
            return Ok(false);
        };
        let node = &self.nodes[n.index()];
        let Some(own) = node.slots.get(&t) else {
            return Ok(false);
        };
        if let Some(i) = slots
            .iter()
            .find(|i| own.get(**i as usize).is_some_and(Option::is_some))
        {
            return Err(format!(
                "slot {i} of {instance_type} on node {name} is held by a job of this queue"
            ));
        }
        let wanted: BTreeSet<u32> = slots
            .iter()
            .copied()
            .filter(|i| (*i as usize) < own.len())
            .collect();
        if node.withheld(t) == wanted {
            return Ok(false);
        }
        self.advance_usage(now);
        let node = &mut self.nodes[n.index()];
        if wanted.is_empty() {
            node.withheld.remove(&t);
        } else {
            node.withheld.insert(t, wanted);
        }
        node.recount_free();
        self.recount_fleet();
        self.unsettle(t);
        Ok(true)
    }

    /// A node stopped heartbeating or left: every attempt placed on it ends
    /// `HOST_LOST` (also its ranks on other nodes, which must be told to
    /// stop), and its instances leave the fleet.
    pub fn lose_node(&mut self, name: &str, now: Time) -> Vec<LostAttempt> {
        self.advance_usage(now);
        let Some(n) = self.node_id(name) else {
            return Vec::new();
        };
        let holders = self.nodes[n.index()].holders();
        self.nodes[n.index()].live = false;
        let mut lost = Vec::new();
        for job in holders {
            let Some(attempt) = self.jobs[&job].attempts.last() else {
                continue;
            };
            let (number, other_nodes) = (
                attempt.number,
                attempt
                    .placement
                    .iter()
                    .map(|r| r.node)
                    .filter(|o| *o != n)
                    .collect(),
            );
            if self.attempt_lost(job, number, now).is_ok() {
                lost.push(LostAttempt {
                    job,
                    attempt: number,
                    other_nodes,
                });
            }
        }
        for slots in self.nodes[n.index()].slots.values_mut() {
            slots.iter_mut().for_each(|s| *s = None);
        }
        self.nodes[n.index()].recount_free();
        self.recount_fleet();
        lost
    }

    /// Sets the pooled node of a type (see [`pool_node_name`]) to `count`
    /// instances: the fleet given as a count, as the simulator's `fleet`
    /// and tests use it. If it shrinks below what is in use there, the most
    /// recently started attempts on it lose their hosts (HOST_LOST) until
    /// the rest fits; their ids are returned.
    pub fn set_fleet(&mut self, instance_type: &str, count: u32, now: Time) -> Vec<JobId> {
        self.advance_usage(now);
        let t = self.intern_type(instance_type);
        let name = pool_node_name(instance_type);
        let n = match self.node_id(&name) {
            Some(n) => n,
            None => {
                self.register_node(&name, "", &[], crate::Runtimes::all(), now);
                self.node_id(&name).expect("just registered")
            }
        };
        let mut holders: Vec<(Time, JobId, u32)> = self.nodes[n.index()]
            .holders()
            .into_iter()
            .map(|id| {
                let j = &self.jobs[&id];
                (j.started_at().unwrap_or(Time::ZERO), id, j.spec.count)
            })
            .collect();
        holders.sort_by(|a, b| b.cmp(a));
        let mut in_use: u32 = holders.iter().map(|h| h.2).sum();
        let mut lost = Vec::new();
        for (_, id, c) in holders {
            if in_use <= count {
                break;
            }
            let attempt = self.jobs[&id].attempts.last().map_or(0, |a| a.number);
            self.attempt_lost(id, attempt, now)
                .expect("holder has a current attempt");
            in_use -= c;
            lost.push(id);
        }
        // A pooled node has no physical slots: the attempts left are packed
        // into the first slots.
        let node = &mut self.nodes[n.index()];
        node.live = true;
        let held: Vec<JobId> = node
            .slots
            .get(&t)
            .map(|s| s.iter().flatten().copied().collect())
            .unwrap_or_default();
        let mut slots: Vec<Option<JobId>> = held.into_iter().map(Some).collect();
        slots.resize(count as usize, None);
        let mut by_job: BTreeMap<JobId, Slots> = BTreeMap::new();
        for (i, s) in slots.iter().enumerate() {
            if let Some(j) = s {
                by_job.entry(*j).or_default().push(i as u32);
            }
        }
        if count == 0 {
            node.slots.remove(&t);
        } else {
            node.slots.insert(t, slots);
        }
        node.recount_free();
        for (job, new_slots) in by_job {
            if let Some(a) = self.jobs.get_mut(&job).and_then(|j| j.attempts.last_mut()) {
                for r in a.placement.iter_mut().filter(|r| r.node == n) {
                    r.slots = new_slots.clone();
                }
            }
        }
        if !self.nodes_of_type[t.index()].contains(&n) && count > 0 {
            self.nodes_of_type[t.index()].push(n);
            self.nodes_of_type[t.index()].sort_unstable();
        }
        self.recount_fleet();
        lost
    }

    /// Marks the slots of a started attempt as held.
    pub(crate) fn hold_slots(&mut self, job: JobId, t: TypeIdx, placement: &[Rank]) {
        self.set_slots(job, t, placement, true);
    }

    /// Frees the slots an ended attempt held.
    pub(crate) fn release_slots(&mut self, job: JobId, t: TypeIdx, placement: &[Rank]) {
        self.set_slots(job, t, placement, false);
    }

    /// Holds (or frees) `job`'s slots, keeping each node's free set with them.
    fn set_slots(&mut self, job: JobId, t: TypeIdx, placement: &[Rank], hold: bool) {
        for r in placement {
            let node = &mut self.nodes[r.node.index()];
            let Some(slots) = node.slots.get_mut(&t) else {
                continue;
            };
            let free = node.free.entry(t).or_default();
            for i in &r.slots {
                let Some(s) = slots.get_mut(*i as usize) else {
                    continue;
                };
                if hold {
                    debug_assert!(s.is_none(), "slot {i} of {:?} held twice", r.node);
                    *s = Some(job);
                    free.remove(i);
                } else if *s == Some(job) {
                    *s = None;
                    free.insert(*i);
                }
            }
        }
    }

    /// Jobs holding slots on any node (placed attempts, running or stopping).
    pub fn placed_jobs(&self) -> Vec<JobId> {
        let mut out: Vec<JobId> = self.nodes.iter().flat_map(Node::holders).collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Free slots of live nodes, all types together.
    pub fn free_slot_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| n.live)
            .flat_map(|n| n.slots.values().flatten())
            .filter(|s| s.is_none())
            .count()
    }

    /// The attempts a node should be running, as (job, attempt).
    pub fn attempts_on(&self, name: &str) -> Vec<(JobId, u32)> {
        let Some(n) = self.node_id(name) else {
            return Vec::new();
        };
        self.nodes[n.index()]
            .holders()
            .into_iter()
            .filter_map(|j| Some((j, self.jobs[&j].attempts.last()?.number)))
            .collect()
    }

    /// The current attempts on the node named `name` whose rank there has
    /// reported starting or running: the executor had them. If its
    /// heartbeats stop listing one, it ended there (see
    /// [`SETTLE_MISSING_AFTER_SECS`]).
    pub fn reported_attempts_on(&self, name: &str) -> Vec<(JobId, u32)> {
        let Some(n) = self.node_id(name) else {
            return Vec::new();
        };
        self.nodes[n.index()]
            .holders()
            .into_iter()
            .filter_map(|j| {
                let a = self.jobs[&j].attempts.last()?;
                let rank = a.placement.iter().position(|r| r.node == n)?;
                matches!(
                    a.ranks.get(rank),
                    Some(RankState::Starting | RankState::Running)
                )
                .then_some((j, a.number))
            })
            .collect()
    }

    // ----- gangs ------------------------------------------------------------

    /// The rank of the current attempt `attempt` of `id` on node `node`:
    /// only a node the attempt was placed on may report it.
    /// The longest grace period among the attempts holding slots on the
    /// node named `name` (0 if none): what its executor may need to stop
    /// them all when it fences itself.
    pub fn longest_grace_on(&self, name: &str) -> u64 {
        let Some(n) = self.node_id(name) else {
            return 0;
        };
        self.nodes[n.index()]
            .holders()
            .iter()
            .filter_map(|j| self.jobs.get(j))
            .map(|j| j.spec.grace_period_secs)
            .max()
            .unwrap_or(0)
    }

    pub fn rank_of(&self, id: JobId, attempt: u32, node: NodeId) -> Result<usize, JobError> {
        let stale = JobError::StaleAttempt { job: id, attempt };
        let n = node;
        let job = self.jobs.get(&id).ok_or(JobError::NotFound(id))?;
        let a = job
            .attempts
            .last()
            .filter(|a| a.number == attempt && a.outcome.is_none())
            .ok_or(stale.clone())?;
        a.placement.iter().position(|r| r.node == n).ok_or(stale)
    }

    /// Records what a rank reported; false if the rank had already ended (a
    /// rank ends once: later reports change nothing).
    fn mark_rank(
        &mut self,
        id: JobId,
        attempt: u32,
        node: NodeId,
        state: RankState,
    ) -> Result<bool, JobError> {
        let rank = self.rank_of(id, attempt, node)?;
        let a = self.current_attempt_mut(id, attempt)?;
        if matches!(a.ranks[rank], RankState::Ended(_)) {
            return Ok(false);
        }
        a.ranks[rank] = state;
        Ok(true)
    }

    /// A rank is restoring its checkpoint and launching: the first one moves
    /// the attempt to STARTING (every rank restores the same checkpoint).
    pub fn rank_starting(
        &mut self,
        id: JobId,
        attempt: u32,
        node: NodeId,
        restore: crate::job::Restore,
        now: Time,
    ) -> Result<(), JobError> {
        let rank = self.rank_of(id, attempt, node)?;
        let first_report = self.jobs[&id]
            .attempts
            .last()
            .is_some_and(|a| a.ranks[rank] == RankState::Commanded);
        if !self.mark_rank(id, attempt, node, RankState::Starting)? || !first_report {
            return Ok(());
        }
        let share = self.jobs[&id].spec.share;
        let a = self.current_attempt_mut(id, attempt)?;
        a.restored_bytes = a.restored_bytes.saturating_add(restore.bytes);
        for why in restore.skipped {
            if !a.restore_skipped.contains(&why) {
                a.restore_skipped.push(why);
            }
        }
        if restore.bytes > 0 {
            let ledger = self.ledger_mut(share);
            ledger.restored_bytes = ledger.restored_bytes.saturating_add(restore.bytes);
        }
        if self.jobs[&id].status == JobStatus::Scheduled {
            self.attempt_starting(id, attempt, restore.mark, now)?;
        }
        Ok(())
    }

    /// A rank's process is up: the attempt is RUNNING once every rank runs.
    pub fn rank_running(
        &mut self,
        id: JobId,
        attempt: u32,
        node: NodeId,
        now: Time,
    ) -> Result<(), JobError> {
        if !self.mark_rank(id, attempt, node, RankState::Running)? {
            return Ok(());
        }
        let a = self.current_attempt_mut(id, attempt)?;
        if a.ranks.iter().all(|r| *r == RankState::Running) {
            self.attempt_running(id, attempt, now)?;
        }
        Ok(())
    }

    /// A rank's process ended. The first rank to end without exiting 0
    /// decides the attempt's exit code and the others are stopped; once
    /// every rank ended, the attempt ends (a stop the scheduler asked for
    /// still decides the outcome).
    pub fn rank_ended(
        &mut self,
        id: JobId,
        attempt: u32,
        node: NodeId,
        exit: RankExit,
        now: Time,
    ) -> Result<RankEnd, JobError> {
        self.advance_usage(now);
        let rank = self.rank_of(id, attempt, node)?;
        let stopping = self.jobs[&id].stopping.is_some();
        let a = self.current_attempt_mut(id, attempt)?;
        if matches!(a.ranks[rank], RankState::Ended(_)) {
            return Ok(RankEnd::Waiting); // a rank ends once
        }
        if exit == RankExit::Fenced {
            let other_nodes = a
                .placement
                .iter()
                .map(|r| r.node)
                .filter(|o| *o != node)
                .collect();
            self.attempt_lost(id, attempt, now)?;
            return Ok(RankEnd::Lost(LostAttempt {
                job: id,
                attempt,
                other_nodes,
            }));
        }
        let code = exit.code();
        a.ranks[rank] = RankState::Ended(code);
        let first_failure = code != Some(0) && a.first_failure.is_none();
        if first_failure {
            a.first_failure = Some(RankFailure { exit_code: code });
        }
        if !a.ranks.iter().all(|r| matches!(r, RankState::Ended(_))) {
            // The first failure happens once: the others are stopped once
            // (unless the scheduler is already stopping the whole attempt).
            if first_failure && !stopping {
                return Ok(RankEnd::StopOthers);
            }
            return Ok(RankEnd::Waiting);
        }
        let code = a.first_failure.map_or(Some(0), |f| f.exit_code);
        self.attempt_ended(id, attempt, code, now)
            .map(RankEnd::Ended)
    }
}
