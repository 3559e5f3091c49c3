//! The usage ledger in the state (`usage.rs`): the rates a share's state
//! implies, accruing them before every change, and reports.
//!
//! Guarantees: every change to what a share holds or queues, to its
//! entitlement or to the fleet is preceded by an accrual of the time since
//! the last one at the old rates (`touch_usage`, from `st_mut`,
//! `transition`, the configuration and the fleet), so the ledger is the
//! exact integral of the state over time.

use super::*;
use crate::usage::{
    accrue, day_of, days_between, ClassCounts, LendRecord, Rates, Source, Usage, UsageRecord,
    UsageReport,
};

impl Cluster {
    /// Moves the usage ledger's clock to `now`: changes from here on
    /// happen at `now`. Every event method calls it; a driver calls it
    /// before an event that takes no time (a priority update).
    pub fn advance_usage(&mut self, now: Time) {
        let first = self.usage.now.is_none();
        self.usage.advance(now);
        if first {
            // The ledger starts now (a new cluster, or a state from before
            // the ledger): whatever is held or queued counts from here.
            for s in 0..self.shares.len() {
                let s = ShareIdx(u16::try_from(s).expect("share slots fit in u16"));
                for t in 0..self.types.len() {
                    self.usage
                        .since
                        .entry((s, TypeIdx(t as u16)))
                        .or_insert(now);
                }
            }
            for t in 0..self.types.len() {
                self.usage
                    .lending
                    .entry(TypeIdx(t as u16))
                    .or_insert_with(|| crate::usage::TypeLending::new(now));
            }
        }
    }

    /// Accrues share `s`'s use of `t`, and the type's lending, up to the
    /// ledger's clock: called before anything about them changes.
    pub(crate) fn touch_usage(&mut self, s: ShareIdx, t: TypeIdx) {
        let Some(now) = self.usage.now else {
            return;
        };
        let since = self.usage.since.get(&(s, t)).copied();
        if since.is_some_and(|since| since >= now) {
            // Already counted at this time (lending included).
            return;
        }
        if let Some(since) = since {
            self.accrue_budget(s, t, since, now);
            self.accrue_fair(s, t, since, now);
            self.ensure_usage_counts();
            if let Some((id, rates)) = self.single_class_rates(s, t) {
                // The common case: one class (no walk, no allocation).
                if rates != Rates::default() {
                    for (day, ms) in days_between(since, now) {
                        let key = crate::usage::Key {
                            day,
                            share: s,
                            ty: t,
                            class: id,
                        };
                        accrue(self.usage.rows.entry(key).or_default(), &rates, ms);
                    }
                }
                self.usage.since.insert((s, t), now);
                self.touch_lending(t, Some(s));
                return;
            }
            let rates = self.share_type_rates(s, t);
            let idle = rates.iter().all(|(_, r)| *r == Rates::default());
            let span = if idle { (now, now) } else { (since, now) };
            for (day, ms) in days_between(span.0, span.1) {
                for (class, r) in &rates {
                    accrue(self.usage.row(day, s, t, class), r, ms);
                }
            }
        }
        self.usage.since.insert((s, t), now);
        self.touch_lending(t, Some(s));
    }

    /// Accrues the lending of `t` up to the ledger's clock, and counts
    /// `touched`'s borrowing (it is about to change).
    pub(crate) fn touch_lending(&mut self, t: TypeIdx, touched: Option<ShareIdx>) {
        let Some(now) = self.usage.now else {
            return;
        };
        let stale = self.usage.lending.get(&t).is_none_or(|l| l.since < now);
        let rates = if stale {
            self.lend_weights(t)
        } else {
            Vec::new()
        };
        let shares = &self.shares;
        let borrowed = |b: ShareIdx| borrowed_in(shares, b, t);
        let usage = &mut self.usage;
        let lending = usage
            .lending
            .entry(t)
            .or_insert_with(|| crate::usage::TypeLending::new(now));
        if stale {
            lending.accrue(t, now, &rates, &borrowed, &mut usage.lent_us);
        }
        if let Some(s) = touched {
            lending.count(t, s, borrowed(s), &mut usage.lent_us);
        }
    }

    /// Instances share `b` holds of `t` beyond its entitlement.
    /// (A deleted share's, like the accounting's, is not counted.)
    pub fn borrowed_now(&self, b: ShareIdx, t: TypeIdx) -> u32 {
        borrowed_in(&self.shares, b, t)
    }

    /// Accrues everything: before a configuration change.
    pub(crate) fn touch_all_usage(&mut self) {
        for s in 0..self.shares.len() {
            let s = ShareIdx(u16::try_from(s).expect("share slots fit in u16"));
            for t in 0..self.types.len() {
                self.touch_usage(s, TypeIdx(t as u16));
            }
        }
    }

