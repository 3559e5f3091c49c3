//! Borrowing budgets: how much a share may borrow over time.
//!
//! A LEND_AND_BORROW share may set `borrowBudget`: instance-hours of
//! borrowed capacity per rolling window of whole clock hours
//! (`windowHours`), or of borrowed usage decayed with a half-life
//! (`halfLifeHours`). Borrowed means what the usage ledger counts as
//! borrowed: instances the share holds beyond its entitlement, every type
//! together.
//!
//! The rules (ADR 0015):
//! - **Safe admission.** A job starts on borrowed capacity only if what
//!   it makes borrowed (its own instances, or lower-priority jobs it pushes
//!   beyond the entitlement), times each one's expected run (an estimate,
//!   else `attemptDurationSeconds`, the gateway's `MaxRuntimeInSeconds`; a
//!   year at most), fits in what is left: the budget, less what the window
//!   holds, less what the share's running borrowed jobs are still expected
//!   to use, less what the pass already admitted. Its reason says how much
//!   is left and when enough refills.
//! - **Jobs without an expected run.** Under `onBudgetExhausted: FINISH`
//!   they never borrow (nothing bounds them); under `CHECKPOINT_AND_STOP`
//!   they borrow while ten instance-minutes per borrowed instance (or a
//!   quarter of a smaller budget) are left, and are stopped when it is
//!   spent.
//! - **Exhaustion.** Once the window holds the whole budget, `FINISH` lets
//!   running borrowed jobs end; `CHECKPOINT_AND_STOP` stops as many of them
//!   as bring the share within its entitlement (checkpoint first, then
//!   requeue, outcome `PREEMPTED_BUDGET`, no preemption retry spent), in a
//!   pass at the moment the budget runs out.
//!
//! Usage counts from when the budget is set; it is kept per share in the
//! state (snapshots carry it), accrued with the usage ledger, so every
//! replica counts the same and nothing counts twice across a takeover.
//!
//! | part | where |
//! |---|---|
//! | configuration | here: [`BorrowBudget`], [`BudgetWindow`], [`OnBudgetExhausted`] |
//! | validation | `validate.rs` |
//! | state | here: [`BudgetUse`] per share, kept in the cluster (`cluster/budget.rs` accrues it on events) |
//! | hooks | `hooks.rs`: safe admission (a gate on borrowing), promises and their return, the stops and wakes when a budget runs out |

pub mod hooks;
pub(crate) mod validate;

use std::collections::BTreeMap;

use crate::time::Time;

/// Milliseconds in an hour.
pub const HOUR_MS: u64 = 3_600_000;
/// The longest expected run a budget holds back for one attempt (a year):
/// a larger declared one counts as this (no overflow, no negative need).
pub const MAX_EXPECTED_RUN_SECS: u64 = 366 * 24 * 3600;

/// Largest budget, in instance-hours.
pub const MAX_BUDGET_INSTANCE_HOURS: u64 = 10_000_000;
/// Longest window or half-life, in hours (366 days).
pub const MAX_BUDGET_HOURS: u64 = 8_784;

/// How borrowed usage is measured against the budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum BudgetWindow {
    /// The borrowing of the last `hours` clock hours (the current one
    /// included): an hour's borrowing leaves the window `hours` hours after
    /// that hour began.
    Rolling { hours: u64 },
    /// Borrowed usage decayed continuously, halving every `hours`.
    HalfLife { hours: u64 },
}

impl BudgetWindow {
    pub fn hours(self) -> u64 {
        match self {
            BudgetWindow::Rolling { hours } | BudgetWindow::HalfLife { hours } => hours,
        }
    }
}

/// What happens to running borrowed jobs when the budget is spent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum OnBudgetExhausted {
    /// They run to their end; no new job borrows.
    #[default]
    Finish,
    /// They are asked to checkpoint, stopped and requeued.
    CheckpointAndStop,
}

