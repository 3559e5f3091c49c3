//! The usage ledger: what each share used, day by day (UTC), by instance
//! type and workload class, in instance-milliseconds: held on its own
//! capacity, held on borrowed capacity (and from whom), queued, lost to
//! preemptions and lost hosts (by cause), and its resume drills.
//!
//! It is integrated exactly, not sampled. Between two events every
//! quantity it counts is constant (instances held, queued, the share's
//! entitlement, the fleet), so each is a rate times the time until the
//! next change. The ledger keeps, per share and type, when it last
//! accrued; just before an event changes a share's state at time `t`
//! (`Cluster::touch_usage`), the time since is accrued at the rates the
//! state implied, split at midnight into days. Nothing is kept per job, so
//! archived jobs stay in the ledger, and since the rates are a function of
//! the state alone, a snapshot holds only the totals and the times: a
//! scheduler that replays the log, or takes over from a snapshot, counts
//! exactly what the one before it would have (ADR 0014).
//!
//! Own and borrowed follow the contract's classification (`semantics.md`
//! section 3): a share's held instances fill its entitlement in the order
//! that decides which jobs are on borrowed capacity (jobs that may not
//! borrow first, then by priority and start); instances beyond it are
//! borrowed. Jobs being stopped hold their instances until they end and
//! are counted after the running ones. Borrowed capacity is attributed
//! to its sources as the accounting attributes lending: the queue's
//! unassigned capacity first, then lending shares in proportion to their
//! idle entitlement.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{ShareIdx, TypeIdx};
use crate::outcome::AttemptOutcome;
use crate::time::Time;

/// A day in milliseconds.
pub const DAY_MS: u64 = 86_400_000;

/// Days of usage kept: older days leave the ledger as new ones begin
/// (about 13 months, enough to bill a year against the one before).
pub const USAGE_KEEP_DAYS: u32 = 400;

/// The day (since the epoch, UTC) a time falls in.
pub fn day_of(t: Time) -> u32 {
    u32::try_from(t.as_millis() / DAY_MS).unwrap_or(u32::MAX)
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One share's use of one type, in one class, over one day (or the sum of
/// several). Instance-milliseconds, except `drills` (a count).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Held within the share's entitlement.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub own_ms: u64,
    /// Held beyond it, on capacity lent by others or unassigned.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub borrowed_ms: u64,
    /// Queued: RUNNABLE jobs' instances, waiting.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub waiting_ms: u64,
    /// Work thrown away by attempts that ended preempted for another share.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recomputed_cross_share_ms: u64,
    /// ... preempted for a more urgent job of the share.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recomputed_in_share_ms: u64,
    /// ... preempted because a limit went down.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recomputed_limit_reduced_ms: u64,
    /// ... whose executor was lost.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recomputed_host_lost_ms: u64,
    /// ... stopped because the share's borrowing budget was spent.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recomputed_budget_ms: u64,
    /// ... stopped by FAIR_SHARE rebalancing.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub recomputed_rebalance_ms: u64,
    /// Held by resume drills' jobs (part of `own_ms`: drills never borrow).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drill_ms: u64,
    /// Resume drills started.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub drills: u64,
}

impl Usage {
    pub fn add(&mut self, o: &Usage) {
        self.own_ms += o.own_ms;
        self.borrowed_ms += o.borrowed_ms;
        self.waiting_ms += o.waiting_ms;
        self.recomputed_cross_share_ms += o.recomputed_cross_share_ms;
        self.recomputed_in_share_ms += o.recomputed_in_share_ms;
        self.recomputed_limit_reduced_ms += o.recomputed_limit_reduced_ms;
        self.recomputed_host_lost_ms += o.recomputed_host_lost_ms;
        self.recomputed_budget_ms += o.recomputed_budget_ms;
        self.recomputed_rebalance_ms += o.recomputed_rebalance_ms;
        self.drill_ms += o.drill_ms;
        self.drills += o.drills;
    }

    /// Instances held, own and borrowed.
    pub fn used_ms(&self) -> u64 {
        self.own_ms + self.borrowed_ms
    }

    /// Work recomputed, every cause together.
    pub fn recomputed_ms(&self) -> u64 {
        self.recomputed_cross_share_ms
            + self.recomputed_in_share_ms
            + self.recomputed_limit_reduced_ms
            + self.recomputed_host_lost_ms
            + self.recomputed_budget_ms
            + self.recomputed_rebalance_ms
    }

