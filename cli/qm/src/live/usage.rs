//! `qm usage`: the usage ledger, as a table, JSON or CSV.

use qm_service::client::Client;
use qm_wire::messages::{BudgetBurnDown, GetUsage, UsageReport, UsageRow};

use super::failure::Failure;
use super::output::{csv_line, print_json};

/// One row per day or per week.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum UsagePeriod {
    Day,
    Week,
}

/// `--from` and `--to` are days (`YYYY-MM-DD`, UTC): checked before
/// anything is contacted, by the rule the scheduler checks them with.
pub fn check_usage_days(from: Option<&str>, to: Option<&str>) -> Result<(), Failure> {
    for (flag, value) in [("--from", from), ("--to", to)] {
        if let Some(v) = value {
            qm_wire::dates::day_of_utc_date(v).map_err(|e| Failure(format!("{flag}: {e}"), 2))?;
        }
    }
    Ok(())
}

fn hours(seconds: f64) -> String {
    format!("{:.2}", seconds / 3600.0)
}

fn recomputed(r: &UsageRow) -> f64 {
    r.recomputed.iter().map(|c| c.instance_seconds).sum()
}

const COLUMNS: [&str; 15] = [
    "period",
    "quotaShareName",
    "instanceType",
    "workloadClass",
    "ownInstanceSeconds",
    "borrowedInstanceSeconds",
    "waitingInstanceSeconds",
    "recomputedCrossShareSeconds",
    "recomputedInShareSeconds",
    "recomputedLimitReducedSeconds",
    "recomputedHostLostSeconds",
    "recomputedBudgetSeconds",
    "recomputedRebalanceSeconds",
    "drills",
    "drillInstanceSeconds",
];

fn cause(r: &UsageRow, name: &str) -> f64 {
    r.recomputed
        .iter()
        .filter(|c| c.cause == name)
        .map(|c| c.instance_seconds)
        .sum()
}

fn csv_row(r: &UsageRow) -> Vec<String> {
    vec![
        r.period.clone(),
        r.quota_share_name.clone(),
        r.instance_type.clone(),
        r.workload_class.clone(),
        format!("{:.3}", r.own_instance_seconds),
        format!("{:.3}", r.borrowed_instance_seconds),
        format!("{:.3}", r.waiting_instance_seconds),
        format!("{:.3}", cause(r, "PREEMPTED_CROSS_SHARE")),
        format!("{:.3}", cause(r, "PREEMPTED_IN_SHARE")),
        format!("{:.3}", cause(r, "PREEMPTED_LIMIT_REDUCED")),
        format!("{:.3}", cause(r, "HOST_LOST")),
        format!("{:.3}", cause(r, "PREEMPTED_BUDGET")),
        format!("{:.3}", cause(r, "PREEMPTED_REBALANCE")),
        r.drills.to_string(),
        format!("{:.3}", r.drill_instance_seconds),
    ]
}

/// `qm usage --queue Q [--share S] [--from D] [--to D] [--by day|week]`.
pub async fn show_usage(
    c: &Client,
    queue: &str,
    share: Option<String>,
    (from, to): (Option<String>, Option<String>),
    by: UsagePeriod,
    (json, csv): (bool, bool),
) -> Result<(), Failure> {
    let r: UsageReport = c
        .get_usage(&GetUsage {
            job_queue: queue.into(),
            quota_share_name: share,
            from,
            to,
            by: Some(
                match by {
                    UsagePeriod::Day => "DAY",
                    UsagePeriod::Week => "WEEK",
                }
                .into(),
            ),
        })
        .await?;
    if json {
        print_json(&r);
        return Ok(());
    }
    if csv {
        println!("{}", COLUMNS.join(","));
        for row in &r.rows {
            println!("{}", csv_line(&csv_row(row)));
        }
        return Ok(());
    }
    println!(
        "usage of {queue}, {} to {} by {} (instance-hours, UTC days)",
        r.from,
        r.to,
        r.by.to_ascii_lowercase()
    );
    if r.rows.is_empty() {
        println!("nothing used or queued in these days (of the shares you may read)");
        print!("{}", render_budgets(&r.budgets));
        return Ok(());
    }
    let mut t = super::output::table(
        &[
            "PERIOD",
            "SHARE",
            "TYPE",
            "CLASS",
            "OWN",
            "BORROWED",
            "WAITING",
            "RECOMPUTED",
            "DRILLS",
        ],
        &[4, 5, 6, 7, 8],
    );
    for row in &r.rows {
        t.add_row(vec![
            row.period.clone(),
            row.quota_share_name.clone(),
            row.instance_type.clone(),
            row.workload_class.clone(),
            hours(row.own_instance_seconds),
            hours(row.borrowed_instance_seconds),
            hours(row.waiting_instance_seconds),
            hours(recomputed(row)),
            row.drills.to_string(),
        ]);
    }
    println!("{}", t.trim_fmt());
    if !r.lending.is_empty() {
        println!();
        println!("borrowed capacity, by lender (instance-hours)");
        for l in &r.lending {
            println!(
                "  {}  {:<16} {} borrowed {} from {}",
                l.period,
                l.instance_type,
                l.borrower,
                hours(l.instance_seconds),
                l.lender
                    .as_deref()
                    .unwrap_or("the queue's unassigned capacity")
            );
        }
    }
    print!("{}", render_budgets(&r.budgets));
    Ok(())
}

