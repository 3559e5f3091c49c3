//! The five points of the scheduling contract decided after the
//! differential check (`semantics.md` sections 3 and 4): one table test
//! each, asserting the exact decisions; each failed before the core
//! followed the decision (see `docs/semantics-decisions.md`).

mod common;

use common::*;
use qm_core::{JobStatus, PreemptionKind, Strategy, WaitReason};

use PreemptionKind::{CrossShare, InShare};

/// Point 1. Borrowed is a prefix of (priority desc, start asc): entitlement
/// 4, running big (3), mid (2), small (1) in that order; a lender needs one
/// instance back: `small` is reclaimed, not `mid` (first fit would have
/// kept `small` within quota and reclaimed `mid`, stopping 2 for 1).
#[test]
fn borrowed_is_a_prefix_so_the_newest_lowest_priority_job_is_reclaimed() {
    let mut w = World::new(
        6,
        vec![lab("LAB", 4, -1), share("OWNER", Strategy::Lend, 2)],
    );
    w.submit("big", "LAB", 3, 3);
    w.submit("mid", "LAB", 2, 2);
    w.submit("small", "LAB", 1, 1);
    let plan = w.step();
    assert_eq!(plan.starts.len(), 3);
    let lab_idx = w.c.share_idx("LAB").expect("LAB");
    let t = w.c.type_idx(T).expect("type");
    assert_eq!(
        w.c.borrowed_jobs(lab_idx, t),
        vec![w.id("mid"), w.id("small")],
        "mid no longer fits in what big leaves; small comes after it"
    );
    let borrowed = |name: &str| {
        plan.starts
            .iter()
            .find(|s| s.job == w.id(name))
            .map(|s| s.borrowed)
    };
    assert_eq!(
        [borrowed("big"), borrowed("mid"), borrowed("small")],
        [Some(0), Some(2), Some(1)],
        "the start records say which runs are opportunistic"
    );

    w.at(10).submit("own", "OWNER", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("small".into(), CrossShare, "own".into())]
    );
    w.exit("small", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["own"]));
    assert_eq!(w.status("mid"), JobStatus::Running);
}

/// Point 2. Reclaim order between shares is measured again after each
/// victim, and shares that tie go on to the next key (lowest priority),
/// never to the order they are listed in; a share with entitlement 0 that
/// borrows borrows the most.
#[test]
fn reclaim_measures_again_after_each_victim_and_ties_go_to_the_next_key() {
    // B1 borrows 2 on entitlement 1 (ratio 2), B2 borrows 1 on 1 (ratio 1).
    let mut w = World::new(
        5,
        vec![
            lab("B1", 1, -1),
            lab("B2", 1, -1),
            share("OWNER", Strategy::Lend, 3),
        ],
    );
    w.submit("b1a", "B1", 1, 5);
    w.submit("b1b", "B1", 1, 5);
    w.submit("b1c", "B1", 1, 5);
    w.submit("b2a", "B2", 1, 5);
    w.submit("b2low", "B2", 1, 1);
    let plan = w.step();
    assert_eq!(plan.starts.len(), 5);

    w.at(10).submit("own", "OWNER", 2, 0);
    let plan = w.step();
    // First from B1 (2/1 > 1/1): its newest submission of equal rank. Then
    // B1 borrows 1/1 like B2: the tie goes to the lowest priority, B2's
    // b2low, although B1 is listed first.
    assert_eq!(
        w.preempted(&plan),
        vec![
            ("b1c".into(), CrossShare, "own".into()),
            ("b2low".into(), CrossShare, "own".into()),
        ]
    );
}

#[test]
fn a_share_with_entitlement_zero_that_borrows_borrows_the_most() {
    let mut w = World::new(
        4,
        vec![
            lab("B1", 1, -1),
            lab("ZERO", 0, -1),
            share("OWNER", Strategy::Lend, 3),
        ],
    );
    w.submit("b1a", "B1", 1, 9);
    w.submit("b1low", "B1", 1, 0);
    w.submit("z", "ZERO", 1, 9);
    w.step();
    w.at(10).submit("own", "OWNER", 2, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("z".into(), CrossShare, "own".into())],
        "1/0 is more than 1/1, whatever the priorities"
    );
}

