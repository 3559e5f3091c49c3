//! The report: a self-contained HTML page with SVG plots (plotters), the
//! same figures as JSON, and a Markdown summary table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use maud::{html, Markup, PreEscaped, DOCTYPE};
use plotters::prelude::*;
use serde::Serialize;

use crate::compare::{Measures, PolicyResult};
use crate::trace::BadLine;
use crate::workload::MappingOut;

/// Everything the report holds.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Evaluation {
    pub citation: String,
    pub trace_files: Vec<String>,
    pub mapping: MappingOut,
    /// Lines of the trace that could not be read (skipped).
    pub bad_lines: Vec<BadLine>,
    pub policies: Vec<PolicyResult>,
    pub wall_seconds: f64,
}

fn hours(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |v| format!("{:.2}", v / 3600.0))
}

fn seconds(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |v| format!("{v:.0}"))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const W: u32 = 760;
const H: u32 = 420;

fn svg_error(e: impl std::fmt::Display) -> String {
    format!(
        "<p class=\"error\">plot failed: {}</p>",
        esc(&e.to_string())
    )
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

/// An SVG of `size` drawn by `draw` on a white background (or the error,
/// as a line of HTML).
fn svg(size: (u32, u32), draw: impl FnOnce(&Area<'_>) -> Drawn) -> String {
    let mut out = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut out, size).into_drawing_area();
        root.fill(&WHITE)
            .map_err(Into::into)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(Into::into))
    };
    match drawn {
        Ok(()) => out,
        Err(e) => svg_error(e),
    }
}

/// Empirical CDFs on a logarithmic axis, values floored at `floor` so
/// that zeros show.
fn cdf_svg(title: &str, x_label: &str, floor: f64, series: &[(&str, &[f64])]) -> String {
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(1.0_f64, f64::max)
        * 1.2;
    svg((W, H), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d((floor..max).log_scale(), 0.0..1.0)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc("fraction of jobs")
            .draw()?;
        for (i, (name, values)) in series.iter().enumerate() {
            if values.is_empty() {
                continue;
            }
            let n = values.len() as f64;
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    values
                        .iter()
                        .enumerate()
                        .map(|(k, v)| (v.max(floor), (k + 1) as f64 / n)),
                    color.stroke_width(2),
                ))?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::LowerRight)
            .draw()?;
        Ok(())
    })
}

/// Horizontal bars, one per name.
fn bars_svg(title: &str, x_label: &str, bars: &[(String, f64)]) -> String {
    let max = bars.iter().map(|b| b.1).fold(0.0_f64, f64::max).max(1e-9) * 1.15;
    let n = bars.len().max(1);
    svg((W, 60 + 34 * n as u32), |root| {
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(36)
            .y_label_area_size(250)
            .build_cartesian_2d(0.0..max, 0.0..n as f64)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_labels(n)
            .y_label_formatter(&|y| {
                let i = (*y - 0.5).round();
                if (y - (i + 0.5)).abs() < 0.01 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .disable_y_mesh()
            .draw()?;
        chart.draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
            Rectangle::new(
                [(0.0, i as f64 + 0.15), (*v, i as f64 + 0.85)],
                Palette99::pick(i).filled(),
            )
        }))?;
        Ok(())
    })
}

/// The six shares using the most, and the others summed as one line.
fn top_usage(usage: &BTreeMap<String, Vec<(f64, u32)>>) -> BTreeMap<String, Vec<(f64, u32)>> {
    const SHOWN: usize = 6;
    if usage.len() <= SHOWN + 1 {
        return usage.clone();
    }
    let mut by_total: Vec<(&String, u64)> = usage
        .iter()
        .map(|(n, v)| (n, v.iter().map(|p| u64::from(p.1)).sum()))
        .collect();
    by_total.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut out: BTreeMap<String, Vec<(f64, u32)>> = by_total[..SHOWN]
        .iter()
        .map(|(n, _)| ((*n).clone(), usage[*n].clone()))
        .collect();
    let rest = &by_total[SHOWN..];
    let mut others: Vec<(f64, u32)> = usage[rest[0].0].iter().map(|p| (p.0, 0)).collect();
    for (n, _) in rest {
        for (o, p) in others.iter_mut().zip(&usage[*n]) {
            o.1 += p.1;
        }
    }
    out.insert(format!("{} other shares", rest.len()), others);
    out
}

