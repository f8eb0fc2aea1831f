//! `tessera`: the command line. Thin: it parses arguments, calls the
//! libraries, and prints (as text or `--json`). It must never hold logic a
//! library user would also need.

mod aes67;
mod args;
mod bench;
mod console;
mod dist;
mod experiment;
mod follow;
mod guard;
mod install;
mod music;
mod net;
mod render;
mod serve;
mod services;
mod show;
mod soak;
mod synth;
mod top;
mod trace;
mod video;

use args::{CellCommand, Cli, Command};
use clap::Parser;
use std::process::ExitCode;
use tessera_broker::{BrokerError, Session};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tessera: {}", e.message);
            if !e.fix.is_empty() {
                eprintln!("  fix: {}", e.fix);
            }
            ExitCode::from(match e.code.as_str() {
                "refused" | "quota" => 3,
                "permission" => 4,
                "not-found" => 5,
                _ => 1,
            })
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode, BrokerError> {
    match cli.command {
        Command::Status { json } => {
            let status = Session::connect()?.status()?;
            show::print(json, &status, show::status)
        }
        Command::Reset { json } => {
            let report = Session::connect()?.reset()?;
            show::print(json, &report, show::reset)
        }
        Command::Cell { command } => cell(command),
        Command::Services { json } => services::run(json),
        Command::Daemon { config, run_dir } => daemon(config, run_dir),
        Command::Demo(opts) => demo(opts),
        Command::Run(a) => experiment::run(a),
        Command::Report(a) => experiment::report(a),
        Command::Load { command } => experiment::load(command),
        Command::Probe(a) => experiment::probe(a),
        Command::Trace {
            command: args::TraceCommand::Window(a),
        } => trace::window(a),
        Command::Bench { command } => bench::run(command),
        Command::Guard { target } => guard::run(target),
        Command::Synth { command } => synth::run(command),
        Command::Music { command } => music::run(command),
        Command::Serve { service } => match service {
            serve::ServeCommand::Net(args) => net::serve(args),
            serve::ServeCommand::Console(args) => console::serve(args),
            serve::ServeCommand::Render(args) => render::serve(args),
        },
        Command::Net { command } => net::run(command),
        Command::Aes67 { command } => match command {
            args::Aes67Command::Run(a) => aes67::run(a),
        },
        Command::Render { command } => render::run(command),
        Command::Top(args) => top::run(args),
        Command::Soak(args) => soak::run(args),
        Command::Install(args) => install::install(args),
        Command::Uninstall(args) => install::uninstall(args),
    }
}

fn cell(command: CellCommand) -> Result<ExitCode, BrokerError> {
    let mut session = Session::connect()?;
    match command {
        CellCommand::Create(c) => {
            let json = c.json;
            let request = c.into_request()?;
            let info = session.create_cell(request, false)?;
            show::print(json, &info, show::created)
        }
        CellCommand::List { json } => show::print(json, &session.list()?, |l| show::cells(l)),
        CellCommand::Show { name, json } => show::print(json, &session.show(&name)?, show::cell),
        CellCommand::Destroy { name } => {
            session.destroy_cell(&name)?;
            println!("cell {name:?} destroyed; its bandwidth returned to the ledger");
            Ok(ExitCode::SUCCESS)
        }
        CellCommand::Attach {
            cell,
            pid,
            follow,
            share,
            ..
        } if follow => follow::attach(session, &cell, pid, share.app_share()?),
        CellCommand::Attach {
            cell,
            pid,
            tid,
            json,
            ..
        } => {
            let tids = session.attach(&cell, pid, tid)?;
            show::print(json, &tids, |t| {
                format!("attached thread(s) {t:?} of process {pid} to cell {cell:?}\n")
            })
        }
        CellCommand::Detach { tid } => {
            session.detach(tid)?;
            println!("thread {tid} detached; its scheduling is restored");
            Ok(ExitCode::SUCCESS)
        }
        CellCommand::Exec {
            cell,
            share,
            command,
        } => follow::exec(session, &cell, &command, share.app_share()?),
        CellCommand::Report {
            name,
            misses,
            xruns,
            json,
        } => {
            let total = session.report(&name, misses, xruns)?;
            show::print(json, &total, |t| {
                format!(
                    "cell {name:?}: {} misses and {} xruns reported in all\n",
                    t.misses, t.xruns
                )
            })
        }
        CellCommand::Resize(r) => {
            let policy = session.show(&r.name)?.grant.request.policy;
            let budget = r.budget(policy == tessera_policy::CellPolicy::TimeTriggered)?;
            let reply = session.resize_cell(&r.name, budget, r.degrade)?;
            show::print(r.json, &reply, |x| {
                let note = if x.degraded {
                    " (degraded: the largest that fits)"
                } else {
                    ""
                };
                format!("cell {:?} now has {}{note}\n", r.name, x.budget)
            })
        }
    }
}

