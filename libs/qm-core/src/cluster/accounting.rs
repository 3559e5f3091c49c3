//! Accounting, read-only: the fleet, each share's usage (owned, used,
//! borrowed, lent, idle), which running jobs are on borrowed capacity, and
//! the limit a job that can never fit runs into.

use super::*;

impl Cluster {
    // ----- accounting -------------------------------------------------------

    /// `n` instances of type `t`, capped by the queue's own limit if it has
    /// one.
    fn queue_capped(&self, t: TypeIdx, n: u32) -> u32 {
        self.queue_limits
            .iter()
            .find(|l| l.capacity_unit == self.types[t.index()])
            .map_or(n, |l| config::clamp_u32(l.max_capacity).min(n))
    }

    /// `F` for a type: the fleet, capped by the queue's own limit if it has one.
    pub fn effective_fleet(&self, t: TypeIdx) -> u32 {
        self.queue_capped(t, self.fleet[t.index()])
    }

    /// The most of a type the queue could hold: its service environment's
    /// live instances (those other queues hold too), capped by the queue's
    /// own limit.
    pub fn environment_fleet(&self, t: TypeIdx) -> u32 {
        self.queue_capped(t, self.fleet[t.index()] + self.withheld_of(t))
    }

    pub fn fleet_of(&self, t: TypeIdx) -> u32 {
        self.fleet[t.index()]
    }

    /// The lost-work ledger's totals of share `s` (see [`crate::ledger`]).
    pub fn lost_work(&self, s: ShareIdx) -> crate::ledger::ShareLedger {
        self.ledger.get(s.index()).copied().unwrap_or_default()
    }

    pub(crate) fn ledger_mut(&mut self, s: ShareIdx) -> &mut crate::ledger::ShareLedger {
        if self.ledger.len() <= s.index() {
            self.ledger.resize(s.index() + 1, Default::default());
        }
        &mut self.ledger[s.index()]
    }

    /// Instances of `t` held by share `s` (running and being stopped).
    pub fn share_usage(&self, s: ShareIdx, t: TypeIdx) -> ShareUsage {
        self.usage_snapshot(t)
            .into_iter()
            .find(|(share, _)| *share == s)
            .map(|(_, usage)| usage)
            .unwrap_or_default()
    }

    /// Every live share's use of `t`, in O(shares). What a share has lent is
    /// an attribution: borrowing is backed by unassigned capacity first, and
    /// the rest by lending shares in proportion to their idle entitlement (so
    /// it can be fractional; reported rounded down here).
    pub fn usage_snapshot(&self, t: TypeIdx) -> Vec<(ShareIdx, ShareUsage)> {
        self.share_usages(t, self.accounting(t)).collect()
    }