/// Instances in use per share over time.
fn usage_svg(title: &str, usage: &BTreeMap<String, Vec<(f64, u32)>>, fleet: u32) -> String {
    let usage = &top_usage(usage);
    let days = usage
        .values()
        .flat_map(|v| v.iter().map(|p| p.0))
        .fold(1.0_f64, f64::max);
    let top = usage
        .values()
        .flat_map(|v| v.iter().map(|p| p.1))
        .max()
        .unwrap_or(1)
        .max(1);
    svg((W, H), |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..days, 0.0..f64::from(top) * 1.1)?;
        chart
            .configure_mesh()
            .x_desc("day")
            .y_desc(format!("instances in use (fleet {fleet})"))
            .draw()?;
        for (i, (share, points)) in usage.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(
                    points.iter().map(|(d, n)| (*d, f64::from(*n))),
                    color.stroke_width(1),
                ))?
                .label(share.as_str())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()?;
        Ok(())
    })
}

fn all(p: &PolicyResult) -> Measures {
    p.measures.get("*").cloned().unwrap_or_default()
}

/// Every plot: its id, the SVG, and its caption.
pub fn plots(e: &Evaluation) -> Vec<(String, String, String)> {
    let completion: Vec<(&str, &[f64])> = e
        .policies
        .iter()
        .map(|p| (p.name.as_str(), p.completion_cdf_hours.as_slice()))
        .collect();
    let reclaim: Vec<(&str, &[f64])> = e
        .policies
        .iter()
        .filter(|p| !p.reclaim_wait_cdf_seconds.is_empty())
        .map(|p| (p.name.as_str(), p.reclaim_wait_cdf_seconds.as_slice()))
        .collect();
    let recomputed: Vec<(String, f64)> = e
        .policies
        .iter()
        .map(|p| (p.name.clone(), all(p).recomputed_gpu_hours))
        .collect();
    let mut out = vec![
        (
            "completion".to_string(),
            cdf_svg("Job completion time", "hours (log)", 1.0 / 60.0, &completion),
            "Job completion time (submit to success), every job, per policy.".to_string(),
        ),
        (
            "reclaim".to_string(),
            cdf_svg(
                "Owners' wait for lent capacity",
                "seconds (log; under 1 s shown at 1 s)",
                1.0,
                &reclaim,
            ),
            "Owners' reclaim wait: submit to start of the jobs for which a borrower was preempted (policies that lend). It includes the borrower's stop and, with checkpoint-then-preempt, its checkpoint window.".to_string(),
        ),
        (
            "recomputed".to_string(),
            bars_svg("Recomputed GPU-hours", "GPU-hours", &recomputed),
            "GPU-hours recomputed: work lost to preemptions (from the last checkpoint, or the start) and done again.".to_string(),
        ),
    ];
    for name in ["partitions", "borrow-100"] {
        if let Some(p) = e.policies.iter().find(|p| p.name == name) {
            out.push((
                format!("usage-{name}"),
                usage_svg(
                    &format!("Share usage over time: {name}"),
                    &p.usage,
                    e.mapping.fleet_instances,
                ),
                format!("Instances in use per share over time (samples at least an hour apart; the six shares using the most, the others summed), under {name}."),
            ));
        }
    }
    out
}

/// The summary table, in Markdown.
pub fn markdown(e: &Evaluation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| policy | jobs done | rejected | completion p50 / p90 (h) | wait p50 / p90 (h) | owners' reclaim wait p50 / p90 (s, jobs) | recomputed GPU-h (fraction) | preemptions / h | jobs preempted > 2 | utilisation |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    for p in &e.policies {
        let m = all(p);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} / {} | {} / {} | {} / {} ({}) | {:.0} ({:.2}%) | {:.2} | {} | {:.1}% |",
            p.name,
            m.succeeded,
            m.rejected,
            hours(m.completion_seconds.p50),
            hours(m.completion_seconds.p90),
            hours(m.wait_seconds.p50),
            hours(m.wait_seconds.p90),
            seconds(m.reclaim_wait_seconds.p50),
            seconds(m.reclaim_wait_seconds.p90),
            m.reclaim_wait_seconds.n,
            m.recomputed_gpu_hours,
            m.recomputed_fraction * 100.0,
            p.preemptions_per_hour,
            m.preempted_more_than_twice,
            p.fleet_utilisation * 100.0
        );
    }
    s.push_str(&fairness_markdown(e));
    s.push_str(&classes_markdown(e));
    s
}

/// Fairness over time: who borrowed how much, and what budgets stopped.
fn fairness_markdown(e: &Evaluation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nFairness over time (Jain's index of borrowed GPU-hours per entitled GPU, over the shares that borrowed: 1 is each in proportion to its size):\n\n| policy | borrowed GPU-h | Jain's index | largest borrower's part | budget stops |\n|---|---|---|---|---|"
    );
    for p in e.policies.iter().filter(|p| p.borrowed_gpu_hours > 0.0) {
        let _ = writeln!(
            s,
            "| {} | {:.0} | {} | {:.1}% | {} |",
            p.name,
            p.borrowed_gpu_hours,
            p.jain_borrowed.map_or("-".into(), |j| format!("{j:.3}")),
            p.top_borrower_fraction * 100.0,
            p.budget_stops
        );
    }
    s
}

