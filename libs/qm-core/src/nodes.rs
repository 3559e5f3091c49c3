//! Nodes, placement and gangs: *where* a job runs, and how the ranks of a
//! job spread over several nodes make one attempt.
//!
//! Decides:
//! - which nodes (executors) and which of their instances (slots, the GPU
//!   indices an executor hands a process) each start gets: [`place`], with
//!   the placement policy below;
//! - what a node that registers again, changes its offer or is lost does to
//!   the attempts placed on it (they end `HOST_LOST`);
//! - the gang rules: an attempt is RUNNING once every rank runs; the first
//!   rank to end without exiting 0 fails the attempt (its exit code is the
//!   attempt's) and the other ranks are stopped; a rank whose process could
//!   not be launched ends with [`LAUNCH_FAILED_EXIT_CODE`].
//!
//! Placement policy (pack, then spread): a job goes on **one** node when any
//! live node has enough free slots of its type: the one with the fewest free
//! slots that fits (best fit, ties by node name), so whole nodes stay free
//! for large gangs. Only when no single node fits it is the job spread, one
//! rank per node, over the nodes with the most free slots first (fewest
//! ranks; ties by node name). Slots are taken lowest index first.
//!
//! Guarantees afterwards: no slot is held by two attempts; the ranks of an
//! attempt are on distinct nodes; a start's slots add up to its count; only
//! live nodes offering the job's type are used. Because any slot of a type
//! can serve any job of that type (a job may spread), every instance a
//! preemption frees can serve the job it is for.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{JobId, TypeIdx};
use crate::outcome::AttemptOutcome;

/// The exit code of a rank whose process could not be launched (as a shell
/// reports a command it cannot run).
pub const LAUNCH_FAILED_EXIT_CODE: i32 = 127;

/// Grace given to an attempt a node runs but the scheduler never placed
/// there (left over from a lost start command or an earlier incarnation
/// of the scheduler): it is stopped with this grace. Nothing of it is
/// expected (its checkpoints are fenced by attempt), so the grace is short.
pub const UNPLACED_STOP_GRACE_SECS: u64 = 10;

/// Index of a node in its cluster's node table (stable: a lost node keeps
/// its slot, and a node that registers again gets the same index).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct NodeId(pub u32);

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A node: one executor and the instances it offers, per type.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Node {
    pub name: String,
    /// Changes when the executor restarts: what ran before is gone.
    pub incarnation: String,
    pub live: bool,
    /// How it can launch attempts (`policy::runtimes`).
    #[serde(default)]
    pub runtimes: crate::Runtimes,
    /// Per type: each slot's holder.
    pub(crate) slots: BTreeMap<TypeIdx, Vec<Option<JobId>>>,
    /// Per type: the free slots (kept with `slots`, so placement never
    /// scans a node).
    pub(crate) free: BTreeMap<TypeIdx, BTreeSet<u32>>,
    /// Per type: slots this queue may not use, held by another queue's job
    /// in the same service environment ([`crate::policy::environments`]). They are
    /// neither free nor in this queue's fleet.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) withheld: BTreeMap<TypeIdx, BTreeSet<u32>>,
}

impl Node {
    /// Slots of type `t` this node offers this queue (not those withheld).
    pub fn offered(&self, t: TypeIdx) -> u32 {
        let all = self.slots.get(&t).map_or(0, |s| s.len() as u32);
        all - self.withheld.get(&t).map_or(0, |w| w.len() as u32)
    }

    /// Slots of type `t` withheld from this queue.
    pub fn withheld(&self, t: TypeIdx) -> BTreeSet<u32> {
        self.withheld.get(&t).cloned().unwrap_or_default()
    }

    /// How many slots of type `t` are free.
    pub fn free_count(&self, t: TypeIdx) -> u32 {
        self.free.get(&t).map_or(0, |f| f.len() as u32)
    }

    /// Rebuilds the free sets from the slots.
    pub(crate) fn recount_free(&mut self) {
        self.free = self
            .slots
            .iter()
            .map(|(t, s)| {
                let withheld = self.withheld.get(t);
                let free = (0..s.len() as u32)
                    .filter(|i| s[*i as usize].is_none())
                    .filter(|i| !withheld.is_some_and(|w| w.contains(i)))
                    .collect();
                (*t, free)
            })
            .collect();
    }

    /// The jobs holding slots here.
    pub fn holders(&self) -> Vec<JobId> {
        let mut out: Vec<JobId> = self.slots.values().flatten().flatten().copied().collect();
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// One rank of an attempt: a node and its slots there.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Rank {
    pub node: NodeId,
    pub slots: Slots,
}

/// The slots of one rank, held inline up to a whole 8-GPU node: placing
/// the common job allocates nothing (a full pass places thousands).
pub type Slots = smallvec::SmallVec<[u32; 8]>;

/// The ranks of an attempt, one per node, held inline for a job on one node.
pub type Ranks = smallvec::SmallVec<[Rank; 1]>;

/// What each rank of an attempt has reported (index = rank).
pub type RankStates = smallvec::SmallVec<[RankState; 2]>;

/// What one rank of an attempt has reported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RankState {
    /// Told to start; nothing reported yet.
    #[default]
    Commanded,
    Starting,
    Running,
    /// Ended, with its exit code (None: killed by a signal).
    Ended(Option<i32>),
}

/// How a rank's process ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RankExit {
    /// It ran and exited (None: by a signal).
    Exited(Option<i32>),
    /// It could not be launched.
    LaunchFailed,
    /// A stop arrived for it before its start did (the start was lost): it
    /// never ran, as if stopped at once.
    NotStarted,
    /// Its executor lost contact with the scheduler and stopped it on its
    /// own (self-fencing): the attempt lost its host.
    Fenced,
}

