//! The progress line of a long command (a run's configurations, a soak's
//! minutes, a benchmark's trials, a stream's seconds): redrawn in place on a
//! terminal, printed now and then in a log. A leaf: it must never import
//! another module of the cli.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

/// The progress line of a run made of steps (configurations, trials):
/// redrawn in place on a terminal; in a log, printed when a step starts,
/// every 10 s of it, and at its end.
pub struct ProgressLine {
    terminal: bool,
    /// The step and its 10 s slice last printed.
    last: Option<(usize, u64)>,
}

impl ProgressLine {
    pub fn new() -> ProgressLine {
        ProgressLine {
            terminal: std::io::stderr().is_terminal(),
            last: None,
        }
    }

    /// Shows `line`, about `step`, `elapsed` into its `total`.
    pub fn show(&mut self, step: usize, elapsed: Duration, total: Duration, line: &str) {
        let done = elapsed >= total;
        let slice = (step, elapsed.as_secs() / 10);
        show_progress(self.terminal, line, done, self.last != Some(slice) || done);
        self.last = Some(slice);
    }
}

/// A progress line: redrawn in place on a terminal (and ended when
/// `done`); in a log, printed when `log` says so.
pub fn show_progress(terminal: bool, line: &str, done: bool, log: bool) {
    if terminal {
        eprint!("\r{line}\x1b[K");
        if done {
            eprintln!();
        }
    } else if log {
        eprintln!("{line}");
    }
    let _ = std::io::stderr().flush();
}
