//! `tessera serve console`: the console service process. Thin: the service
//! lives in `tessera_services::console`; this file parses, waits for a
//! termination signal, and prints the report.

use crate::failure::Failure;
use clap::Args;
use std::fmt::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_broker::{BrokerError, ErrorCode, ServicePolicy};
use tessera_services::console::host::{Host, HostOptions};
use tessera_services::console::ConsoleReport;

pub const EXAMPLES: &str = "Examples:\n  \
    tessera serve console                        # lines to stdout\n  \
    tessera serve console --log /var/log/tessera-console.log\n  \
    tessera serve console --cell console --allow-uid 1000\n\n\
    The service registers with the broker as NAME (default console); writers open it\n\
    by name with tessera_services::console::connect(\"console\", \"my-writer\"). Each\n\
    line is written as `writer[pid]: text`. It runs until Ctrl-C or SIGTERM, then\n\
    prints every writer's lines and drops on stderr.";

#[derive(Args)]
pub struct ServeConsoleArgs {
    /// The name writers open the service by.
    #[arg(long, default_value = "console")]
    pub name: String,
    /// Where to listen (default: the broker's run directory).
    #[arg(long)]
    pub socket: Option<PathBuf>,
    /// Append the lines to this file instead of stdout.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Run the console thread in this existing cell.
    #[arg(long)]
    pub cell: Option<String>,
    /// Admit this uid too (its owner and root always pass); repeatable.
    #[arg(long)]
    pub allow_uid: Vec<u32>,
    /// Admit this gid too; repeatable.
    #[arg(long)]
    pub allow_gid: Vec<u32>,
}

pub fn serve(args: ServeConsoleArgs) -> Result<ExitCode, Failure> {
    let failed = |e: tessera_services::console::ConsoleError| {
        BrokerError::new(ErrorCode::Refused, e.to_string(), "")
    };
    let options = HostOptions {
        name: args.name.clone(),
        socket: args.socket,
        log: args.log,
        cell: args.cell,
        policy: ServicePolicy {
            uids: args.allow_uid,
            gids: args.allow_gid,
        },
    };
    let host = crate::serve::until_stopped(None, || {
        let host = Host::start(&options).map_err(failed)?;
        // Stdout may be the log: everything else goes to stderr.
        eprintln!("{}", host.summary);
        Ok(host)
    })?;
    let report = host.stop().map_err(failed)?;
    eprint!("{}", report_text(&args.name, &report));
    Ok(ExitCode::SUCCESS)
}

fn report_text(name: &str, report: &ConsoleReport) -> String {
    let mut out = format!(
        "console service {name:?} stopped: {} lines written, {} dropped by writers, {} writers\n",
        report.lines,
        report.dropped,
        report.writers.len()
    );
    for w in &report.writers {
        let _ = writeln!(
            out,
            "  {}[{}]: {} lines, {} dropped, {}",
            w.name,
            w.pid,
            w.lines,
            w.dropped,
            w.end.name()
        );
    }
    out
}