impl RankExit {
    pub fn code(self) -> Option<i32> {
        match self {
            RankExit::Exited(code) => code,
            RankExit::LaunchFailed => Some(LAUNCH_FAILED_EXIT_CODE),
            RankExit::NotStarted | RankExit::Fenced => None,
        }
    }
}

/// An attempt its executor reported starting or running, but which that
/// executor's heartbeats (same incarnation) have not listed for this long,
/// ended there and its end report was lost: the scheduler sends it a stop,
/// which the executor answers by reporting the end again.
pub const SETTLE_MISSING_AFTER_SECS: u64 = 10;

/// Extra silence the scheduler allows past an executor's fencing deadline
/// and its attempts' grace before it declares the executor lost: the
/// heartbeat's round trip, the SIGKILL and the scheduler's check interval
/// (ADR 0007).
pub const FENCE_MARGIN_SECS: u64 = 5;

/// How long an executor that fences itself after `fence_after_secs` without
/// an acknowledged heartbeat must be silent before the scheduler declares it
/// lost, when the longest grace period among its attempts is
/// `longest_grace_secs`: by then every attempt it ran has been killed, so a
/// new attempt elsewhere never overlaps the old one.
pub fn silence_before_lost(fence_after_secs: u64, longest_grace_secs: u64) -> u64 {
    fence_after_secs
        .saturating_add(longest_grace_secs.min(crate::outcome::MAX_GRACE_PERIOD_SECS))
        .saturating_add(FENCE_MARGIN_SECS)
}

/// The first rank of an attempt to end without exiting 0: its exit code
/// (None: killed by a signal) becomes the attempt's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RankFailure {
    pub exit_code: Option<i32>,
}

/// What a rank's end means for its attempt.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum RankEnd {
    /// Other ranks still run; nothing to do.
    Waiting,
    /// This rank failed first: stop the attempt's other ranks.
    StopOthers,
    /// Every rank ended: the attempt ended so.
    Ended(AttemptOutcome),
    /// A rank's executor fenced itself: the attempt ended HOST_LOST and its
    /// ranks on other nodes are to be stopped.
    Lost(LostAttempt),
}

/// An attempt that ended `HOST_LOST` because a node was lost, with the
/// other nodes its ranks were on (to be told to stop).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LostAttempt {
    pub job: JobId,
    pub attempt: u32,
    pub other_nodes: Vec<NodeId>,
}

/// Free slots of one type on one node during a pass: how many are left to
/// promise, and the free slots not yet handed out, lowest first.
#[derive(Clone, Debug)]
pub(crate) struct FreeCursor<'c> {
    pub left: u32,
    pub slots: std::collections::btree_set::Iter<'c, u32>,
}

impl FreeCursor<'_> {
    /// The next `k` free slots (what `place` promised this node).
    pub(crate) fn take(&mut self, k: u32) -> Slots {
        self.slots.by_ref().take(k as usize).copied().collect()
    }
}

/// Chooses how many instances each node gives a job of `count`, among the
/// nodes `fit` accepts (its value: how many runtimes the node offers beyond
/// the job's, fewest preferred, see `policy::runtimes`): on one node (best fit:
/// the fewest free that holds it, ties by node name) if any holds it, else
/// spread over the nodes with the most free first (ties by name). Takes
/// them from `free`. None if they do not suffice.
pub(crate) fn place<'n>(
    free: &mut BTreeMap<NodeId, FreeCursor<'_>>,
    names: &dyn Fn(NodeId) -> &'n str,
    fit: &dyn Fn(NodeId) -> Option<u32>,
    count: u32,
) -> Option<smallvec::SmallVec<[(NodeId, u32); 2]>> {
    let total: u64 = free
        .iter()
        .filter(|(n, _)| fit(**n).is_some())
        .map(|(_, f)| u64::from(f.left))
        .sum();
    if total < u64::from(count) || count == 0 {
        return None;
    }
    let best_fit = free
        .iter()
        .filter_map(|(n, f)| Some((n, f, fit(*n)?)))
        .filter(|(_, f, _)| f.left >= count)
        .min_by(|a, b| {
            (a.2.cmp(&b.2))
                .then(a.1.left.cmp(&b.1.left))
                .then(names(*a.0).cmp(names(*b.0)))
        })
        .map(|(n, _, _)| *n);
    if let Some(node) = best_fit {
        free.get_mut(&node).expect("chosen node").left -= count;
        return Some(smallvec::smallvec![(node, count)]);
    }
    let mut order: Vec<(NodeId, u32)> = free
        .iter()
        .filter(|(_, f)| f.left > 0)
        .filter_map(|(n, _)| Some((*n, fit(*n)?)))
        .collect();
    order.sort_by(|(a, fa), (b, fb)| {
        fa.cmp(fb)
            .then(free[b].left.cmp(&free[a].left))
            .then(names(*a).cmp(names(*b)))
    });
    let mut left = count;
    let mut ranks = smallvec::SmallVec::new();
    for (node, _) in order {
        if left == 0 {
            break;
        }
        let f = free.get_mut(&node).expect("listed node");
        let take = left.min(f.left);
        f.left -= take;
        left -= take;
        ranks.push((node, take));
    }
    Some(ranks)
}

/// Name of the pooled node that stands for a type's fleet given as a count
/// (`Cluster::new`'s fleet, `set_fleet`): one node holding them all.
pub fn pool_node_name(instance_type: &str) -> String {
    format!("pool:{instance_type}")
}
