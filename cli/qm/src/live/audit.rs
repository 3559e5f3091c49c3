//! `qm audit`: the audit log, between two times.

use qm_service::client::Client;
use qm_wire::messages::{ListAuditEvents, ListAuditEventsResponse};
use qm_wire::subjects;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::failure::{usage, Failure};
use super::output::{print_json, rfc3339, table};

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
    // `time` takes any character between the date and the time; RFC 3339
    // names `T` and allows a space.
    if !matches!(text.as_bytes().get(10), Some(b'T' | b't' | b' ')) {
        return Err(bad());
    }
    let at = OffsetDateTime::parse(text, &Rfc3339).map_err(|_| bad())?;
    u64::try_from(at.unix_timestamp() * 1000).map_err(|_| bad())
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
        let page: ListAuditEventsResponse = c.list_audit_events(&req).await?;
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
