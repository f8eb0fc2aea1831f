//! What the `tessera serve …` commands (network, console, render) share:
//! start, then serve until Ctrl-C, SIGTERM or `--seconds`, then give
//! everything back. Thin: each service's host lives in `tessera_services`.
//! A leaf: it must never import another module of the cli.

use crate::failure::{failed, Failure};
use std::time::{Duration, Instant};
use tessera_broker::BrokerError;
use tessera_sys::process::{catch_termination, take_termination};

/// Starts a service with `start` (SIGINT and SIGTERM are caught first, so
/// that a stop during the start is not lost), serves until told to stop or
/// for `seconds`, and returns what `start` made so the caller can stop it.
pub fn until_stopped<H>(
    seconds: Option<f64>,
    start: impl FnOnce() -> Result<H, BrokerError>,
) -> Result<H, Failure> {
    catch_termination().map_err(|e| failed(e.to_string(), ""))?;
    let host = start()?;
    let until = seconds.map(|s| Instant::now() + Duration::from_secs_f64(s));
    while take_termination().is_none() && until.is_none_or(|t| Instant::now() < t) {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(host)
}
