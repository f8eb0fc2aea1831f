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
        stop_on_termination(std::sync::Arc::clone(shared), paths.socket())?;
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

/// From now on SIGTERM, SIGINT and SIGHUP (`systemctl stop`, Ctrl-C, a
/// closed terminal) stop the daemon cleanly: once the request in hand is
/// answered (the broker's lock), the budget changes still waiting are
/// saved and its socket is removed — no client tries a daemon that is
/// gone — and it exits. The cells stay: the next daemon re-admits them
/// from `state.json`. Killed by a signal's default action instead, the
/// daemon left its socket behind.
fn stop_on_termination(
    broker: std::sync::Arc<std::sync::Mutex<tessera_broker::Broker>>,
    socket: std::path::PathBuf,
) -> Result<(), Failure> {
    use tessera_sys::process::{catch_termination, take_termination};
    catch_termination().map_err(|e| failed(e.to_string(), ""))?;
    std::thread::Builder::new()
        .name("tessera-stop".into())
        .spawn(move || loop {
            if let Some((signal, _)) = take_termination() {
                let saved = answered(&broker).map(|mut b| b.save_unsaved());
                if let Some(Err(e)) = saved {
                    eprintln!("tessera daemon: budget changes not saved: {e}");
                }
                let _ = std::fs::remove_file(&socket);
                eprintln!(
                    "tessera daemon: stopped by signal {signal}; its cells stay, \
                     re-admitted when it starts again"
                );
                std::process::exit(0);
            }
            std::thread::sleep(STOP_POLL);
        })
        .map_err(|e| failed(format!("start the daemon's stop thread: {e}"), ""))?;
    Ok(())
}

/// How often the stop thread looks for a termination signal.
const STOP_POLL: std::time::Duration = std::time::Duration::from_millis(100);
/// The longest a stop waits for the request in hand.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The broker's lock once the request in hand is answered, or None after
/// [`STOP_WAIT`]: a stop never hangs on a request stuck in a call.
fn answered(
    broker: &std::sync::Mutex<tessera_broker::Broker>,
) -> Option<std::sync::MutexGuard<'_, tessera_broker::Broker>> {
    let start = std::time::Instant::now();
    loop {
        match broker.try_lock() {
            Ok(held) => return Some(held),
            Err(std::sync::TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) if start.elapsed() < STOP_WAIT => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            Err(std::sync::TryLockError::WouldBlock) => return None,
        }
    }
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