impl OnBudgetExhausted {
    pub fn as_str(self) -> &'static str {
        match self {
            OnBudgetExhausted::Finish => "FINISH",
            OnBudgetExhausted::CheckpointAndStop => "CHECKPOINT_AND_STOP",
        }
    }
}

/// A share's `borrowBudget` (the API states it in instance-hours, to the
/// second).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BorrowBudget {
    pub instance_seconds: u64,
    pub window: BudgetWindow,
}

impl BorrowBudget {
    /// A budget of `hours` instance-hours.
    pub fn hours(hours: u64, window: BudgetWindow) -> BorrowBudget {
        BorrowBudget {
            instance_seconds: hours.saturating_mul(3600),
            window,
        }
    }

    pub fn budget_ms(&self) -> u64 {
        self.instance_seconds.saturating_mul(1000)
    }

    pub fn instance_hours(&self) -> f64 {
        self.instance_seconds as f64 / 3600.0
    }

    /// `500 instance-hours per 168 h` or `... with a 72 h half-life`.
    pub fn describe(&self) -> String {
        match self.window {
            BudgetWindow::Rolling { hours } => {
                format!("{} instance-hours per {hours} h", self.instance_hours())
            }
            BudgetWindow::HalfLife { hours } => format!(
                "{} instance-hours of usage decayed with a {hours} h half-life",
                self.instance_hours()
            ),
        }
    }
}

/// One share's borrowing, as its budget measures it.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BudgetUse {
    /// Instance-milliseconds borrowed per clock hour (hours since the
    /// epoch), for a rolling window: hours that left the window are dropped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hours: BTreeMap<u64, u64>,
    /// Decayed borrowed usage in instance-milliseconds at `decayed_at`
    /// (an f64's bits, so the state stays comparable), for a half-life.
    #[serde(default)]
    pub decayed_bits: u64,
    #[serde(default)]
    pub decayed_at: Time,
}

/// `(hour, ms)` pieces of `[since, until)`.
fn hour_pieces(since: Time, until: Time) -> impl Iterator<Item = (u64, u64)> {
    let mut at = since.0;
    let end = until.0;
    std::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let hour = at / HOUR_MS;
        let next = ((hour + 1) * HOUR_MS).min(end);
        let piece = (hour, next - at);
        at = next;
        Some(piece)
    })
}

/// Of usage at constant rate 1 over the `span_ms` before a moment, what is
/// left at that moment under a half-life of `half_life_ms`.
fn decayed_integral(span_ms: u64, half_life_ms: f64) -> f64 {
    half_life_ms / std::f64::consts::LN_2 * (1.0 - (-(span_ms as f64) / half_life_ms).exp2())
}

impl BudgetUse {
    fn decayed(&self) -> f64 {
        f64::from_bits(self.decayed_bits)
    }

    /// Adds `instances` borrowed over `[since, now)`; `now` is the usage
    /// ledger's clock (never earlier than a previous call's).
    pub fn accrue(&mut self, window: BudgetWindow, since: Time, now: Time, instances: u32) {
        if instances == 0 || since >= now {
            return;
        }
        let rate = u64::from(instances);
        match window {
            BudgetWindow::Rolling { hours } => {
                for (hour, ms) in hour_pieces(since, now) {
                    *self.hours.entry(hour).or_default() += ms * rate;
                }
                let first_kept = (now.0 / HOUR_MS + 1).saturating_sub(hours);
                while self
                    .hours
                    .first_key_value()
                    .is_some_and(|(h, _)| *h < first_kept)
                {
                    self.hours.pop_first();
                }
            }
            BudgetWindow::HalfLife { hours } => {
                let h = (hours * HOUR_MS) as f64;
                let carried =
                    self.decayed() * (-(now.millis_since(self.decayed_at) as f64) / h).exp2();
                let added = rate as f64 * decayed_integral(now.millis_since(since), h);
                self.decayed_bits = (carried + added).to_bits();
                self.decayed_at = now;
            }
        }
    }

