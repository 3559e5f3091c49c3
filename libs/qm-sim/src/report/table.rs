//! The report for a person: the text `qm simulate` prints.

use std::fmt::Write as _;

use super::Report;

impl Report {
    /// The report for a person: a compact timeline (one line per job and
    /// moment, chained states), then jobs, shares and the summary.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "Timeline of queue {}", self.job_queue_name);
        // One line per job and moment: its states chained, the last reason.
        let mut i = 0;
        while i < self.transitions.len() {
            let t = self.transitions[i].t;
            let mut end = i;
            while end < self.transitions.len() && self.transitions[end].t == t {
                end += 1;
            }
            let block = &self.transitions[i..end];
            let mut seen: Vec<&str> = Vec::new();
            for tr in block {
                if !seen.contains(&tr.job_name.as_str()) {
                    seen.push(&tr.job_name);
                }
            }
            for job in seen {
                let mut chain: Vec<&str> = Vec::new();
                let mut reasons: Vec<&str> = Vec::new();
                for tr in block.iter().filter(|tr| tr.job_name == job) {
                    if chain.last() != Some(&tr.from.as_str()) {
                        chain.push(&tr.from);
                    }
                    if chain.last() != Some(&tr.to.as_str()) {
                        chain.push(&tr.to);
                    }
                    if reasons.last() != Some(&tr.status_reason.as_str()) {
                        reasons.push(&tr.status_reason);
                    }
                }
                if reasons.len() > 1 {
                    reasons.retain(|r| !r.starts_with("QUEUED:"));
                }
                let _ = writeln!(
                    out,
                    "  t={:>7.1}s  {:<16} {:<44} {}",
                    t,
                    job,
                    chain.join(" -> "),
                    reasons.join(" | ")
                );
            }
            i = end;
        }
        if !self.preemptions.is_empty() {
            let _ = writeln!(out, "\nPreemptions");
            for p in &self.preemptions {
                let _ = writeln!(
                    out,
                    "  t={:>7.1}s  {:<16} {:<14} for {}",
                    p.t, p.job_name, p.kind, p.for_job_name
                );
            }
        }
        if !self.jobs.is_empty() {
            let _ = writeln!(out, "\nJobs");
            let _ = writeln!(
                out,
                "  {:<16} {:<10} {:>4} {:<10} {:>8} {:>8} {:>8} {:>10} {:>10}  status reason",
                "job",
                "share",
                "prio",
                "status",
                "wait s",
                "done s",
                "attempts",
                "preempted",
                "recomp. s"
            );
            for j in &self.jobs {
                let _ = writeln!(
                    out,
                    "  {:<16} {:<10} {:>4} {:<10} {:>8} {:>8} {:>8} {:>10} {:>10.0}  {}",
                    j.job_name,
                    j.quota_share_name,
                    j.scheduling_priority,
                    j.status,
                    fmt_opt(j.wait_seconds),
                    fmt_opt(j.completion_seconds),
                    j.attempts,
                    j.preempted_attempt_count,
                    j.recomputed_seconds,
                    j.status_reason
                );
            }
        }
        let _ = writeln!(out, "\nShares (instance-seconds)");
        let _ = writeln!(
            out,
            "  {:<10} {:<16} {:>5} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}",
            "share", "type", "max", "entitled", "used", "borrowed", "lent", "useful", "recomputed"
        );
        for s in &self.shares {
            let _ = writeln!(
                out,
                "  {:<10} {:<16} {:>5} {:>12.0} {:>12.0} {:>12.0} {:>12.0} {:>12.0} {:>12.0}",
                s.quota_share_name,
                s.instance_type,
                s.entitlement,
                s.entitled_instance_seconds,
                s.used_instance_seconds,
                s.borrowed_instance_seconds,
                s.lent_instance_seconds,
                s.useful_instance_seconds,
                s.recomputed_instance_seconds
            );
        }
        if !self.lost_work.is_empty() {
            let _ = writeln!(
                out,
                "\nLost work (attempts, instance-seconds recomputed), by cause and for whom"
            );
            let _ = writeln!(
                out,
                "  {:<10} {:<26} {:>8} {:>12}",
                "share", "cause", "attempts", "recomputed"
            );
            for l in &self.lost_work {
                let rows = l.by_cause.iter().map(|(c, w)| (c.as_str(), w)).chain(
                    (l.lost_for_this_share.attempts > 0)
                        .then_some(("(others', for this share)", &l.lost_for_this_share)),
                );
                for (cause, w) in rows {
                    let _ = writeln!(
                        out,
                        "  {:<10} {:<26} {:>8} {:>12.0}",
                        l.quota_share_name, cause, w.attempts, w.recomputed_instance_seconds
                    );
                }
            }
        }
        let sum = &self.summary;
        let _ = writeln!(
            out,
            "\nSummary (ended at t={:.1}s after {} passes)",
            sum.end_time, sum.passes
        );
        let statuses: Vec<String> = sum
            .jobs_by_status
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(out, "  jobs: {}", statuses.join(", "));
        if sum.rejected_submissions > 0 {
            let _ = writeln!(out, "  rejected submissions: {}", sum.rejected_submissions);
        }
        for r in &self.rejected {
            let _ = writeln!(
                out,
                "  rejected action {} (at {}s, {}{}): {}: {}",
                r.action,
                r.t,
                r.verb,
                r.job_name
                    .as_deref()
                    .map(|j| format!(" {j}"))
                    .unwrap_or_default(),
                r.error_code,
                r.message
            );
        }
        let _ = writeln!(out, "  completion time (s), submit to SUCCEEDED:");
        for (share, p) in &sum.completion_seconds {
            let label = if share == "*" {
                "all shares"
            } else {
                share.as_str()
            };
            let _ = writeln!(
                out,
                "    {:<12} n={:<7} p50 {:>8} p90 {:>8} p99 {:>8} max {:>8}",
                label,
                p.count,
                fmt_opt(p.p50),
                fmt_opt(p.p90),
                fmt_opt(p.p99),
                fmt_opt(p.max)
            );
        }
        let kinds: Vec<String> = sum
            .preemptions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(out, "  preemptions: {}", kinds.join(", "));
        let _ = writeln!(
            out,
            "  recomputed work: {:.1}% ({:.0} of {:.0} instance-seconds)",
            sum.recomputed_fraction * 100.0,
            sum.recomputed_instance_seconds,
            sum.useful_instance_seconds + sum.recomputed_instance_seconds
        );
        let _ = writeln!(
            out,
            "  fleet utilisation: {:.1}%",
            sum.fleet_utilisation * 100.0
        );
        let p = &sum.placement;
        let _ = writeln!(
            out,
            "  placement: {} starts, {} spread over several nodes{}",
            p.starts,
            p.spread_starts,
            if p.spread_starts > 0 {
                format!(
                    " ({:.1} nodes each on average)",
                    p.mean_nodes_per_spread_start
                )
            } else {
                String::new()
            }
        );
        let _ = writeln!(out, "  policy changes: {}", sum.policy_changes);
        out
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}