/// Point 3. Victims equal on every key go fewest instances first, then most
/// recently submitted: never 2 instances stopped for a 1-instance job while
/// an equally ranked 1-instance job runs. In-share preemption and reclaim.
#[test]
fn full_ties_take_the_smallest_victim_in_share() {
    let mut a = share("A", Strategy::Reserve, 3);
    a.in_share_preemption = true;
    let mut w = World::new(3, vec![a]);
    w.submit("one", "A", 1, 0);
    w.submit("two", "A", 2, 0);
    let plan = w.step();
    assert_eq!(plan.starts.len(), 2);

    w.at(10).submit("urgent", "A", 1, 5);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("one".into(), InShare, "urgent".into())],
        "the newest submission (two) holds 2 instances; one is enough"
    );
}

#[test]
fn full_ties_take_the_smallest_victim_in_reclaim() {
    let mut w = World::new(
        3,
        vec![lab("LAB", 0, -1), share("OWNER", Strategy::Lend, 3)],
    );
    w.submit("one", "LAB", 1, 0);
    w.submit("two", "LAB", 2, 0);
    w.step();
    w.at(10).submit("own", "OWNER", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("one".into(), CrossShare, "own".into())]
    );
    // Equal in size too: the most recently submitted goes first.
    let mut w = World::new(
        2,
        vec![lab("LAB", 0, -1), share("OWNER", Strategy::Lend, 2)],
    );
    w.submit("first", "LAB", 1, 0);
    w.submit("second", "LAB", 1, 0);
    w.step();
    w.at(10).submit("own", "OWNER", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("second".into(), CrossShare, "own".into())]
    );
}

/// Point 4. Room a preemption frees beyond its beneficiary's need is served
/// by the same order as always: within-quota work before borrowing. Here an
/// in-share preemption frees 2 instances for a 1-instance job; the other
/// goes to OWNER's within-quota job (whose own reclaim is held off by a
/// minimum runtime), not to a second urgent job of LAB that would borrow it.
#[test]
fn room_a_preemption_frees_goes_to_within_quota_work_before_borrowing() {
    let mut lab_share = lab("LAB", 3, -1);
    lab_share.in_share_preemption = true;
    lab_share.protections.min_runtime_before_preemption_secs = 600;
    let mut w = World::new(4, vec![lab_share, share("OWNER", Strategy::Lend, 1)]);
    w.submit("lo3", "LAB", 1, 0);
    w.step();
    w.at(1).submit("lo", "LAB", 2, 0);
    w.step();
    w.at(700).submit("b", "LAB", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.started(&plan),
        names(&["b"]),
        "b borrows OWNER's idle instance"
    );

    w.at(800);
    w.submit("j1", "LAB", 1, 5);
    w.submit("j2", "LAB", 1, 5);
    w.submit("own", "OWNER", 1, 0);
    let plan = w.step();
    // j1 takes lo's place (least work at risk: started last of the
    // unprotected ones);
    // lo's second instance goes to `own`, within its quota; j2 then takes
    // lo3's place in its share, as in-share preemption allows.
    assert_eq!(
        w.preempted(&plan),
        vec![
            ("lo".into(), InShare, "j1".into()),
            ("lo3".into(), InShare, "j2".into()),
        ]
    );
    assert!(plan.waiting_for_release.contains(&w.id("own")));
    w.exit("lo", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["j1", "own"]));
    w.exit("lo3", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["j2"]));
    assert_eq!(
        w.status("b"),
        JobStatus::Running,
        "b is protected until 1300"
    );
}

/// Point 4, the in-share sweep: after a preemption frees room, jobs the
/// sweep already passed get another try before the jobs behind them (the
/// sweep does not simply go on from where it stopped).
#[test]
fn in_share_preemption_starts_again_from_the_front_when_a_preemption_frees_room() {
    let in_share = |name: &str, e: i64| {
        let mut s = lab(name, e, -1);
        s.in_share_preemption = true;
        s
    };
    // Entitlements 2 + 2 + 1 of a fleet of 6: 1 instance unassigned.
    let mut w = World::new(
        6,
        vec![in_share("A", 2), in_share("D", 2), in_share("F", 1)],
    );
    w.submit("a_low", "A", 2, 1);
    w.submit("d_low", "D", 3, 1);
    w.submit("f_low", "F", 1, 1);
    let plan = w.step();
    assert_eq!(plan.starts.len(), 3, "D borrows the unassigned instance");
    w.at(10).submit("x", "A", 3, 7);
    w.at(20).submit("y", "D", 2, 5);
    w.at(30).submit("w", "F", 2, 5);
    let plan = w.step();
    // x cannot take a_low's place while D borrows the only lendable
    // instance; y's taking d_low's place gives it back, and x, first in
    // line, gets it before w.
    assert_eq!(
        w.preempted(&plan),
        vec![
            ("d_low".into(), InShare, "y".into()),
            ("a_low".into(), InShare, "x".into()),
        ]
    );
}

