//! Debian's rtkit-daemon on a private system bus, with the polkit daemon
//! it asks before every grant, and a polkit rule (in polkit's own rules
//! directory, removed when done) allowing one user RTKit's two actions — as
//! an active login session does on a desktop: rtkit's actions are
//! `allow_any = no`, and a user of a run's own has no logind session.
//!
//! rtkit-daemon runs as Debian starts it but for `--no-limit-resources`:
//! its own RLIMIT_FSIZE of 0 would kill it with SIGXFSZ at its first log
//! line into a file (`--stderr`); it changes nothing it grants.
//!
//! It owns both daemons and the rule file: stopped and removed by their
//! PIDs and path when dropped, error or not. It must never touch the
//! machine's own bus, nor any rule it did not write.

use crate::harness::servers::{self, OwnedChild};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tessera_rtkit::bus::BUS_NAME;
use tessera_rtkit::private_bus::POLKIT_NAME;
use tessera_scenario::desktop::{POLKITD, RTKIT_DAEMON};

/// How long either daemon may take to exit after SIGTERM.
const GRACE: Duration = Duration::from_secs(3);
/// Where polkit reads an administrator's rules.
const RULES_DIR: &str = "/etc/polkit-1/rules.d";

/// polkitd and rtkit-daemon on a private bus, and the user's rule.
/// Fields drop in order: rtkit-daemon, polkitd, the rule.
pub(crate) struct StockRtkit {
    _rtkit: OwnedChild,
    _polkit: OwnedChild,
    _rule: Rule,
}

/// A polkit rule file of this run's, removed when dropped.
struct Rule(PathBuf);

impl Drop for Rule {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl StockRtkit {
    /// Writes the rule for `user`, starts polkitd and then rtkit-daemon on
    /// the bus at `address` (logs in `dir`); returns once both own their
    /// names.
    pub(crate) fn start(address: &str, user: &str, dir: &Path) -> Result<StockRtkit, String> {
        let rule = Rule(Path::new(RULES_DIR).join(format!("49-tessera-{user}.rules")));
        std::fs::write(&rule.0, rule_text(user))
            .map_err(|e| format!("write the polkit rule {}: {e} (as root)", rule.0.display()))?;
        let polkit = start_daemon(POLKITD, &[], address, &dir.join("polkitd.log"), POLKIT_NAME)?;
        let rtkit_args = ["--stderr", "--no-limit-resources"];
        let rtkit = start_daemon(
            RTKIT_DAEMON,
            &rtkit_args,
            address,
            &dir.join("rtkit-daemon.log"),
            BUS_NAME,
        )?;
        Ok(StockRtkit {
            _rtkit: rtkit,
            _polkit: polkit,
            _rule: rule,
        })
    }
}

/// polkit allows `user` RTKit's realtime and high-priority actions.
fn rule_text(user: &str) -> String {
    format!(
        "// Written by a tessera desktop run for its own user; removed when it ends.\n\
         polkit.addRule(function(action, subject) {{\n\
         \x20   if ((action.id == \"org.freedesktop.RealtimeKit1.acquire-real-time\" ||\n\
         \x20        action.id == \"org.freedesktop.RealtimeKit1.acquire-high-priority\") &&\n\
         \x20       subject.user == \"{user}\") {{\n\
         \x20       return polkit.Result.YES;\n\
         \x20   }}\n\
         }});\n"
    )
}

/// `program` on the bus at `address`, logging to `log`, once it owns `name`.
fn start_daemon(
    program: &str,
    args: &[&str],
    address: &str,
    log: &Path,
    name: &str,
) -> Result<OwnedChild, String> {
    let (out, err) = servers::log_to(log)?;
    let mut command = Command::new(program);
    command
        .args(args)
        .env("DBUS_SYSTEM_BUS_ADDRESS", address)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    let child = command
        .spawn()
        .map_err(|e| format!("starting {program}: {e} (Debian: apt-get install rtkit polkitd)"))?;
    let mut process = OwnedChild::new(child, program, GRACE);
    await_name(&mut process, log, program, address, name)?;
    Ok(process)
}

/// Waits until `name` has an owner on the bus at `address`, failing early
/// if `process` (which should take it) exits.
pub(crate) fn await_name(
    process: &mut OwnedChild,
    log: &Path,
    what: &str,
    address: &str,
    name: &str,
) -> Result<(), String> {
    let connection = zbus::blocking::connection::Builder::address(address)
        .and_then(|b| b.method_timeout(Duration::from_secs(5)).build())
        .map_err(|e| format!("connect to the private bus {address}: {e}"))?;
    let dbus = zbus::blocking::fdo::DBusProxy::new(&connection).map_err(|e| e.to_string())?;
    let bus_name: zbus::names::BusName = name.try_into().map_err(|e| format!("{name}: {e}"))?;
    servers::await_ready(process, log, &format!("{what} (owning {name})"), || {
        dbus.name_has_owner(bus_name.clone()).unwrap_or(false)
    })
}
