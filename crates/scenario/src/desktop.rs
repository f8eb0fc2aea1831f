//! The `desktop` subject of a scenario file (issue 22): an ordinary user's
//! PipeWire (a user made for the run, its own runtime directory, a private
//! system bus), headless on its Dummy-Driver at the subject's quantum and
//! rate, with `clients` pw-jack load clients of `load` each in a chain; and
//! where a configuration's real-time rights come from (its `subject`):
//! `none` (no rtprio limit, nothing owning RTKit's name: PipeWire's threads
//! stay SCHED_OTHER), `rtkit` (Debian's rtkit-daemon on the private bus,
//! with polkit allowing the user), `tessera` (`tessera daemon` with
//! `rtkit = true` owning RTKit's name), `tessera+guard` (the same, plus
//! root's `tessera guard pipewire --pid`).
//!
//! Owns that part of parsing and validation, with the line of every
//! refusal, and the programs each part needs. Like the rest of the crate,
//! it must never touch the machine beyond looking for those programs.

use super::audio_server::{self, AudioClient, AudioServerSubject, ServerKind};
use super::{refuse, required, RawSubject, RawSubjectSched, Refusal};
use std::ops::Range;
use std::path::Path;
use std::time::Duration;
use toml::Spanned;

/// Debian's rtkit-daemon (package `rtkit`), not on the PATH.
pub const RTKIT_DAEMON: &str = "/usr/libexec/rtkit-daemon";
/// polkit's daemon (package `polkitd`), which rtkit-daemon asks.
pub const POLKITD: &str = "/usr/lib/polkit-1/polkitd";
/// The bus daemon every configuration's private system bus is.
const BUS_PROGRAMS: [(&str, &str); 1] = [("dbus-daemon", "dbus-daemon")];
const MAX_CLIENTS: usize = 32;

#[derive(Debug, Clone, PartialEq)]
pub struct DesktopSubject {
    pub frames: u32,
    pub rate: u32,
    /// pw-jack load clients in a chain, all open for the whole run.
    pub clients: usize,
    /// Each client's busy fraction of the period.
    pub load: f64,
}

impl DesktopSubject {
    /// The same server and clients as an audio-server subject (PipeWire,
    /// every client from the start): what its clients' record is measured
    /// against.
    pub fn audio(&self) -> AudioServerSubject {
        AudioServerSubject {
            server: ServerKind::PipeWire,
            frames: self.frames,
            rate: self.rate,
            priority: 10,
            clients: vec![
                AudioClient {
                    load: self.load,
                    start: Duration::ZERO,
                    stop: None,
                };
                self.clients
            ],
            network: None,
        }
    }

    pub fn period(&self) -> Duration {
        self.audio().period()
    }
}

/// Where a configuration's real-time rights come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rights {
    /// None: no rtprio limit, no RTKit on the bus.
    None,
    /// Debian's rtkit-daemon owning RTKit's name.
    StockRtkit,
    /// `tessera daemon` with `rtkit = true` owning it; `guard`: root's
    /// `tessera guard pipewire --pid` too.
    Tessera { guard: bool },
}

const RIGHTS_FORMS: &str = "none (no real-time rights), rtkit (Debian's rtkit-daemon), \
                            tessera (tessera's RTKit), tessera+guard (and `tessera guard pipewire`)";

impl Rights {
    pub fn parse(text: &str) -> Result<Rights, String> {
        match text.trim() {
            "none" => Ok(Rights::None),
            "rtkit" => Ok(Rights::StockRtkit),
            "tessera" => Ok(Rights::Tessera { guard: false }),
            "tessera+guard" => Ok(Rights::Tessera { guard: true }),
            other => Err(format!(
                "{other:?} is not a desktop's real-time rights: give one of {RIGHTS_FORMS}"
            )),
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Rights::None => "none",
            Rights::StockRtkit => "rtkit",
            Rights::Tessera { guard: false } => "tessera",
            Rights::Tessera { guard: true } => "tessera+guard",
        }
    }

    /// Whether tessera gives these rights (the goal compares these with
    /// the others).
    pub fn is_tessera(self) -> bool {
        matches!(self, Rights::Tessera { .. })
    }

    /// The programs beyond the server's these rights need, with their
    /// Debian packages.
    pub fn programs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Rights::StockRtkit => &[(RTKIT_DAEMON, "rtkit"), (POLKITD, "polkitd")],
            Rights::None | Rights::Tessera { .. } => &[],
        }
    }
}

/// Whether `program` is there: a file at an absolute path, else a name on
/// the PATH (`installed` answers that).
fn present(program: &str, installed: &impl Fn(&str) -> bool) -> bool {
    match Path::new(program).is_absolute() {
        true => Path::new(program).is_file(),
        false => installed(program),
    }
}

fn missing(
    programs: &[(&str, &str)],
    installed: &impl Fn(&str) -> bool,
) -> Option<(String, String)> {
    programs
        .iter()
        .find(|(program, _)| !present(program, installed))
        .map(|(program, package)| (program.to_string(), package.to_string()))
}

