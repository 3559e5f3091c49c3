//! The checks of a queue's share groups (`crate::policy::groups`).

use std::collections::BTreeSet;

use crate::config::{
    valid_name, ConfigProblem, QueueConfig, MAX_BORROW_LIMIT, MAX_GROUPS_PER_QUEUE,
};

/// The problems with a queue's groups and its shares' memberships.
pub(crate) fn group_problems(queue: &QueueConfig, out: &mut Vec<ConfigProblem>) {
    if queue.groups.len() > MAX_GROUPS_PER_QUEUE {
        out.push(ConfigProblem {
            field: "shareGroups".into(),
            message: format!(
                "a queue holds at most {MAX_GROUPS_PER_QUEUE} share groups, got {}",
                queue.groups.len()
            ),
        });
    }
    let mut names = BTreeSet::new();
    for (i, g) in queue.groups.iter().enumerate() {
        let field = format!("shareGroups[{i}]");
        if !valid_name(&g.name) {
            out.push(ConfigProblem {
                field: format!("{field}.shareGroupName"),
                message: format!("{:?} is not 1-128 letters, digits, '-' or '_'", g.name),
            });
        }
        if !names.insert(g.name.as_str()) {
            out.push(ConfigProblem {
                field: format!("{field}.shareGroupName"),
                message: format!("share group {:?} is defined more than once", g.name),
            });
        }
        if g.borrow_limit != -1 && !(0..=MAX_BORROW_LIMIT).contains(&g.borrow_limit) {
            out.push(ConfigProblem {
                field: format!("{field}.borrowLimit"),
                message: format!(
                    "must be -1 (unlimited) or 0..={MAX_BORROW_LIMIT} percent, got {}",
                    g.borrow_limit
                ),
            });
        }
        if !queue
            .shares
            .iter()
            .any(|s| s.group.as_deref() == Some(g.name.as_str()))
        {
            out.push(ConfigProblem {
                field: format!("{field}.shareGroupName"),
                message: format!("share group {:?} has no share", g.name),
            });
        }
    }
    for (i, s) in queue.shares.iter().enumerate() {
        if let Some(g) = &s.group {
            if !names.contains(g.as_str()) {
                out.push(ConfigProblem {
                    field: format!("quotaShares[{i}].shareGroup"),
                    message: format!(
                        "names share group {g:?}, which the queue does not define (shareGroups)"
                    ),
                });
            }
        }
    }
}