    /// Every live share's use of `t`, without allocating (see
    /// [`Cluster::usage_snapshot`]).
    pub fn share_usages(
        &self,
        t: TypeIdx,
        acc: TypeAccounting,
    ) -> impl Iterator<Item = (ShareIdx, ShareUsage)> + '_ {
        let lender_idle = acc.lendable - acc.unassigned;
        let to_back = acc.borrowed.saturating_sub(acc.unassigned).min(lender_idle);
        self.share_indices().map(move |s| {
            let st = self.st(s, t);
            let used = st.running_usage + st.stopping_usage;
            let idle = st.entitlement.saturating_sub(used);
            let lent = if self.shares[s.index()].config.strategy.lends() && lender_idle > 0 {
                u32::try_from(u64::from(idle) * u64::from(to_back) / u64::from(lender_idle))
                    .unwrap_or(0)
            } else {
                0
            };
            let usage = ShareUsage {
                entitlement: st.entitlement,
                used,
                borrowed: used.saturating_sub(st.entitlement),
                lent,
                idle,
            };
            (s, usage)
        })
    }

    /// Section 3's accounting for one type, counting jobs being stopped.
    pub fn accounting(&self, t: TypeIdx) -> TypeAccounting {
        let fleet = self.effective_fleet(t);
        let mut acc = TypeAccounting {
            fleet,
            ..TypeAccounting::default()
        };
        let mut sum_e = 0u64;
        let mut idle_lent = 0u32;
        for s in self.share_indices() {
            let st = self.st(s, t);
            let used = st.running_usage + st.stopping_usage;
            sum_e += u64::from(st.entitlement);
            acc.in_use += used;
            acc.borrowed += used.saturating_sub(st.entitlement);
            if self.shares[s.index()].config.strategy.lends() {
                idle_lent += st.entitlement.saturating_sub(used);
            }
        }
        acc.unassigned = u32::try_from(u64::from(fleet).saturating_sub(sum_e)).unwrap_or(0);
        acc.lendable = acc.unassigned + idle_lent;
        acc
    }

    /// Running jobs of a share and type that are on borrowed capacity, in
    /// (priority desc, start asc) order.
    pub fn borrowed_jobs(&self, s: ShareIdx, t: TypeIdx) -> Vec<JobId> {
        let st = self.st(s, t);
        let order: Vec<RunKey> = st.running.iter().copied().collect();
        borrowed_jobs(&order, st.entitlement)
            .into_iter()
            .map(|k| k.job)
            .collect()
    }

    /// Whether a running job is on borrowed capacity.
    pub fn is_on_borrowed_capacity(&self, id: JobId) -> bool {
        self.jobs.get(&id).is_some_and(|job| {
            job.status.holds_instances()
                && job.stopping.is_none()
                && self
                    .borrowed_jobs(job.spec.share, job.spec.instance_type)
                    .contains(&id)
        })
    }

    /// The RUNNABLE jobs of a share and type, in line order.
    pub fn runnable_in_order(&self, s: ShareIdx, t: TypeIdx) -> Vec<JobId> {
        self.st(s, t)
            .runnable
            .in_order()
            .into_iter()
            .map(|(k, _)| k.job)
            .collect()
    }

    /// Whether a job holds a claim on room being freed for it: it is the
    /// beneficiary of preemptions that are under way, and is admitted
    /// first by every pass until it starts (`WAITING_FOR_RECLAIM`).
    pub fn holds_claim(&self, id: JobId) -> bool {
        self.claims.contains(&id)
    }

    pub fn runnable_count(&self) -> usize {
        self.shares
            .iter()
            .flat_map(|s| s.types.iter())
            .map(|st| st.runnable.len())
            .sum()
    }

    // ----- never fits -------------------------------------------------------

    /// The limit that keeps a job of `count` instances of `t` in share `s`
    /// (with borrow bar `bar`, see [`Cluster::borrow_bar_of`]) from ever
    /// running under the current configuration and fleet, if any. A bar a
    /// resume drill could lift never makes a job unfittable.
    pub fn never_fits(
        &self,
        s: ShareIdx,
        t: TypeIdx,
        count: u32,
        bar: Option<crate::policy::classes::BorrowBar>,
    ) -> Option<NeverFits> {
        let share = &self.shares[s.index()].config;
        let entitlement = self.st(s, t).entitlement;
        if let Some(queue_limit) = self
            .queue_limits
            .iter()
            .find(|l| l.capacity_unit == self.types[t.index()])
            .map(|l| config::clamp_u32(l.max_capacity))
        {
            if count > queue_limit {
                return Some(NeverFits::QueueLimit { count, queue_limit });
            }
        }
        match share.strategy {
            Strategy::Reserve | Strategy::Lend if count > entitlement => {
                return Some(NeverFits::ShareLimit {
                    count,
                    max_capacity: entitlement,
                })
            }
            Strategy::LendAndBorrow if share.borrow_limit >= 0 => {
                let max_holding = share.max_holding(entitlement);
                if count > max_holding {
                    return Some(NeverFits::ShareLimitPlusBorrowLimit { count, max_holding });
                }
            }
            _ => {}
        }
        if share.strategy == Strategy::LendAndBorrow && count > entitlement {
            match bar {
                Some(crate::policy::classes::BorrowBar::NoCheckpoint) => {
                    return Some(NeverFits::BorrowRequiresCheckpoint {
                        count,
                        max_capacity: entitlement,
                    })
                }
                Some(crate::policy::classes::BorrowBar::ClassNeverBorrows) => {
                    return Some(NeverFits::ClassMayNotBorrow {
                        count,
                        max_capacity: entitlement,
                    })
                }
                Some(crate::policy::classes::BorrowBar::Drill) => {
                    return Some(NeverFits::DrillOnOwnCapacity {
                        count,
                        max_capacity: entitlement,
                    })
                }
                Some(crate::policy::classes::BorrowBar::ResumeNotVerified) | None => {}
            }
        }
        // Against what the queue could ever hold: instances another queue
        // of its environment holds now may be its later.
        let fleet = self.environment_fleet(t);
        if fleet > 0 && count > fleet {
            return Some(NeverFits::FleetMaximum { count, fleet });
        }
        if share.strategy == Strategy::LendAndBorrow && count > entitlement && fleet > 0 {
            // What the share could ever hold: its own entitlement plus everything
            // that could be lent to it (unassigned capacity and other lenders).
            let mut sum_e = 0u64;
            let mut others_lendable = 0u64;
            for o in self.share_indices() {
                let e = u64::from(self.st(o, t).entitlement);
                sum_e += e;
                if o != s && self.shares[o.index()].config.strategy.lends() {
                    others_lendable += e;
                }
            }
            let unassigned = u64::from(fleet).saturating_sub(sum_e);
            let reachable =
                (u64::from(entitlement) + unassigned + others_lendable).min(u64::from(fleet));
            let reachable = u32::try_from(reachable).unwrap_or(u32::MAX);
            if count > reachable {
                return Some(NeverFits::AllBorrowableCapacity { count, reachable });
            }
        }
        None
    }
}
