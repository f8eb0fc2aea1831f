//! `tessera serve …`: the service processes (network, console, render) and
//! what their commands share: start, then serve until Ctrl-C, SIGTERM or
//! `--seconds`, then give everything back. Thin: each service's host lives
//! in `tessera_services`.

use clap::Subcommand;
use std::time::{Duration, Instant};
use tessera_broker::BrokerError;
use tessera_sys::process::{catch_termination, take_termination};

#[derive(Subcommand)]
pub enum ServeCommand {
    /// The network service: flows with reservations (mClock), real-time packets first.
    #[command(after_help = crate::net::SERVE_EXAMPLES)]
    Net(crate::net::ServeNetArgs),
    /// The console service: real-time-safe logging, one channel per writer.
    #[command(after_help = crate::console::EXAMPLES)]
    Console(crate::console::ServeConsoleArgs),
    /// The render service of seed 003: per-client reservations, SLAs from probe requests.
    #[command(after_help = crate::render::SERVE_EXAMPLES)]
    Render(crate::render::ServeRenderArgs),
}

/// Starts a service with `start` (SIGINT and SIGTERM are caught first, so
/// that a stop during the start is not lost), serves until told to stop or
/// for `seconds`, and returns what `start` made so the caller can stop it.
pub fn until_stopped<H>(
    seconds: Option<f64>,
    start: impl FnOnce() -> Result<H, BrokerError>,
) -> Result<H, BrokerError> {
    catch_termination().map_err(|e| BrokerError::new("internal", e.to_string(), ""))?;
    let host = start()?;
    let until = seconds.map(|s| Instant::now() + Duration::from_secs_f64(s));
    while take_termination().is_none() && until.is_none_or(|t| Instant::now() < t) {
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(host)
}