    /// Each cause of recomputed work with its total, in a fixed order.
    pub fn recomputed_by_cause(&self) -> [(AttemptOutcome, u64); 6] {
        [
            (
                AttemptOutcome::PreemptedCrossShare,
                self.recomputed_cross_share_ms,
            ),
            (
                AttemptOutcome::PreemptedInShare,
                self.recomputed_in_share_ms,
            ),
            (
                AttemptOutcome::PreemptedLimitReduced,
                self.recomputed_limit_reduced_ms,
            ),
            (AttemptOutcome::PreemptedBudget, self.recomputed_budget_ms),
            (
                AttemptOutcome::PreemptedRebalance,
                self.recomputed_rebalance_ms,
            ),
            (AttemptOutcome::HostLost, self.recomputed_host_lost_ms),
        ]
    }

    pub(crate) fn recomputed_mut(&mut self, cause: AttemptOutcome) -> Option<&mut u64> {
        match cause {
            AttemptOutcome::PreemptedCrossShare => Some(&mut self.recomputed_cross_share_ms),
            AttemptOutcome::PreemptedInShare => Some(&mut self.recomputed_in_share_ms),
            AttemptOutcome::PreemptedLimitReduced => Some(&mut self.recomputed_limit_reduced_ms),
            AttemptOutcome::PreemptedBudget => Some(&mut self.recomputed_budget_ms),
            AttemptOutcome::PreemptedRebalance => Some(&mut self.recomputed_rebalance_ms),
            AttemptOutcome::HostLost => Some(&mut self.recomputed_host_lost_ms),
            _ => None,
        }
    }

    pub fn is_empty(&self) -> bool {
        *self == Usage::default()
    }
}

/// Where borrowed capacity came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Source {
    /// The queue's capacity no share is entitled to.
    Unassigned,
    /// A lending share's idle entitlement.
    Share(ShareIdx),
}

/// The ledger's row key: a day, a share, a type, a class (an index into
/// the ledger's class names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct Key {
    pub day: u32,
    pub share: ShareIdx,
    pub ty: TypeIdx,
    pub class: u16,
}

/// Borrowed capacity's row key: a day, a type, the borrower, the source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct LendKey {
    pub day: u32,
    pub ty: TypeIdx,
    pub borrower: ShareIdx,
    pub source: Source,
}

/// What one share's jobs of one type and class hold and wait with, now:
/// the rates the ledger accrues at until the next change.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rates {
    pub own: u32,
    pub borrowed: u32,
    pub waiting: u64,
    pub drill: u32,
}

/// Instances per class of one share and type, kept as jobs change status
/// (derived from the jobs: rebuilt after a snapshot is read or the
/// configuration changes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ClassCounts {
    /// Held: SCHEDULED, STARTING or RUNNING (including being stopped).
    pub held: u32,
    /// Of those, by resume drills' jobs.
    pub drill: u32,
    /// RUNNABLE.
    pub waiting: u64,
}

/// The per-class counts, derived state: never compared, never stored.
#[derive(Clone, Debug, Default)]
pub(crate) struct Counts {
    pub valid: bool,
    /// (share, type) -> (class name, counts), a handful of classes each.
    pub by_share_type: BTreeMap<(ShareIdx, TypeIdx), Vec<(String, ClassCounts)>>,
}

impl PartialEq for Counts {
    fn eq(&self, _: &Counts) -> bool {
        true
    }
}
impl Eq for Counts {}

impl Counts {
    pub(crate) fn entry(&mut self, s: ShareIdx, t: TypeIdx, class: &str) -> &mut ClassCounts {
        let v = self.by_share_type.entry((s, t)).or_default();
        let i = match v.iter().position(|(c, _)| c == class) {
            Some(i) => i,
            None => {
                v.push((class.to_string(), ClassCounts::default()));
                v.len() - 1
            }
        };
        &mut v[i].1
    }
}

