//! `tessera`: the command line. Thin: it parses arguments, calls the
//! libraries, and prints (as text or `--json`). It must never hold logic a
//! library user would also need.
//!
//! Each command has its own module (its flags, its call, its printing);
//! `args` assembles them into the command line and only `main` uses it.
//! What several commands share sits in leaves that import no other module
//! of the cli: `parse` (durations, placements, pads, percentages, core
//! specs), `failure` (errors and exit statuses), `progress`, `serve`,
//! `netclient` and `show`.

mod aes67;
mod args;
mod bench;
mod cell;
mod console;
mod daemon;
mod demo;
mod dist;
mod failure;
mod follow;
mod guard;
mod install;
mod load;
mod music;
mod net;
mod netclient;
mod parse;
mod probe;
mod progress;
mod render;
mod report;
mod run;
mod serve;
mod services;
mod show;
mod soak;
mod synth;
mod top;
mod trace;
mod video;
mod why;

use args::{Cli, Command};
use clap::Parser;
use failure::Failure;
use std::process::ExitCode;
use tessera_broker::Session;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tessera: {}", e.message());
            if !e.fix().is_empty() {
                eprintln!("  fix: {}", e.fix());
            }
            ExitCode::from(e.exit_code())
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode, Failure> {
    match cli.command {
        Command::Status { json } => {
            let status = Session::connect()?.status()?;
            show::print(json, &status, show::status)
        }
        Command::Reset { json } => {
            let report = Session::connect()?.reset()?;
            show::print(json, &report, show::reset)
        }
        Command::Cell { command } => cell::run(command),
        Command::Services { json } => services::run(json),
        Command::Daemon { config, run_dir } => daemon::run(config, run_dir),
        Command::Demo(opts) => demo::run(opts),
        Command::Run(a) => run::run(a),
        Command::Report(a) => report::run(a),
        Command::Load { command } => load::run(command),
        Command::Probe(a) => probe::run(a),
        Command::Trace {
            command: args::TraceCommand::Window(a),
        } => trace::window(a),
        Command::Bench { command } => bench::run(command),
        Command::Guard { target } => guard::run(target),
        Command::Synth { command } => synth::run(command),
        Command::Music { command } => music::run(command),
        Command::Serve { service } => match service {
            args::ServeCommand::Net(args) => net::serve(args),
            args::ServeCommand::Console(args) => console::serve(args),
            args::ServeCommand::Render(args) => render::serve(args),
        },
        Command::Net { command } => net::run(command),
        Command::Aes67 { command } => match command {
            args::Aes67Command::Run(a) => aes67::run(a),
        },
        Command::Render { command } => render::run(command),
        Command::Top(args) => top::run(args),
        Command::Why(args) => why::run(args),
        Command::Soak(args) => soak::run(args),
        Command::Install(args) => install::install(args),
        Command::Uninstall(args) => install::uninstall(args),
    }
}
