//! Reading real traces: the ITP-2021 job traces (`job_id,submission_time,
//! duration,num_gpu`, one CSV per cluster) and the Helios (Venus) daily
//! quota table (`date,<vc>...,total`). A malformed line is never dropped
//! silently: it is reported with its file and line, and either skipped
//! (counted in the report) or fatal.

/// One job of a trace.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceJob {
    /// The cluster (the file's name without `.csv`).
    pub cluster: String,
    pub job_id: String,
    /// Seconds from the start of collection.
    pub submitted: f64,
    /// Seconds of run time.
    pub duration: f64,
    pub gpus: u32,
}

/// A line that could not be read.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BadLine {
    pub file: String,
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for BadLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.message)
    }
}

/// What to do with a malformed line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnBadLine {
    /// Report it and go on without it.
    Skip,
    /// Stop at it.
    Fail,
}

const ITP_HEADER: &str = "job_id,submission_time,duration,num_gpu";

fn number(field: &str, v: &str) -> Result<f64, String> {
    let x: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{field} {v:?} is not a number"))?;
    if !x.is_finite() || x < 0.0 {
        return Err(format!("{field} {v:?} is not a number >= 0"));
    }
    Ok(x)
}

/// The records of a CSV text with the line each is on (the `csv` crate,
/// reading fields as the traces write them: split at commas, no quoting,
/// so a stray quote cannot join lines). Lines that hold nothing but
/// spaces are left out; every other line is a record, so a malformed one
/// is named, never dropped. A line the reader cannot read at all is one
/// field holding the reader's error.
fn records(text: &str) -> impl Iterator<Item = (usize, Vec<String>)> + '_ {
    let reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .quoting(false)
        .from_reader(text.as_bytes());
    // A record's position is where the reader began reading it, before
    // the blank lines it skipped: its line is the first that is not blank.
    let bytes = text.as_bytes();
    let line_at = move |p: Option<&csv::Position>| {
        let mut byte = p.map_or(0, |p| p.byte() as usize).min(bytes.len());
        while bytes.get(byte).is_some_and(|b| matches!(b, b'\n' | b'\r')) {
            byte += 1;
        }
        bytes[..byte].iter().filter(|&&b| b == b'\n').count() + 1
    };
    reader.into_byte_records().filter_map(move |r| {
        let (line, fields) = match r {
            Ok(r) => (
                line_at(r.position()),
                r.iter()
                    .map(|f| String::from_utf8_lossy(f).into_owned())
                    .collect::<Vec<String>>(),
            ),
            Err(e) => (line_at(e.position()), vec![e.to_string()]),
        };
        let blank = fields.len() == 1 && fields[0].trim().is_empty();
        (!blank).then_some((line, fields))
    })
}

/// Reads one ITP-2021 cluster file (`file` names it in messages; the
/// cluster is its name without directories and `.csv`).
pub fn read_itp(
    file: &str,
    text: &str,
    on_bad: OnBadLine,
) -> Result<(Vec<TraceJob>, Vec<BadLine>), BadLine> {
    let cluster = std::path::Path::new(file)
        .file_stem()
        .map_or_else(|| file.to_string(), |s| s.to_string_lossy().into_owned());
    let mut jobs = Vec::new();
    let mut bad = Vec::new();
    let mut lines = records(text);
    match lines.next() {
        Some((1, h)) if h.join(",").trim() == ITP_HEADER => {}
        Some((line, h)) => {
            // The header is the first line, whatever it holds.
            let header = if line == 1 {
                h.join(",")
            } else {
                String::new()
            };
            return Err(BadLine {
                file: file.into(),
                line: 1,
                message: format!(
                    "the header is {header:?}, not {ITP_HEADER:?} (an ITP-2021 cluster file)"
                ),
            });
        }
        None => {
            return Err(BadLine {
                file: file.into(),
                line: 1,
                message: "the file is empty".into(),
            })
        }
    }
    for (line, fields) in lines {
        let parsed = (|| {
            let fields: Vec<&str> = fields.iter().map(String::as_str).collect();
            let [id, submitted, duration, gpus] = fields[..] else {
                return Err(format!(
                    "{} fields, not 4 (job_id,submission_time,duration,num_gpu)",
                    fields.len()
                ));
            };
            if id.trim().is_empty() {
                return Err("no job_id".into());
            }
            let duration = number("duration", duration)?;
            if duration <= 0.0 {
                return Err(format!("duration {duration} is not > 0"));
            }
            let gpus = number("num_gpu", gpus)?;
            if gpus < 1.0 || gpus.fract() != 0.0 || gpus > 4096.0 {
                return Err(format!("num_gpu {gpus} is not a whole number 1-4096"));
            }
            Ok(TraceJob {
                cluster: cluster.clone(),
                job_id: id.trim().to_string(),
                submitted: number("submission_time", submitted)?,
                duration,
                gpus: gpus as u32,
            })
        })();
        match parsed {
            Ok(j) => jobs.push(j),
            Err(message) => {
                let b = BadLine {
                    file: file.into(),
                    line,
                    message,
                };
                match on_bad {
                    OnBadLine::Skip => bad.push(b),
                    OnBadLine::Fail => return Err(b),
                }
            }
        }
    }
    Ok((jobs, bad))
}