/// The rows of the per-class comparison: policy, class, measures.
fn class_rows(e: &Evaluation) -> Vec<(&str, &str, &Measures)> {
    e.policies
        .iter()
        .flat_map(|p| {
            p.by_class
                .iter()
                .map(move |(c, m)| (p.name.as_str(), c.as_str(), m))
        })
        .collect()
}

/// Per workload class: the same jobs (drawn into classes by the seed)
/// under every policy; only `+classes` policies schedule by them.
fn classes_markdown(e: &Evaluation) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "\nPer workload class (jobs drawn into classes by the seed; only the `+classes` policy schedules by them):\n\n| policy | class | jobs done | completion p50 / p90 (h) | wait p50 / p90 (h) | recomputed GPU-h (fraction) | jobs preempted > 2 |\n|---|---|---|---|---|---|---|"
    );
    for (policy, class, m) in class_rows(e) {
        let _ = writeln!(
            s,
            "| {policy} | {class} | {} | {} / {} | {} / {} | {:.0} ({:.2}%) | {} |",
            m.succeeded,
            hours(m.completion_seconds.p50),
            hours(m.completion_seconds.p90),
            hours(m.wait_seconds.p50),
            hours(m.wait_seconds.p90),
            m.recomputed_gpu_hours,
            m.recomputed_fraction * 100.0,
            m.preempted_more_than_twice
        );
    }
    s
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}table{border-collapse:collapse;font-size:13px;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}figure{margin:1.5em 0}.note{color:#555;font-size:13px}";

/// The HTML report (self-contained: styles and SVG plots inline; maud
/// escapes every text it is given).
pub fn html(e: &Evaluation) -> String {
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Quartermaster what-if: sharing policies on a real trace" }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { "Sharing policies compared on a real trace" }
                (workload_html(e))
                h2 { "Summary" }
                (summary_html(e))
                h2 { "Plots" }
                @for (id, svg, caption) in plots(e) {
                    figure id=(id) { (PreEscaped(svg)) figcaption { (caption) } }
                }
                h2 { "Fairness over time" }
                (fairness_html(e))
                h2 { "Per workload class" }
                (classes_html(e))
                h2 { "Per share" }
                @for p in &e.policies {
                    (share_html(p))
                }
                p.note {
                    "Made by " code { "qm whatif" } (format!(" in {:.0} s. ", e.wall_seconds))
                    "Every run is the scheduling core itself on virtual time (" code { "qm simulate" } ")."
                }
            }
        }
    };
    let mut out = page.into_string();
    out.push('\n');
    out
}

/// The trace, its mapping and what could not be read.
fn workload_html(e: &Evaluation) -> Markup {
    let m = &e.mapping;
    let shares = m
        .shares
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ");
    html! {
        p.note { (e.citation) }
        h2 { "The workload" }
        p {
            (format!(
                "{} jobs from {}, {:.0} GPU-hours over {:.1} days (mean demand {:.0} GPUs). ",
                m.jobs,
                e.trace_files.join(", "),
                m.gpu_hours,
                m.span_days,
                m.mean_gpu_demand
            ))
            (m.description)
        }
        p { (format!("Seed {}. Shares: {shares}.", m.seed)) }
        @if let Some(first) = e.bad_lines.first() {
            p { (format!("{} malformed trace lines were skipped, e.g. {first}.", e.bad_lines.len())) }
        }
    }
}

/// One row per policy: what it is and its measures over every share.
fn summary_html(e: &Evaluation) -> Markup {
    html! {
        table {
            tr {
                @for h in ["policy", "what it is", "jobs done", "rejected", "completion p50 / p90 / p99 (h)", "wait p50 / p90 (h)", "owners' reclaim wait p50 / p90 / max (s)", "recomputed GPU-h", "recomputed", "preemptions / h", "preempted > 2", "utilisation", "wall (s)"] {
                    th { (h) }
                }
            }
            @for p in &e.policies {
                @let m = all(p);
                tr {
                    td { (p.name) }
                    td style="text-align:left" { (p.description) }
                    td { (m.succeeded) }
                    td { (m.rejected) }
                    td { (hours(m.completion_seconds.p50)) " / " (hours(m.completion_seconds.p90)) " / " (hours(m.completion_seconds.p99)) }
                    td { (hours(m.wait_seconds.p50)) " / " (hours(m.wait_seconds.p90)) }
                    td {
                        (seconds(m.reclaim_wait_seconds.p50)) " / " (seconds(m.reclaim_wait_seconds.p90)) " / " (seconds(m.reclaim_wait_seconds.max))
                        (format!(" ({} jobs)", m.reclaim_wait_seconds.n))
                    }
                    td { (format!("{:.0}", m.recomputed_gpu_hours)) }
                    td { (format!("{:.2}%", m.recomputed_fraction * 100.0)) }
                    td { (format!("{:.2}", p.preemptions_per_hour)) }
                    td { (m.preempted_more_than_twice) }
                    td { (format!("{:.1}%", p.fleet_utilisation * 100.0)) }
                    td { (format!("{:.1}", p.wall_seconds)) }
                }
            }
        }
    }
}