fn daemon(
    config: Option<std::path::PathBuf>,
    run_dir: Option<std::path::PathBuf>,
) -> Result<ExitCode, BrokerError> {
    let config = tessera_broker::config::Config::load(config.as_deref())
        .map_err(|e| BrokerError::new("invalid", e, "fix the config file"))?;
    let paths = run_dir
        .map(tessera_broker::paths::Paths::at)
        .unwrap_or_else(tessera_broker::paths::Paths::from_env);
    let (rtkit, fallback, limits) = (config.rtkit, config.rtkit_fallback, config.rtkit_limits);
    tessera_broker::daemon::run(paths.clone(), config, |shared, notes| {
        let (mode, guards) = {
            let broker = shared.lock().unwrap_or_else(|p| p.into_inner());
            (broker.mode().clone(), broker.config.guard.clone())
        };
        let listening = format!("listening on {} ({mode:?} mode)", paths.socket().display());
        eprintln!("tessera daemon: {listening}");
        if let Some(b) = mode.banner() {
            eprintln!("tessera daemon: {b}");
        }
        for n in notes {
            eprintln!("tessera daemon: recovered: {n}");
        }
        if rtkit {
            serve_rtkit(shared, fallback, limits)?;
        }
        // Ready means the socket and, when configured, the bus name.
        tell_service_manager_ready(&listening);
        if let Ok(exe) = std::env::current_exe() {
            tessera_guard::supervise::keep_running(guards, exe, |line| {
                eprintln!("tessera daemon: {line}")
            });
        }
        Ok(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// RTKit's interface on the system bus, answered with reservations. A
/// daemon configured for it that cannot own the name fails, so that its
/// service manager retries once the name is free.
fn serve_rtkit(
    broker: &std::sync::Arc<std::sync::Mutex<tessera_broker::Broker>>,
    fallback: tessera_broker::config::RtkitFallback,
    limits: tessera_broker::config::RtkitLimits,
) -> Result<(), BrokerError> {
    let log: fn(&str) = |line| eprintln!("tessera daemon: rtkit: {line}");
    match tessera_rtkit::serve(std::sync::Arc::clone(broker), fallback, limits, log) {
        // The interface's thread keeps serving after the handle is dropped.
        Ok(service) => {
            eprintln!(
                "tessera daemon: rtkit: serving {} ({} grant(s) taken back)",
                tessera_rtkit::bus::BUS_NAME,
                service.status().len()
            );
            Ok(())
        }
        Err(e) => Err(BrokerError::new("rtkit", e.to_string(), "")),
    }
}

/// READY=1 for systemd's Type=notify (tessera.service): sent once the
/// socket listens. Outside systemd (no NOTIFY_SOCKET) nothing is sent. The
/// variable stays set, as unsetting it races the daemon's threads; the
/// guards it starts inherit it, and systemd heeds only the main process.
fn tell_service_manager_ready(status: &str) {
    let state = [
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(status),
    ];
    if let Err(e) = sd_notify::notify(false, &state) {
        eprintln!(
            "tessera daemon: could not tell the service manager it is ready ($NOTIFY_SOCKET): {e}"
        );
    }
}

fn demo(opts: args::DemoArgs) -> Result<ExitCode, BrokerError> {
    let privileged = tessera_broker::Mode::detect() == tessera_broker::Mode::Guaranteed;
    if !privileged {
        eprintln!(
            "tessera demo: {}",
            tessera_broker::Mode::detect().banner().unwrap_or_default()
        );
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match opts.isolation {
        true => isolation_demo(opts, privileged, stamp),
        false => experiment::music_demo(opts, privileged, stamp),
    }
}

fn isolation_demo(
    opts: args::DemoArgs,
    privileged: bool,
    stamp: u64,
) -> Result<ExitCode, BrokerError> {
    if !privileged {
        eprintln!("tessera demo: only the plain SCHED_OTHER configuration can run; nothing here is guaranteed.\n");
    }
    let out_dir = opts
        .out
        .unwrap_or_else(|| std::path::PathBuf::from(format!("results/isolation-{stamp}")));
    let options = tessera_experiments::isolation::Options {
        seconds: opts.seconds,
        core: opts.core,
        task_budget: args::time(&opts.task_budget, "--task-budget 500us")?,
        out_dir,
        configurations: tessera_experiments::isolation::Configuration::available(privileged),
    };
    eprintln!(
        "tessera demo: why cells exist — a periodic task (400 µs of work every 1333 µs) against two \
         equal-priority FIFO hogs (3 ms every 10 ms), all on one core; {:.0} s per configuration",
        opts.seconds
    );
    let outcome = tessera_experiments::isolation::run(&options, |line| eprintln!("  {line}"))?;
    if opts.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&outcome.results).unwrap_or_default()
        );
    } else {
        println!("\n{}", outcome.table);
        for c in &outcome.results.configurations {
            println!("- {}: {}", c.name, c.notes.join("; "));
        }
        println!(
            "\nreport: {}/README.md (plots: PNG and SVG)",
            outcome.report_dir.display()
        );
        println!(
            "again: tessera demo --isolation --seconds {} --core {}",
            opts.seconds,
            opts.core
                .map(|c| c.to_string())
                .unwrap_or_else(|| "LAST".into())
        );
    }
    Ok(ExitCode::SUCCESS)
}
