//! A `tessera daemon` of one configuration's own: a fresh run directory
//! (socket, state, `monitor.jsonl`), the daemon's config file written there
//! (monitor interval, `[adaptation]` on or off; or `rtkit = true` with a
//! private system bus to own RTKit's name on), the daemon started as a
//! child of this process and awaited until it answers.
//!
//! It owns that daemon and that directory: when done (or dropped, on error
//! too) it resets the daemon's broker (every cell destroyed, every thread
//! given back its scheduling), stops the daemon by its PID and removes the
//! directory. It must never start while another broker holds cpusets (two
//! brokers would tear down each other's cpuset layout), and never signal a
//! process it did not start.

use crate::harness::servers::{self, OwnedChild};
use crate::harness::stock_rtkit::await_name;
use serde::Serialize;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;
use tessera_broker::monitor::{Monitor, Sample};
use tessera_broker::paths::Paths;
use tessera_broker::Session;
use tessera_policy::rap::RapConfig;

/// How long the daemon may take to exit after SIGTERM.
const DAEMON_GRACE: Duration = Duration::from_secs(5);

/// The daemon's config file, as `tessera_broker::config::Config` reads it
/// (what is absent keeps its default).
#[derive(Serialize, Default)]
struct DaemonConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    monitor_interval_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    adaptation: Option<&'a RapConfig>,
    /// Own RTKit's name on the system bus.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    rtkit: bool,
}

/// A daemon started here, in a run directory of its own.
pub(crate) struct PrivateDaemon {
    process: Option<OwnedChild>,
    paths: Paths,
}

impl PrivateDaemon {
    /// Writes the config (`adaptation` as given, `monitor_interval` the
    /// daemon's sampling) into a fresh directory and starts `tessera daemon`
    /// on it; returns once its socket answers.
    pub(crate) fn start(
        monitor_interval: Duration,
        adaptation: &RapConfig,
    ) -> Result<PrivateDaemon, String> {
        let config = DaemonConfig {
            monitor_interval_ms: Some(monitor_interval.as_millis() as u64),
            adaptation: Some(adaptation),
            ..DaemonConfig::default()
        };
        PrivateDaemon::start_with(&config, None)
    }

    /// A daemon answering RTKit's interface (`rtkit = true`, the rest of
    /// its config the defaults) on the system bus at `bus_address`;
    /// returns once it owns RTKit's name there.
    pub(crate) fn start_rtkit(bus_address: &str) -> Result<PrivateDaemon, String> {
        let config = DaemonConfig {
            rtkit: true,
            ..DaemonConfig::default()
        };
        PrivateDaemon::start_with(&config, Some(bus_address))
    }

    fn start_with(
        config_values: &DaemonConfig,
        bus_address: Option<&str>,
    ) -> Result<PrivateDaemon, String> {
        refuse_beside_another_broker()?;
        let tessera = servers::program_beside_us("tessera");
        if !servers::is_program(&tessera) {
            return Err(
                "the `tessera` binary is not built, and each configuration runs a daemon of its \
                 own: cargo build -p tessera-cli"
                    .into(),
            );
        }
        let paths = Paths::at(std::env::temp_dir().join(servers::unique("tessera-rap")));
        paths
            .ensure()
            .map_err(|e| format!("create {}: {e}", paths.dir.display()))?;
        // From here on the handle removes the directory whatever happens.
        let mut daemon = PrivateDaemon {
            process: None,
            paths,
        };
        let config = daemon.paths.dir.join("daemon.toml");
        let text =
            toml::to_string(config_values).map_err(|e| format!("the daemon's config: {e}"))?;
        std::fs::write(&config, text).map_err(|e| format!("write {}: {e}", config.display()))?;
        let log = daemon.paths.dir.join("daemon.log");
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out
            .try_clone()
            .map_err(|e| format!("{}: {e}", log.display()))?;
        let mut command = Command::new(&tessera);
        if let Some(address) = bus_address {
            command.env("DBUS_SYSTEM_BUS_ADDRESS", address);
        }
        let child = command
            .arg("daemon")
            .arg("--config")
            .arg(&config)
            .arg("--run-dir")
            .arg(&daemon.paths.dir)
            .env("TESSERA_RUN_DIR", &daemon.paths.dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {}: {e}", tessera.display()))?;
        let process = daemon
            .process
            .insert(OwnedChild::new(child, "tessera daemon", DAEMON_GRACE));
        let socket = daemon.paths.socket();
        servers::await_ready(process, &log, "tessera daemon", || {
            UnixStream::connect(&socket).is_ok()
        })?;
        if let Some(address) = bus_address {
            let name = tessera_rtkit::bus::BUS_NAME;
            await_name(process, &log, "tessera daemon", address, name)?;
        }
        Ok(daemon)
    }

    /// Its run directory (`TESSERA_RUN_DIR` for its clients).
    pub(crate) fn dir(&self) -> &Path {
        &self.paths.dir
    }

    pub(crate) fn paths(&self) -> &Paths {
        &self.paths
    }

    /// A session to it (and to nothing else).
    pub(crate) fn session(&self) -> Result<Session, String> {
        Session::daemon_at(&self.paths).map_err(|e| e.to_string())
    }

    /// The monitor's series so far, oldest first.
    pub(crate) fn samples(&self) -> Vec<Sample> {
        Monitor::open(self.paths.monitor()).since(None)
    }

    /// Resets its broker, stops it and removes its directory; notes on
    /// what did not go cleanly.
    pub(crate) fn stop(mut self) -> Vec<String> {
        self.shut_down()
    }

    fn shut_down(&mut self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(mut process) = self.process.take() {
            if process.exited().is_none() {
                if let Err(e) = self
                    .session()
                    .and_then(|mut s| s.reset().map(drop).map_err(|e| e.to_string()))
                {
                    notes.push(format!("the private daemon's reset failed: {e}"));
                }
            }
            let ending = process.stop();
            if !ending.contains("stopped") {
                notes.push(format!(
                    "{ending}: {}",
                    servers::log_tail(&self.paths.dir.join("daemon.log"))
                ));
            }
        }
        if self.paths.dir.exists() {
            if let Err(e) = std::fs::remove_dir_all(&self.paths.dir) {
                notes.push(format!("remove {}: {e}", self.paths.dir.display()));
            }
        }
        notes
    }
}

impl Drop for PrivateDaemon {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// A broker holding cpusets (the `tessera` cpuset groups exist) would have
/// them torn down by this run's daemons, which know nothing of its cells.
fn refuse_beside_another_broker() -> Result<(), String> {
    let Ok(layout) = tessera_broker::layout::Layout::detect() else {
        return Ok(());
    };
    match layout.existing_groups().first() {
        None => Ok(()),
        Some(group) => Err(format!(
            "another tessera broker holds cpusets ({} exists), and this experiment runs a daemon \
             of its own per configuration, which would tear them down: let the other run end, \
             or release its cells (`tessera reset`), then run again",
            group.path.display()
        )),
    }
}
