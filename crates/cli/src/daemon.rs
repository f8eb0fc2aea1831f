//! `tessera daemon`: the broker served on its Unix socket, with RTKit's
//! interface when configured, the guards of its config kept running, and
//! systemd told when it is ready. Thin: the daemon is tessera-broker's.

use crate::failure::{failed, Failure};
use std::process::ExitCode;
use tessera_broker::{BrokerError, ErrorCode};

pub fn run(
    config: Option<std::path::PathBuf>,
    run_dir: Option<std::path::PathBuf>,
) -> Result<ExitCode, Failure> {
    let config = tessera_broker::config::Config::load(config.as_deref())
        .map_err(|e| BrokerError::new(ErrorCode::Invalid, e, "fix the config file"))?;
    let paths = run_dir
        .map(tessera_broker::paths::Paths::at)
        .unwrap_or_else(tessera_broker::paths::Paths::from_env);
    let (rtkit, fallback, limits) = (config.rtkit, config.rtkit_fallback, config.rtkit_limits);
    tessera_broker::daemon::run(paths.clone(), config, |shared, notes| {
        let (mode, guards) = {
            let broker = shared.lock().unwrap_or_else(|p| p.into_inner());
            (broker.mode().clone(), broker.config.guard.clone())
        };
        let listening = format!("listening on {} ({mode:?} mode)", paths.socket().display());
        eprintln!("tessera daemon: {listening}");
        if let Some(b) = mode.banner() {
            eprintln!("tessera daemon: {b}");
        }
        for n in notes {
            eprintln!("tessera daemon: recovered: {n}");
        }
        if rtkit {
            serve_rtkit(shared, fallback, limits)?;
        }
        // Ready means the socket and, when configured, the bus name.
        tell_service_manager_ready(&listening);
        if let Ok(exe) = std::env::current_exe() {
            tessera_guard::supervise::keep_running(guards, exe, |line| {
                eprintln!("tessera daemon: {line}")
            });
        }
        Ok::<(), Failure>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

/// RTKit's interface on the system bus, answered with reservations. A
/// daemon configured for it that cannot own the name fails, so that its
/// service manager retries once the name is free.
fn serve_rtkit(
    broker: &std::sync::Arc<std::sync::Mutex<tessera_broker::Broker>>,
    fallback: tessera_broker::config::RtkitFallback,
    limits: tessera_broker::config::RtkitLimits,
) -> Result<(), Failure> {
    let log: fn(&str) = |line| eprintln!("tessera daemon: rtkit: {line}");
    match tessera_rtkit::serve(std::sync::Arc::clone(broker), fallback, limits, log) {
        // The interface's thread keeps serving after the handle is dropped.
        Ok(service) => {
            eprintln!(
                "tessera daemon: rtkit: serving {} ({} grant(s) taken back)",
                tessera_rtkit::bus::BUS_NAME,
                service.status().len()
            );
            Ok(())
        }
        Err(e) => Err(failed(e.to_string(), "")),
    }
}

/// READY=1 for systemd's Type=notify (tessera.service): sent once the
/// socket listens. Outside systemd (no NOTIFY_SOCKET) nothing is sent. The
/// variable stays set, as unsetting it races the daemon's threads; the
/// guards it starts inherit it, and systemd heeds only the main process.
fn tell_service_manager_ready(status: &str) {
    let state = [
        sd_notify::NotifyState::Ready,
        sd_notify::NotifyState::Status(status),
    ];
    if let Err(e) = sd_notify::notify(false, &state) {
        eprintln!(
            "tessera daemon: could not tell the service manager it is ready ($NOTIFY_SOCKET): {e}"
        );
    }
}
