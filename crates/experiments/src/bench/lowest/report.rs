//! The lowest-buffer benchmark's outputs: lowest.json (every figure), the
//! summary table printed at the end, README.md (the summary, the method,
//! every trial, the plot) and the plot of failures against the buffer size.
//!
//! It only formats what the run measured; it must never compute a figure
//! the results do not hold (the ratio and the lowest sizes come from
//! [`super::ServerResult`]).

use super::results::{Config, ConfigResult, LowestResults, ServerResult, GOAL_RATIO};
use crate::bench::output::{stopped_early, write_file, write_json};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use tessera_measure::plot::{self, CountLine, CountPanel};

/// The plot's file name without extension (PNG and SVG beside README.md).
pub const PLOT_STEM: &str = "failures-by-buffer";
const JSON: &str = "lowest.json";

/// Writes lowest.json, the plot and README.md into `dir`; returns the
/// README's path.
pub(super) fn write(results: &LowestResults, dir: &Path) -> Result<PathBuf, String> {
    write_json(dir, JSON, results)?;
    plot(results, dir)?;
    let readme = dir.join("README.md");
    write_file(&readme, &readme_text(results))?;
    Ok(readme)
}

/// "512 (10.67 ms)", or why there is no size.
fn lowest_cell(config: Option<&ConfigResult>, candidates: &[u32]) -> String {
    match config {
        None => "–".into(),
        Some(c) => match (c.lowest_frames, c.latency_ms) {
            (Some(frames), Some(ms)) => format!("{frames} ({ms:.2} ms)"),
            _ if c.trials.is_empty() => "not run".into(),
            _ => format!(
                "none up to {}",
                candidates.last().copied().unwrap_or_default()
            ),
        },
    }
}

fn ratio_cell(server: &ServerResult) -> String {
    match server.ratio {
        Some(r) => format!("{r:.2}"),
        None => "–".into(),
    }
}

/// Per server: its name, plain's lowest, guarded's lowest, their ratio.
fn summary_rows(results: &LowestResults) -> Vec<[String; 4]> {
    results
        .servers
        .iter()
        .map(|s| {
            [
                s.server.clone(),
                lowest_cell(s.config(Config::Plain), &results.frames),
                lowest_cell(s.config(Config::Guarded), &results.frames),
                ratio_cell(s),
            ]
        })
        .collect()
}

/// Per server, plain's lowest against guarded's and their ratio, with the
/// issue's goal: the figure of merit printed at the end of a run.
pub fn summary_table(results: &LowestResults) -> String {
    let mut text = format!(
        "{:<10} {:>22} {:>22} {:>14}\n",
        "server", "plain FIFO lowest", "guarded lowest", "plain÷guarded"
    );
    for [server, plain, guarded, ratio] in summary_rows(results) {
        let _ = writeln!(text, "{server:<10} {plain:>22} {guarded:>22} {ratio:>14}");
    }
    let _ = write!(
        text,
        "goal: guarded holds at ≤ half plain's buffer (ratio ≥ {GOAL_RATIO:.0}); \
         frames at {} Hz, {} s per trial, total {:.0} s",
        results.rate, results.seconds, results.total_s
    );
    text
}

