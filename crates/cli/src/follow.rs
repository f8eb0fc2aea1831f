//! `tessera cell exec` and `tessera cell attach --follow`: a program's
//! threads followed into a cell (tessera-guard's `follow`), with what
//! happens printed on stderr so that the program's own output stays its own.
//!
//! Thin: it must never decide where a thread goes; the guard library does.

use crate::failure::Failure;
use std::process::{Command, ExitCode};
use tessera_broker::{BrokerError, ErrorCode, Session};
use tessera_guard::follow::{self, FollowEvent, FollowOptions, Follower};
use tessera_guard::share::AppShare;
use tessera_sys::process::{catch_termination, take_termination};

fn say(line: impl std::fmt::Display) {
    eprintln!("tessera: {line}");
}

/// Prints what was placed, refused, taken back or restored; the comings
/// and goings of threads and processes that held nothing are left out.
fn print_event(e: &FollowEvent) {
    let routine = matches!(
        e,
        FollowEvent::ThreadExited {
            reserved: false,
            ..
        } | FollowEvent::ProcessStarted { .. }
            | FollowEvent::ProcessExited { .. }
    );
    if !routine {
        say(e);
    }
}

/// Says how threads are found and, without the connector, why.
fn mechanism(follower: &Follower) {
    say(format!("threads are found by {}", follower.mechanism()));
    if let Some(reason) = follower.fallback_reason() {
        say(format!("  (no process-events connector: {reason})"));
    }
}

/// Runs `command` in `cell`, following it; exits with its status.
pub fn exec(
    session: Session,
    cell: &str,
    command: &[String],
    app_share: Option<AppShare>,
) -> Result<ExitCode, Failure> {
    let (program, rest) = command.split_first().ok_or_else(|| {
        BrokerError::new(
            ErrorCode::Invalid,
            "no command given",
            "e.g. `tessera cell exec synth -- ./my-synth --flag`",
        )
    })?;
    catch_termination()?;
    let mut cmd = Command::new(program);
    cmd.args(rest);
    let options = FollowOptions {
        app_share,
        ..FollowOptions::default()
    };
    let launched = follow::spawn_in_cell(session, cell, cmd, options)?;
    say(format!(
        "{program} (pid {}) runs in cell {cell:?}",
        launched.pid()
    ));
    mechanism(&launched.follower);
    let status = launched.wait(forwarded_signal, print_event)?;
    let code = follow::exit_code(status);
    say(format!(
        "{program} ended (exit status {code}); every thread is restored"
    ));
    Ok(ExitCode::from(code))
}

/// A SIGINT/SIGTERM/SIGHUP to pass on to the program. One a terminal sent
/// (Ctrl-C) reached the program's process group already, and is not.
fn forwarded_signal() -> Option<i32> {
    take_termination().and_then(|(signal, from_terminal)| (!from_terminal).then_some(signal))
}

/// Follows running process `pid` in `cell` until it exits or Ctrl-C/SIGTERM.
pub fn attach(
    session: Session,
    cell: &str,
    pid: i32,
    app_share: Option<AppShare>,
) -> Result<ExitCode, Failure> {
    catch_termination()?;
    let options = FollowOptions {
        app_share,
        ..FollowOptions::default()
    };
    let follower = Follower::start(session, cell, pid, options)?;
    say(format!(
        "following process {pid} in cell {cell:?} until it exits or Ctrl-C"
    ));
    mechanism(&follower);
    let mut stopped_by = None;
    let restored = follower.run(
        || {
            if let Some((signal, _)) = take_termination() {
                stopped_by = Some(signal);
            }
            stopped_by.is_some()
        },
        print_event,
    );
    for e in &restored {
        print_event(e);
    }
    Ok(match stopped_by {
        Some(signal) => {
            say(format!("stopped by signal {signal}; every thread restored"));
            ExitCode::from(128u8.wrapping_add(signal as u8))
        }
        None => {
            say(format!("process {pid} exited; every thread restored"));
            ExitCode::SUCCESS
        }
    })
}
