//! The views, rendered on the server from what the API answered: pure
//! functions of their data (the page benchmark renders them from a
//! 100,000-job queue's answers). Every value is escaped by maud; nothing
//! the API returns is ever written as markup.

use maud::{html, Markup, DOCTYPE};
use qm_wire::messages::{
    AuditEvent, JobOutlook, JobQueueSnapshot, ListServiceJobsResponse, ReclaimExposure, ServiceJob,
    ShareUsage, UsageReport,
};
use qm_wire::system::QueueDocument;

/// Who is looking, as the page shows it.
pub struct Frame<'a> {
    pub principal: &'a str,
    /// The person's role: ADMIN | READER | TEAM.
    pub role: &'a str,
    pub csrf: &'a str,
    /// The last live event number the page has seen.
    pub live_since: u64,
    /// Which navigation entry is current.
    pub nav: Nav,
    /// The queue the page is about (the navigation links to its views).
    pub queue: Option<&'a str>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    Queues,
    Queue,
    Flows,
    Audit,
    WhatIf,
    Job,
}

/// Percent-encodes one path segment or query value.
pub fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `ms` since the Unix epoch, in UTC to the second.
pub fn when(ms: u64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(time::macros::format_description!(
                "[year]-[month]-[day] [hour]:[minute]:[second] UTC"
            ))
            .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

/// A duration in a few characters ("42 s", "3 min", "2.5 h").
pub fn span(ms: u64) -> String {
    let s = ms / 1000;
    if s < 120 {
        format!("{s} s")
    } else if s < 7200 {
        format!("{} min", s / 60)
    } else {
        format!("{:.1} h", s as f64 / 3600.0)
    }
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="referrer" content="same-origin";
            title { (title) " · Quartermaster" }
            link rel="stylesheet" href="/assets/console.css";
            script src="/assets/console.js" defer {}
        }
    }
}

/// The sign-in page.
pub fn sign_in(error: Option<&str>, proxy_only: bool) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head("Sign in"))
            body {
                main id="main" class="narrow" {
                    h1 { "Quartermaster" }
                    @if let Some(e) = error {
                        p class="error" role="alert" { (e) }
                    }
                    @if proxy_only {
                        p { "Sign in through your company's sign-in page." }
                    } @else {
                        form method="post" action="/sign-in" {
                            p {
                                label for="key" { "Access key id" }
                                input id="key" name="accessKeyId" autocomplete="username" required spellcheck="false";
                            }
                            p {
                                label for="secret" { "Secret" }
                                input id="secret" name="secret" type="password" autocomplete="current-password" required;
                            }
                            button type="submit" { "Sign in" }
                        }
                        p class="hint" { "The access key and secret in your " code { "<principal>.aws-credentials" } " file from " code { "qm auth" } "." }
                    }
                }
            }
        }
    }
}

/// A whole page around `body`.
pub fn page(frame: &Frame<'_>, title: &str, body: Markup) -> Markup {
    let current = |n: Nav| if frame.nav == n { Some("page") } else { None };
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body data-live-since=(frame.live_since) {
                a class="skip" href="#main" { "Skip to content" }
                header {
                    nav aria-label="Views" {
                        a href="/queues" aria-current=[current(Nav::Queues)] { "Queues" }
                        @if let Some(q) = frame.queue {
                            a href={ "/queues/" (enc(q)) } aria-current=[current(Nav::Queue)] { "Queue " (q) }
                            a href={ "/queues/" (enc(q)) "/flows" } aria-current=[current(Nav::Flows)] { "Flows" }
                            a href={ "/queues/" (enc(q)) "/what-if" } aria-current=[current(Nav::WhatIf)] { "What if" }
                        }
                        a href="/audit" aria-current=[current(Nav::Audit)] { "Audit" }
                    }
                    form method="post" action="/sign-out" class="who" {
                        span { (frame.principal) " (" (frame.role.to_lowercase()) ")" }
                        input type="hidden" name="csrf" value=(frame.csrf);
                        button type="submit" { "Sign out" }
                    }
                }
                main id="main" tabindex="-1" {
                    (body)
                }
                aside aria-label="Live updates" {
                    h2 { "Live" }
                    p id="live-state" class="hint" { "Updates appear here as they happen." }
                    ol id="live" aria-live="polite" {}
                }
            }
        }
    }
}

