//! The argument parsing the commands share: durations, placements, pads,
//! percentages, core specs and predictors, each turned into the libraries'
//! types or into an `invalid` error that shows a good example; and the
//! application-share flags of `guard`, `cell exec` and `cell attach`.
//!
//! A leaf: it must never import another module of the cli.

use std::time::Duration;
use tessera_broker::{BrokerError, ErrorCode};
use tessera_guard::guard::Cores;
use tessera_guard::share::AppShare;
use tessera_policy::{Placement, PredictorKind};

/// A bad argument: what is wrong and an example of a good one.
pub fn invalid(message: impl Into<String>, fix: &str) -> BrokerError {
    BrokerError::new(ErrorCode::Invalid, message, fix)
}

/// A duration as people write them for audio ("400us", "1.333ms", "2s");
/// `example` shows the flag in the fix.
pub fn time(text: &str, example: &str) -> Result<Duration, BrokerError> {
    tessera_scenario::parse_duration(text).map_err(|e| invalid(e, &format!("e.g. {example}")))
}

/// A `--placement` flag: partitioned or global.
pub fn placement(text: &str) -> Result<Placement, BrokerError> {
    match text {
        "partitioned" => Ok(Placement::Partitioned),
        "global" => Ok(Placement::Global),
        other => Err(invalid(
            format!("unknown placement {other:?}"),
            "use partitioned or global",
        )),
    }
}

/// SLABS pads as people list them: "0-31", "0,3,8-11" (pads 0–31).
pub fn pads(list: &str) -> Result<Vec<usize>, BrokerError> {
    tessera_synth::parse_pads(list).map_err(|e| {
        invalid(
            format!("--pads: {e}"),
            "e.g. --pads 0-31 or --pads 0,3,8-11",
        )
    })
}

/// A guard's `--core`: `auto` (or none) lets the guard decide, `global`
/// asks for global EDF, a number for that core.
pub fn cores(spec: Option<&str>) -> Result<Cores, BrokerError> {
    match spec {
        None | Some("auto") => Ok(tessera_guard::guard::default_cores()),
        Some("global") => Ok(Cores::Global),
        Some(n) => n.parse().map(Cores::Core).map_err(|_| {
            invalid(
                format!("--core {n:?} is not a core number, \"auto\" or \"global\""),
                "e.g. --core 1, --core auto (the default), or --core global",
            )
        }),
    }
}

/// A budget predictor: max, mean or pNN (a percentile, 1–100).
pub fn predictor(text: &str) -> Result<PredictorKind, BrokerError> {
    match text {
        "max" => Ok(PredictorKind::Max),
        "mean" => Ok(PredictorKind::Mean),
        p => p
            .strip_prefix('p')
            .and_then(|n| n.parse::<u8>().ok())
            .filter(|n| (1..=100).contains(n))
            .map(PredictorKind::Percentile)
            .ok_or_else(|| {
                invalid(
                    format!("--predictor {p:?} is not max, mean or pNN"),
                    "e.g. --predictor max, --predictor mean, --predictor p99",
                )
            }),
    }
}

/// The application share of a guarded or followed program's busy threads
/// that are not real-time (`tessera guard`, `cell exec`, `attach --follow`).
#[derive(clap::Args, Debug, Clone)]
pub struct ShareArgs {
    /// The least CPU, % of one, each guarded process's busy threads that
    /// are not real-time hold together (its application share): they get
    /// reservations of their own, adapted to what they use.
    #[arg(long, default_value = "2", conflicts_with = "rt_only")]
    pub app_share: String,
    /// Reserve only the threads programs made real-time (no application
    /// shares): the others run at their own policy.
    #[arg(long)]
    pub rt_only: bool,
}

impl ShareArgs {
    /// The share asked for, or none with `--rt-only`.
    pub fn app_share(&self) -> Result<Option<AppShare>, BrokerError> {
        if self.rt_only {
            return Ok(None);
        }
        self.app_share
            .trim_end_matches('%')
            .parse::<f64>()
            .ok()
            .and_then(AppShare::percent)
            .map(Some)
            .ok_or_else(|| {
                invalid(
                    format!(
                        "--app-share {:?} is not a percentage of a CPU",
                        self.app_share
                    ),
                    "e.g. --app-share 2 (2 % of a CPU per application, the default), or --rt-only",
                )
            })
    }
}
