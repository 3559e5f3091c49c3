//! A queue as it runs: `qm snapshot`, `qm top` and `qm watch`.

use std::collections::BTreeMap;

use futures::StreamExt;
use qm_service::client::Client;
use qm_wire::messages::{Caller, Empty, JobQueueSnapshot, QueueRef, ShareLostWork};
use qm_wire::subjects;
use time::macros::format_description;
use time::OffsetDateTime;

use super::failure::{usage, Failure};
use super::output::{human_bytes, print_json, table};

pub async fn snapshot(c: &Client, queue: &str, json: bool) -> Result<(), Failure> {
    let s = fetch_snapshot(c, queue).await?;
    if json {
        print_json(&s);
        return Ok(());
    }
    print!("{}", render_snapshot(&s));
    Ok(())
}

async fn fetch_snapshot(c: &Client, queue: &str) -> Result<JobQueueSnapshot, Failure> {
    Ok(c.get_job_queue_snapshot(&QueueRef {
        job_queue: queue.into(),
    })
    .await?)
}

/// A bar of `used` against `owned` (borrowed instances beyond it in `+`).
fn bar(used: u32, owned: u32) -> String {
    const WIDTH: u32 = 12;
    let scale = owned.max(used).max(1);
    let cells = |n: u32| ((n * WIDTH + scale / 2) / scale) as usize;
    let mine = cells(used.min(owned));
    let over = cells(used).saturating_sub(mine);
    let free = (WIDTH as usize).saturating_sub(mine + over);
    format!(
        "{}{}{}",
        "#".repeat(mine),
        "+".repeat(over),
        ".".repeat(free)
    )
}

fn render_snapshot(s: &JobQueueSnapshot) -> String {
    let mut out = format!("job queue {}\n\n", s.job_queue);
    let mut shares = table(
        &[
            "SHARE", "TYPE", "OWNED", "USED", "BORROWED", "LENT", "IDLE", "USE",
        ],
        &[2, 3, 4, 5, 6],
    );
    for u in &s.shares {
        shares.add_row(vec![
            u.quota_share_name.clone(),
            u.instance_type.clone(),
            u.entitlement.to_string(),
            u.used.to_string(),
            u.borrowed.to_string(),
            u.lent.to_string(),
            u.idle.to_string(),
            bar(u.used, u.entitlement),
        ]);
    }
    out.push_str(&format!("{}\n", shares.trim_fmt()));
    out.push_str(&format!(
        "\nfront of queue ({} shown)\n",
        s.front_of_queue.len()
    ));
    let mut front = table(&["JOB", "NAME", "SHARE", "PRIO", "REASON"], &[3]);
    for j in &s.front_of_queue {
        front.add_row(vec![
            j.job_id.clone(),
            j.job_name.clone(),
            j.quota_share_name.clone(),
            j.scheduling_priority.to_string(),
            j.status_reason.clone(),
        ]);
    }
    out.push_str(&format!("{}\n", front.trim_fmt()));
    if !s.lost_work.is_empty() {
        out.push_str(&format!("\n{}", render_lost_work(&s.lost_work)));
    }
    out.push_str(&super::usage::render_budgets(&s.budgets));
    out
}

/// The lost-work ledger's totals: per share and cause, the attempts that
/// threw work away and the instance-seconds to compute again; and per
/// share, what other jobs lost being preempted for its jobs.
fn render_lost_work(lost: &[ShareLostWork]) -> String {
    let secs = |ms: u64| format!("{:.1}", ms as f64 / 1000.0);
    let mut t = table(
        &["SHARE", "CAUSE", "ATTEMPTS", "RECOMPUTED (instance-s)"],
        &[2, 3],
    );
    for share in lost {
        for (cause, w) in &share.by_cause {
            t.add_row(vec![
                share.quota_share_name.clone(),
                cause.clone(),
                w.attempts.to_string(),
                secs(w.recomputed_instance_ms),
            ]);
        }
        if share.restored_bytes > 0 {
            t.add_row(vec![
                share.quota_share_name.clone(),
                format!(
                    "(checkpoints restored: {})",
                    human_bytes(share.restored_bytes)
                ),
                "-".into(),
                "-".into(),
            ]);
        }
        let w = &share.lost_for_this_share;
        if w.attempts > 0 {
            t.add_row(vec![
                share.quota_share_name.clone(),
                "(others', for this share)".into(),
                w.attempts.to_string(),
                secs(w.recomputed_instance_ms),
            ]);
        }
    }
    format!("lost work (preemptions and lost hosts)\n{}\n", t.trim_fmt())
}