    /// The class a job is counted in: its own, or its share's default.
    pub(crate) fn usage_class<'a>(&'a self, job: &'a Job) -> &'a str {
        self.shares[job.spec.share.index()]
            .config
            .class_name(job.spec.class.as_deref())
    }

    /// Keeps the per-class counts as job `id` goes from `from` to `to`.
    pub(crate) fn count_transition(&mut self, id: JobId, from: JobStatus, to: JobStatus) {
        if from == to || !self.usage.counts.valid {
            return;
        }
        let job = &self.jobs[&id];
        let (s, t, n) = (job.spec.share, job.spec.instance_type, job.spec.count);
        let drill = job.spec.drill.is_some();
        let class = self.shares[s.index()]
            .config
            .class_name(job.spec.class.as_deref());
        let c = self.usage.counts.entry(s, t, class);
        // The counts follow the jobs (an invariant the property tests
        // check through the ledger); never below zero if they did not.
        let take = |v: &mut u32, n: u32| {
            debug_assert!(*v >= n, "usage counts below zero");
            *v = v.saturating_sub(n);
        };
        if from == JobStatus::Runnable {
            debug_assert!(c.waiting >= u64::from(n), "usage counts below zero");
            c.waiting = c.waiting.saturating_sub(u64::from(n));
        }
        if to == JobStatus::Runnable {
            c.waiting += u64::from(n);
        }
        let (held_before, held_after) = (from.holds_instances(), to.holds_instances());
        if held_before && !held_after {
            take(&mut c.held, n);
            if drill {
                take(&mut c.drill, n);
            }
        }
        if !held_before && held_after {
            c.held += n;
            if drill {
                c.drill += n;
            }
        }
    }

    /// The per-class counts are rebuilt from the jobs when they are not
    /// known (a state read from a snapshot, a configuration change).
    pub(crate) fn ensure_usage_counts(&mut self) {
        if self.usage.counts.valid {
            return;
        }
        let mut counts = crate::usage::Counts {
            valid: true,
            ..Default::default()
        };
        for job in self.jobs.values().filter(|j| !j.status.is_final()) {
            let (s, t) = (job.spec.share, job.spec.instance_type);
            let c = counts.entry(s, t, self.usage_class(job));
            add_to_counts(c, job);
        }
        self.usage.counts = counts;
    }

    /// The rates of share `s` and type `t` when at most one class (already
    /// named in the ledger) holds or queues anything: its index and rates
    /// (default rates when nothing does). None: several classes, or a
    /// class the ledger has not named yet.
    fn single_class_rates(&self, s: ShareIdx, t: TypeIdx) -> Option<(u16, Rates)> {
        let mut live = self
            .usage
            .counts
            .by_share_type
            .get(&(s, t))
            .into_iter()
            .flatten()
            .filter(|(_, c)| *c != ClassCounts::default());
        let Some((name, c)) = live.next() else {
            return Some((0, Rates::default()));
        };
        if live.next().is_some() {
            return None;
        }
        let id = self.usage.classes.iter().position(|n| n == name)? as u16;
        let st = self.st(s, t);
        let used = st.running_usage + st.stopping_usage;
        let own = used.min(st.entitlement);
        Some((
            id,
            Rates {
                own,
                borrowed: used - own,
                waiting: c.waiting,
                drill: c.drill,
            },
        ))
    }