    /// Instance-milliseconds the budget counts at `now`, with `pending`:
    /// `(since, instances)` borrowed from `since` to `now` and not accrued
    /// yet (one per instance type).
    pub fn used_ms(&self, window: BudgetWindow, now: Time, pending: &[(Time, u32)]) -> u64 {
        match window {
            BudgetWindow::Rolling { hours } => {
                let first = (now.0 / HOUR_MS + 1).saturating_sub(hours);
                let kept: u64 = self.hours.range(first..).map(|(_, ms)| ms).sum();
                let new: u64 = pending
                    .iter()
                    .flat_map(|&(since, n)| {
                        hour_pieces(since, now)
                            .filter(move |(h, _)| *h >= first)
                            .map(move |(_, ms)| ms * u64::from(n))
                    })
                    .sum();
                kept + new
            }
            BudgetWindow::HalfLife { hours } => {
                let h = (hours * HOUR_MS) as f64;
                let carried =
                    self.decayed() * (-(now.millis_since(self.decayed_at) as f64) / h).exp2();
                let new: f64 = pending
                    .iter()
                    .map(|&(since, n)| f64::from(n) * decayed_integral(now.millis_since(since), h))
                    .sum();
                (carried + new).round() as u64
            }
        }
    }

    /// The first time after `now` at which what the budget counts is at
    /// most `level_ms` if nothing more is borrowed (None: never, the level
    /// being below zero; `now` if it already is).
    pub fn refills_to(
        &self,
        window: BudgetWindow,
        now: Time,
        used_ms: u64,
        level_ms: i64,
    ) -> Option<Time> {
        if level_ms < 0 {
            return None;
        }
        let level = level_ms as u64;
        if used_ms <= level {
            return Some(now);
        }
        match window {
            BudgetWindow::Rolling { hours } => {
                // Hours leave oldest first: the one whose leaving brings
                // the count to the level. (What was borrowed since the last
                // accrual is in the newest hours: it leaves last.)
                let first = (now.0 / HOUR_MS + 1).saturating_sub(hours);
                let mut left = used_ms;
                for (hour, ms) in self.hours.range(first..) {
                    left = left.saturating_sub(*ms);
                    if left <= level {
                        return Some(Time((hour + hours) * HOUR_MS));
                    }
                }
                Some(Time(((now.0 / HOUR_MS) + hours) * HOUR_MS))
            }
            BudgetWindow::HalfLife { hours } => {
                if level == 0 {
                    return None;
                }
                let h = (hours * HOUR_MS) as f64;
                let wait = h * (used_ms as f64 / level as f64).log2();
                Some(now.plus_millis(wait.ceil() as u64))
            }
        }
    }
}

/// A share's budget as `qm usage` and `qm snapshot` show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BudgetStatus {
    pub budget: BorrowBudget,
    pub on_exhausted: OnBudgetExhausted,
    /// What the window (or the decayed sum) holds now.
    pub used_ms: u64,
    /// What running borrowed jobs are still expected to use.
    pub committed_ms: u64,
    /// Instances borrowed now, every type together.
    pub borrowing: u32,
    /// When the budget is spent at the current rate (None: not borrowing,
    /// or already spent).
    pub exhausts_at: Option<Time>,
    /// When the count next falls (an hour leaves the window), if it holds
    /// anything.
    pub refills_at: Option<Time>,
}

impl BudgetStatus {
    pub fn left_ms(&self) -> u64 {
        self.budget.budget_ms().saturating_sub(self.used_ms)
    }

    pub fn exhausted(&self) -> bool {
        self.used_ms >= self.budget.budget_ms()
    }
}

