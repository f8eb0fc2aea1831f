//! `tessera services`: the services registered with the broker, as a table
//! or `--json`. It only lists; it must never register, open or remove one.

use crate::failure::Failure;
use crate::show;
use std::fmt::Write;
use std::process::ExitCode;
use tessera_broker::{ServiceInfo, Session};

pub const EXAMPLES: &str = "Examples:\n  \
    tessera services\n  \
    tessera services --json\n\n\
    A service whose process exited shows as not alive; the next registration or open\n\
    of its name removes it. Clients open a service by name (Session::open_service):\n\
    the broker checks the caller against the service's policy (its owner and root\n\
    always pass).\n\
    See docs/protocol.md.";

pub fn run(json: bool) -> Result<ExitCode, Failure> {
    let services = Session::connect()?.list_services()?;
    show::print(json, &services, |s| table(s))
}

fn table(services: &[ServiceInfo]) -> String {
    if services.is_empty() {
        return "no services registered (a service registers itself when it starts, e.g. `tessera serve net`)\n".into();
    }
    let name_w = services
        .iter()
        .map(|s| s.entry.name.len())
        .max()
        .unwrap_or(0)
        .max("service".len());
    let mut out = format!(
        "{:<name_w$}  {:>7}  {:<5}  socket — admits\n",
        "service", "pid", "alive"
    );
    for s in services {
        let e = &s.entry;
        let _ = writeln!(
            out,
            "{:<name_w$}  {:>7}  {:<5}  {} — {}",
            e.name,
            e.process.pid,
            if s.alive { "yes" } else { "no" },
            e.socket.display(),
            e.policy.describe(e.owner_uid)
        );
    }
    out
}
