//! The report for a person: the text `qm simulate` prints, its columns
//! laid out by comfy-table as `qm`'s other tables are.

use std::fmt::Write as _;

use comfy_table::{CellAlignment, ContentArrangement, Table};

use super::Report;

impl Report {
    /// The report for a person: a compact timeline (one line per job and
    /// moment, chained states), then jobs, shares and the summary.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        self.write_timeline(&mut out);
        self.write_tables(&mut out);
        self.write_summary(&mut out);
        out
    }

    /// The timeline (one line per job and moment, chained states) and the
    /// preemptions.
    fn write_timeline(&self, out: &mut String) {
        let _ = writeln!(out, "Timeline of queue {}", self.job_queue_name);
        // One line per job and moment: its states chained, the last reason.
        let mut timeline = table(&[]);
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
                timeline.add_row(vec![
                    format!("t={t:.1}s"),
                    job.to_string(),
                    chain.join(" -> "),
                    reasons.join(" | "),
                ]);
            }
            i = end;
        }
        print_table(out, timeline, &[0], 1);
        if !self.preemptions.is_empty() {
            let _ = writeln!(out, "\nPreemptions");
            let mut t = table(&[]);
            for p in &self.preemptions {
                t.add_row(vec![
                    format!("t={:.1}s", p.t),
                    p.job_name.clone(),
                    p.kind.clone(),
                    format!("for {}", p.for_job_name),
                ]);
            }
            print_table(out, t, &[0], 1);
        }
    }

    /// The jobs, shares, lost work and (where classes are declared) usage
    /// ledger tables.
    fn write_tables(&self, out: &mut String) {
        if !self.jobs.is_empty() {
            let _ = writeln!(out, "\nJobs");
            let mut t = table(&[
                "job",
                "share",
                "prio",
                "status",
                "wait s",
                "done s",
                "attempts",
                "preempted",
                "recomp. s",
                "status reason",
            ]);
            for j in &self.jobs {
                t.add_row(vec![
                    j.job_name.clone(),
                    j.quota_share_name.clone(),
                    j.scheduling_priority.to_string(),
                    j.status.clone(),
                    fmt_opt(j.wait_seconds),
                    fmt_opt(j.completion_seconds),
                    j.attempts.to_string(),
                    j.preempted_attempt_count.to_string(),
                    format!("{:.0}", j.recomputed_seconds),
                    j.status_reason.clone(),
                ]);
            }
            print_table(out, t, &[2, 4, 5, 6, 7, 8], 1);
        }
        let _ = writeln!(out, "\nShares (instance-seconds)");
        let mut t = table(&[
            "share",
            "type",
            "max",
            "entitled",
            "used",
            "borrowed",
            "lent",
            "useful",
            "recomputed",
        ]);
        for s in &self.shares {
            t.add_row(vec![
                s.quota_share_name.clone(),
                s.instance_type.clone(),
                s.entitlement.to_string(),
                format!("{:.0}", s.entitled_instance_seconds),
                format!("{:.0}", s.used_instance_seconds),
                format!("{:.0}", s.borrowed_instance_seconds),
                format!("{:.0}", s.lent_instance_seconds),
                format!("{:.0}", s.useful_instance_seconds),
                format!("{:.0}", s.recomputed_instance_seconds),
            ]);
        }
        print_table(out, t, &[2, 3, 4, 5, 6, 7, 8], 1);
        if !self.lost_work.is_empty() {
            let _ = writeln!(
                out,
                "\nLost work (attempts, instance-seconds recomputed), by cause and for whom"
            );
            let mut t = table(&["share", "cause", "attempts", "recomputed"]);
            for l in &self.lost_work {
                let rows = l.by_cause.iter().map(|(c, w)| (c.as_str(), w)).chain(
                    (l.lost_for_this_share.attempts > 0)
                        .then_some(("(others', for this share)", &l.lost_for_this_share)),
                );
                for (cause, w) in rows {
                    t.add_row(vec![
                        l.quota_share_name.clone(),
                        cause.to_string(),
                        w.attempts.to_string(),
                        format!("{:.0}", w.recomputed_instance_seconds),
                    ]);
                }
            }
            print_table(out, t, &[2, 3], 1);
        }
        if self
            .usage
            .iter()
            .any(|u| u.workload_class != qm_core::IMPLICIT_CLASS)
        {
            let _ = writeln!(
                out,
                "\nUsage ledger by workload class (instance-seconds; qm usage shows it live)"
            );
            let mut t = table(&[
                "share",
                "type",
                "class",
                "own",
                "borrowed",
                "waiting",
                "recomputed",
            ]);
            for u in &self.usage {
                t.add_row(vec![
                    u.quota_share_name.clone(),
                    u.instance_type.clone(),
                    u.workload_class.clone(),
                    format!("{:.0}", u.own_instance_seconds),
                    format!("{:.0}", u.borrowed_instance_seconds),
                    format!("{:.0}", u.waiting_instance_seconds),
                    format!("{:.0}", u.recomputed_instance_seconds),
                ]);
            }
            print_table(out, t, &[3, 4, 5, 6], 1);
        }
    }

    /// The summary: statuses, rejections, completion times, preemptions,
    /// recomputed work, utilisation and placement.
    fn write_summary(&self, out: &mut String) {
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
        let mut t = table(&["share", "n", "p50", "p90", "p99", "max"]);
        for (share, p) in &sum.completion_seconds {
            let label = if share == "*" {
                "all shares"
            } else {
                share.as_str()
            };
            t.add_row(vec![
                label.to_string(),
                p.count.to_string(),
                fmt_opt(p.p50),
                fmt_opt(p.p90),
                fmt_opt(p.p99),
                fmt_opt(p.max),
            ]);
        }
        print_table(out, t, &[1, 2, 3, 4, 5], 3);
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
    }
}

/// A borderless table whose columns are as wide as their widest cell, as
/// `qm`'s other tables (no header when `header` is empty).
fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_style(comfy_table::presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    if !header.is_empty() {
        t.set_header(header.to_vec());
    }
    t
}

/// Appends `t`'s lines to `out`, each indented by `indent` spaces more than
/// the cell padding (one space), with `right` (the numeric columns)
/// aligned right. A table without header or rows prints nothing.
fn print_table(out: &mut String, mut t: Table, right: &[usize], indent: usize) {
    if t.header().is_none() && t.row_count() == 0 {
        return;
    }
    for &i in right {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    for line in t.lines() {
        let _ = writeln!(out, "{:indent$}{}", "", line.trim_end());
    }
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}