/// `qm top`: the snapshot of `queue`, refreshed every `interval` until
/// interrupted (or `iterations` times). On a terminal each refresh
/// replaces the screen; otherwise refreshes follow each other. A failed
/// refresh is shown and retried: the view outlives a restart of admission.
pub async fn top(
    c: &Client,
    queue: &str,
    interval: std::time::Duration,
    iterations: Option<u64>,
) -> Result<(), Failure> {
    use std::io::{IsTerminal, Write};
    subjects::token(queue).map_err(|e| usage(format!("--queue: {e}")))?;
    let terminal = std::io::stdout().is_terminal();
    let mut n = 0u64;
    loop {
        let view = match fetch_snapshot(c, queue).await {
            Ok(s) => render_snapshot(&s),
            // A queue that does not exist (or no service) is an error at
            // once, not a blank screen; later, a failed refresh is shown.
            Err(e) if n == 0 => return Err(e),
            Err(e) => format!("job queue {queue}\n\nrefresh failed: {}\n", e.0),
        };
        let now = utc_clock();
        let header = format!(
            "qm top  {now}  every {}s  (Ctrl-C to quit)\n\n",
            interval.as_secs_f64()
        );
        let mut stdout = std::io::stdout().lock();
        if terminal {
            let _ = write!(stdout, "\x1b[H\x1b[2J");
        } else if n > 0 {
            let _ = writeln!(stdout);
        }
        let _ = write!(stdout, "{header}{view}");
        let _ = stdout.flush();
        drop(stdout);
        n += 1;
        if iterations.is_some_and(|max| n >= max) {
            return Ok(());
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
    }
}

/// The wall-clock time, UTC, to the second (`HH:MM:SS UTC`).
fn utc_clock() -> String {
    i64::try_from(qm_service::now_ms() / 1000)
        .ok()
        .and_then(|secs| OffsetDateTime::from_unix_timestamp(secs).ok())
        .and_then(|t| {
            t.format(format_description!("[hour]:[minute]:[second] UTC"))
                .ok()
        })
        .unwrap_or_default()
}

/// Prints job and preemption events as they happen, until interrupted:
/// of every share for admins and readers, of the caller's own shares for a
/// team (the server refuses a team a subscription to anyone else's).
pub async fn watch(
    c: &Client,
    queue: Option<String>,
    job: Option<String>,
    json: bool,
) -> Result<(), Failure> {
    let q = queue.as_deref().unwrap_or("*");
    let j = job.as_deref().unwrap_or("*");
    for t in [q, j] {
        if t != "*" {
            subjects::token(t).map_err(|e| usage(e.to_string()))?;
        }
    }
    let me: Caller = c.who_am_i(&Empty {}).await?;
    let mut patterns = Vec::new();
    if qm_tenancy::sees_all(&me) {
        patterns.push(subjects::events_of(q, j).map_err(|e| usage(e.to_string()))?);
    } else {
        for grant in me
            .shares
            .iter()
            .filter_map(|s| qm_tenancy::Grant::parse(s).ok())
        {
            if q != "*" && grant.queue != q {
                continue;
            }
            let share = grant.share.as_deref().unwrap_or("*");
            let subjects =
                subjects::share_events(&grant.queue, share, j).map_err(|e| usage(e.to_string()))?;
            patterns.extend(subjects);
        }
    }
    if patterns.is_empty() {
        return Err(Failure(
            format!(
                "principal {} owns no share{} to watch",
                me.principal,
                queue.map(|q| format!(" of queue {q}")).unwrap_or_default()
            ),
            1,
        ));
    }
    let mut subs = Vec::new();
    for subject in &patterns {
        subs.push(
            c.nats
                .subscribe(subject.clone())
                .await
                .map_err(|e| Failure(format!("cannot subscribe to {subject}: {e}"), 3))?,
        );
    }
    let mut sub = futures::stream::select_all(subs);
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    eprintln!("qm: watching {} (Ctrl-C to stop)", patterns.join(", "));
    while let Some(msg) = sub.next().await {
        if json {
            println!("{}", String::from_utf8_lossy(&msg.payload));
            continue;
        }
        let v: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap_or_default();
        let s = |k: &str| v.get(k).and_then(|x| x.as_str()).unwrap_or("").to_string();
        let id = s("jobId");
        if let Some(n) = v.get("jobName").and_then(|x| x.as_str()) {
            names.insert(id.clone(), n.to_string());
        }
        let name = names.get(&id).cloned().unwrap_or_else(|| id.clone());
        if msg.subject.starts_with(subjects::PREEMPTION_EVENTS) {
            println!(
                "{} preemption {} of {} ({}) for {}",
                s("phase"),
                s("kind"),
                name,
                id,
                s("forJobId")
            );
        } else {
            println!(
                "{:<16} {:<10} -> {:<10} {}",
                name,
                s("from"),
                s("to"),
                s("statusReason")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshot_shows_lost_work_per_share_and_cause_and_for_whom() {
        let total = |attempts, ms| qm_wire::messages::LostWorkTotal {
            attempts,
            recomputed_instance_ms: ms,
        };
        let mut s = JobQueueSnapshot {
            job_queue: "q".into(),
            ..Default::default()
        };
        assert!(
            !render_snapshot(&s).contains("lost work"),
            "nothing lost, no table"
        );
        s.lost_work = vec![
            ShareLostWork {
                quota_share_name: "borrower".into(),
                by_cause: [
                    ("HOST_LOST".to_string(), total(1, 80_000)),
                    ("PREEMPTED_CROSS_SHARE".to_string(), total(3, 44_500)),
                ]
                .into(),
                lost_for_this_share: total(0, 0),
                restored_bytes: 3 << 30,
            },
            ShareLostWork {
                quota_share_name: "owner".into(),
                by_cause: Default::default(),
                lost_for_this_share: total(3, 44_500),
                restored_bytes: 0,
            },
        ];
        let text = render_snapshot(&s);
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip_while(|l| !l.starts_with("lost work"))
            .skip(2)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            vec![
                vec!["borrower", "HOST_LOST", "1", "80.0"],
                vec!["borrower", "PREEMPTED_CROSS_SHARE", "3", "44.5"],
                vec![
                    "borrower",
                    "(checkpoints",
                    "restored:",
                    "3.0",
                    "GiB)",
                    "-",
                    "-"
                ],
                vec!["owner", "(others',", "for", "this", "share)", "3", "44.5"],
            ],
            "{text}"
        );
    }
}