/// The ledger: totals by day, and when each share and type last accrued.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UsageLedger {
    /// Totals by (day, share, type, class).
    pub(crate) rows: BTreeMap<Key, Usage>,
    /// Borrowed capacity by (day, type, borrower, source), in
    /// instance-microseconds.
    pub(crate) lent_us: BTreeMap<LendKey, u64>,
    /// Class names the rows' keys index.
    pub(crate) classes: Vec<String>,
    /// Per share and type: accrued up to here (None: never touched).
    pub(crate) since: BTreeMap<(ShareIdx, TypeIdx), Time>,
    /// Per type: lending accrued so far in the day (see [`TypeLending`]).
    pub(crate) lending: BTreeMap<TypeIdx, TypeLending>,
    /// The time of the event being applied: changes happen at it.
    pub(crate) now: Option<Time>,
    #[serde(skip)]
    pub(crate) counts: Counts,
}

impl UsageLedger {
    pub(crate) fn class_id(&mut self, name: &str) -> u16 {
        match self.classes.iter().position(|c| c == name) {
            Some(i) => i as u16,
            None => {
                self.classes.push(name.to_string());
                (self.classes.len() - 1) as u16
            }
        }
    }

    /// The row of `(day, share, type, class)`.
    pub(crate) fn row(
        &mut self,
        day: u32,
        share: ShareIdx,
        ty: TypeIdx,
        class: &str,
    ) -> &mut Usage {
        let class = self.class_id(class);
        self.rows
            .entry(Key {
                day,
                share,
                ty,
                class,
            })
            .or_default()
    }

    /// Moves the clock to `now` (never back); drops days older than
    /// [`USAGE_KEEP_DAYS`] when a new day begins.
    pub(crate) fn advance(&mut self, now: Time) {
        let before = self.now;
        if before.is_some_and(|b| b >= now) {
            return;
        }
        self.now = Some(now);
        if before.is_some_and(|b| day_of(b) != day_of(now)) {
            let cutoff = day_of(now).saturating_sub(USAGE_KEEP_DAYS);
            if self.rows.keys().next().is_some_and(|k| k.day < cutoff) {
                self.rows.retain(|k, _| k.day >= cutoff);
            }
            if self.lent_us.keys().next().is_some_and(|k| k.day < cutoff) {
                self.lent_us.retain(|k, _| k.day >= cutoff);
            }
        }
    }
}

/// `[from, to)` split at midnights: (day, milliseconds) pieces.
pub(crate) fn days_between(from: Time, to: Time) -> impl Iterator<Item = (u32, u64)> {
    let (mut at, end) = (from.as_millis(), to.as_millis());
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let day = at / DAY_MS;
        let next = ((day + 1) * DAY_MS).min(end);
        let piece = (u32::try_from(day).unwrap_or(u32::MAX), next - at);
        at = next;
        Some(piece)
    })
}

/// Adds `rates` held for `ms` to `u`.
pub(crate) fn accrue(u: &mut Usage, rates: &Rates, ms: u64) {
    u.own_ms += u64::from(rates.own) * ms;
    u.borrowed_ms += u64::from(rates.borrowed) * ms;
    u.waiting_ms += rates.waiting * ms;
    u.drill_ms += u64::from(rates.drill) * ms;
}

/// One type's lending, accrued without a borrower-by-lender product per
/// event. Over any stretch where nothing changes, borrower `b` holds
/// `borrowed_b` instances beyond its entitlement and source `src` backs a
/// fraction `w_src` of all borrowing (the accounting's attribution), so `b`
/// borrowed `borrowed_b * w_src * ms` from `src`. `weight[src]` sums
/// `w_src * ms` over the day so far; a borrower's `borrowed_b` only changes
/// when its own state does, so it is counted then (and at midnight) as
/// `borrowed_b * (weight - counted[b])`: one share's row per event.
/// Weights are `f64` kept as bits (exact in every replica: only `+`, `*`
/// and `/`, in the same order), counted in instance-microseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TypeLending {
    /// Accrued up to here.
    pub since: Time,
    /// The day `weight` is of.
    pub day: u32,
    /// Per source slot (0: unassigned capacity, 1 + s: share s).
    pub weight: Vec<u64>,
    /// Per borrower: `weight` when it was last counted.
    pub counted: BTreeMap<ShareIdx, Vec<u64>>,
}

fn bits(v: &[u64], i: usize) -> f64 {
    v.get(i).map_or(0.0, |b| f64::from_bits(*b))
}

