//! Protections in a pass (`crate::policy::protections`).
//!
//! Hooks: [`cooldown`] (a gate on borrowing: the re-borrow cool-down after
//! a reclaim), [`protected_until`] (a filter on victims: the minimum run
//! before preemption, of the job's workload class or else its share).

use crate::cluster::Cluster;
use crate::ids::{ShareIdx, TypeIdx};
use crate::index::RunKey;
use crate::reason::WaitReason;
use crate::time::Time;

/// Whether share `s` may borrow `t` now, or waits out the re-borrow
/// cool-down after capacity of `t` was reclaimed from it.
pub fn cooldown(c: &Cluster, s: ShareIdx, t: TypeIdx, now: Time) -> Result<(), WaitReason> {
    let secs = c.shares[s.index()]
        .config
        .protections
        .reborrow_cooldown_secs;
    if secs > 0 {
        if let Some(at) = c.st(s, t).reclaimed_at {
            let until = at.plus_secs(secs);
            if until > now {
                return Err(WaitReason::ReborrowCooldownUntil(until));
            }
        }
    }
    Ok(())
}

/// Until when a running job of share `s` may not be preempted, by the
/// minimum runtime of its workload class (by default its share's).
pub fn protected_until(c: &Cluster, s: ShareIdx, key: &RunKey, now: Time) -> Option<Time> {
    let min_runtime = c.shares[s.index()]
        .config
        .rules(c.jobs[&key.job].spec.class.as_deref())
        .min_runtime_before_preemption_secs;
    if min_runtime == 0 {
        return None;
    }
    let until = key.started.plus_secs(min_runtime);
    (until > now).then_some(until)
}
