//! `GetUsage`: the core's usage ledger (`qm_core::usage`) read back by day
//! or week, with dates, the shares the caller may read only.

use std::collections::BTreeMap;

use qm_core::{Time, Usage, DAY_MS, USAGE_KEEP_DAYS};
use qm_wire::messages::{
    ApiError, BorrowBudget, BudgetBurnDown, ErrorCode, GetUsage, LendingRow, Problem,
    RecomputedUsage, UsageReport, UsageRow,
};

use qm_wire::dates::day_of_utc_date as day_of_date;

use super::governance::{date, week_start};
use super::State;

/// The most days one report spans (a little over the ledger's keep).
pub const MAX_REPORT_DAYS: u32 = USAGE_KEEP_DAYS + 7;

fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

fn invalid(field: &str, message: String) -> ApiError {
    qm_service::api::invalid(
        format!("invalid usage request: {field}: {message}"),
        vec![Problem {
            field: field.into(),
            message,
        }],
    )
}

impl State {
    /// The usage of queue `g.job_queue` over the days asked for, up to
    /// `now`, for the shares `may_read` allows (`g.quota_share_name` only,
    /// if given). Lending rows are shown when the caller may read their
    /// borrower or their lender.
    pub fn usage(
        &self,
        g: &GetUsage,
        may_read: &dyn Fn(&str) -> bool,
        now: u64,
    ) -> Result<UsageReport, ApiError> {
        let weekly = match g.by.as_deref().map(str::to_ascii_uppercase).as_deref() {
            None | Some("DAY") => false,
            Some("WEEK") => true,
            Some(other) => return Err(invalid("by", format!("{other:?} is neither DAY nor WEEK"))),
        };
        let today = (now / DAY_MS) as u32;
        let to = match &g.to {
            Some(t) => day_of_date(t).map_err(|e| invalid("to", e))?,
            None => today,
        };
        let from = match &g.from {
            Some(f) => day_of_date(f).map_err(|e| invalid("from", e))?,
            None => to.saturating_sub(6),
        };
        if from > to {
            return Err(invalid(
                "from",
                format!("{} is after to ({})", date_of(from), date_of(to)),
            ));
        }
        if to - from >= MAX_REPORT_DAYS {
            return Err(invalid(
                "from",
                format!(
                    "a report spans at most {MAX_REPORT_DAYS} days (the ledger keeps {USAGE_KEEP_DAYS}); asked for {}",
                    to - from + 1
                ),
            ));
        }
        let Some(qs) = self.queues.get(&g.job_queue) else {
            return Err(qm_service::api::error(
                ErrorCode::NotFound,
                format!("job queue {:?} not found", g.job_queue),
            ));
        };
        let wanted = |share: &str| {
            may_read(share) && g.quota_share_name.as_deref().is_none_or(|s| s == share)
        };
        let report = qs.cluster.usage_report(from, to, Time(now));
        let period = |day: u32| {
            let start = u64::from(day) * DAY_MS;
            if weekly {
                week_start(start)
            } else {
                start
            }
        };
        let mut rows: BTreeMap<(u64, String, String, String), Usage> = BTreeMap::new();
        for r in report.rows.iter().filter(|r| wanted(&r.share)) {
            rows.entry((
                period(r.day),
                r.share.clone(),
                r.instance_type.clone(),
                r.class.clone(),
            ))
            .or_default()
            .add(&r.usage);
        }
        let mut lending: BTreeMap<(u64, String, String, Option<String>), u64> = BTreeMap::new();
        for l in report
            .lending
            .iter()
            .filter(|l| wanted(&l.borrower) || l.lender.as_deref().is_some_and(&wanted))
        {
            *lending
                .entry((
                    period(l.day),
                    l.instance_type.clone(),
                    l.borrower.clone(),
                    l.lender.clone(),
                ))
                .or_default() += l.ms;
        }
        Ok(UsageReport {
            job_queue: g.job_queue.clone(),
            from: date_of(from),
            to: date_of(to),
            by: if weekly { "WEEK" } else { "DAY" }.into(),
            as_of: now,
            rows: rows
                .into_iter()
                .map(|((start, share, instance_type, class), u)| UsageRow {
                    period: date(start),
                    quota_share_name: share,
                    instance_type,
                    workload_class: class,
                    own_instance_seconds: seconds(u.own_ms),
                    borrowed_instance_seconds: seconds(u.borrowed_ms),
                    waiting_instance_seconds: seconds(u.waiting_ms),
                    recomputed: u
                        .recomputed_by_cause()
                        .into_iter()
                        .filter(|(_, ms)| *ms > 0)
                        .map(|(cause, ms)| RecomputedUsage {
                            cause: cause.as_str().to_string(),
                            instance_seconds: seconds(ms),
                        })
                        .collect(),
                    drill_instance_seconds: seconds(u.drill_ms),
                    drills: u.drills,
                })
                .collect(),
            lending: lending
                .into_iter()
                .map(
                    |((start, instance_type, borrower, lender), ms)| LendingRow {
                        period: date(start),
                        instance_type,
                        borrower,
                        lender,
                        instance_seconds: seconds(ms),
                    },
                )
                .collect(),
            budgets: qs
                .cluster
                .share_indices()
                .filter(|s| wanted(&qs.cluster.share_config(*s).name))
                .filter_map(|s| burn_down(&qs.cluster, s, now))
                .collect(),
        })
    }
}

/// Share `s`'s borrowing budget at `now`, if it has one.
pub fn burn_down(c: &qm_core::Cluster, s: qm_core::ShareIdx, now: u64) -> Option<BudgetBurnDown> {
    let b = c.budget_status(s, Time(now))?;
    let hours = |ms: u64| ms as f64 / qm_core::budget::HOUR_MS as f64;
    let (window_hours, half_life_hours) = match b.budget.window {
        qm_core::BudgetWindow::Rolling { hours } => (Some(hours), None),
        qm_core::BudgetWindow::HalfLife { hours } => (None, Some(hours)),
    };
    Some(BudgetBurnDown {
        quota_share_name: c.share_config(s).name.clone(),
        budget: BorrowBudget {
            instance_hours: b.budget.instance_hours(),
            window_hours,
            half_life_hours,
        },
        on_budget_exhausted: b.on_exhausted.as_str().into(),
        used_instance_hours: hours(b.used_ms),
        committed_instance_hours: hours(b.committed_ms),
        left_instance_hours: hours(b.left_ms()),
        borrowing_instances: b.borrowing,
        exhausts_at: b.exhausts_at.map(|t| t.0),
        refills_at: b.refills_at.map(|t| t.0),
    })
}

fn date_of(day: u32) -> String {
    date(u64::from(day) * DAY_MS)
}
