//! Workload classes in a pass (`crate::policy::classes`).
//!
//! Hook: [`bar`] (a gate on borrowing: a job whose class, checkpoint or
//! resume proof keeps it off borrowed capacity, and what it waits for).

use crate::cluster::Cluster;
use crate::job::Job;
use crate::policy::classes::BorrowBar;
use crate::reason::WaitReason;

/// Whether `job` may borrow despite its borrow bar. `barred_used` gives
/// what the share's jobs that may not borrow hold (asked only for such a
/// job): they are classified within quota first, so a job that may not
/// borrow may start as long as those jobs together stay within the
/// entitlement (the excess is then on jobs that may borrow, which can
/// resume).
pub fn bar(c: &Cluster, job: &Job, barred_used: impl FnOnce() -> u32) -> Result<(), WaitReason> {
    let Some(bar) = job.borrow_bar else {
        return Ok(());
    };
    let st = c.st(job.spec.share, job.spec.instance_type);
    if barred_used() + job.spec.count <= st.entitlement {
        return Ok(());
    }
    Err(match bar {
        BorrowBar::NoCheckpoint => WaitReason::BorrowRequiresCheckpoint,
        BorrowBar::ClassNeverBorrows => WaitReason::ClassMayNotBorrow,
        BorrowBar::ResumeNotVerified => WaitReason::ResumeNotVerified,
        BorrowBar::Drill => WaitReason::OwnCapacityInUse {
            used: st.running_usage,
            entitlement: st.entitlement,
        },
    })
}
