//! Session descriptions (RFC 4566) as AES67 uses them: one audio media of
//! L16 or L24 over RTP/AVP, with the PTP reference clock (RFC 7273) and the
//! media clock offset the receiver needs to line up timestamps. It owns
//! reading and writing that text and must never guess: what it cannot play
//! is an error naming the line, what it does not need is ignored. Control
//! path only; it allocates.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::format::{Encoding, StreamFormat};

/// Where the stream's timestamps come from (a=ts-refclk, RFC 7273 §4.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RefClock {
    /// `ptp=IEEE1588-2008:39-A7-94-FF-FE-07-CB-D0:0`
    Ptp {
        version: String,
        grandmaster: String,
        domain: u8,
    },
    /// `ptp=IEEE1588-2008:traceable`: any PTP clock traceable to TAI.
    PtpTraceable,
    /// `localmac=...`: the sender's own free-running clock.
    LocalMac(String),
    Other(String),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionDescription {
    pub origin_user: String,
    pub session_id: u64,
    pub session_version: u64,
    pub origin_address: Ipv4Addr,
    /// s=
    pub name: String,
    /// i= (session or media level; media wins)
    pub info: Option<String>,
    /// c=IN IP4 addr[/ttl] (session or media level; media wins)
    pub destination: Ipv4Addr,
    pub ttl: Option<u8>,
    /// m=audio PORT RTP/AVP PT
    pub port: u16,
    pub payload_type: u8,
    /// From a=rtpmap:PT L24/48000/8 (channels default 1) and a=ptime (ms,
    /// may be fractional "0.333"; absent → 1 ms); a=framecount:N wins.
    pub format: StreamFormat,
    /// a=ts-refclk:ptp=IEEE1588-2008:GM:DOMAIN | ptp=traceable | localmac=..
    pub ref_clock: Option<RefClock>,
    /// a=mediaclk:direct=N: the RTP timestamp at PTP epoch, modulo 2^32.
    pub media_clock_offset: Option<u32>,
    /// recvonly / sendonly / sendrecv / inactive
    pub direction: Option<String>,
    /// a=tool:
    pub tool: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SdpError {
    #[error("{field} line {line}: {problem}")]
    Line {
        line: usize,
        field: &'static str,
        problem: String,
    },
    #[error("no {0} line; an AES67 session description needs one")]
    Missing(&'static str),
}

impl SessionDescription {
    /// Accepts CRLF or LF; ignores attributes and lines it does not know and
    /// every media section but the first audio one.
    pub fn parse(text: &str) -> Result<SessionDescription, SdpError> {
        let mut draft = Draft::default();
        let mut in_audio_or_session = true;
        for (n, raw) in text.lines().enumerate() {
            let line = n + 1;
            if raw.trim().is_empty() {
                continue;
            }
            let (kind, value) = match raw.as_bytes() {
                [kind, b'=', ..] => (*kind, &raw[2..]),
                _ => {
                    return Err(at(line, "SDP")(format!(
                        "\"{raw}\" is not a type=value line"
                    )))
                }
            };
            if kind == b'm' {
                in_audio_or_session = draft.media(line, value)?;
            } else if in_audio_or_session {
                draft.field(line, kind, value)?;
            }
        }
        draft.finish()
    }

    /// RFC 4566 order (v o s i c t a m a), CRLF line ends. `parse` of the
    /// result gives `self` back: a=framecount is written whenever the packet
    /// time is not a whole number of milliseconds, as a=ptime then rounds.
    pub fn to_sdp(&self) -> String {
        let mut lines = vec![
            "v=0".to_string(),
            format!(
                "o={} {} {} IN IP4 {}",
                self.origin_user, self.session_id, self.session_version, self.origin_address
            ),
            format!("s={}", self.name),
        ];
        lines.extend(self.info.iter().map(|i| format!("i={i}")));
        let ttl = self.ttl.map(|t| format!("/{t}")).unwrap_or_default();
        lines.push(format!("c=IN IP4 {}{ttl}", self.destination));
        lines.push("t=0 0".to_string());
        lines.extend(self.tool.iter().map(|t| format!("a=tool:{t}")));
        lines.push(format!(
            "m=audio {} RTP/AVP {}",
            self.port, self.payload_type
        ));
        lines.push(format!("a=rtpmap:{} {}", self.payload_type, self.rtpmap()));
        lines.extend(self.direction.iter().map(|d| format!("a={d}")));
        lines.extend(packet_time_lines(&self.format));
        lines.extend(
            self.ref_clock
                .iter()
                .map(|c| format!("a=ts-refclk:{}", ref_clock_text(c))),
        );
        lines.extend(
            self.media_clock_offset
                .iter()
                .map(|o| format!("a=mediaclk:direct={o}")),
        );
        lines.iter().map(|l| format!("{l}\r\n")).collect()
    }

    /// "L24/48000/8"
    pub fn rtpmap(&self) -> String {
        let f = &self.format;
        format!("{}/{}/{}", f.encoding.name(), f.sample_rate, f.channels)
    }
}

/// AES67 writes ptime in milliseconds with three decimals when fractional
/// ("0.333" for 16 frames at 48 kHz); framecount then says it exactly.
fn packet_time_lines(format: &StreamFormat) -> Vec<String> {
    let frames = u64::from(format.frames_per_packet);
    let rate = u64::from(format.sample_rate);
    if (frames * 1000).is_multiple_of(rate) {
        return vec![format!("a=ptime:{}", frames * 1000 / rate)];
    }
    let us = (frames * 1_000_000 + rate / 2) / rate;
    vec![
        format!("a=ptime:{}.{:03}", us / 1000, us % 1000),
        format!("a=framecount:{frames}"),
    ]
}

fn ref_clock_text(clock: &RefClock) -> String {
    match clock {
        RefClock::Ptp {
            version,
            grandmaster,
            domain,
        } => format!("ptp={version}:{grandmaster}:{domain}"),
        RefClock::PtpTraceable => "ptp=IEEE1588-2008:traceable".to_string(),
        RefClock::LocalMac(mac) => format!("localmac={mac}"),
        RefClock::Other(text) => text.clone(),
    }
}

/// An error about `field` on `line`, given the problem.
fn at(line: usize, field: &'static str) -> impl Fn(String) -> SdpError + Copy {
    move |problem| SdpError::Line {
        line,
        field,
        problem,
    }
}

struct Media {
    line: usize,
    port: u16,
    /// The first is the one played; rtpmaps for the others are ignored.
    payload_types: Vec<u8>,
}

/// What the lines said so far. Media-level lines come after session-level
/// ones, so a later line simply overwrites: media wins.
#[derive(Default)]
struct Draft {
    origin: Option<(String, u64, u64, Ipv4Addr)>,
    name: Option<String>,
    info: Option<String>,
    connection: Option<(Ipv4Addr, Option<u8>)>,
    media: Option<Media>,
    rtpmap: Option<(usize, Encoding, u32, u16)>,
    ptime_us: Option<u32>,
    framecount: Option<u32>,
    ref_clock: Option<RefClock>,
    media_clock_offset: Option<u32>,
    direction: Option<String>,
    tool: Option<String>,
}

impl Draft {
    /// Takes an m= line; returns whether the lines after it are read.
    fn media(&mut self, line: usize, value: &str) -> Result<bool, SdpError> {
        let err = at(line, "m=");
        let words: Vec<&str> = value.split_whitespace().collect();
        let [kind, port, proto, types @ ..] = &words[..] else {
            return Err(err(format!(
                "\"{value}\" is not \"MEDIA PORT PROTO FORMAT...\""
            )));
        };
        if *kind != "audio" || self.media.is_some() {
            return Ok(false);
        }
        if *proto != "RTP/AVP" {
            return Err(err(format!(
                "transport \"{proto}\"; AES67 streams are RTP/AVP"
            )));
        }
        let port = port.split('/').next().unwrap_or(port);
        let port = port
            .parse()
            .map_err(|_| err(format!("port \"{port}\" is not 0..=65535")))?;
        let payload_types = types
            .iter()
            .map(|t| t.parse::<u8>().ok().filter(|&pt| pt <= 127))
            .collect::<Option<Vec<u8>>>()
            .filter(|pts| !pts.is_empty())
            .ok_or_else(|| err("payload types must be 0..=127, at least one".to_string()))?;
        self.media = Some(Media {
            line,
            port,
            payload_types,
        });
        Ok(true)
    }

    fn field(&mut self, line: usize, kind: u8, value: &str) -> Result<(), SdpError> {
        match kind {
            b'v' if value != "0" => {
                return Err(at(line, "v=")(format!(
                    "SDP version {value}; only 0 exists"
                )))
            }
            b'o' => self.origin = Some(parse_origin(value).map_err(at(line, "o="))?),
            b's' => self.name = Some(value.to_string()),
            b'i' => self.info = Some(value.to_string()),
            b'c' => self.connection = Some(parse_connection(value).map_err(at(line, "c="))?),
            b'a' => self.attribute(line, value)?,
            _ => {}
        }
        Ok(())
    }

    fn attribute(&mut self, line: usize, value: &str) -> Result<(), SdpError> {
        let (name, arg) = value.split_once(':').unwrap_or((value, ""));
        match name {
            "rtpmap" => self.rtpmap(line, arg)?,
            "ptime" => self.ptime_us = Some(parse_ptime(arg).map_err(at(line, "a=ptime"))?),
            "framecount" => {
                let err = || at(line, "a=framecount")(format!("\"{arg}\" is not a frame count"));
                self.framecount = Some(arg.trim().parse().map_err(|_| err())?);
            }
            "ts-refclk" => {
                self.ref_clock = Some(parse_ref_clock(arg).map_err(at(line, "a=ts-refclk"))?)
            }
            "mediaclk" => {
                self.media_clock_offset = parse_media_clock(arg).map_err(at(line, "a=mediaclk"))?
            }
            "recvonly" | "sendonly" | "sendrecv" | "inactive" => {
                self.direction = Some(name.to_string())
            }
            "tool" => self.tool = Some(arg.to_string()),
            _ => {}
        }
        Ok(())
    }

    fn rtpmap(&mut self, line: usize, arg: &str) -> Result<(), SdpError> {
        let err = at(line, "a=rtpmap");
        // rtpmap is a media-level attribute: at session level it maps nothing.
        let Some(media) = &self.media else {
            return Ok(());
        };
        let (pt, spec) = arg
            .split_once(' ')
            .ok_or_else(|| err(format!("\"{arg}\" is not \"PT ENCODING/RATE[/CHANNELS]\"")))?;
        let played = media.payload_types[0];
        match pt.parse::<u8>() {
            Ok(pt) if pt == played => {
                let (encoding, rate, channels) = parse_encoding(spec.trim()).map_err(err)?;
                self.rtpmap = Some((line, encoding, rate, channels));
                Ok(())
            }
            Ok(pt) if media.payload_types.contains(&pt) => Ok(()),
            _ => Err(err(format!(
                "an rtpmap for payload type {pt}, but m=audio carries {played}"
            ))),
        }
    }

    fn finish(self) -> Result<SessionDescription, SdpError> {
        let (origin_user, session_id, session_version, origin_address) =
            self.origin.ok_or(SdpError::Missing("o="))?;
        let name = self.name.ok_or(SdpError::Missing("s="))?;
        let media = self.media.ok_or(SdpError::Missing("m=audio"))?;
        let (destination, ttl) = self.connection.ok_or(SdpError::Missing("c="))?;
        let payload_type = media.payload_types[0];
        let (line, encoding, rate, channels) = self.rtpmap.ok_or_else(|| {
            at(media.line, "m=")(format!(
                "payload type {payload_type} has no a=rtpmap, so its encoding is a static one \
                 (0 is PCMU); tessera plays L16 and L24 described by an a=rtpmap"
            ))
        })?;
        let format = match self.framecount {
            Some(frames) => StreamFormat::new(encoding, rate, channels, frames),
            None => {
                let us = self.ptime_us.unwrap_or(1000);
                StreamFormat::with_packet_time(encoding, rate, channels, us)
            }
        }
        .map_err(|e| at(line, "a=rtpmap")(e.to_string()))?;
        Ok(SessionDescription {
            origin_user,
            session_id,
            session_version,
            origin_address,
            name,
            info: self.info,
            destination,
            ttl,
            port: media.port,
            payload_type,
            format,
            ref_clock: self.ref_clock,
            media_clock_offset: self.media_clock_offset,
            direction: self.direction,
            tool: self.tool,
        })
    }
}

/// The o= line of a description, or of a SAP deletion that carries only
/// that line (RFC 2974 allows either).
pub(crate) fn find_origin(text: &str) -> Option<(String, u64, u64, Ipv4Addr)> {
    let value = text.lines().find_map(|l| l.strip_prefix("o="))?;
    parse_origin(value).ok()
}

/// `- 1311738121 1311738121 IN IP4 192.168.1.1`
fn parse_origin(value: &str) -> Result<(String, u64, u64, Ipv4Addr), String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    let [user, id, version, net, addr_type, address] = words[..] else {
        return Err(format!(
            "\"{value}\" is not \"USER ID VERSION IN IP4 ADDRESS\""
        ));
    };
    let number = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("\"{s}\" is not a number"))
    };
    Ok((
        user.to_string(),
        number(id)?,
        number(version)?,
        parse_address(net, addr_type, address)?,
    ))
}

