//! What the audio-server tests share: a time limit on a run, and whether a
//! workspace program is built beside the test. It must never start a
//! server or touch the machine.

use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread of its own; fails the test if it takes longer
/// than `limit` (the run's own Drop guards stop what it started).
pub fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(limit) {
        Ok(value) => value,
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("did not finish within {limit:?}"),
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the run panicked (above)"),
    }
}

/// Whether `program` of this workspace is built beside the test (else
/// the test is skipped, saying so, or failed under CI=true).
pub fn built(test: &str, program: &str) -> bool {
    let path = tessera_experiments::harness::servers::program_beside_us(program);
    if path.is_file() {
        return true;
    }
    let msg = format!(
        "SKIPPED {test}: {program} is not built (cargo build -p {})",
        package(program)
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}, and CI=true requires it");
    }
    eprintln!("{msg}");
    false
}

/// The package that builds `program`.
fn package(program: &str) -> &str {
    match program {
        "tessera" => "tessera-cli",
        other => other,
    }
}