/// Every queue the viewer may read.
pub fn queues(names: &[String]) -> Markup {
    html! {
        h1 { "Job queues" }
        @if names.is_empty() {
            p class="empty" { "No job queue you may read. An admin creates queues with " code { "qm apply -f queue.yaml" } "." }
        } @else {
            ul class="cards" {
                @for q in names {
                    li { a href={ "/queues/" (enc(q)) } { (q) } }
                }
            }
        }
    }
}

/// One bar: own use, borrowed, lent and idle of an entitlement, drawn to
/// `scale` instances (SVG attributes, so no inline style is needed).
fn bar(u: &ShareUsage, scale: u32) -> Markup {
    let scale = scale.max(1) as f64;
    let own = u.used.saturating_sub(u.borrowed);
    let parts = [
        ("own", own),
        ("borrowed", u.borrowed),
        ("lent", u.lent),
        ("idle", u.idle),
    ];
    let mut x = 0.0;
    let segments: Vec<(&str, f64, f64)> = parts
        .iter()
        .map(|(class, n)| {
            let w = f64::from(*n) / scale * 100.0;
            let at = x;
            x += w;
            (*class, at, w)
        })
        .collect();
    let label = format!(
        "{}: {} entitled, {} used ({} borrowed), {} lent, {} idle",
        u.instance_type, u.entitlement, u.used, u.borrowed, u.lent, u.idle
    );
    html! {
        svg class="bar" viewBox="0 0 100 10" preserveAspectRatio="none" role="img" aria-label=(label) {
            title { (label) }
            @for (class, at, w) in &segments {
                rect class=(class) x=(format!("{at:.2}")) y="0" width=(format!("{w:.2}")) height="10" {}
            }
        }
    }
}

/// The queue: every share's capacity per type, its borrow limit, budget
/// and group.
pub fn queue(q: &str, snap: &JobQueueSnapshot, doc: Option<&QueueDocument>) -> Markup {
    let scale = snap
        .shares
        .iter()
        .map(|u| u.entitlement.max(u.used + u.lent + u.idle))
        .max()
        .unwrap_or(1);
    let config =
        |share: &str| doc.and_then(|d| d.quota_shares.iter().find(|s| s.quota_share_name == share));
    html! {
        h1 { "Queue " (q) }
        p class="legend" aria-hidden="true" {
            span class="key own" {} "own use " span class="key borrowed" {} "borrowed " span class="key lent" {} "lent " span class="key idle" {} "idle"
        }
        @if snap.shares.is_empty() {
            p class="empty" { "No share you may read in this queue." }
        } @else {
            table class="shares" {
                caption { "Capacity by share and instance type (instances)" }
                thead { tr { th scope="col" { "Share" } th scope="col" { "Type" } th scope="col" { "Use" } th scope="col" { "Entitled" } th scope="col" { "Used" } th scope="col" { "Borrowed" } th scope="col" { "Lent" } th scope="col" { "Idle" } th scope="col" { "Borrow limit" } th scope="col" { "Group" } } }
                tbody {
                    @for u in &snap.shares {
                        @let c = config(&u.quota_share_name);
                        tr {
                            th scope="row" { a href={ "/queues/" (enc(q)) "/shares/" (enc(&u.quota_share_name)) } { (u.quota_share_name) } }
                            td { (u.instance_type) }
                            td class="barcell" { (bar(u, scale)) }
                            td class="n" { (u.entitlement) }
                            td class="n" { (u.used) }
                            td class="n" { (u.borrowed) }
                            td class="n" { (u.lent) }
                            td class="n" { (u.idle) }
                            td { (borrow_limit(c)) }
                            td { (c.and_then(|c| c.share_group.clone().flatten()).unwrap_or_default()) }
                        }
                    }
                }
            }
        }
        @if !snap.budgets.is_empty() {
            h2 { "Borrowing budgets" }
            table {
                thead { tr { th scope="col" { "Share" } th scope="col" { "Used" } th scope="col" { "Committed" } th scope="col" { "Left" } th scope="col" { "Borrowing now" } th scope="col" { "Runs out" } th scope="col" { "Refills" } } }
                tbody {
                    @for b in &snap.budgets {
                        tr {
                            th scope="row" { (b.quota_share_name) }
                            td class="n" { (format!("{:.1} h", b.used_instance_hours)) }
                            td class="n" { (format!("{:.1} h", b.committed_instance_hours)) }
                            td class="n" { (format!("{:.1} h", b.left_instance_hours)) }
                            td class="n" { (b.borrowing_instances) }
                            td { (b.exhausts_at.map(when).unwrap_or_else(|| "-".into())) }
                            td { (b.refills_at.map(when).unwrap_or_else(|| "-".into())) }
                        }
                    }
                }
            }
        }
        (waiting_list(q, "Front of the queue", &snap.front_of_queue))
        @if !snap.lost_work.is_empty() {
            h2 { "Lost work" }
            table {
                thead { tr { th scope="col" { "Share" } th scope="col" { "Cause" } th scope="col" { "Attempts" } th scope="col" { "Recomputed" } } }
                tbody {
                    @for l in &snap.lost_work {
                        @for (cause, t) in &l.by_cause {
                            tr { th scope="row" { (l.quota_share_name) } td { (cause) } td class="n" { (t.attempts) } td class="n" { (format!("{:.2} instance-h", t.recomputed_instance_ms as f64 / 3.6e6)) } }
                        }
                    }
                }
            }
        }
    }
}

