//! The `netphone` subject of a scenario file (seed 004 §4): mike and speaker
//! in hosts of their own across a shaped link — its `stream`, the link's
//! rate (`link`), and whether a `flood` shares the link — and how a
//! configuration runs it: `"plain"`, or a table giving the roles `mike` and
//! `speaker` a scheduling each (`cell:NAME`, `fifo:P`, `plain`), mike's
//! `packets` marked real-time or not, another `stream`, and `service`: the
//! speaker's packets through the network service process, its real-time
//! thread scheduled so (`cell:NAME` or `plain`).
//!
//! Owns that part of parsing and validation, with the line of every
//! refusal; the netphone's [`Stream`] is `tessera_policy::media`'s (the
//! workload sends what a scenario names). Like the rest of the crate, it must never touch the
//! machine.

use super::{refuse, RawSubject, RawSubjectSched, Refusal};
use std::ops::Range;
pub use tessera_policy::media::Stream;
use toml::Spanned;

/// The roles a configuration schedules one by one.
pub const ROLES: [&str; 2] = ["mike", "speaker"];
/// The role of the network service's real-time thread; naming it routes
/// the speaker's packets through the service.
pub const SERVICE_ROLE: &str = "service";
/// Slowest link: the 16 Mbit/s stream must fit with room to spare.
const MIN_LINK_BPS: u64 = 20_000_000;
/// Fastest link: beyond it the machine, not the shaping, sets the rate.
const MAX_LINK_BPS: u64 = 10_000_000_000;

#[derive(Debug, Clone, PartialEq)]
pub struct NetphoneSubject {
    /// The stream configurations send unless they name another.
    pub stream: Stream,
    pub link_bps: u64,
    pub flood: bool,
}

/// How one configuration runs the netphone.
#[derive(Debug, Clone, PartialEq)]
pub struct NetphoneSettings {
    pub stream: Stream,
    /// Mike's packets carry the real-time marks.
    pub marked: bool,
    /// The speaker receives through a real-time flow of the network
    /// service process in its host (the `service` role schedules the
    /// service's real-time thread); otherwise on a socket of its own.
    pub service: bool,
}

impl NetphoneSettings {
    pub fn describe(&self) -> String {
        let marks = match self.marked {
            true => "marked real-time",
            false => "unmarked",
        };
        let through = match self.service {
            true => ", received through the network service",
            false => "",
        };
        format!("{}, {marks}{through}", self.stream.describe())
    }
}

/// A configuration's netphone: its settings, and each role's scheduling
/// as written, with where it stands (the caller checks those against the
/// scenario's cells; roles not named run plain).
pub(super) struct NetphoneConfiguration {
    pub settings: NetphoneSettings,
    pub roles: Vec<(String, String, Range<usize>)>,
}

/// The subject's keys.
pub(super) fn subject(s: &RawSubject) -> Result<NetphoneSubject, Refusal> {
    let stream = match &s.stream {
        Some(v) => stream(v.get_ref()).map_err(|e| (v.span(), e))?,
        None => Stream::AUDIO,
    };
    let link_bps = super::net_service::link(s.link.as_ref())?;
    if !(MIN_LINK_BPS..=MAX_LINK_BPS).contains(&link_bps) {
        let span = s.link.as_ref().map_or(s.kind.span(), Spanned::span);
        return refuse(span, "a netphone's link must be 20mbit–10gbit");
    }
    if stream.bits_per_second() * 2.0 > link_bps as f64 {
        let span = s.link.as_ref().or(s.stream.as_ref()).map(Spanned::span);
        return refuse(
            span.unwrap_or(s.kind.span()),
            format!(
                "the link ({:.0} Mbit/s) must carry twice the stream ({:.1} Mbit/s)",
                link_bps as f64 / 1e6,
                stream.bits_per_second() / 1e6
            ),
        );
    }
    Ok(NetphoneSubject {
        stream,
        link_bps,
        flood: s.flood.as_ref().is_some_and(|f| *f.get_ref()),
    })
}

