//! Validation: whether a configuration, a share or a priority may be
//! stored, every problem named by its field. Above the plain types it
//! checks, below the state that refuses what fails (`tests/layers.rs`).

use std::collections::BTreeSet;

use crate::config::*;

use crate::policy::{budgets, classes, groups};

/// The problem with a `schedulingPriority`, if any (submits and updates).
pub fn priority_problem(priority: u32) -> Option<ConfigProblem> {
    (priority > MAX_PRIORITY).then(|| ConfigProblem {
        field: "schedulingPriority".into(),
        message: format!("must be 0..={MAX_PRIORITY}, got {priority}"),
    })
}

fn name_problem(field: String, kind: &str, name: &str) -> Option<ConfigProblem> {
    if valid_name(name) {
        return None;
    }
    Some(ConfigProblem {
        field,
        message: format!(
            "{kind} {name:?} must be 1-{MAX_NAME_LEN} characters of letters, digits, '-' and '_'"
        ),
    })
}

fn limit_problems(field: &str, limits: &[CapacityLimit], out: &mut Vec<ConfigProblem>) {
    let mut seen = BTreeSet::new();
    for (i, limit) in limits.iter().enumerate() {
        if limit.capacity_unit.trim().is_empty() {
            out.push(ConfigProblem {
                field: format!("{field}[{i}].capacityUnit"),
                message: "must name an instance type, e.g. ml.g5.xlarge".into(),
            });
        }
        if limit.max_capacity < 0 {
            out.push(ConfigProblem {
                field: format!("{field}[{i}].maxCapacity"),
                message: format!("must be >= 0, got {}", limit.max_capacity),
            });
        }
        if limit.max_capacity > i64::from(u32::MAX) {
            out.push(ConfigProblem {
                field: format!("{field}[{i}].maxCapacity"),
                message: format!("must be <= {}, got {}", u32::MAX, limit.max_capacity),
            });
        }
        if !seen.insert(limit.capacity_unit.as_str()) {
            out.push(ConfigProblem {
                field: format!("{field}[{i}].capacityUnit"),
                message: format!(
                    "instance type {:?} is listed more than once",
                    limit.capacity_unit
                ),
            });
        }
    }
}

/// Validates one share on its own; `field` is its path prefix.
pub fn share_problems(field: &str, share: &QuotaShare) -> Vec<ConfigProblem> {
    let mut out = Vec::new();
    out.extend(name_problem(
        format!("{field}.quotaShareName"),
        "quota share name",
        &share.name,
    ));
    let limits_field = format!("{field}.capacityLimits");
    if share.capacity_limits.is_empty() || share.capacity_limits.len() > MAX_LIMITS_PER_SHARE {
        out.push(ConfigProblem {
            field: limits_field.clone(),
            message: format!(
                "must hold 1 to {MAX_LIMITS_PER_SHARE} entries, got {}",
                share.capacity_limits.len()
            ),
        });
    }
    limit_problems(&limits_field, &share.capacity_limits, &mut out);
    let borrow_field = format!("{field}.resourceSharingConfiguration.borrowLimit");
    if share.borrow_limit != -1 {
        if share.strategy != Strategy::LendAndBorrow {
            out.push(ConfigProblem {
                field: borrow_field,
                message: format!(
                    "is only valid with strategy LEND_AND_BORROW (strategy is {}); remove it or change the strategy",
                    share.strategy.as_str()
                ),
            });
        } else if !(0..=MAX_BORROW_LIMIT).contains(&share.borrow_limit) {
            out.push(ConfigProblem {
                field: borrow_field,
                message: format!(
                    "must be -1 (unlimited) or 0..={MAX_BORROW_LIMIT} percent, got {}",
                    share.borrow_limit
                ),
            });
        }
    }
    classes::validate::class_problems(field, share, &mut out);
    budgets::validate::budget_problems(field, share, &mut out);
    if !(1..=MAX_FAIR_SHARE_WEIGHT).contains(&share.fair_share_weight) {
        out.push(ConfigProblem {
            field: format!("{field}.fairShareWeight"),
            message: format!(
                "must be 1..={MAX_FAIR_SHARE_WEIGHT}, got {}",
                share.fair_share_weight
            ),
        });
    }
    out
}