fn borrow_limit(c: Option<&qm_wire::messages::QuotaShare>) -> String {
    let Some(rs) = c.and_then(|c| c.resource_sharing_configuration.as_ref()) else {
        return String::new();
    };
    match (rs.strategy.as_str(), rs.borrow_limit) {
        ("LEND_AND_BORROW", Some(-1) | None) => "unlimited".into(),
        ("LEND_AND_BORROW", Some(n)) => format!("{n}%"),
        (s, _) => s.to_lowercase(),
    }
}

fn waiting_list(q: &str, title: &str, jobs: &[ServiceJob]) -> Markup {
    html! {
        h2 { (title) }
        @if jobs.is_empty() {
            p class="empty" { "No job is waiting." }
        } @else {
            table {
                thead { tr { th scope="col" { "Job" } th scope="col" { "Share" } th scope="col" { "Instances" } th scope="col" { "Priority" } th scope="col" { "Why it waits" } } }
                tbody {
                    @for j in jobs {
                        tr {
                            th scope="row" { a href={ "/jobs/" (enc(&j.job_id)) } { (j.job_name) } }
                            td { a href={ "/queues/" (enc(q)) "/shares/" (enc(&j.quota_share_name)) } { (j.quota_share_name) } }
                            td class="n" { (j.instance_count) " × " (j.instance_type) }
                            td class="n" { (j.scheduling_priority) }
                            td { (j.status_reason) }
                        }
                    }
                }
            }
        }
    }
}