fn readme_text(results: &LowestResults) -> String {
    let mut text = format!(
        "# The lowest buffer that holds (`tessera bench lowest`)\n\n\
         For each server, {} JACK load clients of {:.0} % of the period each in a chain plus a \
         monitor client (`tessera-jack-peer`), under seed 001 §4.4's interference — {} — \
         the smallest buffer at {} Hz at which a trial of {} s (after {} s of warm-up) \
         had no failure, for the server as users run it (plain FIFO) and under \
         `tessera guard` (its defaults), in one run.\n\n\
         Machine: {}. Started {}, {:.0} s in all.\n\n",
        results.clients,
        results.client_load * 100.0,
        results.interference,
        results.rate,
        results.seconds,
        results.warmup_s,
        results.machine,
        results.started_at,
        results.total_s,
    );
    text.push_str(&stopped_early(results.stopped.as_deref()));
    text.push_str("| server | plain FIFO lowest (frames) | guarded lowest | plain ÷ guarded |\n|---|--:|--:|--:|\n");
    for row in summary_rows(results) {
        let _ = writeln!(text, "| {} |", row.join(" | "));
    }
    let _ = write!(
        text,
        "\nThe issue's goal: guarded holds at no more than half the buffer plain FIFO needs \
         (plain ÷ guarded ≥ {GOAL_RATIO:.0}).\n\n\
         ![failures against the buffer size]({PLOT_STEM}.png)\n\n\
         ## Method\n\n\
         - Search: {}. Sizes tried: {}.\n\
         - The two configurations of a server take turns, one trial each, so that both see \
         the same machine; the servers run one after the other.\n",
        results.search,
        results
            .frames
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    );
    for s in &results.servers {
        let schedulings: Vec<String> = s
            .configs
            .iter()
            .map(|c| format!("{} `{}`", c.config.name(), c.scheduling))
            .collect();
        let _ = writeln!(
            text,
            "- {}: failures are {}; rt-app at SCHED_FIFO {}; {}.",
            s.server,
            s.counted,
            s.interference_priority,
            schedulings.join(", ")
        );
    }
    text.push_str(&trials_section(results));
    text
}

fn trials_section(results: &LowestResults) -> String {
    let mut text = "\n## Every trial\n\n\
        | server | configuration | frames | period (ms) | held | failures | xruns | late cycles \
        | periods skipped | cycles | reserved ÷ used | trial (s) |\n\
        |---|---|--:|--:|---|--:|--:|--:|--:|--:|--:|--:|\n"
        .to_string();
    let mut notes = String::new();
    for s in &results.servers {
        for c in &s.configs {
            for t in &c.trials {
                let held = match (&t.refused, t.held) {
                    (Some(_), _) => "no (see notes)",
                    (None, true) => "yes",
                    (None, false) => "no",
                };
                let ratio = t
                    .reserved_per_used
                    .map_or("–".into(), |r| format!("{r:.2}"));
                let (server, config, frames) = (&s.server, c.config.name(), t.frames);
                let _ = writeln!(
                    text,
                    "| {server} | {config} | {frames} | {:.2} | {held} | {} | {} | {} | {} | {} \
                     | {ratio} | {:.0} |",
                    t.latency_ms, t.failures, t.xruns, t.late, t.skipped, t.cycles, t.duration_s
                );
                let said: Vec<&str> = t
                    .refused
                    .iter()
                    .chain(&t.notes)
                    .map(String::as_str)
                    .collect();
                let _ = writeln!(
                    notes,
                    "- {server} {config} at {frames} frames: {}",
                    said.join("; ")
                );
            }
        }
    }
    text.push_str("\n## Notes of each trial\n\n");
    text.push_str(&notes);
    text
}