/// Validates a `desktop` subject: PipeWire's and the bus's programs, the
/// quantum and rate, the clients.
pub(super) fn subject(
    s: &RawSubject,
    table: &Range<usize>,
    installed: impl Fn(&str) -> bool,
) -> Result<DesktopSubject, Refusal> {
    let needed = ServerKind::PipeWire.programs().iter().chain(&BUS_PROGRAMS);
    let needed: Vec<(&str, &str)> = needed.copied().collect();
    if let Some((program, package)) = missing(&needed, &installed) {
        return refuse(
            s.kind.span(),
            format!("{program} is not installed (Debian: apt-get install {package}, or ./scripts/setup.sh)"),
        );
    }
    for (key, present) in [
        ("server", s.server.is_some()),
        ("priority", s.priority.is_some()),
        ("[[subject.client]]", !s.client.is_empty()),
        ("[subject.staircase]", s.staircase.is_some()),
    ] {
        if present {
            return refuse(
                table.clone(),
                format!("a desktop subject is always the user's PipeWire with `clients` of `load` each: remove {key}"),
            );
        }
    }
    let (frames, rate) = audio_server::frames_and_rate(s, table)?;
    let count = required(&s.clients, table, "clients")?;
    if !(1..=MAX_CLIENTS).contains(count.get_ref()) {
        return refuse(
            count.span(),
            format!("clients must be 1–{MAX_CLIENTS}, not {}", count.get_ref()),
        );
    }
    let load_value = required(&s.load, table, "load")?;
    let load = *load_value.get_ref();
    if !(load > 0.0 && load < 1.0) {
        return refuse(
            load_value.span(),
            format!("load is each client's busy fraction of the period, in (0, 1), not {load}"),
        );
    }
    let sum = load * *count.get_ref() as f64;
    if sum >= 1.0 {
        return refuse(
            load_value.span(),
            format!(
                "{} clients of {load} add up to {sum:.2} of the period: no cycle could finish \
                 (lower `load` or `clients`)",
                count.get_ref()
            ),
        );
    }
    Ok(DesktopSubject {
        frames,
        rate,
        clients: *count.get_ref(),
        load,
    })
}

/// A configuration's rights, from its `subject` (required: a desktop
/// configuration says where its rights come from), with the programs
/// they need.
pub(super) fn configuration(
    value: Option<&Spanned<RawSubjectSched>>,
    table: &Range<usize>,
    installed: impl Fn(&str) -> bool,
) -> Result<Rights, Refusal> {
    let (text, span) = match value.map(|v| (v.get_ref(), v.span())) {
        None => {
            return refuse(
                table.clone(),
                format!("a desktop configuration needs `subject`: {RIGHTS_FORMS}"),
            )
        }
        Some((RawSubjectSched::All(text), span)) => (text.as_str(), span),
        Some((RawSubjectSched::Roles(_), span)) => {
            return refuse(
                span,
                format!("a desktop has no roles; give its rights as one word: {RIGHTS_FORMS}"),
            )
        }
    };
    let rights = Rights::parse(text).map_err(|e| (span.clone(), e))?;
    if let Some((program, package)) = missing(rights.programs(), &installed) {
        return refuse(
            span,
            format!(
                "{} needs {program}, which is not installed (Debian: apt-get install {package}, \
                 or ./scripts/setup.sh)",
                rights.describe()
            ),
        );
    }
    Ok(rights)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rights_parse_and_describe_themselves() {
        for text in ["none", "rtkit", "tessera", "tessera+guard"] {
            assert_eq!(Rights::parse(text).unwrap().describe(), text);
        }
        assert!(Rights::parse(" tessera ").unwrap().is_tessera());
        assert!(!Rights::parse("rtkit").unwrap().is_tessera());
        let e = Rights::parse("fifo:88").unwrap_err();
        assert!(
            e.contains("\"fifo:88\"") && e.contains("tessera+guard"),
            "{e}"
        );
    }

    #[test]
    fn stock_rtkit_needs_rtkit_and_polkit() {
        let programs: Vec<&str> = Rights::StockRtkit
            .programs()
            .iter()
            .map(|(p, _)| *p)
            .collect();
        assert_eq!(programs, [RTKIT_DAEMON, POLKITD]);
        assert!(Rights::Tessera { guard: true }.programs().is_empty());
        let nothing = |_: &str| false;
        assert_eq!(
            missing(&[("pw-jack", "pipewire-jack")], &nothing),
            Some(("pw-jack".into(), "pipewire-jack".into()))
        );
        assert_eq!(
            missing(&[("/bin/sh", "dash")], &nothing),
            None,
            "a path is looked at, not the PATH"
        );
    }

    #[test]
    fn the_subject_is_pipewire_with_its_clients_from_the_start() {
        let d = DesktopSubject {
            frames: 64,
            rate: 48_000,
            clients: 8,
            load: 0.05,
        };
        let audio = d.audio();
        assert_eq!(audio.server, ServerKind::PipeWire);
        assert_eq!(audio.clients.len(), 8);
        assert!(audio
            .clients
            .iter()
            .all(|c| c.start.is_zero() && c.stop.is_none()));
        assert_eq!(d.period().as_nanos(), 1_333_333);
    }
}