/// One share: its jobs (a page of them) and its reclaim exposure.
pub fn share(
    q: &str,
    name: &str,
    jobs: &ListServiceJobsResponse,
    status: Option<&str>,
    exposure: &ReclaimExposure,
) -> Markup {
    let filters = ["RUNNABLE", "RUNNING", "SUCCEEDED", "FAILED"];
    html! {
        h1 { "Share " (name) " of " (q) }
        h2 { "Reclaim exposure" }
        @if exposure.exposures.is_empty() {
            p class="empty" { "Nothing of this share runs on borrowed capacity: no lender can reclaim anything from it." }
        } @else {
            p { "If each lender submitted now, for as many instances as it lends:" }
            ul class="exposure" {
                @for e in &exposure.exposures {
                    li {
                        strong { (e.lending_share) } " (lends " (e.lent) " × " (e.instance_type) ") "
                        @if let Some(w) = &e.waits {
                            "would wait: " (w)
                        } @else if e.victims.is_empty() {
                            "would preempt none of this share's jobs."
                        } @else {
                            "would preempt:"
                            ul {
                                @for v in &e.victims {
                                    li {
                                        a href={ "/jobs/" (enc(&v.job_id)) } { (v.job_name.as_deref().unwrap_or(&v.job_id)) }
                                        ", losing " (span((v.work_at_risk_seconds * 1000.0) as u64)) " of work (since its last checkpoint, or its start)"
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Jobs" }
        nav aria-label="Filter jobs by status" class="filters" {
            a href={ "/queues/" (enc(q)) "/shares/" (enc(name)) } aria-current=[status.is_none().then_some("page")] { "All" }
            @for f in filters {
                a href={ "/queues/" (enc(q)) "/shares/" (enc(name)) "?status=" (f) } aria-current=[(status == Some(f)).then_some("page")] { (f.to_lowercase()) }
            }
        }
        @if jobs.job_summary_list.is_empty() {
            p class="empty" { "No job here. Submit one with " code { "qm submit" } " or try " a href={ "/queues/" (enc(q)) "/what-if" } { "what if" } " first." }
        } @else {
            table class="jobs" {
                thead { tr { th scope="col" { "Job" } th scope="col" { "Status" } th scope="col" { "Instances" } th scope="col" { "Priority" } th scope="col" { "Class" } th scope="col" { "Borrowed" } th scope="col" { "Reason" } th scope="col" { "Submitted" } } }
                tbody {
                    @for j in &jobs.job_summary_list {
                        tr {
                            th scope="row" { a href={ "/jobs/" (enc(&j.job_id)) } { (j.job_name) } }
                            td { span class={ "status " (j.status.to_lowercase()) } { (j.status) } }
                            td class="n" { (j.instance_count) " × " (j.instance_type) }
                            td class="n" { (j.scheduling_priority) }
                            td { (j.workload_class.as_deref().unwrap_or("")) }
                            td { @if j.on_borrowed_capacity { "yes" } }
                            td { (j.status_reason) }
                            td { (when(j.created_at)) }
                        }
                    }
                }
            }
            @if let Some(next) = &jobs.next_token {
                p { a href={ "/queues/" (enc(q)) "/shares/" (enc(name)) "?next=" (enc(next)) (status.map(|s| format!("&status={}", enc(s))).unwrap_or_default()) } rel="next" { "Next page" } }
            }
        }
    }
}

/// A job: its attempts as a timeline, its lost work, why it waits and
/// when it starts, its output's tail, and what may be done to it.
pub fn job(
    j: &ServiceJob,
    outlook: Option<&JobOutlook>,
    logs: Option<&str>,
    may_change: bool,
    csrf: &str,
) -> Markup {
    let lost_ms: u64 = j.attempts.iter().filter_map(|a| a.recomputed_ms).sum();
    html! {
        h1 { "Job " (j.job_name) }
        dl class="facts" {
            dt { "Id" } dd { code { (j.job_id) } }
            dt { "Status" } dd { span class={ "status " (j.status.to_lowercase()) } { (j.status) } @if !j.status_reason.is_empty() { " — " (j.status_reason) } }
            dt { "Share" } dd { a href={ "/queues/" (enc(&j.job_queue)) "/shares/" (enc(&j.quota_share_name)) } { (j.job_queue) "/" (j.quota_share_name) } }
            dt { "Asks for" } dd { (j.instance_count) " × " (j.instance_type) }
            dt { "Priority" } dd { (j.scheduling_priority) @if let Some(c) = &j.workload_class { " (class " (c) ")" } }
            @if let Some(image) = &j.container_image { dt { "Image" } dd { code { (image) } } }
            dt { "Submitted" } dd { (when(j.created_at)) }
            @if let Some(t) = &j.trace_id { dt { "Trace id" } dd { code { (t) } } }
            dt { "Lost work" } dd { (span(lost_ms)) " recomputed by later attempts (per instance)" }
        }
        @if let Some(o) = outlook.filter(|o| o.outcome == "WAITS") {
            section class="why" aria-labelledby="why" {
                h2 id="why" { "Why it waits" }
                p class="reason" { (o.status_reason.as_deref().unwrap_or("")) }
                @if let Some(u) = &o.unblock { p { strong { "What would unblock it: " } (u) } }
                p { strong { "Expected to start: " }
                    @match (o.estimated_start, &o.estimate_note) {
                        (Some(ms), _) => { (when(ms)) },
                        (None, Some(note)) => { (note) },
                        (None, None) => { "unknown" },
                    }
                }
                p { strong { "Position in line: " }
                    @match o.position_in_line {
                        Some(0) => { "first of its share and type" },
                        Some(n) => { (n) " job(s) ahead" @if !o.ahead.is_empty() { " (first: " (o.ahead.join(", ")) ")" } },
                        None => { "-" },
                    }
                }
            }
        }
        @if let Some(o) = outlook.filter(|o| o.outcome == "STARTS" || o.outcome == "PREEMPTS") {
            section class="why" { h2 { "Next pass" } p { @if o.outcome == "STARTS" { "It starts in the next pass." } @else { "It starts once " (o.victims.len()) " job(s) are preempted for it." } } }
        }
        h2 { "Attempts" }
        @if j.attempts.is_empty() {
            p class="empty" { "No attempt yet: it has not been placed." }
        } @else {
            ol class="timeline" {
                @for a in &j.attempts {
                    li {
                        h3 { "Attempt " (a.attempt) @if let Some(o) = &a.outcome { " — " (o) } }
                        ul {
                            @if let Some(t) = a.scheduled_at { li { (when(t)) ": placed" @if let Some(e) = &a.executor_id { " on " (e) } } }
                            @if let Some(step) = a.restored_checkpoint_step { li { "restored checkpoint step " (step) } }
                            @if let Some(t) = a.started_at { li { (when(t)) ": started" } }
                            @if let Some(step) = a.last_checkpoint_step { li { "last checkpoint committed: step " (step) } }
                            @if let Some(p) = &a.progress { li { (p) } }
                            @if let Some(t) = a.stopped_at { li { (when(t)) ": stopped" @if let Some(c) = a.exit_code { " (exit " (c) ")" } } }
                            @if let Some(by) = &a.preempted_for_job_id { li { "preempted for " a href={ "/jobs/" (enc(by)) } { (by) } @if let Some(s) = &a.preempted_for_share { " of share " (s) } } }
                            @if let Some(ms) = a.recomputed_ms { li { (span(ms)) " of work lost" } }
                            @if let Some(r) = &a.status_reason { li { (r) } }
                        }
                    }
                }
            }
        }
        @if let Some(text) = logs {
            h2 { "Output (tail)" }
            pre class="logs" tabindex="0" { (text) }
        }
        @if may_change && !matches!(j.status.as_str(), "SUCCEEDED" | "FAILED") {
            h2 { "Actions" }
            form method="post" action={ "/jobs/" (enc(&j.job_id)) "/priority" } class="inline" {
                input type="hidden" name="csrf" value=(csrf);
                label for="priority" { "Scheduling priority" }
                input id="priority" name="priority" type="number" min="0" max="9999" value=(j.scheduling_priority) required;
                button type="submit" { "Change priority" }
            }
            form method="post" action={ "/jobs/" (enc(&j.job_id)) "/terminate" } class="inline" {
                input type="hidden" name="csrf" value=(csrf);
                label for="reason" { "Reason" }
                input id="reason" name="reason" maxlength="256" required placeholder="why it is stopped";
                button type="submit" class="danger" { "Terminate" }
            }
        }
    }
}

/// Who borrowed from whom, from the usage ledger.
pub fn flows(q: &str, report: &UsageReport) -> Markup {
    // (lender, borrower, type) -> instance-hours over the report.
    let mut sums: std::collections::BTreeMap<(String, String, String), f64> = Default::default();
    for r in &report.lending {
        let lender = r.lender.clone().unwrap_or_else(|| "(unassigned)".into());
        *sums
            .entry((lender, r.borrower.clone(), r.instance_type.clone()))
            .or_default() += r.instance_seconds / 3600.0;
    }
    let most = sums.values().copied().fold(0.0, f64::max).max(1e-9);
    html! {
        h1 { "Flows in " (q) }
        p { "Borrowed capacity from " (report.from) " to " (report.to) ", from the usage ledger (as of " (when(report.as_of)) ")." }
        @if sums.is_empty() {
            p class="empty" { "No share borrowed from another in this period." }
        } @else {
            table {
                thead { tr { th scope="col" { "Lender" } th scope="col" { "Borrower" } th scope="col" { "Type" } th scope="col" { "Instance-hours" } th scope="col" { "" } } }
                tbody {
                    @for ((lender, borrower, t), h) in &sums {
                        tr {
                            td { (lender) }
                            td { (borrower) }
                            td { (t) }
                            td class="n" { (format!("{h:.2}")) }
                            td class="barcell" {
                                svg class="bar" viewBox="0 0 100 10" preserveAspectRatio="none" aria-hidden="true" {
                                    rect class="borrowed" x="0" y="0" width=(format!("{:.2}", h / most * 100.0)) height="10" {}
                                }
                            }
                        }
                    }
                }
            }
        }
        h2 { "By day" }
        @if report.lending.is_empty() {
            p class="empty" { "Nothing borrowed." }
        } @else {
            table {
                thead { tr { th scope="col" { "Day" } th scope="col" { "Lender" } th scope="col" { "Borrower" } th scope="col" { "Type" } th scope="col" { "Instance-hours" } } }
                tbody {
                    @for r in &report.lending {
                        tr { td { (r.period) } td { (r.lender.as_deref().unwrap_or("(unassigned)")) } td { (r.borrower) } td { (r.instance_type) } td class="n" { (format!("{:.2}", r.instance_seconds / 3600.0)) } }
                    }
                }
            }
        }
    }
}

/// The audit filter's values.
#[derive(Default)]
pub struct AuditFilter {
    pub queue: String,
    pub share: String,
    pub principal: String,
}

/// The writes, filterable.
pub fn audit(filter: &AuditFilter, events: &[AuditEvent], next: Option<&str>) -> Markup {
    html! {
        h1 { "Audit" }
        form method="get" action="/audit" class="filters" {
            label for="aq" { "Queue" } input id="aq" name="queue" value=(filter.queue);
            label for="as" { "Share" } input id="as" name="share" value=(filter.share);
            label for="ap" { "Principal" } input id="ap" name="principal" value=(filter.principal);
            button type="submit" { "Filter" }
        }
        @if events.is_empty() {
            p class="empty" { "No write matches." }
        } @else {
            table {
                thead { tr { th scope="col" { "When" } th scope="col" { "Who" } th scope="col" { "Operation" } th scope="col" { "Where" } th scope="col" { "What" } } }
                tbody {
                    @for e in events {
                        tr {
                            td { (when(e.at)) }
                            td { (e.principal) }
                            td { (e.operation) }
                            td { (e.job_queue) @if let Some(s) = &e.quota_share_name { "/" (s) } @if let Some(j) = &e.job_id { " " a href={ "/jobs/" (enc(j)) } { (j) } } }
                            td { (e.detail) }
                        }
                    }
                }
            }
            @if let Some(n) = next {
                p { a rel="next" href={ "/audit?queue=" (enc(&filter.queue)) "&share=" (enc(&filter.share)) "&principal=" (enc(&filter.principal)) "&next=" (enc(n)) } { "Next page" } }
            }
        }
    }
}

/// The what-if form's values.
#[derive(Default)]
pub struct WhatIf {
    pub share: String,
    pub instance_type: String,
    pub count: String,
    pub priority: String,
    pub estimated_runtime: String,
}

/// What-if: a submit, foreseen by the scheduler's own pass.
pub fn what_if(
    q: &str,
    shares: &[String],
    types: &[String],
    form: &WhatIf,
    result: Option<Result<&JobOutlook, &str>>,
    csrf: &str,
) -> Markup {
    html! {
        h1 { "What if, in " (q) }
        p { "Foresee a submit before making it: the scheduler runs its own next pass on a copy of the queue. Nothing is stored." }
        form method="post" action={ "/queues/" (enc(q)) "/what-if" } {
            input type="hidden" name="csrf" value=(csrf);
            p { label for="ws" { "Share" }
                select id="ws" name="share" required {
                    @for s in shares { option value=(s) selected[*s == form.share] { (s) } }
                }
            }
            p { label for="wt" { "Instance type" }
                select id="wt" name="instanceType" required {
                    @for t in types { option value=(t) selected[*t == form.instance_type] { (t) } }
                }
            }
            p { label for="wc" { "Instances" } input id="wc" name="count" type="number" min="1" max="100000" value=(if form.count.is_empty() { "1" } else { &form.count }) required; }
            p { label for="wp" { "Scheduling priority (empty: the class's lowest)" } input id="wp" name="priority" type="number" min="0" max="9999" value=(form.priority); }
            p { label for="wr" { "Estimated runtime, seconds (optional)" } input id="wr" name="estimatedRuntime" type="number" min="1" value=(form.estimated_runtime); }
            button type="submit" { "Foresee" }
        }
        @match result {
            None => {},
            Some(Err(e)) => { p class="error" role="alert" { (e) } },
            Some(Ok(o)) => {
                section class="why" aria-labelledby="result" {
                    h2 id="result" { "It would " (match o.outcome.as_str() { "STARTS" => "start now", "PREEMPTS" => "preempt", "WAITS" => "wait", _ => "not run" }) }
                    @if o.outcome == "STARTS" {
                        p { (o.own_instances) " instance(s) of its share's own, " (o.borrowed_instances) " borrowed" @if !o.lending_shares.is_empty() { " from " (o.lending_shares.join(", ")) } "." }
                    }
                    @if !o.victims.is_empty() {
                        p { "These jobs would be stopped for it:" }
                        ul { @for v in &o.victims { li { (v.job_name.as_deref().unwrap_or(&v.job_id)) " (share " (v.quota_share_name) ", " (v.kind) "): " (span((v.work_at_risk_seconds * 1000.0) as u64)) " of work at risk" } } }
                    }
                    @if let Some(r) = &o.status_reason { p class="reason" { (r) } }
                    @if let Some(u) = &o.unblock { p { strong { "What would unblock it: " } (u) } }
                    @if let Some(ms) = o.estimated_start { p { strong { "Expected to start: " } (when(ms)) } }
                    @if let Some(n) = &o.estimate_note { p { strong { "Expected to start: " } (n) } }
                }
            },
        }
    }
}

/// The limit what-if form's values (admins).
#[derive(Default)]
pub struct LimitChange {
    pub share: String,
    pub instance_type: String,
    pub max_capacity: String,
}

fn affected_list(title: &str, jobs: &[qm_wire::messages::AffectedJob]) -> Markup {
    html! {
        @if !jobs.is_empty() {
            h3 { (title) " (" (jobs.len()) ")" }
            ul {
                @for j in jobs.iter().take(100) {
                    li {
                        a href={ "/jobs/" (enc(&j.job_id)) } { (j.job_name.as_deref().unwrap_or(&j.job_id)) }
                        " (share " (j.quota_share_name) ")"
                        @if !j.detail.is_empty() { ": " (j.detail) }
                    }
                }
                @if jobs.len() > 100 { li { "and " (jobs.len() - 100) " more" } }
            }
        }
    }
}

/// What-if for admins: a share's limit changed, foreseen by the core's
/// dry run of the configuration; nothing is stored.
pub fn limit_what_if(
    q: &str,
    shares: &[String],
    types: &[String],
    form: &LimitChange,
    result: Option<Result<&qm_wire::messages::QueueChangeOutlook, &str>>,
    csrf: &str,
) -> Markup {
    html! {
        h2 { "What if a share's limit changed" }
        form method="post" action={ "/queues/" (enc(q)) "/what-if/limit" } {
            input type="hidden" name="csrf" value=(csrf);
            p { label for="ls" { "Share" }
                select id="ls" name="share" required {
                    @for s in shares { option value=(s) selected[*s == form.share] { (s) } }
                }
            }
            p { label for="lt" { "Instance type" }
                select id="lt" name="instanceType" required {
                    @for t in types { option value=(t) selected[*t == form.instance_type] { (t) } }
                }
            }
            p { label for="lm" { "New maxCapacity" } input id="lm" name="maxCapacity" type="number" min="0" value=(form.max_capacity) required; }
            button type="submit" { "Foresee the change" }
        }
        @match result {
            None => {},
            Some(Err(e)) => { p class="error" role="alert" { (e) } },
            Some(Ok(o)) => {
                section class="why" aria-labelledby="limit-result" {
                    h3 id="limit-result" { "Lowering or raising " (form.share) "'s " (form.instance_type) " to " (form.max_capacity) " would:" }
                    @if o.become_preemptible.is_empty() && o.become_protected.is_empty() && o.become_unfittable.is_empty()
                        && o.reclassified.is_empty() && o.terminated.is_empty() && o.next_pass_starts.is_empty() && o.next_pass_preemptions.is_empty() {
                        p { "change nothing for any job now." }
                    }
                    (affected_list("Become preemptible (on borrowed capacity)", &o.become_preemptible))
                    (affected_list("No longer preemptible", &o.become_protected))
                    (affected_list("Could never run", &o.become_unfittable))
                    (affected_list("Moved to another class or priority", &o.reclassified))
                    (affected_list("Stopped or failed", &o.terminated))
                    (affected_list("Started by the next pass", &o.next_pass_starts))
                    @if !o.next_pass_preemptions.is_empty() {
                        h3 { "Preempted by the next pass (" (o.next_pass_preemptions.len()) ")" }
                        ul { @for v in &o.next_pass_preemptions { li { (v.job_name.as_deref().unwrap_or(&v.job_id)) " (share " (v.quota_share_name) ", " (v.kind) "): " (span((v.work_at_risk_seconds * 1000.0) as u64)) " of work at risk" } } }
                    }
                }
            },
        }
    }
}

/// A page that says what went wrong, in the frame.
pub fn problem(title: &str, message: &str) -> Markup {
    html! {
        h1 { (title) }
        p class="error" role="alert" { (message) }
        p { a href="/queues" { "Back to the queues" } }
    }
}
