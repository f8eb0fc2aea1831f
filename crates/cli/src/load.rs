//! `tessera load`: one interference workload by itself (hogs, EP, STREAM,
//! I/O writers, video players, stress-ng), and what it did. Thin: the
//! workloads are in tessera-workloads.

use crate::failure::{failed, Failure};
use crate::parse;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tessera_broker::BrokerError;
use tessera_workloads::external::{self, ExternalLoad};
use tessera_workloads::{ep, hog, io, stream, Window};

#[derive(Subcommand)]
pub enum LoadCommand {
    /// Threads burning a share of a CPU each (best-effort unless run in a cell).
    Hog {
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Share of a CPU per thread, in (0, 1].
        #[arg(long, default_value_t = 1.0)]
        load: f64,
        #[command(flatten)]
        common: LoadCommon,
    },
    /// The NAS EP kernel over and over (or once, verified, with --verify).
    Ep {
        #[arg(long, default_value_t = 1)]
        threads: usize,
        /// Run class S/W/A once and check NPB's sums instead.
        #[arg(long)]
        verify: Option<String>,
        #[command(flatten)]
        common: LoadCommon,
    },
    /// STREAM triad over arrays larger than the cache.
    Stream {
        #[arg(long, default_value_t = 1)]
        threads: usize,
        #[arg(long, default_value_t = 64)]
        mebibytes: usize,
        #[command(flatten)]
        common: LoadCommon,
    },
    /// Writers with periodic fdatasync in a directory.
    Io {
        #[arg(long, default_value_t = 1)]
        threads: usize,
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        #[command(flatten)]
        common: LoadCommon,
    },
    /// Video players (raw CIF frames, YUV→RGB) feeding the GUI service.
    Video {
        #[arg(long, default_value_t = 2)]
        players: usize,
        /// Frames per second of each player, in (0, 240].
        #[arg(long, default_value_t = 30.0)]
        fps: f64,
        /// Threads of the GUI service.
        #[arg(long, default_value_t = 1)]
        gui_threads: usize,
        /// Where the raw video file is generated once and reused (default: the temp dir).
        #[arg(long)]
        dir: Option<PathBuf>,
        #[command(flatten)]
        common: LoadCommon,
    },
    /// Debian's stress-ng with the given stressor arguments.
    StressNg {
        #[command(flatten)]
        common: LoadCommon,
        #[arg(last = true, required = true)]
        args: Vec<String>,
    },
}

#[derive(Args)]
pub struct LoadCommon {
    /// How long to run.
    #[arg(long, default_value = "10s")]
    pub duration: String,
    #[arg(long)]
    pub json: bool,
}

/// How long a load runs.
fn duration(common: &LoadCommon) -> Result<Duration, BrokerError> {
    parse::time(&common.duration, "--duration 10s")
}

fn window(common: &LoadCommon) -> Result<Window, BrokerError> {
    Ok(Window::lasting(duration(common)?))
}

fn no_setup(_: usize) -> tessera_workloads::Setup {
    Box::new(|| Ok(()))
}

pub fn run(command: LoadCommand) -> Result<ExitCode, Failure> {
    let spawn_error = |e: std::io::Error| failed(e.to_string(), "");
    let (threads, json) = match command {
        LoadCommand::Ep {
            verify: Some(class),
            threads,
            ..
        } => {
            let class = ep::EpClass::parse(&class).ok_or_else(|| {
                parse::invalid(format!("unknown class {class:?}"), "use S, W or A")
            })?;
            let tally = ep::kernel(class, threads);
            println!(
                "EP class {class:?}: {} pairs, {} accepted, sx {:.15e}, sy {:.15e}: {}",
                tally.pairs,
                tally.accepted(),
                tally.sx,
                tally.sy,
                if tally.verifies(class) {
                    "VERIFIED"
                } else {
                    "NOT verified"
                }
            );
            return Ok(if tally.verifies(class) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        LoadCommand::Video {
            players,
            fps,
            gui_threads,
            dir,
            common,
        } => {
            let run_for = duration(&common)?;
            return crate::video::load(players, fps, gui_threads, dir, run_for, common.json);
        }
        LoadCommand::StressNg { common, args } => {
            let spec = external::stress_ng("stress-ng", &args, window(&common)?);
            let load = ExternalLoad::spawn(spec, Box::new(|_| Ok(())))
                .map_err(|e| parse::invalid(e, "install stress-ng"))?;
            load.start(tessera_sys::clock::monotonic_ns());
            println!("{}", load.join().describe());
            return Ok(ExitCode::SUCCESS);
        }
        LoadCommand::Hog {
            threads,
            load,
            common,
        } => {
            let spec = hog::HogSpec {
                name: "hog".into(),
                threads,
                load,
                window: window(&common)?,
            };
            (
                hog::spawn(&spec, no_setup).map_err(spawn_error)?,
                common.json,
            )
        }
        LoadCommand::Ep {
            threads, common, ..
        } => (
            ep::spawn("ep", threads, window(&common)?, no_setup).map_err(spawn_error)?,
            common.json,
        ),
        LoadCommand::Stream {
            threads,
            mebibytes,
            common,
        } => {
            let spec = stream::StreamSpec {
                name: "stream".into(),
                threads,
                mebibytes,
                window: window(&common)?,
            };
            (
                stream::spawn(&spec, no_setup).map_err(spawn_error)?,
                common.json,
            )
        }
        LoadCommand::Io {
            threads,
            dir,
            common,
        } => {
            let spec = io::IoSpec {
                name: "io".into(),
                threads,
                dir,
                block_kib: 256,
                file_mib: 64,
                sync_mib: 8,
                window: window(&common)?,
            };
            (
                io::spawn(&spec, no_setup).map_err(spawn_error)?,
                common.json,
            )
        }
    };
    threads.start(tessera_sys::clock::monotonic_ns());
    let report = threads.join();
    if json {
        println!(
            "{}",
            serde_json::json!({
                "name": report.name, "threads": report.threads.len(), "cpu_s": report.cpu_ns() as f64 / 1e9,
                "wall_s": report.wall_s(), "cpus_used": report.cpus_used(), "units": report.units(),
                "unit": report.unit, "errors": report.errors(),
            })
        );
    } else {
        println!("{}", report.describe());
    }
    Ok(ExitCode::SUCCESS)
}
