//! `qm governance`: the policy-stability record, as a table, JSON or CSV.

use qm_service::client::Client;
use qm_wire::messages::{ByPrincipal, GetPolicyStabilityRecord, PolicyStabilityRecord, ShareWeek};

use super::failure::Failure;
use super::output::{csv_line, print_json};

fn by(list: &[ByPrincipal]) -> String {
    list.iter()
        .map(|b| format!("{}:{}", b.principal, b.count))
        .collect::<Vec<_>>()
        .join(" ")
}

fn preemptions(w: &ShareWeek) -> String {
    w.preemptions
        .iter()
        .map(|p| format!("{}/{}:{}", p.kind, p.workload_class, p.count))
        .collect::<Vec<_>>()
        .join(" ")
}

fn total(list: &[ByPrincipal]) -> u32 {
    list.iter().map(|b| b.count).sum()
}

const COLUMNS: [&str; 13] = [
    "week",
    "quotaShareName",
    "priorityChanges",
    "priorityChangesBy",
    "terminations",
    "terminationsBy",
    "configurationChanges",
    "preemptions",
    "jobsPreemptedMoreThanTwice",
    "reclaimWaitP50Seconds",
    "reclaimWaitP90Seconds",
    "drillsPassedFailed",
    "borrowRefusalsMissingProof",
];

fn row(w: &ShareWeek) -> Vec<String> {
    let wait = |f: fn(&qm_wire::messages::WaitPercentiles) -> f64| {
        w.reclaim_wait_seconds
            .as_ref()
            .map_or(String::new(), |p| format!("{:.1}", f(p)))
    };
    vec![
        w.week.clone(),
        w.quota_share_name.clone(),
        total(&w.priority_changes).to_string(),
        by(&w.priority_changes),
        total(&w.terminations).to_string(),
        by(&w.terminations),
        total(&w.configuration_changes).to_string(),
        preemptions(w),
        w.jobs_preempted_more_than_twice.to_string(),
        wait(|p| p.p50),
        wait(|p| p.p90),
        format!("{}/{}", w.drills_passed, w.drills_failed),
        w.borrow_refusals_missing_proof.to_string(),
    ]
}

/// `qm governance --queue Q [--share S] [--since T]`.
pub async fn governance(
    c: &Client,
    queue: &str,
    share: Option<String>,
    since: Option<u64>,
    json: bool,
    csv: bool,
) -> Result<(), Failure> {
    let r: PolicyStabilityRecord = c
        .get_policy_stability_record(&GetPolicyStabilityRecord {
            job_queue: queue.into(),
            quota_share_name: share,
            since,
        })
        .await?;
    if json {
        print_json(&r);
        return Ok(());
    }
    if csv {
        println!("{}", COLUMNS.join(","));
        for w in &r.weeks {
            println!("{}", csv_line(&row(w)));
        }
        return Ok(());
    }
    if r.weeks.is_empty() {
        println!("nothing recorded for {queue} yet (of the shares you may read)");
        return Ok(());
    }
    for w in &r.weeks {
        println!("week of {} / {}", w.week, w.quota_share_name);
        println!(
            "  priority changes  {} {}",
            total(&w.priority_changes),
            by(&w.priority_changes)
        );
        println!(
            "  terminations      {} {}",
            total(&w.terminations),
            by(&w.terminations)
        );
        println!(
            "  config changes    {} {}",
            total(&w.configuration_changes),
            by(&w.configuration_changes)
        );
        println!("  preemptions       {}", preemptions(w));
        println!("  preempted >2x     {}", w.jobs_preempted_more_than_twice);
        match &w.reclaim_wait_seconds {
            Some(p) => println!(
                "  reclaim waits     {} (p50 {:.1} s, p90 {:.1} s, p99 {:.1} s, max {:.1} s)",
                p.count, p.p50, p.p90, p.p99, p.max
            ),
            None => println!("  reclaim waits     -"),
        }
        println!(
            "  drills            {} passed, {} failed",
            w.drills_passed, w.drills_failed
        );
        println!(
            "  no resume proof   {} job(s) could not borrow",
            w.borrow_refusals_missing_proof
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_fields_are_quoted_only_when_they_must_be() {
        assert_eq!(csv_line(&["alice:2"]), "alice:2");
        assert_eq!(csv_line(&["a,b"]), "\"a,b\"");
        assert_eq!(csv_line(&["say \"hi\""]), "\"say \"\"hi\"\"\"");
        assert_eq!(
            csv_line(&["a", "", "b,c"]),
            "a,,\"b,c\"",
            "an empty cell stays empty"
        );
        let w = ShareWeek {
            week: "2026-11-30".into(),
            quota_share_name: "QS1".into(),
            ..Default::default()
        };
        assert_eq!(row(&w).len(), COLUMNS.len());
    }
}
