//! A music configuration's `service` key (seed 000 §4.2): the application's
//! flow through the network service process, how the service schedules
//! (mclock or fifo), what the music flow reserves, and whether the abusive
//! streamer runs. The link's rate is the subject's `link`.
//!
//! Owns parsing and validation of the key; it must never start anything.

use super::Refusal;
use crate::parse_rate;
use serde::Deserialize;
use std::ops::Range;
use tessera_policy::mclock::{Discipline, FlowClass};
use toml::Spanned;

/// The link's rate when the subject gives none: the seed's gigabit LAN.
pub const DEFAULT_LINK_BPS: u64 = 1_000_000_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServicePlan {
    discipline: Option<Spanned<String>>,
    reservation: Option<Spanned<String>>,
    class: Option<Spanned<String>>,
    #[serde(default)]
    streamer: bool,
}

/// How a configuration runs the music application's network.
#[derive(Debug, Clone, PartialEq)]
pub struct ServicePlan {
    pub discipline: Discipline,
    /// The music flow's reservation each way, bits/s (0: none).
    pub reservation_bps: u64,
    /// The music flow's class: real-time (the service's real-time thread,
    /// first) by default when it reserves, bulk otherwise.
    pub class: FlowClass,
    pub streamer: bool,
    /// The link's rate: the LAN's shaping and the service's capacity.
    pub link_bps: u64,
}

/// The subject's `link`, as the rate of the LAN and of the service.
pub(super) fn link(value: Option<&Spanned<String>>) -> Result<u64, Refusal> {
    match value {
        None => Ok(DEFAULT_LINK_BPS),
        Some(v) => parse_rate(v.get_ref()).map_err(|e| (v.span(), format!("link: {e}"))),
    }
}

/// A configuration's `service`, checked against the link.
pub(super) fn plan(
    raw: &Spanned<RawServicePlan>,
    link_bps: u64,
    table: &Range<usize>,
) -> Result<ServicePlan, Refusal> {
    let r = raw.get_ref();
    let discipline = match r
        .discipline
        .as_ref()
        .map(|d| (d.get_ref().as_str(), d.span()))
    {
        None | Some(("mclock", _)) => Discipline::MClock,
        Some(("fifo", _)) => Discipline::Fifo,
        Some((other, span)) => {
            return Err((
                span,
                format!("discipline {other:?}: use \"mclock\" (QoS) or \"fifo\" (none)"),
            ))
        }
    };
    let reservation_bps = match &r.reservation {
        None => 0,
        Some(v) => parse_rate(v.get_ref()).map_err(|e| (v.span(), format!("reservation: {e}")))?,
    };
    let class = match r.class.as_ref().map(|c| (c.get_ref().as_str(), c.span())) {
        None if reservation_bps > 0 => FlowClass::RealTime,
        None | Some(("bulk", _)) => FlowClass::Bulk,
        Some(("real-time", _)) if reservation_bps > 0 => FlowClass::RealTime,
        Some(("real-time", span)) => {
            return Err((
                span,
                "a real-time flow needs a reservation (its limit); give `reservation`".into(),
            ))
        }
        Some((other, span)) => {
            return Err((
                span,
                format!("class {other:?}: use \"real-time\" or \"bulk\""),
            ))
        }
    };
    if reservation_bps >= link_bps {
        let span = r.reservation.as_ref().map_or(table.clone(), Spanned::span);
        return Err((
            span,
            format!(
                "a reservation of {} Mbit/s does not fit a {} Mbit/s link (the service keeps 5 % \
                 free)",
                reservation_bps / 1_000_000,
                link_bps / 1_000_000
            ),
        ));
    }
    Ok(ServicePlan {
        discipline,
        reservation_bps,
        class,
        streamer: r.streamer,
        link_bps,
    })
}
