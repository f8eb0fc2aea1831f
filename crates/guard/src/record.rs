//! The guard's record (`tessera guard --record FILE`): CSV, one row per
//! reserved thread per control interval, budgets per reservation period.
//! The format is defined here once, beside its writer: the guard writes
//! rows with [`RecordRow::line`], and whoever reads a record (the
//! experiments) parses them with [`RecordRow::parse`].
//!
//! It owns the format only; it must never decide a budget.

use crate::guard::Kind;

/// The header line.
pub const HEADER: &str =
    "t_s,pid,tid,thread,kind,period_ns,used_ns,predicted_ns,set_ns,degraded,xruns";

/// The columns after the thread's name (which may hold commas).
const AFTER_NAME: usize = 7;

/// One reserved thread in one control interval.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordRow {
    /// Seconds since the guard started.
    pub t_s: f64,
    pub pid: i32,
    pub tid: i32,
    pub thread: String,
    pub kind: Kind,
    pub period_ns: u64,
    /// CPU time per reservation period over the interval.
    pub used_ns: u64,
    pub predicted_ns: u64,
    /// The budget in force.
    pub set_ns: u64,
    /// Admission gave less than asked.
    pub degraded: bool,
    /// The server's xruns so far.
    pub xruns: u64,
}

impl RecordRow {
    /// The row as a CSV line (no newline).
    pub fn line(&self) -> String {
        format!(
            "{:.3},{},{},{},{},{},{},{},{},{},{}",
            self.t_s,
            self.pid,
            self.tid,
            self.thread,
            self.kind.name(),
            self.period_ns,
            self.used_ns,
            self.predicted_ns,
            self.set_ns,
            u8::from(self.degraded),
            self.xruns
        )
    }

    /// A line of a record; None when it is not a row (the header, a blank
    /// line, a malformed row). The name is whatever lies between the
    /// first three fields and the last seven, so it may hold commas.
    pub fn parse(line: &str) -> Option<RecordRow> {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if fields.len() < 4 + AFTER_NAME {
            return None;
        }
        let tail = &fields[fields.len() - AFTER_NAME..];
        let n = |s: &str| s.parse::<u64>().ok();
        Some(RecordRow {
            t_s: fields[0].parse().ok()?,
            pid: fields[1].parse().ok()?,
            tid: fields[2].parse().ok()?,
            thread: fields[3..fields.len() - AFTER_NAME]
                .join(",")
                .trim_matches('"')
                .to_string(),
            kind: Kind::from_name(tail[0])?,
            period_ns: n(tail[1])?.max(1),
            used_ns: n(tail[2])?,
            predicted_ns: n(tail[3])?,
            set_ns: n(tail[4])?,
            degraded: tail[5] != "0",
            xruns: n(tail[6])?,
        })
    }

    /// Every row of a record's text, after its header; an error names the
    /// first line that is not a row.
    pub fn parse_all(text: &str) -> Result<Vec<RecordRow>, String> {
        text.lines()
            .skip_while(|l| !l.starts_with("t_s,"))
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .map(|line| RecordRow::parse(line).ok_or(format!("a malformed row: {line:?}")))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(thread: &str, kind: Kind) -> RecordRow {
        RecordRow {
            t_s: 1.5,
            pid: 10,
            tid: 11,
            thread: thread.into(),
            kind,
            period_ns: 1_333_333,
            used_ns: 100_000,
            predicted_ns: 120_000,
            set_ns: 200_000,
            degraded: true,
            xruns: 3,
        }
    }

    #[test]
    fn a_written_row_reads_back_the_same() {
        for kind in Kind::ALL {
            let r = row("tessera,peer", kind);
            assert_eq!(RecordRow::parse(&r.line()), Some(r));
        }
    }

    #[test]
    fn a_record_reads_after_its_header_and_names_a_bad_line() {
        let text = format!("{HEADER}\n{}\n\n", row("jackd", Kind::Share).line());
        assert_eq!(RecordRow::parse_all(&text).unwrap().len(), 1);
        let bad = format!("{HEADER}\n1,2\n");
        assert!(RecordRow::parse_all(&bad).unwrap_err().contains("\"1,2\""));
        assert!(RecordRow::parse(HEADER).is_none());
    }
}
