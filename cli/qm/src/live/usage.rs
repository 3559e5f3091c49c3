//! `qm usage`: the usage ledger, as a table, JSON or CSV.

use qm_service::client::Client;
use qm_wire::messages::{GetUsage, UsageReport, UsageRow};
use qm_wire::subjects::Operation;

use super::governance::field;
use super::{print_json, Failure};

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

const COLUMNS: [&str; 13] = [
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
        .call(
            Operation::GetUsage,
            &GetUsage {
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
            },
        )
        .await?;
    if json {
        print_json(&r);
        return Ok(());
    }
    if csv {
        println!("{}", COLUMNS.join(","));
        for row in &r.rows {
            let cells: Vec<String> = csv_row(row).iter().map(|c| field(c)).collect();
            println!("{}", cells.join(","));
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
        return Ok(());
    }
    println!(
        "{:<11} {:<14} {:<16} {:<12} {:>9} {:>9} {:>9} {:>11} {:>6}",
        "PERIOD", "SHARE", "TYPE", "CLASS", "OWN", "BORROWED", "WAITING", "RECOMPUTED", "DRILLS"
    );
    for row in &r.rows {
        println!(
            "{:<11} {:<14} {:<16} {:<12} {:>9} {:>9} {:>9} {:>11} {:>6}",
            row.period,
            row.quota_share_name,
            row.instance_type,
            row.workload_class,
            hours(row.own_instance_seconds),
            hours(row.borrowed_instance_seconds),
            hours(row.waiting_instance_seconds),
            hours(recomputed(row)),
            row.drills
        );
    }
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
    Ok(())
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
    fn a_csv_row_has_every_column() {
        let r = UsageRow {
            period: "2026-11-30".into(),
            quota_share_name: "QS1".into(),
            ..Default::default()
        };
        assert_eq!(csv_row(&r).len(), COLUMNS.len());
    }
}