/// The borrowing budgets' burn-down (`qm usage`, `qm snapshot`): empty
/// when no share shown has a budget.
pub fn render_budgets(budgets: &[BudgetBurnDown]) -> String {
    if budgets.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nborrowing budgets (instance-hours)\n");
    for b in budgets {
        let per = match (b.budget.window_hours, b.budget.half_life_hours) {
            (Some(h), _) => format!("per {h} h"),
            (_, Some(h)) => format!("decayed, {h} h half-life"),
            _ => String::new(),
        };
        let total = b.budget.instance_hours;
        let cells = 20usize;
        let used = ((b.used_instance_hours / total.max(1e-9)) * cells as f64)
            .round()
            .clamp(0.0, cells as f64) as usize;
        out.push_str(&format!(
            "  {:<14} [{}{}] {:.2} used, {:.2} committed, {:.2} left of {} {per}; {}\n",
            b.quota_share_name,
            "#".repeat(used),
            ".".repeat(cells - used),
            b.used_instance_hours,
            b.committed_instance_hours,
            b.left_instance_hours,
            b.budget.instance_hours,
            b.on_budget_exhausted,
        ));
        let mut when = Vec::new();
        if b.borrowing_instances > 0 {
            when.push(format!(
                "borrowing {} instance(s) now",
                b.borrowing_instances
            ));
        }
        if let Some(at) = b.exhausts_at {
            when.push(format!(
                "spent at {} at this rate",
                super::output::rfc3339(at)
            ));
        } else if b.left_instance_hours <= 0.0 {
            when.push("spent: nothing borrows until it refills".into());
        }
        if let Some(at) = b.refills_at {
            when.push(format!(
                "the next hour leaves the window at {}",
                super::output::rfc3339(at)
            ));
        }
        if !when.is_empty() {
            out.push_str(&format!("  {:<14} {}\n", "", when.join("; ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_are_checked_before_anything_is_contacted() {
        assert!(check_usage_days(Some("2026-11-01"), None).is_ok());
        let e = check_usage_days(None, Some("2026-11-1")).expect_err("short");
        assert!(e.0.contains("--to: \"2026-11-1\" is not a date"), "{}", e.0);
        assert!(check_usage_days(Some("yesterday"), None).is_err());
        let e = check_usage_days(Some("2026-02-30"), None).expect_err("no such day");
        assert!(e.0.contains("not a day of the calendar"), "{}", e.0);
    }

    #[test]
    fn a_budget_shows_what_is_used_left_and_when_it_runs_out() {
        let b = BudgetBurnDown {
            quota_share_name: "QS1".into(),
            budget: qm_wire::messages::BorrowBudget {
                instance_hours: 10.0,
                window_hours: Some(24),
                half_life_hours: None,
            },
            on_budget_exhausted: "CHECKPOINT_AND_STOP".into(),
            used_instance_hours: 5.0,
            committed_instance_hours: 1.0,
            left_instance_hours: 5.0,
            borrowing_instances: 2,
            exhausts_at: Some(1_796_547_600_000),
            refills_at: None,
        };
        let text = render_budgets(&[b]);
        assert!(text.contains("[##########..........] 5.00 used, 1.00 committed, 5.00 left of 10 per 24 h; CHECKPOINT_AND_STOP"), "{text}");
        assert!(
            text.contains("borrowing 2 instance(s) now; spent at 2026-12-06T09:00:00.000Z"),
            "{text}"
        );
        assert_eq!(render_budgets(&[]), "");
    }

    #[test]
    fn a_csv_row_has_every_column() {
        let r = UsageRow {
            period: "2026-11-30".into(),
            quota_share_name: "QS1".into(),
            ..Default::default()
        };
        assert_eq!(csv_row(&r).len(), COLUMNS.len());
    }
}