/// `IN IP4 239.0.0.1/32`: a multicast address may carry a TTL and a count;
/// the count (consecutive addresses) is not used by AES67 and is ignored.
fn parse_connection(value: &str) -> Result<(Ipv4Addr, Option<u8>), String> {
    let words: Vec<&str> = value.split_whitespace().collect();
    let [net, addr_type, spec] = words[..] else {
        return Err(format!("\"{value}\" is not \"IN IP4 ADDRESS[/TTL]\""));
    };
    let mut parts = spec.split('/');
    let address = parse_address(net, addr_type, parts.next().unwrap_or(spec))?;
    let ttl = parts
        .next()
        .map(|t| {
            t.parse::<u8>()
                .map_err(|_| format!("TTL \"{t}\" is not 0..=255"))
        })
        .transpose()?;
    Ok((address, ttl))
}

fn parse_address(net: &str, addr_type: &str, address: &str) -> Result<Ipv4Addr, String> {
    if net != "IN" || addr_type != "IP4" {
        return Err(format!(
            "\"{net} {addr_type}\": tessera reads IN IP4 addresses only"
        ));
    }
    address
        .parse()
        .map_err(|_| format!("\"{address}\" is not an IPv4 address"))
}

/// `L24/48000/8` (channels default to 1, RFC 4566 §6).
fn parse_encoding(spec: &str) -> Result<(Encoding, u32, u16), String> {
    let mut parts = spec.split('/');
    let name = parts.next().unwrap_or(spec);
    let encoding = Encoding::from_name(name)
        .ok_or_else(|| format!("unknown encoding \"{name}\"; tessera plays L16 and L24"))?;
    let rate = parts.next().unwrap_or("");
    let rate = rate
        .parse()
        .map_err(|_| format!("clock rate \"{rate}\" is not a number of Hz"))?;
    let channels = parts.next().map_or(Ok(1), |c| {
        c.parse()
            .map_err(|_| format!("channel count \"{c}\" is not a number"))
    })?;
    Ok((encoding, rate, channels))
}

