//! The usage ledger (`usage.rs`), case by case: own and borrowed capacity
//! and whom it was borrowed from, queued time, midnight, work recomputed,
//! classes, and that the ledger adds up to the attempts' own records.

mod common;

use common::*;
use qm_core::{Cluster, QuotaShare, Strategy, Time, Usage, UsageReport, WorkloadClass, DAY_MS};

const S: u64 = 1000;

/// Every day's rows of a share, summed over types and classes.
fn total(c: &Cluster, share: &str, as_of: Time) -> Usage {
    let mut u = Usage::default();
    for r in report(c, as_of).rows.iter().filter(|r| r.share == share) {
        u.add(&r.usage);
    }
    u
}

fn report(c: &Cluster, as_of: Time) -> UsageReport {
    c.usage_report(0, u32::MAX - 1, as_of)
}

/// Borrowed instance-milliseconds of `borrower` from `lender` (None: the
/// queue's unassigned capacity).
fn lent(c: &Cluster, borrower: &str, lender: Option<&str>, as_of: Time) -> u64 {
    report(c, as_of)
        .lending
        .iter()
        .filter(|l| l.borrower == borrower && l.lender.as_deref() == lender)
        .map(|l| l.ms)
        .sum()
}

/// What the attempts themselves say was held: (stopped or `as_of`) minus
/// scheduled, times instances, summed over every attempt of every job.
fn held_by_attempts(c: &Cluster, as_of: Time) -> u64 {
    c.jobs()
        .flat_map(|j| {
            j.attempts.iter().map(move |a| {
                a.stopped_at.unwrap_or(as_of).millis_since(a.scheduled_at) * u64::from(j.spec.count)
            })
        })
        .sum()
}

#[test]
fn a_borrowing_job_counts_its_own_capacity_and_what_it_borrowed_from_whom() {
    // A: 2 of its own, may borrow; B lends its 2.
    let mut w = World::new(4, vec![lab("A", 2, -1), share("B", Strategy::Lend, 2)]);
    w.submit("big", "A", 3, 1);
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["big"]);
    w.at(100);
    w.exit("big", 0);
    let a = total(&w.c, "A", w.now);
    assert_eq!((a.own_ms, a.borrowed_ms), (200 * S, 100 * S));
    assert_eq!(lent(&w.c, "A", Some("B"), w.now), 100 * S);
    assert_eq!(lent(&w.c, "A", None, w.now), 0);
    assert!(total(&w.c, "B", w.now).is_empty(), "B held nothing");
    // Nothing runs: nothing more is counted, however long the ledger waits.
    assert_eq!(total(&w.c, "A", Time::from_secs(5000)), a);
}

#[test]
fn capacity_no_share_is_entitled_to_is_borrowed_first() {
    // 5 instances, 3 entitled: 2 unassigned. A borrows 3: 2 of them from
    // the unassigned capacity, 1 from B's idle entitlement.
    let mut w = World::new(5, vec![lab("A", 2, -1), share("B", Strategy::Lend, 1)]);
    w.submit("big", "A", 5, 1);
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["big"]);
    let as_of = Time::from_secs(10);
    assert_eq!(lent(&w.c, "A", None, as_of), 20 * S);
    assert_eq!(lent(&w.c, "A", Some("B"), as_of), 10 * S);
    assert_eq!(total(&w.c, "A", as_of).borrowed_ms, 30 * S);
}

#[test]
fn queued_instances_count_as_waiting_until_they_start() {
    let mut w = World::new(1, vec![share("A", Strategy::Reserve, 1)]);
    w.submit("first", "A", 1, 1);
    w.submit("second", "A", 1, 1);
    w.step();
    w.at(50);
    w.exit("first", 0);
    let plan = w.step();
    assert_eq!(w.started(&plan), vec!["second"]);
    w.at(80);
    w.exit("second", 0);
    let a = total(&w.c, "A", w.now);
    assert_eq!(a.own_ms, 80 * S);
    assert_eq!(a.waiting_ms, 50 * S);
    assert_eq!(a.borrowed_ms, 0);
}

#[test]
fn usage_across_midnight_lands_in_both_days() {
    let mut w = World::new(2, vec![share("A", Strategy::Reserve, 2)]);
    w.now = Time(DAY_MS - 10 * S);
    w.submit("late", "A", 2, 1);
    w.step();
    w.now = Time(DAY_MS + 20 * S);
    w.exit("late", 0);
    let r = report(&w.c, w.now);
    let days: Vec<(u32, u64)> = r.rows.iter().map(|r| (r.day, r.usage.own_ms)).collect();
    assert_eq!(days, vec![(0, 20 * S), (1, 40 * S)]);
    // A report of day 1 alone.
    let one = w.c.usage_report(1, 1, w.now);
    assert_eq!(one.rows.len(), 1);
    assert_eq!(one.rows[0].usage.own_ms, 40 * S);
}

#[test]
fn a_reclaim_counts_the_borrowers_recomputed_work_by_cause() {
    let mut w = World::new(2, vec![lab("A", 1, -1), share("B", Strategy::Lend, 1)]);
    w.submit("borrower", "A", 2, 1);
    w.step();
    w.at(30);
    w.checkpoint("borrower", 10);
    w.at(50);
    w.submit("owner", "B", 1, 1);
    let plan = w.step();
    assert_eq!(plan.preemptions.len(), 1);
    w.at(52);
    w.exit("borrower", 143);
    let a = total(&w.c, "A", w.now);
    // Lost: from the checkpoint (30 s) to the end (52 s), two instances.
    assert_eq!(a.recomputed_cross_share_ms, 44 * S);
    assert_eq!(
        a.recomputed_ms(),
        w.c.lost_work(w.c.share_idx("A").expect("A"))
            .total()
            .recomputed_instance_ms
    );
    // Held 52 s with two instances: one own, one borrowed.
    assert_eq!((a.own_ms, a.borrowed_ms), (52 * S, 52 * S));
}