    /// The counts of share `s` and type `t` by class, sorted by class.
    fn class_counts(&self, s: ShareIdx, t: TypeIdx) -> Vec<(String, ClassCounts)> {
        let mut v =
            if self.usage.counts.valid {
                self.usage
                    .counts
                    .by_share_type
                    .get(&(s, t))
                    .cloned()
                    .unwrap_or_default()
            } else {
                // Not known yet (a report right after a snapshot was read):
                // counted from the jobs.
                let mut counts = crate::usage::Counts::default();
                for job in self.jobs.values().filter(|j| {
                    !j.status.is_final() && j.spec.share == s && j.spec.instance_type == t
                }) {
                    add_to_counts(counts.entry(s, t, self.usage_class(job)), job);
                }
                counts.by_share_type.remove(&(s, t)).unwrap_or_default()
            };
        v.retain(|(_, c)| *c != ClassCounts::default());
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// What share `s`'s jobs of type `t` hold and queue now, by class.
    pub fn share_type_rates(&self, s: ShareIdx, t: TypeIdx) -> Vec<(String, Rates)> {
        let counts = self.class_counts(s, t);
        let st = self.st(s, t);
        let used = st.running_usage + st.stopping_usage;
        let own_total = used.min(st.entitlement);
        let mut rates: Vec<(String, Rates)> = counts
            .iter()
            .map(|(class, c)| {
                (
                    class.clone(),
                    Rates {
                        waiting: c.waiting,
                        drill: c.drill,
                        ..Rates::default()
                    },
                )
            })
            .collect();
        let holding: Vec<usize> = (0..counts.len())
            .filter(|&i| counts[i].1.held > 0)
            .collect();
        if let [only] = holding[..] {
            rates[only].1.own = own_total;
            rates[only].1.borrowed = used - own_total;
            return rates;
        }
        if holding.is_empty() {
            return rates;
        }
        // Several classes hold instances: the entitlement is filled in the
        // order that classifies jobs as borrowed, then by jobs being stopped.
        let mut left = st.entitlement;
        let mut running_by_class = vec![0u32; counts.len()];
        let walk = |may_borrow: bool,
                    left: &mut u32,
                    rates: &mut Vec<(String, Rates)>,
                    running: &mut Vec<u32>| {
            for key in st.running.iter().filter(|k| k.may_borrow == may_borrow) {
                let Some(job) = self.jobs.get(&key.job) else {
                    continue;
                };
                let class = self.usage_class(job);
                let Some(i) = counts.iter().position(|(c, _)| c == class) else {
                    continue;
                };
                let own = key.count.min(*left);
                *left -= own;
                rates[i].1.own += own;
                rates[i].1.borrowed += key.count - own;
                running[i] += key.count;
            }
        };
        walk(false, &mut left, &mut rates, &mut running_by_class);
        walk(true, &mut left, &mut rates, &mut running_by_class);
        for (i, (_, c)) in counts.iter().enumerate() {
            let stopping = c.held.saturating_sub(running_by_class[i]);
            let own = stopping.min(left);
            left -= own;
            rates[i].1.own += own;
            rates[i].1.borrowed += stopping - own;
        }
        rates
    }

    /// Every share's rates now, by (share, type, class) names: what the
    /// ledger accrues at until the next change.
    pub fn usage_rates(&self) -> Vec<((String, String, String), Rates)> {
        let mut out = Vec::new();
        for s in 0..self.shares.len() {
            let s = ShareIdx(u16::try_from(s).expect("share slots fit in u16"));
            for t in 0..self.types.len() {
                let t = TypeIdx(t as u16);
                for (class, r) in self.share_type_rates(s, t) {
                    let key = (
                        self.shares[s.index()].config.name.clone(),
                        self.types[t.index()].clone(),
                        class,
                    );
                    out.push((key, r));
                }
            }
        }
        out
    }

    /// Where the borrowed capacity of `t` comes from now: per source slot
    /// (0: unassigned capacity, 1 + s: share s), the fraction of all
    /// borrowed instances it backs, as the accounting attributes lending
    /// (unassigned first, then lenders by idle entitlement). Empty when
    /// nothing is borrowed.
    pub fn lend_weights(&self, t: TypeIdx) -> Vec<f64> {
        let acc = self.accounting(t);
        if acc.borrowed == 0 {
            return Vec::new();
        }
        let total = f64::from(acc.borrowed);
        let unassigned = acc.unassigned.min(acc.borrowed);
        let lender_idle = acc.lendable - acc.unassigned;
        let to_back = (acc.borrowed - unassigned).min(lender_idle);
        let mut w = vec![0.0; self.shares.len() + 1];
        w[0] = f64::from(unassigned) / total;
        if to_back > 0 {
            for l in self.share_indices() {
                if !self.shares[l.index()].config.strategy.lends() {
                    continue;
                }
                let st = self.st(l, t);
                let idle = st
                    .entitlement
                    .saturating_sub(st.running_usage + st.stopping_usage);
                if idle > 0 {
                    w[1 + l.index()] =
                        f64::from(idle) * f64::from(to_back) / (f64::from(lender_idle) * total);
                }
            }
        }
        w
    }

    /// Work an ended attempt threw away, in the ledger (its day, class and
    /// cause).
    pub(crate) fn count_recomputed(
        &mut self,
        id: JobId,
        cause: AttemptOutcome,
        instance_ms: u64,
        now: Time,
    ) {
        let job = &self.jobs[&id];
        let (s, t) = (job.spec.share, job.spec.instance_type);
        let class = self.shares[s.index()]
            .config
            .class_name(job.spec.class.as_deref())
            .to_string();
        if let Some(v) = self
            .usage
            .row(day_of(now), s, t, &class)
            .recomputed_mut(cause)
        {
            *v += instance_ms;
        }
    }

    /// A resume drill started for a job of `spec`'s share, type and class.
    pub(crate) fn count_drill(&mut self, spec: &JobSpec, now: Time) {
        let class = self.shares[spec.share.index()]
            .config
            .class_name(spec.class.as_deref())
            .to_string();
        self.usage
            .row(day_of(now), spec.share, spec.instance_type, &class)
            .drills += 1;
    }

    /// The ledger's rows for days `from..=to` (days since the epoch, UTC),
    /// up to `as_of` (the open intervals accrued on the fly), with names.
    /// Rows of nothing are left out.
    pub fn usage_report(&self, from: u32, to: u32, as_of: Time) -> UsageReport {
        let in_range = |day: u32| (from..=to).contains(&day);
        // A deleted share's rows keep its name, marked: a new share of the
        // same name (perhaps another team's) does not read them as its own.
        let share_name = |s: ShareIdx| {
            let slot = &self.shares[s.index()];
            if slot.deleted {
                format!("{} (deleted)", slot.config.name)
            } else {
                slot.config.name.clone()
            }
        };
        let mut rows: BTreeMap<(u32, String, String, String), Usage> = BTreeMap::new();
        // Rows are keyed by day first: only the days asked for are read.
        let first = crate::usage::Key {
            day: from,
            share: ShareIdx(0),
            ty: TypeIdx(0),
            class: 0,
        };
        let asked = self
            .usage
            .rows
            .range(first..)
            .take_while(|(k, _)| k.day <= to);
        for (k, u) in asked {
            if in_range(k.day) {
                rows.entry((
                    k.day,
                    share_name(k.share),
                    self.types[k.ty.index()].clone(),
                    self.usage.classes[usize::from(k.class)].clone(),
                ))
                .or_default()
                .add(u);
            }
        }
        for (&(s, t), &since) in &self.usage.since {
            if since >= as_of {
                continue;
            }
            let rates = self.share_type_rates(s, t);
            let (a, b) = clip(since, as_of, from, to);
            for (day, ms) in days_between(a, b) {
                for (class, r) in &rates {
                    let row = rows
                        .entry((
                            day,
                            share_name(s),
                            self.types[t.index()].clone(),
                            class.clone(),
                        ))
                        .or_default();
                    accrue(row, r, ms);
                }
            }
        }
        let mut lending: BTreeMap<(u32, String, String, Option<String>), u64> = BTreeMap::new();
        let source_name = |src: Source| match src {
            Source::Unassigned => None,
            Source::Share(l) => Some(share_name(l)),
        };
        // What is counted, and what the open day holds up to `as_of` (on
        // a copy: every borrower counted to the end).
        let mut lent_us = BTreeMap::new();
        for (&t, l) in &self.usage.lending {
            let mut open = l.clone();
            let borrowed = |b: ShareIdx| self.borrowed_now(b, t);
            if open.since < as_of {
                open.accrue(t, as_of, &self.lend_weights(t), &borrowed, &mut lent_us);
            }
            open.count_all(t, &borrowed, &mut lent_us);
        }
        let first = crate::usage::LendKey {
            day: from,
            ty: TypeIdx(0),
            borrower: ShareIdx(0),
            source: Source::Unassigned,
        };
        let counted = self
            .usage
            .lent_us
            .range(first..)
            .take_while(|(k, _)| k.day <= to);
        for (k, us) in counted.chain(lent_us.iter()) {
            if in_range(k.day) {
                *lending
                    .entry((
                        k.day,
                        self.types[k.ty.index()].clone(),
                        share_name(k.borrower),
                        source_name(k.source),
                    ))
                    .or_default() += us;
            }
        }
        UsageReport {
            rows: rows
                .into_iter()
                .filter(|(_, u)| !u.is_empty())
                .map(|((day, share, instance_type, class), usage)| UsageRecord {
                    day,
                    share,
                    instance_type,
                    class,
                    usage,
                })
                .collect(),
            lending: lending
                .into_iter()
                .filter(|(_, us)| *us >= 1000)
                .map(|((day, instance_type, borrower, lender), us)| LendRecord {
                    day,
                    instance_type,
                    borrower,
                    lender,
                    ms: us / 1000,
                })
                .collect(),
        }
    }
}

fn borrowed_in(shares: &[ShareSlot], b: ShareIdx, t: TypeIdx) -> u32 {
    match shares.get(b.index()) {
        Some(slot) if !slot.deleted => {
            let st = &slot.types[t.index()];
            (st.running_usage + st.stopping_usage).saturating_sub(st.entitlement)
        }
        _ => 0,
    }
}

/// `[since, as_of)` within days `from..=to`.
fn clip(since: Time, as_of: Time, from: u32, to: u32) -> (Time, Time) {
    let start = Time(u64::from(from) * crate::usage::DAY_MS);
    let end = Time((u64::from(to) + 1).saturating_mul(crate::usage::DAY_MS));
    (since.max(start), as_of.min(end))
}

fn add_to_counts(c: &mut ClassCounts, job: &Job) {
    let n = job.spec.count;
    if job.status == JobStatus::Runnable {
        c.waiting += u64::from(n);
    }
    if job.status.holds_instances() {
        c.held += n;
        if job.spec.drill.is_some() {
            c.drill += n;
        }
    }
}