/// Milliseconds, possibly fractional ("0.333"), to whole microseconds.
fn parse_ptime(arg: &str) -> Result<u32, String> {
    let ms: f64 = arg
        .trim()
        .parse()
        .map_err(|_| format!("\"{arg}\" is not a packet time in ms"))?;
    if !(ms > 0.0 && ms <= 1000.0) {
        return Err(format!(
            "{ms} ms is not a packet time; AES67 uses 0.125 to 4 ms"
        ));
    }
    Ok((ms * 1000.0).round() as u32)
}

fn parse_ref_clock(arg: &str) -> Result<RefClock, String> {
    if let Some(mac) = arg.strip_prefix("localmac=") {
        return Ok(RefClock::LocalMac(mac.to_string()));
    }
    let Some(ptp) = arg.strip_prefix("ptp=") else {
        return Ok(RefClock::Other(arg.to_string()));
    };
    let parts: Vec<&str> = ptp.split(':').collect();
    let ptp = |version: &str, grandmaster: &str, domain| RefClock::Ptp {
        version: version.to_string(),
        grandmaster: grandmaster.to_string(),
        domain,
    };
    match parts[..] {
        ["traceable"] | [_, "traceable"] => Ok(RefClock::PtpTraceable),
        [version, grandmaster] => Ok(ptp(version, grandmaster, 0)),
        [version, grandmaster, domain] => match domain.parse() {
            Ok(domain) => Ok(ptp(version, grandmaster, domain)),
            Err(_) => Err(format!("PTP domain \"{domain}\" is not 0..=255")),
        },
        _ => Ok(RefClock::Other(arg.to_string())),
    }
}

