//! `qm audit`: the audit log, between two times.

use qm_service::client::Client;
use qm_wire::messages::{ListAuditEvents, ListAuditEventsResponse};
use qm_wire::subjects::{self, Operation};

use super::{print_json, rfc3339, table, usage, Failure};

/// Milliseconds since the Unix epoch from `2026-12-03T09:00:00Z` (or an
/// offset such as `+01:00`, fractions ignored) or a plain number of ms.
pub fn parse_time(flag: &str, text: &str) -> Result<u64, Failure> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let bad = || {
        usage(format!(
            "{flag}: {text:?} is not a time (use RFC 3339 such as 2026-12-03T09:00:00Z, or ms since the epoch)"
        ))
    };
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, Failure> {
        text.get(r).and_then(|s| s.parse().ok()).ok_or_else(bad)
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return Err(bad());
    }
    let mut rest = &text[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        rest = frac.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
            let oh: i64 = o[1..3].parse().map_err(|_| bad())?;
            let om: i64 = o[4..6].parse().map_err(|_| bad())?;
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (oh * 3600 + om * 60)
        }
        _ => return Err(bad()),
    };
    // Days from 1970-01-01 (the proleptic Gregorian calendar).
    let (yy, mm) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * mm + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    u64::try_from(secs * 1000).map_err(|_| bad())
}

pub fn audit_request(
    queue: &Option<String>,
    share: &Option<String>,
    principal: &Option<String>,
    since: &Option<String>,
    until: &Option<String>,
) -> Result<ListAuditEvents, Failure> {
    for (flag, v) in [("--queue", queue), ("--share", share), ("--by", principal)] {
        if let Some(v) = v {
            subjects::token(v).map_err(|e| usage(format!("{flag}: {e}")))?;
        }
    }
    Ok(ListAuditEvents {
        job_queue: queue.clone(),
        quota_share_name: share.clone(),
        principal: principal.clone(),
        since: since
            .as_deref()
            .map(|t| parse_time("--since", t))
            .transpose()?,
        until: until
            .as_deref()
            .map(|t| parse_time("--until", t))
            .transpose()?,
        max_results: None,
        next_token: None,
    })
}

pub async fn audit(
    c: &Client,
    mut req: ListAuditEvents,
    max: Option<usize>,
    json: bool,
) -> Result<(), Failure> {
    let mut events = Vec::new();
    loop {
        let page: ListAuditEventsResponse = c.call(Operation::ListAuditEvents, &req).await?;
        events.extend(page.audit_events);
        if max.is_some_and(|m| events.len() >= m) {
            events.truncate(max.unwrap_or(usize::MAX));
            break;
        }
        match page.next_token {
            Some(t) => req.next_token = Some(t),
            None => break,
        }
    }
    if json {
        print_json(&events);
        return Ok(());
    }
    let mut t = table(
        &["TIME", "PRINCIPAL", "OPERATION", "SHARE", "JOB", "DETAIL"],
        &[],
    );
    for e in &events {
        let share = format!(
            "{}/{}",
            e.job_queue,
            e.quota_share_name.as_deref().unwrap_or("*")
        );
        t.add_row(vec![
            rfc3339(e.at),
            e.principal.clone(),
            e.operation.clone(),
            share,
            e.job_id.clone().unwrap_or_else(|| "-".into()),
            e.detail.clone(),
        ]);
    }
    println!("{}", t.trim_fmt());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_and_print_in_rfc3339() {
        let ms = |t: &str| parse_time("--since", t).ok();
        assert_eq!(ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(ms("2026-12-03T09:00:00Z"), Some(1_796_288_400_000));
        assert_eq!(ms("2026-12-03T10:00:00+01:00"), Some(1_796_288_400_000));
        assert_eq!(ms("2026-12-03T09:00:00.250Z"), Some(1_796_288_400_000));
        assert_eq!(ms("1796288400123"), Some(1_796_288_400_123));
        assert_eq!(ms("2026-13-03T09:00:00Z"), None);
        assert_eq!(ms("tomorrow"), None);
        assert_eq!(rfc3339(1_796_288_400_123), "2026-12-03T09:00:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}