#[test]
fn classes_split_own_and_borrowed_in_the_order_that_decides_borrowing() {
    let mut a = lab("A", 2, -1);
    a.classes = vec![
        WorkloadClass::new("exploratory", 0, 99),
        WorkloadClass::new("urgent", 200, 299),
    ];
    let mut w = World::new(4, vec![a, share("B", Strategy::Lend, 2)]);
    let mut spec = w.spec("explore", "A", 2, 50);
    spec.class = Some("exploratory".into());
    w.submit_spec(spec);
    w.step();
    w.at(10);
    let mut spec = w.spec("incident", "A", 2, 200);
    spec.class = Some("urgent".into());
    w.submit_spec(spec);
    w.step();
    let as_of = Time::from_secs(30);
    let r = report(&w.c, as_of);
    let of = |class: &str| {
        r.rows
            .iter()
            .find(|r| r.class == class)
            .map(|r| (r.usage.own_ms, r.usage.borrowed_ms))
    };
    // Exploratory alone for 10 s (own), then urgent takes the entitlement
    // and exploratory is the one on borrowed capacity for 20 s.
    assert_eq!(of("exploratory"), Some((2 * 10 * S, 2 * 20 * S)));
    assert_eq!(of("urgent"), Some((2 * 20 * S, 0)));
}

#[test]
fn a_share_without_classes_counts_under_default() {
    let mut w = World::new(1, vec![share("A", Strategy::Reserve, 1)]);
    w.submit("x", "A", 1, 1);
    w.step();
    let r = report(&w.c, Time::from_secs(1));
    assert_eq!(r.rows.len(), 1);
    assert_eq!(r.rows[0].class, "default");
    assert_eq!(r.rows[0].instance_type, T);
}

#[test]
fn the_ledger_adds_up_to_the_attempts_own_records() {
    let mut w = World::new(
        4,
        vec![
            lab("A", 2, -1),
            lab("B", 1, -1),
            share("C", Strategy::Lend, 1),
        ],
    );
    for (i, share) in ["A", "B", "A", "C", "B", "A"].iter().enumerate() {
        w.at(i as u64 * 7);
        let count = if *share == "C" { 1 } else { 1 + (i as u32 % 2) };
        w.submit(&format!("j{i}"), share, count, i as u32);
        w.step();
    }
    w.at(60);
    w.lose_host("j0");
    w.step();
    w.at(75);
    for name in ["j1", "j2"] {
        if w.status(name).holds_instances() {
            w.exit(name, 0);
        }
    }
    w.step();
    let as_of = Time::from_secs(90);
    let mut used = 0;
    for share in ["A", "B", "C"] {
        used += total(&w.c, share, as_of).used_ms();
    }
    assert!(used > 0);
    assert_eq!(used, held_by_attempts(&w.c, as_of));
}

#[test]
fn a_configuration_change_counts_the_old_entitlement_up_to_it() {
    let a = share("A", Strategy::LendAndBorrow, 1);
    let mut w = World::new(2, vec![a, share("B", Strategy::Lend, 1)]);
    w.submit("two", "A", 2, 1);
    w.step();
    w.at(10);
    let mut q = w.c.queue_config();
    q.shares[0] = QuotaShare::new("A", &[(T, 2)]);
    q.shares[0].strategy = Strategy::LendAndBorrow;
    q.shares[1] = QuotaShare::new("B", &[(T, 0)]);
    q.shares[1].strategy = Strategy::Lend;
    w.c.update_queue(q, w.now).expect("valid");
    let a = total(&w.c, "A", Time::from_secs(30));
    assert_eq!((a.own_ms, a.borrowed_ms), (10 * S + 2 * 20 * S, 10 * S));
}

#[test]
fn archived_jobs_stay_in_the_ledger() {
    let mut w = World::new(1, vec![share("A", Strategy::Reserve, 1)]);
    w.submit("done", "A", 1, 1);
    w.step();
    w.at(40);
    w.exit("done", 0);
    let before = report(&w.c, w.now);
    w.c.forget(w.id("done")).expect("a finished job");
    assert!(w.c.job(w.id("done")).is_none(), "archived");
    assert_eq!(report(&w.c, w.now), before);
    assert_eq!(total(&w.c, "A", w.now).own_ms, 40 * S);
}

#[test]
fn days_older_than_the_keep_leave_the_ledger() {
    let mut w = World::new(1, vec![share("A", Strategy::Reserve, 1)]);
    w.submit("old", "A", 1, 1);
    w.step();
    w.at(10);
    w.exit("old", 0);
    assert_eq!(report(&w.c, w.now).rows.len(), 1);
    // A new day, USAGE_KEEP_DAYS later: day 0 is dropped.
    w.now = Time((u64::from(qm_core::USAGE_KEEP_DAYS) + 1) * DAY_MS);
    w.submit("new", "A", 1, 1);
    let r = report(&w.c, w.now);
    assert!(r.rows.iter().all(|r| r.day > 0), "{r:?}");
}