/// Point 5. Only a preemption's beneficiary holds a claim and is shown
/// `WAITING_FOR_RECLAIM`; a job fitted into room still held by stopping
/// jobs is told what holds it now, and a second pass at the same instant
/// tells every job the same.
#[test]
fn only_a_preemptions_beneficiary_is_told_it_waits_for_reclaim() {
    // Fleet 3: OWNER owns 2, 1 is unassigned; LAB borrows all 3.
    let mut w = World::new(
        3,
        vec![
            lab("LAB", 0, -1),
            share("OWNER", Strategy::Lend, 2),
            lab("OTHER", 0, -1),
        ],
    );
    w.submit("borrower", "LAB", 3, 0);
    w.step();
    w.at(10).submit("own", "OWNER", 2, 0);
    w.submit("late", "OTHER", 1, 0);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![("borrower".into(), CrossShare, "own".into())]
    );
    assert_eq!(w.wait("own"), Some(WaitReason::WaitingForRelease));
    assert!(w.c.holds_claim(w.id("own")));
    // `late` was fitted into the third instance the borrower frees, but it
    // holds no claim: it is told what holds it now (the borrower's stop).
    assert!(plan.waiting_for_release.contains(&w.id("late")));
    assert!(!w.c.holds_claim(w.id("late")));
    let told = w.wait("late");
    assert!(
        matches!(told, Some(WaitReason::NoLendableCapacity { .. })),
        "{told:?}"
    );
    let again = w.step();
    assert!(again.is_empty());
    assert_eq!(w.wait("own"), Some(WaitReason::WaitingForRelease));
    assert_eq!(w.wait("late"), told, "the same instant, the same reason");
    w.exit("borrower", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["own", "late"]));
}

/// Where a limit reduction or a smaller fleet left a lending debt, no start
/// may make it worse: a job taking the place of lower-priority jobs of its
/// share starts only once the debt allows, so its victims pay the debt down
/// (here both, 4 instances for a 2-instance job: either alone leaves the
/// debt worse). The claim is then honoured as the victims stop, with no
/// further preemption. (The property tests' minimal-preemption check counts
/// the debt; before, it called such a pass a violation.)
#[test]
fn in_share_preemption_under_a_lending_debt_pays_it_down_and_its_claim_is_honoured() {
    let mut lab_share = lab("LAB", 3, 300);
    lab_share.in_share_preemption = true;
    let mut w = World::new(
        7,
        vec![
            share("R0", Strategy::Reserve, 1),
            share("R1", Strategy::Reserve, 2),
            lab_share,
        ],
    );
    w.submit("r0", "R0", 1, 0);
    w.submit("v1", "LAB", 2, 0);
    w.submit("v2", "LAB", 2, 0);
    let plan = w.step();
    assert_eq!(plan.starts.len(), 3);
    // R0's limit drops to 0 (its running job is now borrowed) and the
    // fleet shrinks by one: 2 borrowed, 1 lendable, a debt of 1.
    let mut cfg = w.c.queue_config();
    cfg.shares[0].capacity_limits[0].max_capacity = 0;
    w.c.update_queue(cfg, w.now).expect("valid change");
    w.c.set_fleet(T, 6, w.now);

    w.at(10).submit("urgent", "LAB", 2, 3);
    let plan = w.step();
    assert_eq!(
        w.preempted(&plan),
        vec![
            ("v2".into(), InShare, "urgent".into()),
            ("v1".into(), InShare, "urgent".into()),
        ],
        "taking v2's place alone would leave the debt at 2"
    );
    assert_eq!(w.wait("urgent"), Some(WaitReason::WaitingForRelease));
    w.at(11);
    w.exit("v2", 143);
    let plan = w.step();
    assert!(
        plan.starts.is_empty() && plan.preemptions.is_empty(),
        "{plan:?}"
    );
    assert_eq!(w.wait("urgent"), Some(WaitReason::WaitingForRelease));
    w.exit("v1", 143);
    let plan = w.step();
    assert_eq!(w.started(&plan), names(&["urgent"]));
    assert_eq!(
        w.status("r0"),
        JobStatus::Running,
        "the debt is not reclaimed"
    );
}
