//! `tessera install` and `tessera uninstall`: tessera set up as a system
//! service the way its Debian package sets it up. The files are dist.rs's;
//! this module adds what only a live system needs — systemd and the system
//! bus told — and otherwise says plainly what it left undone, with the
//! command that does it.
//!
//! It must never run systemctl for a root other than the machine's own /,
//! nor when systemd is not running, and never touch files the Debian
//! package owns.

use crate::dist::{self, Action, FileOutcome};
use crate::failure::{failed, Failure};
use crate::parse::invalid;
use clap::Args;
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use tessera_broker::broker::ResetReport;
use tessera_broker::{BrokerError, ErrorCode, Session};

pub const INSTALL_EXAMPLES: &str = "Examples:\n  \
    sudo tessera install                      # the files, then systemctl enable --now tessera.service\n  \
    sudo tessera install --no-enable          # the files, reloaded; not enabled or started\n  \
    tessera install --root /srv/image --json  # into an image or a chroot: systemd is not told\n\n\
    Writes /usr/bin/tessera (this binary), /usr/lib/systemd/system/tessera.service,\n\
    /usr/share/dbus-1/system.d/org.freedesktop.RealtimeKit1.tessera.conf and\n\
    /etc/tessera/daemon.toml (never over an existing one). Running it again changes nothing.\n\
    See docs/daemon.md, \"Installing as a system service\".";

pub const UNINSTALL_EXAMPLES: &str = "Examples:\n  \
    sudo tessera uninstall                    # stop and disable tessera.service, reset its cells, remove its files\n  \
    tessera uninstall --root /srv/image --json\n\n\
    A /etc/tessera/daemon.toml that differs from the shipped one is kept. RTKit (if installed)\n\
    answers again at the next real-time request, through its own D-Bus activation.\n\
    See docs/daemon.md, \"Installing as a system service\".";

#[derive(Args)]
pub struct InstallArgs {
    /// Install under this directory instead of / (an image, a chroot, a
    /// test); systemd is then not told.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Write the files and reload systemd and the bus, but neither enable
    /// nor start tessera.service.
    #[arg(long)]
    pub no_enable: bool,
    /// Every file and what happened to it, the commands run and those left
    /// to you, as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct UninstallArgs {
    /// Uninstall from this directory instead of / (an image, a chroot, a
    /// test); systemd is then not told.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Every file and what happened to it, the commands run and those left
    /// to you, as JSON.
    #[arg(long)]
    pub json: bool,
}

/// A `systemctl` command for the live system, and its form for a system
/// that is not running (None: a booting system needs none, it reads the
/// files fresh).
struct Step {
    what: &'static str,
    live: &'static [&'static str],
    offline: Option<&'static [&'static str]>,
}

const RELOAD_UNITS: Step = Step {
    what: "reload systemd's unit files",
    live: &["daemon-reload"],
    offline: None,
};
/// A daemon already running goes on the new files; it recovers its cells.
const RESTART: Step = Step {
    what: "restart a running tessera.service on the new files",
    live: &["try-restart", "tessera.service"],
    offline: None,
};
const ENABLE: Step = Step {
    what: "enable tessera.service at boot",
    live: &["enable", "--now", "tessera.service"],
    offline: Some(&["enable", "tessera.service"]),
};
/// The bus would also notice its system.d changed; this makes it certain.
const RELOAD_BUS: Step = Step {
    what: "reload the system bus's policy",
    live: &["reload", "dbus.service"],
    offline: None,
};
const DISABLE: Step = Step {
    what: "disable tessera.service at boot",
    live: &["disable", "--now", "tessera.service"],
    offline: Some(&["disable", "tessera.service"]),
};

/// What the Debian package's files are listed in, when it is installed.
const PACKAGE_LIST: &str = "var/lib/dpkg/info/tessera.list";

#[derive(Serialize)]
struct Report {
    root: PathBuf,
    files: Vec<FileOutcome>,
    /// The commands run on the live system, in order.
    ran: Vec<String>,
    /// Why systemd was not told (absent when it was).
    #[serde(skip_serializing_if = "Option::is_none")]
    not_run_because: Option<String>,
    /// What was left undone, each with the command that does it.
    not_run: Vec<Left>,
    /// The stopped daemon's cells destroyed (uninstall on the live system).
    #[serde(skip_serializing_if = "Option::is_none")]
    reset: Option<ResetReport>,
}

#[derive(Serialize)]
struct Left {
    what: &'static str,
    command: String,
}

/// Where the files go, and why systemd is not to be told (None: it is).
struct Target {
    root: PathBuf,
    offline: Option<String>,
}

