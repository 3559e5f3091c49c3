//! FAIR_SHARE rebalancing (`fairShareRebalanceSeconds`), a phase of the
//! pass after borrowing: a borrower under its fair part takes a borrowed
//! job's place from a borrower over it. The claims are the policy's
//! (`crate::policy::fair_share`).
//!
//! Decides: for the borrowing share with the lowest claim (`FairShare::claim`:
//! borrowed now plus recently, per unit of weight) whose next job could not
//! borrow, at most one victim: a job of another share on borrowed capacity
//! that has run at least the interval, whose share's claim stays above the
//! beneficiary's after the move:
//!
//! `claim(b) + count(job) / weight(b)  <=  claim(a) - count(victim) / weight(a)`
//!
//! Guarantees afterwards (the rule, ADR 0016):
//! - no job is preempted to rebalance more than once per interval of its
//!   own run (a victim must have run that long since it last started);
//! - the two claims move toward each other and do not cross: the larger,
//!   `claim(a)`, falls, and the beneficiary's rises to at most `a`'s new
//!   one, so the borrowers' claims sorted from the largest fall
//!   lexicographically with every rebalance. At a fixed time there are
//!   finitely many placements, so passes cannot take a place back and
//!   forth: two borrowers never preempt each other in turn without
//!   something else changing (a job ending, a new one arriving, time
//!   decaying the recent part);
//! - the beneficiary borrows as any borrower does (limits, budget,
//!   lendable capacity), and the victim is never protected
//!   (`minRuntimeBeforePreemptionSeconds`) or already stopping.

use super::*;

impl Pass<'_> {
    /// One rebalancing preemption for type `t`, if the rule allows one.
    /// Returns whether it preempted.
    pub(super) fn rebalance(&mut self, t: TypeIdx) -> bool {
        let Some(interval) = self.c.fair_share_rebalance_secs else {
            return false;
        };
        if !self.hooks.fair_share.on() {
            return false;
        }
        // Each borrowing share's next job that still needs to borrow, the
        // lowest claim first.
        let mut heads: Vec<(f64, QueueKey, ShareIdx)> = Vec::new();
        for i in 0..self.c.shares.len() {
            let s = ShareIdx(i as u16);
            if !self.share_takes_part(s, t, Step::Borrow) {
                continue;
            }
            if let Some((key, _)) = self.next_candidate(s, t, Step::Borrow, None, u32::MAX) {
                if self.job(key.job).borrow_bar.is_none() {
                    heads.push((self.hooks.fair_share.claim(self, s, t), key, s));
                }
            }
        }
        heads.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then((a.1.runnable_since, a.1.job).cmp(&(b.1.runnable_since, b.1.job)))
        });
        for (claim, key, b) in heads {
            let job = self.job(key.job);
            let wb = f64::from(self.c.shares[b.index()].config.fair_share_weight.max(1));
            let after = claim + f64::from(job.spec.count) / wb;
            let mut victims: Vec<(f64, RunKey, ShareIdx)> = Vec::new();
            for i in 0..self.c.shares.len() {
                let a = ShareIdx(i as u16);
                if a == b || self.c.shares[i].deleted {
                    continue;
                }
                let entitlement = self.views[t.index()].entitlement[i];
                let wa = f64::from(self.c.shares[i].config.fair_share_weight.max(1));
                let claim_a = self.hooks.fair_share.claim(self, a, t);
                for k in borrowed_jobs(&self.projected_running(a, t), entitlement) {
                    let left = claim_a - f64::from(k.count) / wa;
                    let eligible_at = k.started.plus_secs(interval);
                    let ran_long_enough = eligible_at <= self.now;
                    if after <= left && !ran_long_enough {
                        // A pass when it may give way.
                        self.wake(eligible_at);
                    }
                    if after <= left
                        && ran_long_enough
                        && !self.admitted.contains(&k.job)
                        && !self.committed.contains(&k.job)
                        && self.protected_until(a, &k).is_none()
                    {
                        victims.push((left, k, a));
                    }
                }
            }
            // The most over its part first, then as reclaim picks victims.
            victims.sort_by(|x, y| {
                y.0.total_cmp(&x.0)
                    .then_with(|| self.victim_order(&x.1).cmp(&self.victim_order(&y.1)))
            });
            for (_, k, a) in victims {
                let victim = Victim {
                    key: k,
                    share: a,
                    kind: PreemptionKind::Rebalance,
                };
                self.remove_from_projection(&victim, t);
                let fits = self.fit(key.job, false).is_ok();
                self.restore_to_projection(&victim, t);
                if fits {
                    self.admit(key.job, &[victim], &[]);
                    return true;
                }
            }
        }
        false
    }
}