/// Failures against the buffer size, one panel per server, one line per
/// configuration.
fn plot(results: &LowestResults, dir: &Path) -> Result<(), String> {
    let captions: Vec<String> = results
        .servers
        .iter()
        .map(|s| {
            format!(
                "{}: plain {}, guarded {} — failures: {}",
                s.server,
                lowest_cell(s.config(Config::Plain), &results.frames),
                lowest_cell(s.config(Config::Guarded), &results.frames),
                s.unit
            )
        })
        .collect();
    let panels: Vec<CountPanel> = results
        .servers
        .iter()
        .zip(&captions)
        .map(|(s, caption)| CountPanel {
            label: caption,
            lines: s
                .configs
                .iter()
                .map(|c| CountLine {
                    name: c.config.name(),
                    points: c
                        .trials
                        .iter()
                        .map(|t| (f64::from(t.frames), t.failures as f64))
                        .collect(),
                })
                .collect(),
        })
        .collect();
    plot::counts_by_size(
        &dir.join(PLOT_STEM),
        &format!(
            "Failures in {} s against the buffer ({} Hz, §4.4 interference)",
            results.seconds, results.rate
        ),
        ("buffer (frames, log scale)", "failures (log scale)"),
        &panels,
    )
    .map(drop)
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::super::results::{latency_ms, Options, Trial};
    use super::*;
    use std::fs;
    use tessera_scenario::ServerKind;

    fn trial(frames: u32, failures: u64) -> Trial {
        Trial {
            frames,
            latency_ms: latency_ms(frames),
            held: failures == 0,
            failures,
            xruns: failures,
            late: 0,
            skipped: 0,
            cycles: 1000,
            reserved_per_used: None,
            duration_s: 3.0,
            refused: None,
            notes: vec!["steal time: cpu0 0 ms".into()],
        }
    }

    fn results() -> LowestResults {
        let options = Options::new(PathBuf::from("unused"));
        let mut results = LowestResults::start(&options);
        let mut jack = ServerResult::start(ServerKind::Jack, &options);
        jack.configs[0].trials = vec![trial(128, 900), trial(512, 0), trial(256, 4)];
        jack.configs[1].trials = vec![trial(128, 0), trial(32, 70), trial(64, 2)];
        let searches = [
            (Config::Plain, {
                let mut b = super::super::search::Bisection::new(7);
                b.record(3, false);
                b.record(5, true);
                b.record(4, false);
                b
            }),
            (Config::Guarded, {
                let mut b = super::super::search::Bisection::new(7);
                b.record(3, true);
                b.record(1, false);
                b.record(2, false);
                b
            }),
        ];
        jack.conclude(&searches, &options.frames);
        results.servers.push(jack);
        results.total_s = 400.0;
        results
    }

    #[test]
    fn the_summary_gives_both_lowest_sizes_and_their_ratio() {
        let r = results();
        let jack = &r.servers[0];
        assert_eq!(jack.config(Config::Plain).unwrap().lowest_frames, Some(512));
        assert_eq!(
            jack.config(Config::Guarded).unwrap().lowest_frames,
            Some(128)
        );
        assert_eq!(jack.ratio, Some(4.0));
        let table = summary_table(&r);
        assert!(table.contains("512 (10.67 ms)"), "{table}");
        assert!(table.contains("128 (2.67 ms)"), "{table}");
        assert!(table.contains("4.00"), "{table}");
    }

    #[test]
    fn the_report_directory_has_json_readme_and_plot() {
        let dir =
            std::env::temp_dir().join(format!("tessera-lowest-report-{}", std::process::id()));
        let readme = write(&results(), &dir).unwrap();
        let text = fs::read_to_string(&readme).unwrap();
        assert!(
            text.contains("| jackd | 512 (10.67 ms) | 128 (2.67 ms) | 4.00 |"),
            "{text}"
        );
        assert!(
            text.contains("| jackd | guarded | 64 | 1.33 | no | 2 |"),
            "{text}"
        );
        assert!(
            text.contains("monotonic"),
            "the search's assumption is stated"
        );
        for file in [JSON, "failures-by-buffer.png", "failures-by-buffer.svg"] {
            assert!(dir.join(file).is_file(), "{file} missing");
        }
        let json: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(dir.join(JSON)).unwrap()).unwrap();
        assert_eq!(json["servers"][0]["configs"][1]["lowest_frames"], 128);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_search_that_found_nothing_says_so() {
        let mut r = results();
        let s = &mut r.servers[0];
        s.configs[0].lowest_frames = None;
        s.configs[0].latency_ms = None;
        s.ratio = None;
        let table = summary_table(&r);
        assert!(table.contains("none up to 1024"), "{table}");
    }

    #[test]
    fn pipewire_failures_are_named_as_counted() {
        let options = Options::new(PathBuf::from("unused"));
        let pw = ServerResult::start(ServerKind::PipeWire, &options);
        assert_eq!(pw.unit, "skipped + late");
        assert!(pw.counted.contains("skipped"));
        assert_eq!(pw.interference_priority, 88);
    }
}
