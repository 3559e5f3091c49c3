//! `qm events`: the stored events of the shares the caller may read, from
//! a cursor or a time on, and followed with `--follow` (ADR 0022).

use qm_service::client::Client;
use qm_wire::subjects;

use super::failure::{usage, Failure};

/// What `qm events` reads: the queue, share and job (each optional), and
/// where to start.
#[derive(Clone, Debug, clap::Args)]
pub struct EventsArgs {
    /// Only this queue's events.
    #[arg(long)]
    pub queue: Option<String>,
    /// Only this share (needs --queue).
    #[arg(long)]
    pub share: Option<String>,
    /// Only this job's events.
    #[arg(long)]
    pub job: Option<String>,
    /// Go on after this cursor (from an earlier line or run).
    #[arg(long, value_name = "CURSOR")]
    pub after: Option<String>,
    /// From this time (RFC 3339, e.g. 2026-12-03T09:00:00Z, or ms since the epoch); default: the oldest kept.
    #[arg(long)]
    pub since: Option<String>,
    /// Wait for new events until interrupted.
    #[arg(long, short)]
    pub follow: bool,
    /// Stop after this many events.
    #[arg(long)]
    pub max: Option<usize>,
}

/// One event as a line: when, what, and the cursor to go on after it.
fn event_line(e: &qm_wire::messages::StoredEvent) -> String {
    use qm_wire::messages::EventKind;
    let what = match e.kind {
        EventKind::Job => e.job().map(|c| {
            let why = if c.status_reason.is_empty() {
                String::new()
            } else {
                format!(" ({})", c.status_reason)
            };
            let attempt = c
                .attempt
                .map(|a| format!(" attempt {a}"))
                .unwrap_or_default();
            (c.at, format!("{} -> {}{attempt}{why}", c.from, c.to))
        }),
        EventKind::Preemption => e.preemption().map(|p| {
            let whom = if p.for_job_id.is_empty() {
                String::new()
            } else {
                format!(" for {}", p.for_job_id)
            };
            (
                p.at,
                format!(
                    "preemption {} {} of attempt {}{whom}",
                    p.kind, p.phase, p.attempt
                ),
            )
        }),
        EventKind::Checkpoint => e.checkpoint().map(|c| {
            let step = c.step.map(|s| format!(" at step {s}")).unwrap_or_default();
            (
                c.created_at,
                format!(
                    "checkpoint {} of attempt {} committed{step}",
                    c.seq, c.attempt
                ),
            )
        }),
    };
    let (at, text) = what.unwrap_or((0, "(unreadable event)".into()));
    format!(
        "{}  {}/{}  {}  {}  [{}]",
        super::output::rfc3339(at),
        e.job_queue,
        e.quota_share_name,
        e.job_id,
        text,
        e.cursor
    )
}

/// Prints the stored events (of the shares the caller may read) from a
/// cursor or a time on; with `follow`, waits for new ones until
/// interrupted.
pub async fn events(c: &Client, args: EventsArgs, json: bool) -> Result<(), Failure> {
    for (flag, v) in [
        ("--queue", &args.queue),
        ("--share", &args.share),
        ("--job", &args.job),
    ] {
        if let Some(v) = v {
            subjects::token(v).map_err(|e| usage(format!("{flag}: {e}")))?;
        }
    }
    if args.share.is_some() && args.queue.is_none() {
        return Err(usage("--share needs --queue"));
    }
    if args.after.is_some() && args.since.is_some() {
        return Err(usage("give --after or --since, not both"));
    }
    let since = args
        .since
        .as_deref()
        .map(|t| super::audit::parse_time("--since", t))
        .transpose()?;
    let request = qm_wire::messages::ListEvents {
        job_queue: args.queue,
        quota_share_name: args.share,
        job_id: args.job,
        after: args.after,
        since,
        ..Default::default()
    };
    let mut printed = 0usize;
    if !args.follow {
        // The events stored now, page by page, then stop.
        let mut request = request;
        loop {
            let page = c.list_events(&request).await?;
            for e in &page.events {
                if args.max.is_some_and(|m| printed >= m) {
                    return Ok(());
                }
                print_event(e, json);
                printed += 1;
            }
            if page.caught_up || args.max.is_some_and(|m| printed >= m) {
                if !json {
                    eprintln!("qm: {printed} event(s); go on with --after {}", page.after);
                }
                return Ok(());
            }
            request.after = Some(page.after);
        }
    }
    let mut events = c.events(request);
    while let Some(e) = events.next().await {
        print_event(&e?, json);
        printed += 1;
        if args.max.is_some_and(|m| printed >= m) {
            break;
        }
    }
    Ok(())
}

fn print_event(e: &qm_wire::messages::StoredEvent, json: bool) {
    if json {
        println!("{}", serde_json::to_string(e).unwrap_or_default());
    } else {
        println!("{}", event_line(e));
    }
}
