//! A system bus of one's own: a `dbus-daemon` on a socket in a given
//! directory, whose policy lets root own RTKit's name (and polkit's daemon
//! its own, which a stock rtkit-daemon asks) and everyone call it.
//! For tests and benchmarks, which must never take the machine's bus name
//! from its real owner; every process pointed at it through
//! `DBUS_SYSTEM_BUS_ADDRESS` (libdbus, sd-bus and zbus all honour it) sees
//! it as the system bus.
//!
//! It owns that daemon and stops it when dropped; it must never touch the
//! machine's own bus.

use crate::bus::BUS_NAME;
use crate::RtkitError;
use std::path::Path;
use std::process::{Command, Stdio};

/// polkit's bus name: Debian's polkitd drops to its user `polkitd` before
/// it takes the name (dbus-daemon ignores the rule where no such user
/// exists).
pub const POLKIT_NAME: &str = "org.freedesktop.PolicyKit1";

/// The bus daemon, terminated when dropped.
pub struct PrivateBus {
    /// Its address, for DBUS_SYSTEM_BUS_ADDRESS.
    pub address: String,
    pid: i32,
}

impl PrivateBus {
    /// Starts a bus listening in `dir` (which must be reachable by the
    /// users whose processes connect).
    pub fn start(dir: &Path) -> Result<PrivateBus, RtkitError> {
        let socket = dir.join("system_bus_socket");
        let config = dir.join("bus.conf");
        std::fs::write(&config, policy(&socket))
            .map_err(|e| RtkitError::failed(format!("write {}: {e}", config.display()), ""))?;
        let out = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", config.display()))
            .args(["--fork", "--print-pid", "--print-address"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| {
                RtkitError::failed(
                    format!("start dbus-daemon: {e}"),
                    "install Debian's dbus-daemon (./scripts/setup.sh does)",
                )
            })?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut lines = text.lines();
        let address = lines.next().unwrap_or_default().to_string();
        let pid = lines.next().and_then(|p| p.trim().parse().ok());
        match pid {
            Some(pid) if out.status.success() && !address.is_empty() => {
                Ok(PrivateBus { address, pid })
            }
            _ => Err(RtkitError::failed(
                format!(
                    "dbus-daemon did not start: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
                "",
            )),
        }
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = tessera_sys::process::terminate(self.pid);
    }
}

fn policy(socket: &Path) -> String {
    format!(
        r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy user="root"><allow own="{BUS_NAME}"/><allow own="{POLKIT_NAME}"/></policy>
  <policy user="polkitd"><allow own="{POLKIT_NAME}"/></policy>
  <policy context="default">
    <allow user="*"/>
    <allow send_destination="*" eavesdrop="false"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
        socket.display()
    )
}