/// `direct=963214424` (optionally followed by ` rate=...`); other media
/// clocks (RFC 7273 §5) carry no offset.
fn parse_media_clock(arg: &str) -> Result<Option<u32>, String> {
    let first = arg.split_whitespace().next().unwrap_or("");
    first
        .strip_prefix("direct=")
        .map(|n| {
            n.parse()
                .map_err(|_| format!("offset \"{n}\" is not 0..2^32"))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const AES67_EXAMPLE: &str = "v=0\n\
        o=- 1311738121 1311738121 IN IP4 192.168.1.1\n\
        s=Stage left I/O\n\
        c=IN IP4 239.0.0.1/32\n\
        t=0 0\n\
        m=audio 5004 RTP/AVP 96\n\
        i=Channels 1-8\n\
        a=rtpmap:96 L24/48000/8\n\
        a=recvonly\n\
        a=ptime:1\n\
        a=ts-refclk:ptp=IEEE1588-2008:39-A7-94-FF-FE-07-CB-D0:0\n\
        a=mediaclk:direct=963214424\n";

    const PIPEWIRE: &str = "v=0\r\n\
        o=- 1234 0 IN IP4 10.0.0.1\r\n\
        s=PipeWire RTP Stream on host\r\n\
        c=IN IP4 224.0.0.56\r\n\
        t=0 0\r\n\
        a=recvonly\r\n\
        a=tool:PipeWire 0.3.65\r\n\
        m=audio 46000 RTP/AVP 127\r\n\
        a=rtpmap:127 L16/48000/2\r\n\
        a=type:broadcast\r\n\
        a=ptime:2\r\n";

    const RFC4566_EXAMPLE: &str = "v=0\r\n\
        o=jdoe 2890844526 2890842807 IN IP4 10.47.16.5\r\n\
        s=SDP Seminar\r\n\
        i=A Seminar on the session description protocol\r\n\
        u=http://www.example.com/seminars/sdp.pdf\r\n\
        e=j.doe@example.com (Jane Doe)\r\n\
        c=IN IP4 224.2.17.12/127\r\n\
        t=2873397496 2873404696\r\n\
        a=recvonly\r\n\
        m=audio 49170 RTP/AVP 0\r\n\
        m=video 51372 RTP/AVP 99\r\n\
        a=rtpmap:99 h263-1998/90000\r\n";

    fn round_trips(d: &SessionDescription) {
        let text = d.to_sdp();
        assert!(text.ends_with("\r\n") && !text.replace("\r\n", "").contains('\n'));
        assert_eq!(SessionDescription::parse(&text).as_ref(), Ok(d), "{text}");
    }

    #[test]
    fn the_aes67_example() {
        let d = SessionDescription::parse(AES67_EXAMPLE).unwrap();
        assert_eq!(d.origin_user, "-");
        assert_eq!((d.session_id, d.session_version), (1311738121, 1311738121));
        assert_eq!(d.origin_address, Ipv4Addr::new(192, 168, 1, 1));
        assert_eq!(d.name, "Stage left I/O");
        assert_eq!(d.info.as_deref(), Some("Channels 1-8"));
        assert_eq!(
            (d.destination, d.ttl),
            (Ipv4Addr::new(239, 0, 0, 1), Some(32))
        );
        assert_eq!((d.port, d.payload_type), (5004, 96));
        assert_eq!(
            d.format,
            StreamFormat::new(Encoding::L24, 48_000, 8, 48).unwrap()
        );
        assert_eq!(d.rtpmap(), "L24/48000/8");
        assert_eq!(
            d.ref_clock,
            Some(RefClock::Ptp {
                version: "IEEE1588-2008".into(),
                grandmaster: "39-A7-94-FF-FE-07-CB-D0".into(),
                domain: 0
            })
        );
        assert_eq!(d.media_clock_offset, Some(963214424));
        assert_eq!(d.direction.as_deref(), Some("recvonly"));
        assert_eq!(d.tool, None);
        round_trips(&d);
    }

    #[test]
    fn what_pipewire_announces() {
        let d = SessionDescription::parse(PIPEWIRE).unwrap();
        assert_eq!((d.destination, d.ttl), (Ipv4Addr::new(224, 0, 0, 56), None));
        assert_eq!((d.port, d.payload_type, d.session_version), (46000, 127, 0));
        assert_eq!(
            d.format,
            StreamFormat::new(Encoding::L16, 48_000, 2, 96).unwrap()
        );
        assert_eq!(d.direction.as_deref(), Some("recvonly"));
        assert_eq!(d.tool.as_deref(), Some("PipeWire 0.3.65"));
        assert_eq!((d.ref_clock.as_ref(), d.media_clock_offset), (None, None));
        round_trips(&d);
    }

    #[test]
    fn the_rfc4566_example_fails_on_its_static_encoding() {
        let err = SessionDescription::parse(RFC4566_EXAMPLE).unwrap_err();
        assert!(
            matches!(
                err,
                SdpError::Line {
                    line: 10,
                    field: "m=",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("encoding"), "{err}");
        let pcmu = RFC4566_EXAMPLE.replace(
            "m=audio 49170 RTP/AVP 0\r\n",
            "m=audio 49170 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n",
        );
        assert_eq!(
            SessionDescription::parse(&pcmu).unwrap_err().to_string(),
            "a=rtpmap line 11: unknown encoding \"PCMU\"; tessera plays L16 and L24"
        );
    }

    #[test]
    fn every_aes67_packet_time_round_trips() {
        let base = SessionDescription::parse(AES67_EXAMPLE).unwrap();
        for (us, ptime, framecount) in [
            (125, "0.125", true),
            (250, "0.250", true),
            (333, "0.333", true),
            (1000, "1", false),
            (4000, "4", false),
        ] {
            let format = StreamFormat::with_packet_time(Encoding::L24, 48_000, 2, us).unwrap();
            let d = SessionDescription {
                format,
                ..base.clone()
            };
            let text = d.to_sdp();
            assert!(text.contains(&format!("a=ptime:{ptime}\r\n")), "{text}");
            assert_eq!(text.contains("a=framecount:"), framecount, "{text}");
            round_trips(&d);
        }
    }

    #[test]
    fn optional_fields_and_other_clocks_round_trip() {
        let mut d = SessionDescription::parse(PIPEWIRE).unwrap();
        d.info = Some("Channels 1-2".into());
        d.ttl = Some(15);
        d.format = StreamFormat::new(Encoding::L24, 44_100, 1, 44).unwrap();
        for clock in [
            RefClock::PtpTraceable,
            RefClock::LocalMac("CA-FE-00-00-00-01".into()),
            RefClock::Other("ntp=203.0.113.10".into()),
        ] {
            d.ref_clock = Some(clock);
            round_trips(&d);
        }
        d.direction = None;
        d.tool = None;
        round_trips(&d);
    }

    #[test]
    fn fields_are_read_leniently() {
        let text = AES67_EXAMPLE
            .replace("a=ptime:1\n", "a=framecount:16\na=clock-domain:PTPv2 0\n")
            .replace("L24/48000/8", "l16/48000")
            .replace("c=IN IP4 239.0.0.1/32", "c=IN IP4 239.0.0.1/32/2")
            .replace("5004 RTP/AVP 96", "5004/2 RTP/AVP 96 97")
            .replace("a=recvonly\n", "a=rtpmap:97 L16/96000/2\na=sendonly\n\n")
            .replace("CB-D0:0", "CB-D0:5");
        let d = SessionDescription::parse(&text).unwrap();
        assert_eq!(
            d.format,
            StreamFormat::new(Encoding::L16, 48_000, 1, 16).unwrap()
        );
        assert_eq!((d.port, d.ttl), (5004, Some(32)));
        assert_eq!(d.direction.as_deref(), Some("sendonly"));
        assert!(matches!(d.ref_clock, Some(RefClock::Ptp { domain: 5, .. })));
    }

    #[test]
    fn errors_name_the_line_and_the_problem() {
        let cases = [
            (
                "a=rtpmap:96 L24/48000/8",
                "a=rtpmap:98 L24/48000/8",
                8,
                "payload type 98",
            ),
            ("c=IN IP4 239.0.0.1/32", "c=IN IP6 ff02::1", 4, "IN IP4"),
            (
                "c=IN IP4 239.0.0.1/32",
                "c=IN IP4 239.0.0/32",
                4,
                "IPv4 address",
            ),
            ("o=- 1311738121", "o=- x", 2, "not a number"),
            ("a=ptime:1", "a=ptime:soon", 10, "packet time"),
            ("a=ptime:1", "a=ptime:4", 8, "at most 60 frames"),
            ("L24/48000/8", "L24/32000/8", 8, "not an AES67 rate"),
            ("RTP/AVP 96", "RTP/SAVP 96", 6, "RTP/AVP"),
            ("CB-D0:0", "CB-D0:x", 11, "PTP domain"),
            ("direct=963214424", "direct=-1", 12, "offset"),
            ("v=0", "v=1", 1, "only 0"),
            ("t=0 0", "t 0 0", 5, "type=value"),
        ];
        for (from, to, line, problem) in cases {
            let err = SessionDescription::parse(&AES67_EXAMPLE.replace(from, to)).unwrap_err();
            let SdpError::Line { line: got, .. } = err else {
                panic!("{err}")
            };
            assert_eq!(got, line, "{err}");
            assert!(err.to_string().contains(problem), "{err}");
        }
    }

    #[test]
    fn missing_lines_are_named() {
        let without = |prefix: &str| {
            let text: String = AES67_EXAMPLE
                .lines()
                .filter(|l| !l.starts_with(prefix))
                .map(|l| format!("{l}\n"))
                .collect();
            SessionDescription::parse(&text).unwrap_err()
        };
        assert_eq!(without("m="), SdpError::Missing("m=audio"));
        assert_eq!(without("c="), SdpError::Missing("c="));
        assert_eq!(without("o="), SdpError::Missing("o="));
        assert!(without("a=rtpmap").to_string().contains("m= line 6"));
    }
}
