//! Days on the wire: `YYYY-MM-DD`, UTC, proleptic Gregorian (the usage
//! ledger's and the policy-stability record's periods), with the `time`
//! crate's calendar.

use time::{Date, Month};

const DAY_MS: u64 = 86_400_000;

/// The Unix epoch's day.
const EPOCH: Date = match Date::from_ordinal_date(1970, 1) {
    Ok(d) => d,
    Err(_) => panic!("1970-01-01 is a date"),
};

/// `YYYY-MM-DD` of the day holding `ms` (ms since the Unix epoch).
pub fn utc_date(ms: u64) -> String {
    // Past the calendar's last day (9999-12-31), that day.
    let date = i32::try_from(ms / DAY_MS)
        .ok()
        .and_then(|days| EPOCH.to_julian_day().checked_add(days))
        .and_then(|day| Date::from_julian_day(day).ok())
        .unwrap_or(Date::MAX);
    format!(
        "{:04}-{:02}-{:02}",
        date.year(),
        u8::from(date.month()),
        date.day()
    )
}

/// The day since the Unix epoch that `YYYY-MM-DD` names, or what is wrong
/// with it (not a date, a day the calendar lacks, before 1970).
pub fn day_of_utc_date(text: &str) -> Result<u32, String> {
    let wrong = || format!("{text:?} is not a date (YYYY-MM-DD)");
    let parts: Vec<&str> = text.split('-').collect();
    let [y, m, d] = parts[..] else {
        return Err(wrong());
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if y.len() != 4 || m.len() != 2 || d.len() != 2 || !digits(y) || !digits(m) || !digits(d) {
        return Err(wrong());
    }
    let (Ok(y), Ok(m), Ok(d)) = (y.parse::<i32>(), m.parse::<u8>(), d.parse::<u8>()) else {
        return Err(wrong());
    };
    let Ok(month) = Month::try_from(m) else {
        return Err(wrong());
    };
    if !(1..=31).contains(&d) {
        return Err(wrong());
    }
    if y < 1970 {
        return Err(format!("{text:?} is before 1970"));
    }
    // 2023-02-31 is refused, not taken for March 3rd.
    let date = Date::from_calendar_date(y, month, d)
        .map_err(|_| format!("{text:?} is not a day of the calendar"))?;
    u32::try_from(date.to_julian_day() - EPOCH.to_julian_day()).map_err(|_| wrong())
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
        assert_eq!(
            utc_date(u64::MAX),
            "9999-12-31",
            "past the calendar: its last day"
        );
        for bad in [
            "2023-02-29",
            "2026-13-01",
            "2026-1-01",
            "yesterday",
            "1969-12-31",
            "2024-+2-+9",
            "",
        ] {
            let e = day_of_utc_date(bad).expect_err(bad);
            assert!(e.contains(bad), "{e}");
        }
    }
}