/// A configuration's `subject` for a netphone.
pub(super) fn configuration(
    value: Option<&Spanned<RawSubjectSched>>,
    subject: &NetphoneSubject,
) -> Result<NetphoneConfiguration, Refusal> {
    let mut settings = NetphoneSettings {
        stream: subject.stream,
        marked: false,
        service: false,
    };
    let mut roles = Vec::new();
    let Some(value) = value else {
        return Ok(NetphoneConfiguration { settings, roles });
    };
    let span = value.span();
    let map = match value.get_ref() {
        RawSubjectSched::All(text) if text.trim() == "plain" => {
            return Ok(NetphoneConfiguration { settings, roles })
        }
        RawSubjectSched::All(text) => {
            return refuse(
                span,
                format!(
                    "{text:?}: a netphone runs \"plain\" or as a table, e.g. \
                     {{ mike = \"cell:mike\", speaker = \"cell:speaker\", packets = \"marked\" }}"
                ),
            )
        }
        RawSubjectSched::Roles(map) => map,
    };
    for (key, text) in map {
        match key.as_str() {
            "packets" => {
                settings.marked = match text.as_str() {
                    "marked" => true,
                    "unmarked" => false,
                    other => {
                        return refuse(
                            span,
                            format!("packets must be \"marked\" or \"unmarked\", not {other:?}"),
                        )
                    }
                }
            }
            "stream" => settings.stream = stream(text).map_err(|e| (span.clone(), e))?,
            SERVICE_ROLE => {
                if !(text.starts_with("cell:") || text.trim() == "plain") {
                    return refuse(
                        span,
                        format!(
                            "service = {text:?}: the network service's real-time thread runs in \
                             a cell (\"cell:NAME\") or \"plain\""
                        ),
                    );
                }
                settings.service = true;
                roles.push((key.clone(), text.clone(), span.clone()));
            }
            role if ROLES.contains(&role) => roles.push((key.clone(), text.clone(), span.clone())),
            other => {
                return refuse(
                    span,
                    format!(
                        "unknown key {other:?} (a netphone's configuration has {}, packets, \
                         stream, {SERVICE_ROLE})",
                        ROLES.join(", ")
                    ),
                )
            }
        }
    }
    if settings.stream.bits_per_second() * 2.0 > subject.link_bps as f64 {
        return refuse(span, "the link must carry twice the stream");
    }
    Ok(NetphoneConfiguration { settings, roles })
}

/// "1.2mbit" and "16mbit" (the seed's two streams) or "SIZEB@RATEHz".
fn stream(text: &str) -> Result<Stream, String> {
    let text = text.trim();
    let custom = || -> Option<Stream> {
        let (size, rate) = text.split_once('@')?;
        let packet_bytes = size.trim().strip_suffix('B')?.trim().parse().ok()?;
        let hz = rate.trim().strip_suffix("Hz")?.trim().parse().ok()?;
        Some(Stream { packet_bytes, hz })
    };
    let stream = match text {
        "1.2mbit" => Stream::AUDIO,
        "16mbit" => Stream::VIDEO,
        _ => custom().ok_or_else(|| {
            format!(
                "{text:?} is not a stream: \"1.2mbit\" (1500 B at 100 Hz), \"16mbit\" \
                 (4096 B at 500 Hz) or e.g. \"1500B@100Hz\""
            )
        })?,
    };
    if !(Stream::MIN_PACKET..=Stream::MAX_PACKET).contains(&stream.packet_bytes) {
        return Err(format!(
            "a packet holds {}–{} bytes, not {}",
            Stream::MIN_PACKET,
            Stream::MAX_PACKET,
            stream.packet_bytes
        ));
    }
    if !(1..=10_000).contains(&stream.hz) {
        return Err(format!("a stream's rate is 1–10000 Hz, not {}", stream.hz));
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_by_the_seeds_names_or_size_and_rate() {
        assert_eq!(stream("1.2mbit"), Ok(Stream::AUDIO));
        assert_eq!(stream("16mbit"), Ok(Stream::VIDEO));
        assert_eq!(
            stream("200B@50Hz"),
            Ok(Stream {
                packet_bytes: 200,
                hz: 50
            })
        );
        assert!(stream("4mbit").unwrap_err().contains("1500B@100Hz"));
        assert!(stream("8B@100Hz").unwrap_err().contains("bytes"));
        assert!(stream("100B@0Hz").unwrap_err().contains("Hz"));
    }
}