pub fn install(args: InstallArgs) -> Result<ExitCode, Failure> {
    let target = Target::of(&args.root)?;
    let mut report = Report::new(&target);
    report.files = dist::install(&target.root)?;
    let mut steps = vec![RELOAD_UNITS];
    if report.files.iter().any(|f| f.action == Action::Written) {
        steps.push(RESTART);
    }
    if !args.no_enable {
        steps.push(ENABLE);
    }
    steps.push(RELOAD_BUS);
    target.tell_systemd(&steps, &mut report)?;
    crate::show::print(args.json, &report, |r| r.text("installed under"))
}

pub fn uninstall(args: UninstallArgs) -> Result<ExitCode, Failure> {
    let target = Target::of(&args.root)?;
    let mut report = Report::new(&target);
    // Stopped while its unit is still there to stop it by.
    if target.root.join(dist::UNIT_PATH).exists() {
        target.tell_systemd(&[DISABLE], &mut report)?;
    }
    // A stopped daemon leaves its cells for the next one to re-admit; with
    // no next one, every thread goes back to what its program set and every
    // cpuset is removed, as `tessera reset` does.
    if target.offline.is_none() {
        report.reset = Some(Session::connect()?.reset()?);
    }
    report.files = dist::uninstall(&target.root)?;
    target.tell_systemd(&[RELOAD_UNITS, RELOAD_BUS], &mut report)?;
    crate::show::print(args.json, &report, |r| r.text("uninstalled from"))
}

impl Target {
    fn of(root: &Path) -> Result<Target, BrokerError> {
        let root = root.canonicalize().map_err(|e| {
            invalid(
                format!("--root {}: {e}", root.display()),
                "give an existing directory: the / the files go under",
            )
        })?;
        if root.join(PACKAGE_LIST).exists() {
            return Err(BrokerError::new(
                ErrorCode::Invalid,
                format!(
                    "the Debian package tessera is installed under {}: its files are dpkg's",
                    root.display()
                ),
                "use `apt install tessera` / `apt remove tessera` instead",
            ));
        }
        let offline = if root != Path::new("/") {
            Some(format!(
                "{} is not this machine's /: systemd here does not run from it",
                root.display()
            ))
        } else if !sd_notify::booted().unwrap_or(false) {
            Some("systemd is not running here (no /run/systemd/system)".to_string())
        } else {
            None
        };
        Ok(Target { root, offline })
    }

    /// Runs the steps on the live system, or lists their offline forms.
    fn tell_systemd(&self, steps: &[Step], report: &mut Report) -> Result<(), Failure> {
        let Some(why) = &self.offline else {
            for step in steps {
                report.ran.push(systemctl(step.live)?);
            }
            return Ok(());
        };
        report.not_run_because = Some(why.clone());
        for step in steps {
            if let Some(args) = step.offline {
                report.not_run.push(Left {
                    what: step.what,
                    command: self.offline_command(args),
                });
            }
        }
        Ok(())
    }

    /// `systemctl` as the admin would run it for this root.
    fn offline_command(&self, args: &[&str]) -> String {
        let root = match self.root == Path::new("/") {
            true => String::new(),
            false => format!("--root={} ", self.root.display()),
        };
        format!("systemctl {root}{}", args.join(" "))
    }
}

/// Runs `systemctl args`; the command as run, or why it failed.
fn systemctl(args: &[&str]) -> Result<String, Failure> {
    let command = format!("systemctl {}", args.join(" "));
    let out = Command::new("systemctl").args(args).output().map_err(|e| {
        failed(
            format!("run `{command}`: {e}"),
            "install systemd's systemctl, or run the command yourself",
        )
    })?;
    if !out.status.success() {
        return Err(failed(
            format!(
                "`{command}` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ),
            "see `systemctl status tessera.service` and `journalctl -u tessera.service`, \
             then run the same tessera command again (it redoes only what is missing)",
        ));
    }
    Ok(command)
}

impl Report {
    fn new(target: &Target) -> Report {
        Report {
            root: target.root.clone(),
            files: Vec::new(),
            ran: Vec::new(),
            not_run_because: None,
            not_run: Vec::new(),
            reset: None,
        }
    }

    fn text(&self, done: &str) -> String {
        let mut out = format!("tessera {done} {}:\n", self.root.display());
        for f in &self.files {
            let mode = f
                .mode
                .as_deref()
                .map(|m| format!(" ({m})"))
                .unwrap_or_default();
            let note = match f.action {
                Action::Kept => ": it differs from the shipped one, so it is yours and stays",
                _ => "",
            };
            let action = f.action.name();
            let _ = writeln!(out, "  {action:<10} {}{mode}{note}", f.path.display());
        }
        for command in &self.ran {
            let _ = writeln!(out, "ran: {command}");
        }
        if let Some(reset) = &self.reset {
            out += &crate::show::reset(reset);
        }
        if let Some(why) = &self.not_run_because {
            let _ = writeln!(out, "systemd not told: {why}.");
            for left in &self.not_run {
                let _ = writeln!(out, "  to {}: {}", left.what, left.command);
            }
        }
        out
    }
}
