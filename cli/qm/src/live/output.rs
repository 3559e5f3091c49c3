//! How commands show what they read: tables, JSON, CSV fields, times and
//! sizes as people read them.

use time::macros::format_description;
use time::OffsetDateTime;

/// Bytes for a person: B, KiB, MiB, GiB or TiB with one decimal.
pub(super) fn human_bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

/// `ms` since the Unix epoch in RFC 3339, UTC, to the millisecond
/// (`2026-12-03T09:00:00.123Z`; past the year 9999, the number itself).
pub(super) fn rfc3339(ms: u64) -> String {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .ok()
        .and_then(|t| {
            t.format(format_description!(
                "[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z"
            ))
            .ok()
        })
        .unwrap_or_else(|| ms.to_string())
}

/// A borderless table whose columns are as wide as their widest cell (ids
/// of any length stay aligned); `right` lists the numeric columns.
pub(super) fn table(header: &[&str], right: &[usize]) -> comfy_table::Table {
    let mut t = comfy_table::Table::new();
    t.load_style(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Disabled)
        .set_header(header.to_vec());
    for &i in right {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(comfy_table::CellAlignment::Right);
        }
    }
    t
}

pub(super) fn print_json<T: serde::Serialize>(v: &T) {
    match serde_json::to_string_pretty(v) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("qm: cannot print JSON: {e}"),
    }
}

/// One CSV line of `cells`, each quoted only when it must be (the `csv`
/// crate's rule; an empty cell stays empty), without its line end.
pub(super) fn csv_line<S: AsRef<str>>(cells: &[S]) -> String {
    let mut w = csv::WriterBuilder::new()
        .quote_style(csv::QuoteStyle::Necessary)
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    let written = w.write_record(cells.iter().map(AsRef::as_ref)).is_ok();
    let bytes = w.into_inner().ok().filter(|_| written).unwrap_or_default();
    let mut line = String::from_utf8(bytes).unwrap_or_default();
    if line.ends_with('\n') {
        line.pop();
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_a_person_would_write_them() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(2 << 30), "2.0 GiB");
        assert_eq!(human_bytes(5 << 40), "5.0 TiB");
        assert_eq!(human_bytes(3 << 50), "3072.0 TiB");
    }

    #[test]
    fn tables_fit_their_widest_cell_and_align_numbers_right() {
        let mut t = table(&["JOB", "PRIO", "REASON"], &[1]);
        t.add_row(vec!["0b6f7c1e-2a4d-4b9e-9a51-3f1d2c7e8a90", "5", "waiting"]);
        t.add_row(vec!["j-1", "10", ""]);
        let text = t.trim_fmt();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        // Every row's second column ends where the header's does.
        let end = lines[0].find("PRIO").expect("header") + "PRIO".len();
        assert_eq!(&lines[1][end - 1..end], "5", "{text}");
        assert_eq!(&lines[2][end - 2..end], "10", "{text}");
        assert!(lines[1].contains("0b6f7c1e-2a4d-4b9e-9a51-3f1d2c7e8a90"));
        // A table without rows is its header line alone.
        assert_eq!(
            table(&["TIME", "DETAIL"], &[]).trim_fmt().lines().count(),
            1
        );
    }
}