/// When a budget with `used_ms` counted at `now` runs out if `borrowing`
/// instances go on borrowing (None: it does not at this rate, or already
/// has). For a window the linear estimate (usage leaving it only delays
/// the end, and the pass then looks again); for a half-life the exact
/// moment.
pub fn exhausts_at(budget: BorrowBudget, used_ms: u64, borrowing: u32, now: Time) -> Option<Time> {
    let budget_ms = budget.budget_ms();
    if borrowing == 0 || used_ms >= budget_ms {
        return None;
    }
    let rate = u64::from(borrowing);
    if let BudgetWindow::HalfLife { hours } = budget.window {
        // Decayed usage u(t) = u0 2^(-t/h) + L (1 - 2^(-t/h)), tending to
        // L = rate x h / ln 2: below the budget B it never runs out, else
        // it reaches B at t = h log2((L - u0) / (L - B)).
        let h = (hours * HOUR_MS) as f64;
        let limit = rate as f64 * h / std::f64::consts::LN_2;
        let (u0, b) = (used_ms as f64, budget_ms as f64);
        if limit <= b {
            return None;
        }
        let t = h * ((limit - u0) / (limit - b)).log2();
        return Some(now.plus_millis((t.ceil() as u64).max(1)));
    }
    Some(now.plus_millis((budget_ms - used_ms).div_ceil(rate).max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rolling_window_counts_whole_hours_and_forgets_old_ones() {
        let w = BudgetWindow::Rolling { hours: 2 };
        let mut u = BudgetUse::default();
        // 2 instances from 0:30 to 1:30.
        u.accrue(w, Time(HOUR_MS / 2), Time(HOUR_MS * 3 / 2), 2);
        assert_eq!(u.hours.get(&0), Some(&HOUR_MS));
        assert_eq!(u.hours.get(&1), Some(&HOUR_MS));
        assert_eq!(u.used_ms(w, Time(HOUR_MS * 3 / 2), &[]), 2 * HOUR_MS);
        // At 2:00 hour 0 has left the window (hours 1 and 2 remain).
        assert_eq!(u.used_ms(w, Time(HOUR_MS * 2), &[]), HOUR_MS);
        // Pending usage counts as if accrued.
        assert_eq!(
            u.used_ms(w, Time(HOUR_MS * 2), &[(Time(HOUR_MS * 3 / 2), 1)]),
            HOUR_MS + HOUR_MS / 2
        );
        // To be at most 1 h, wait for hour 0 to leave: at 2:00.
        assert_eq!(
            u.refills_to(w, Time(HOUR_MS * 3 / 2), 2 * HOUR_MS, HOUR_MS as i64),
            Some(Time(2 * HOUR_MS))
        );
        assert_eq!(
            u.refills_to(w, Time(HOUR_MS * 3 / 2), 2 * HOUR_MS, 0),
            Some(Time(3 * HOUR_MS))
        );
        assert_eq!(u.refills_to(w, Time(0), 5, -1), None);
    }

    #[test]
    fn a_half_life_halves_the_count() {
        let w = BudgetWindow::HalfLife { hours: 1 };
        let mut u = BudgetUse::default();
        u.accrue(w, Time(0), Time(60_000), 1);
        let first = u.used_ms(w, Time(60_000), &[]);
        assert!((59_000..=60_000).contains(&first), "{first}");
        let later = u.used_ms(w, Time(60_000 + HOUR_MS), &[]);
        assert!(later.abs_diff(first / 2) <= 1, "{first} then {later}");
        // Accruing in two pieces equals one piece.
        let mut a = BudgetUse::default();
        a.accrue(w, Time(0), Time(HOUR_MS), 3);
        let mut b = BudgetUse::default();
        b.accrue(w, Time(0), Time(HOUR_MS / 3), 3);
        b.accrue(w, Time(HOUR_MS / 3), Time(HOUR_MS), 3);
        let (x, y) = (
            a.used_ms(w, Time(HOUR_MS), &[]),
            b.used_ms(w, Time(HOUR_MS), &[]),
        );
        assert!(x.abs_diff(y) <= 1, "{x} vs {y}");
        // A quarter is two half-lives away (the level rounded down to a
        // whole millisecond: within a second).
        let at = u
            .refills_to(w, Time(60_000), first, (first / 4) as i64)
            .expect("refills");
        assert!(at.0.abs_diff(60_000 + 2 * HOUR_MS) <= 1_000, "{at:?}");
    }
}
