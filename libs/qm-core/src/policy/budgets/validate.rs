//! The checks of a share's borrowing budget (`crate::policy::budgets`).

use crate::config::ConfigProblem;
use crate::policy::budgets::*;

/// The problems with a share's budget settings (`field` is the share's).
pub(crate) fn budget_problems(
    field: &str,
    share: &crate::config::QuotaShare,
    out: &mut Vec<ConfigProblem>,
) {
    let Some(b) = &share.borrow_budget else {
        if share.on_budget_exhausted != OnBudgetExhausted::Finish {
            out.push(ConfigProblem {
                field: format!("{field}.onBudgetExhausted"),
                message: "has no effect without a borrowBudget".into(),
            });
        }
        return;
    };
    if share.strategy != crate::config::Strategy::LendAndBorrow {
        out.push(ConfigProblem {
            field: format!("{field}.borrowBudget"),
            message: format!(
                "only a LEND_AND_BORROW share borrows; this one is {}",
                share.strategy.as_str()
            ),
        });
    }
    if b.instance_seconds == 0 || b.instance_seconds > MAX_BUDGET_INSTANCE_HOURS * 3600 {
        out.push(ConfigProblem {
            field: format!("{field}.borrowBudget.instanceHours"),
            message: format!(
                "must be at least one instance-second and at most {MAX_BUDGET_INSTANCE_HOURS}, got {} (a share that may not borrow at all is LEND or RESERVE)",
                b.instance_hours()
            ),
        });
    }
    let (name, hours) = match b.window {
        BudgetWindow::Rolling { hours } => ("windowHours", hours),
        BudgetWindow::HalfLife { hours } => ("halfLifeHours", hours),
    };
    if hours == 0 || hours > MAX_BUDGET_HOURS {
        out.push(ConfigProblem {
            field: format!("{field}.borrowBudget.{name}"),
            message: format!("must be 1..={MAX_BUDGET_HOURS} hours, got {hours}"),
        });
    }
}