/// The Helios (Venus) quota table: each virtual cluster's mean daily GPU
/// quota over the table's days (the clusters whose quota is always 0 are
/// left out), in the table's column order.
pub fn read_quota(file: &str, text: &str) -> Result<Vec<(String, f64)>, BadLine> {
    let bad = |line: usize, message: String| BadLine {
        file: file.into(),
        line,
        message,
    };
    let mut lines = records(text);
    let header: Vec<String> = match lines.next() {
        Some((_, h)) => h.iter().map(|f| f.trim().to_string()).collect(),
        None => return Err(bad(1, "the file is empty".into())),
    };
    let header: Vec<&str> = header.iter().map(String::as_str).collect();
    if header.first() != Some(&"date") || header.len() < 3 {
        return Err(bad(
            1,
            "the header is not date,<cluster>...,total (the Helios quota table)".into(),
        ));
    }
    let names: Vec<&str> = header[1..]
        .iter()
        .copied()
        .filter(|n| *n != "total")
        .collect();
    let mut sums = vec![0.0; names.len()];
    let mut days = 0usize;
    for (line, fields) in lines {
        if fields.len() != header.len() {
            return Err(bad(
                line,
                format!("{} fields, not {}", fields.len(), header.len()),
            ));
        }
        for (k, sum) in sums.iter_mut().enumerate() {
            *sum += number(names[k], &fields[k + 1]).map_err(|m| bad(line, m))?;
        }
        days += 1;
    }
    if days == 0 {
        return Err(bad(2, "no days in the table".into()));
    }
    Ok(names
        .iter()
        .zip(sums)
        .filter(|(_, s)| *s > 0.0)
        .map(|(n, s)| (n.to_string(), s / days as f64))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn itp_lines_are_read_and_bad_ones_named_with_file_and_line() {
        let text = "job_id,submission_time,duration,num_gpu\n\
                    a,10,100,1\n\
                    b,20,oops,8\n\
                    \n\
                    c,30,50,0\n\
                    d,40,60,64\n\
                    e,50\n";
        let (jobs, bad) = read_itp("traces/cluster03.csv", text, OnBadLine::Skip).expect("read");
        assert_eq!(
            jobs.iter()
                .map(|j| (j.job_id.as_str(), j.gpus))
                .collect::<Vec<_>>(),
            [("a", 1), ("d", 64)]
        );
        assert_eq!(jobs[0].cluster, "cluster03");
        assert_eq!(jobs[0].submitted, 10.0);
        let lines: Vec<(usize, &str)> = bad.iter().map(|b| (b.line, b.message.as_str())).collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0], (3, "duration \"oops\" is not a number"));
        assert_eq!(lines[1].0, 5);
        assert!(lines[1].1.contains("num_gpu 0"));
        assert_eq!(lines[2].0, 7);
        assert_eq!(
            bad[0].to_string(),
            "traces/cluster03.csv:3: duration \"oops\" is not a number"
        );
        let fatal = read_itp("x.csv", text, OnBadLine::Fail).expect_err("fatal");
        assert_eq!((fatal.file.as_str(), fatal.line), ("x.csv", 3));
        let e = read_itp("x.csv", "id,t\n", OnBadLine::Skip).expect_err("header");
        assert!(e
            .message
            .contains("not \"job_id,submission_time,duration,num_gpu\""));
    }

    #[test]
    fn the_quota_table_gives_mean_quotas_of_the_clusters_that_have_one() {
        let text = "date,vcA,vcB,vcC,total\n2020-04-01,8,0,4,12\n2020-04-02,16,0,4,20\n";
        let q = read_quota("q.csv", text).expect("read");
        assert_eq!(q, [("vcA".to_string(), 12.0), ("vcC".to_string(), 4.0)]);
        let e = read_quota("q.csv", "date,vcA,total\n2020-04-01,x,1\n").expect_err("bad");
        assert_eq!(e.line, 2);
    }

    #[test]
    fn a_line_of_empty_fields_or_a_stray_quote_is_named_not_dropped_or_joined() {
        let text = "job_id,submission_time,duration,num_gpu\n\
                    ,,,\n\
                    \"a,10,100,1\n\
                    b,20,100,1\n";
        let (jobs, bad) = read_itp("x.csv", text, OnBadLine::Skip).expect("read");
        assert_eq!(
            jobs.len(),
            2,
            "the quote is part of a's id, b is its own line"
        );
        assert_eq!(jobs[0].job_id, "\"a");
        assert_eq!(bad.len(), 1);
        assert_eq!((bad[0].line, bad[0].message.as_str()), (2, "no job_id"));
        let late = read_itp(
            "x.csv",
            "\njob_id,submission_time,duration,num_gpu\n",
            OnBadLine::Skip,
        )
        .expect_err("the header is the first line");
        assert!(
            late.message.starts_with("the header is \"\""),
            "{}",
            late.message
        );
    }
}