/// Jain's index of borrowed GPU-hours, per policy that borrowed.
fn fairness_html(e: &Evaluation) -> Markup {
    html! {
        p.note { "Jain's index of borrowed GPU-hours per entitled GPU, over the shares that borrowed (1: each in proportion to its size)." }
        table {
            tr { th { "policy" } th { "borrowed GPU-h" } th { "Jain's index" } th { "largest borrower's part" } th { "budget stops" } }
            @for p in e.policies.iter().filter(|p| p.borrowed_gpu_hours > 0.0) {
                tr {
                    td { (p.name) }
                    td { (format!("{:.0}", p.borrowed_gpu_hours)) }
                    td { (p.jain_borrowed.map_or("-".into(), |j| format!("{j:.3}"))) }
                    td { (format!("{:.1}%", p.top_borrower_fraction * 100.0)) }
                    td { (p.budget_stops) }
                }
            }
        }
    }
}

/// The measures of each workload class under each policy.
fn classes_html(e: &Evaluation) -> Markup {
    html! {
        p.note { "Jobs drawn into classes by a seeded hash of their name (60% exploratory, 30% release, 10% urgent); every policy runs the same jobs, only " code { "+classes" } " schedules by the classes." }
        table {
            tr {
                @for h in ["policy", "class", "jobs done", "completion p50 / p90 (h)", "wait p50 / p90 (h)", "recomputed GPU-h", "recomputed", "preempted > 2"] {
                    th { (h) }
                }
            }
            @for (policy, class, m) in class_rows(e) {
                tr {
                    td { (policy) }
                    td { (class) }
                    td { (m.succeeded) }
                    td { (hours(m.completion_seconds.p50)) " / " (hours(m.completion_seconds.p90)) }
                    td { (hours(m.wait_seconds.p50)) " / " (hours(m.wait_seconds.p90)) }
                    td { (format!("{:.0}", m.recomputed_gpu_hours)) }
                    td { (format!("{:.2}%", m.recomputed_fraction * 100.0)) }
                    td { (m.preempted_more_than_twice) }
                }
            }
        }
    }
}

/// One policy's measures per share, and examples of what it refused.
fn share_html(p: &PolicyResult) -> Markup {
    html! {
        h3 { (p.name) }
        table {
            tr {
                @for h in ["share", "jobs", "rejected", "completion p50 / p90 (h)", "wait p50 / p90 (h)", "reclaim wait p50 / p90 (s, jobs)", "recomputed GPU-h", "preempted 0 / 1 / 2 / 3+", "preemptions / h", "use of its entitlement"] {
                    th { (h) }
                }
            }
            @for (share, m) in &p.measures {
                @let b = |k: &str| m.preempted_attempts.get(k).copied().unwrap_or(0);
                tr {
                    td { (share) }
                    td { (m.jobs) }
                    td { (m.rejected) }
                    td { (hours(m.completion_seconds.p50)) " / " (hours(m.completion_seconds.p90)) }
                    td { (hours(m.wait_seconds.p50)) " / " (hours(m.wait_seconds.p90)) }
                    td { (seconds(m.reclaim_wait_seconds.p50)) " / " (seconds(m.reclaim_wait_seconds.p90)) (format!(" ({})", m.reclaim_wait_seconds.n)) }
                    td { (format!("{:.0}", m.recomputed_gpu_hours)) }
                    td { (b("0")) " / " (b("1")) " / " (b("2")) " / " (b("3+")) }
                    td { (format!("{:.2}", m.preemptions_per_hour)) }
                    td { (m.utilisation_of_entitlement.map_or_else(|| "-".into(), |u| format!("{:.0}%", u * 100.0))) }
                }
            }
        }
        @if !p.rejected_examples.is_empty() {
            p.note { "Refused submissions, e.g.: " (p.rejected_examples.join("; ")) }
        }
    }
}