/// Validates a whole queue configuration and returns every problem found.
pub fn validate_queue(queue: &QueueConfig) -> Result<(), ConfigError> {
    let mut out = Vec::new();
    out.extend(name_problem(
        "jobQueueName".into(),
        "job queue name",
        &queue.name,
    ));
    // A queue may have no share yet (as in AWS Batch: a queue is created,
    // then its shares); it then accepts no jobs.
    if queue.shares.len() > MAX_SHARES_PER_QUEUE {
        out.push(ConfigProblem {
            field: "quotaShares".into(),
            message: format!(
                "a queue holds at most {MAX_SHARES_PER_QUEUE} quota shares, got {}",
                queue.shares.len()
            ),
        });
    }
    limit_problems("capacityLimits", &queue.capacity_limits, &mut out);
    if let Some(env) = &queue.service_environment {
        out.extend(name_problem(
            "serviceEnvironment".into(),
            "service environment name",
            env,
        ));
    }
    if queue.priority > MAX_QUEUE_PRIORITY {
        out.push(ConfigProblem {
            field: "priority".into(),
            message: format!("must be 0..={MAX_QUEUE_PRIORITY}, got {}", queue.priority),
        });
    }
    if let Some(secs) = queue.fair_share_rebalance_secs {
        if queue.idle_assignment != IdleAssignment::FairShare {
            out.push(ConfigProblem {
                field: "fairShareRebalanceSeconds".into(),
                message:
                    "rebalances borrowers only under idleResourceAssignmentStrategy FAIR_SHARE"
                        .into(),
            });
        } else if !(60..=MAX_REBALANCE_SECS).contains(&secs) {
            out.push(ConfigProblem {
                field: "fairShareRebalanceSeconds".into(),
                message: format!("must be 60..={MAX_REBALANCE_SECS} seconds, got {secs}"),
            });
        }
    }
    if !(1..=crate::policy::budgets::MAX_BUDGET_HOURS).contains(&queue.fair_share_half_life_hours) {
        out.push(ConfigProblem {
            field: "fairShareHalfLifeHours".into(),
            message: format!(
                "must be 1..={} hours, got {}",
                crate::policy::budgets::MAX_BUDGET_HOURS,
                queue.fair_share_half_life_hours
            ),
        });
    }
    groups::validate::group_problems(queue, &mut out);
    let mut names = BTreeSet::new();
    for (i, share) in queue.shares.iter().enumerate() {
        let field = format!("quotaShares[{i}]");
        out.extend(share_problems(&field, share));
        if !names.insert(share.name.as_str()) {
            out.push(ConfigProblem {
                field: format!("{field}.quotaShareName"),
                message: format!("quota share {:?} is defined more than once", share.name),
            });
        }
    }
    if out.is_empty() {
        Ok(())
    } else {
        Err(ConfigError(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three_shares() -> QueueConfig {
        let mut s1 = QuotaShare::new("QS1", &[("ml.g5.xlarge", 1)]);
        s1.strategy = Strategy::LendAndBorrow;
        s1.borrow_limit = 200;
        let mut s2 = QuotaShare::new("QS2", &[("ml.g5.xlarge", 1)]);
        s2.strategy = Strategy::Lend;
        let s3 = QuotaShare::new("QS3", &[("ml.g5.xlarge", 1)]);
        QueueConfig::new("training", vec![s1, s2, s3])
    }

    #[test]
    fn a_valid_queue_passes() {
        assert_eq!(validate_queue(&three_shares()), Ok(()));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let mut queue = three_shares();
        queue.shares[0].capacity_limits[0].max_capacity = -1;
        queue.shares[1].borrow_limit = 50; // LEND may not set a borrow limit
        queue.shares[2].name = "bad name!".into();
        let duplicate = queue.shares[2].capacity_limits[0].clone();
        queue.shares[2].capacity_limits.push(duplicate);
        let err = validate_queue(&queue).expect_err("four problems");
        let fields: Vec<_> = err.0.iter().map(|p| p.field.as_str()).collect();
        assert_eq!(
            fields,
            vec![
                "quotaShares[0].capacityLimits[0].maxCapacity",
                "quotaShares[1].resourceSharingConfiguration.borrowLimit",
                "quotaShares[2].quotaShareName",
                "quotaShares[2].capacityLimits[1].capacityUnit",
            ]
        );
        assert!(err.to_string().contains("4 problems"), "{err}");
    }

    #[test]
    fn share_and_limit_counts_are_bounded() {
        let mut queue = three_shares();
        queue.shares = (0..21)
            .map(|i| QuotaShare::new(format!("S{i}"), &[("t", 1)]))
            .collect();
        queue.shares[0].capacity_limits = (0..6)
            .map(|i| CapacityLimit {
                capacity_unit: format!("t{i}"),
                max_capacity: 1,
            })
            .collect();
        let err = validate_queue(&queue).expect_err("too many");
        assert_eq!(err.0.len(), 2, "{err}");
    }

    #[test]
    fn duplicate_share_names_and_borrow_limit_range() {
        let mut queue = three_shares();
        queue.shares[1].name = "QS1".into();
        queue.shares[0].borrow_limit = 10_001;
        let err = validate_queue(&queue).expect_err("two problems");
        assert_eq!(err.0.len(), 2, "{err}");
    }

    #[test]
    fn max_holding_follows_the_borrow_limit() {
        let queue = three_shares();
        assert_eq!(queue.shares[0].max_holding(1), 3);
        assert_eq!(queue.shares[1].max_holding(1), 1);
        let mut unlimited = queue.shares[0].clone();
        unlimited.borrow_limit = -1;
        assert_eq!(unlimited.max_holding(1), u32::MAX);
        unlimited.borrow_limit = 50;
        assert_eq!(unlimited.max_holding(3), 4, "4.5 rounds down");
    }
}
