//! Days on the wire: `YYYY-MM-DD`, UTC, proleptic Gregorian (the usage
//! ledger's and the policy-stability record's periods).

const DAY_MS: u64 = 86_400_000;

/// `YYYY-MM-DD` of the day holding `ms` (ms since the Unix epoch).
pub fn utc_date(ms: u64) -> String {
    // Howard Hinnant's civil_from_days.
    let z = (ms / DAY_MS) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The day since the Unix epoch that `YYYY-MM-DD` names, or what is wrong
/// with it (not a date, a day the calendar lacks, before 1970).
pub fn day_of_utc_date(text: &str) -> Result<u32, String> {
    let wrong = || format!("{text:?} is not a date (YYYY-MM-DD)");
    let parts: Vec<&str> = text.split('-').collect();
    let [y, m, d] = parts[..] else {
        return Err(wrong());
    };
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return Err(wrong());
    }
    let (Ok(y), Ok(m), Ok(d)) = (y.parse::<i64>(), m.parse::<i64>(), d.parse::<i64>()) else {
        return Err(wrong());
    };
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return Err(wrong());
    }
    if y < 1970 {
        return Err(format!("{text:?} is before 1970"));
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    // 2023-02-31 would silently be March 3rd: refused.
    if utc_date(days as u64 * DAY_MS) != text {
        return Err(format!("{text:?} is not a day of the calendar"));
    }
    u32::try_from(days).map_err(|_| wrong())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_bad_ones_are_named() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(1_796_288_400_000), "2026-12-03");
        for day in [0u32, 59, 60, 365, 11_016, 20_790, 40_000] {
            let text = utc_date(u64::from(day) * DAY_MS);
            assert_eq!(day_of_utc_date(&text), Ok(day), "{text}");
        }
        assert_eq!(day_of_utc_date("2024-02-29"), Ok(19_782));
        for bad in [
            "2023-02-29",
            "2026-13-01",
            "2026-1-01",
            "yesterday",
            "1969-12-31",
            "",
        ] {
            let e = day_of_utc_date(bad).expect_err(bad);
            assert!(e.contains(bad), "{e}");
        }
    }
}
