//! `tessera soak`: the demo's configuration with Group 2 run for an hour
//! (or the minutes given), every tessera process's RSS and descriptors and
//! the music application's misses sampled each minute. Thin: the work is
//! in `tessera_experiments::bench::soak`.

use crate::failure::Failure;
use crate::parse::invalid;
use crate::progress::show_progress;
use clap::Args;
use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_broker::Mode;
use tessera_experiments::bench::soak::{self, Progress};

pub const EXAMPLES: &str = "Examples:\n  \
    sudo tessera soak                      (60 minutes)\n  \
    sudo tessera soak --minutes 2 --out results/soak-short\n  \
    sudo tessera soak --json > soak.json\n  \
    tessera soak --report results/soak-1700000000   (the report again, e.g. of a run cut short)";

#[derive(Args)]
pub struct SoakArgs {
    /// Minutes to run, after the scenario's 1 s of warm-up.
    #[arg(long, default_value_t = 60)]
    pub minutes: u32,
    /// Report directory (default results/soak-<time>); its results.json is
    /// rewritten after every minute.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the results (samples, minutes, verdict) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Run nothing: write the report of the soak in this directory again
    /// from its results.json (a run cut short keeps the minutes it measured).
    #[arg(long, conflicts_with_all = ["minutes", "out"])]
    pub report: Option<PathBuf>,
}

pub fn run(args: SoakArgs) -> Result<ExitCode, Failure> {
    if let Some(dir) = &args.report {
        let results = soak::rewrite_report(dir).map_err(|e| {
            invalid(
                e,
                "give the directory of a soak run (it holds results.json)",
            )
        })?;
        return Ok(print(&results, dir, args.json));
    }
    if args.minutes == 0 {
        return Err(invalid("--minutes 0", "give at least 1 minute, e.g. --minutes 60").into());
    }
    let mode = Mode::detect();
    if let Some(banner) = mode.banner() {
        eprintln!("tessera soak: {banner}");
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let options = soak::Options {
        minutes: args.minutes,
        out_dir: args
            .out
            .unwrap_or_else(|| PathBuf::from(format!("results/soak-{stamp}"))),
        privileged: mode == Mode::Guaranteed,
    };
    eprintln!(
        "tessera soak: the demo's configuration with Group 2 (the LAN music application under \
         the video players, the GUI and the EP benchmark) for {} min; each minute the RSS and \
         open descriptors of every tessera process and the minute's misses; results in {}",
        options.minutes,
        options.out_dir.display()
    );
    let outcome = soak::run(&options, progress_line())?;
    Ok(print(&outcome.results, &outcome.report_dir, args.json))
}

/// The verdict per process and for the misses, and where the report is.
fn print(results: &soak::SoakResults, dir: &std::path::Path, json: bool) -> ExitCode {
    if json {
        println!("{}", serde_json::to_string(results).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    let v = &results.verdict;
    for p in &v.processes {
        println!(
            "{}: RSS {:.1} → {:.1} MiB ({:+.2} MiB, goal ≤ +{:.0} MiB: {}), descriptors {} → {}",
            p.name,
            p.first_kib as f64 / 1024.0,
            p.last_kib as f64 / 1024.0,
            p.growth_kib as f64 / 1024.0,
            results.rss_goal_kib as f64 / 1024.0,
            verdict(p.rss_met),
            p.first_fds,
            p.last_fds
        );
    }
    let t = &v.misses;
    println!(
        "misses: {} in {} minutes, {:.2}/min in the first half and {:.2}/min in the second \
         (flat: {})",
        t.total,
        t.minutes,
        t.first_half_per_minute,
        t.second_half_per_minute,
        verdict(!t.rising)
    );
    println!(
        "\nreport: {}/README.md (plots beside it; the configuration's own report in run/)",
        dir.display()
    );
    ExitCode::SUCCESS
}

fn verdict(met: bool) -> &'static str {
    match met {
        true => "met",
        false => "NOT met",
    }
}

/// The run's progress: redrawn each second on a terminal; in a log, a
/// line per minute.
fn progress_line() -> impl FnMut(&Progress) {
    let terminal = std::io::stderr().is_terminal();
    move |p: &Progress| {
        let minute = match p.minute {
            Some(m) => format!(
                "minute {}: {} misses ({} in all), Δt p99 {:.0} µs, max {:.0} µs",
                m.minute, m.misses, p.misses, m.p99_us, m.max_us
            ),
            None => "warming up".into(),
        };
        let processes = p.sample.map_or_else(String::new, |s| {
            let all: Vec<String> = s
                .processes
                .iter()
                .map(|x| {
                    format!(
                        "{} {:.1} MiB, {} FDs",
                        x.name,
                        x.rss_kib as f64 / 1024.0,
                        x.fds
                    )
                })
                .collect();
            format!("; {}", all.join("; "))
        });
        let line = format!(
            "  [{}/{} min] {:.0}/{:.0} s — {minute}{processes}",
            p.sample.map_or(0, |s| s.minute),
            p.minutes,
            p.elapsed.min(p.total).as_secs_f64(),
            p.total.as_secs_f64()
        );
        let done = p.new_sample && p.sample.is_some_and(|s| s.minute == p.minutes);
        show_progress(terminal, &line, done, p.new_sample);
    }
}