impl TypeLending {
    pub(crate) fn new(now: Time) -> TypeLending {
        TypeLending {
            since: now,
            day: day_of(now),
            ..TypeLending::default()
        }
    }

    /// Accrues `[since, now)` at `rates` (per source slot, the fraction of
    /// borrowing it backs; empty: nothing borrowed). At each midnight every
    /// borrower is counted into the day that ends.
    pub(crate) fn accrue(
        &mut self,
        ty: TypeIdx,
        now: Time,
        rates: &[f64],
        borrowed: &dyn Fn(ShareIdx) -> u32,
        out: &mut BTreeMap<LendKey, u64>,
    ) {
        if now <= self.since {
            return;
        }
        for (day, ms) in days_between(self.since, now) {
            if day != self.day {
                self.count_all(ty, borrowed, out);
                self.weight.clear();
                self.counted.clear();
                self.day = day;
                if rates.is_empty() {
                    // Nothing borrowed from here to `now`: no day to count.
                    self.day = day_of(now);
                    break;
                }
            }
            if rates.is_empty() {
                continue;
            }
            if self.weight.len() < rates.len() {
                self.weight.resize(rates.len(), 0f64.to_bits());
            }
            for (i, r) in rates.iter().enumerate() {
                if *r > 0.0 {
                    self.weight[i] = (f64::from_bits(self.weight[i]) + r * ms as f64).to_bits();
                }
            }
        }
        self.since = now;
    }

    /// Counts borrower `b` (holding `borrowed_b` beyond its entitlement
    /// since it was last counted) up to now.
    pub(crate) fn count(
        &mut self,
        ty: TypeIdx,
        b: ShareIdx,
        borrowed_b: u32,
        out: &mut BTreeMap<LendKey, u64>,
    ) {
        let before = self.counted.get(&b);
        if borrowed_b > 0 {
            for i in 0..self.weight.len() {
                let delta = bits(&self.weight, i) - before.map_or(0.0, |c| bits(c, i));
                if delta <= 0.0 {
                    continue;
                }
                let us = (f64::from(borrowed_b) * delta * 1000.0).round() as u64;
                if us == 0 {
                    continue;
                }
                let source = match i {
                    0 => Source::Unassigned,
                    _ => Source::Share(ShareIdx((i - 1) as u16)),
                };
                let key = LendKey {
                    day: self.day,
                    ty,
                    borrower: b,
                    source,
                };
                *out.entry(key).or_default() += us;
            }
        }
        match self.counted.get_mut(&b) {
            Some(c) => c.clone_from(&self.weight),
            None if !self.weight.is_empty() => {
                self.counted.insert(b, self.weight.clone());
            }
            None => {}
        }
    }

    /// Counts every borrower up to now.
    pub(crate) fn count_all(
        &mut self,
        ty: TypeIdx,
        borrowed: &dyn Fn(ShareIdx) -> u32,
        out: &mut BTreeMap<LendKey, u64>,
    ) {
        let n = self.weight.len().saturating_sub(1);
        for b in 0..n {
            let b = ShareIdx(b as u16);
            self.count(ty, b, borrowed(b), out);
        }
    }
}

/// A row of a usage report: one day, share, type and class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageRecord {
    pub day: u32,
    pub share: String,
    pub instance_type: String,
    pub class: String,
    pub usage: Usage,
}

/// Borrowed capacity in a usage report: one day, type, borrower and source
/// (None: the queue's unassigned capacity), in instance-milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LendRecord {
    pub day: u32,
    pub instance_type: String,
    pub borrower: String,
    pub lender: Option<String>,
    pub ms: u64,
}

/// A usage report: rows of the days asked for, up to `as_of`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UsageReport {
    pub rows: Vec<UsageRecord>,
    pub lending: Vec<LendRecord>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interval_splits_at_midnight() {
        let from = Time(DAY_MS - 500);
        let to = Time(2 * DAY_MS + 250);
        let pieces: Vec<_> = days_between(from, to).collect();
        assert_eq!(pieces, vec![(0, 500), (1, DAY_MS), (2, 250)]);
        assert_eq!(days_between(to, from).count(), 0);
        let total: u64 = pieces.iter().map(|p| p.1).sum();
        assert_eq!(total, to.millis_since(from));
    }
}
