//! The D-Bus object `/org/freedesktop/RealtimeKit1`, interface
//! `org.freedesktop.RealtimeKit1`, on the system bus (or the bus
//! `DBUS_SYSTEM_BUS_ADDRESS` names): RTKit 0.13's methods and properties,
//! with the caller's uid and pid taken from the bus daemon, never from the
//! message.
//!
//! It owns the connection, the bus name and the adaptation thread; it must
//! never hold the table's lock while it talks to the bus.

use crate::grants::{GrantKind, Grants, INTERVAL};
use crate::limits::{Caller, Limits, RtkitError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use tessera_broker::config::RtkitFallback;
use tessera_broker::Broker;
use zbus::fdo;
use zbus::message::Header;

/// The well-known name RTKit's clients call.
pub const BUS_NAME: &str = "org.freedesktop.RealtimeKit1";
/// The object they call it at.
pub const OBJECT_PATH: &str = "/org/freedesktop/RealtimeKit1";

/// The interface's object: the table, the callers' credentials, and a
/// flag `Exit` raises.
struct RealtimeKit {
    grants: Arc<Mutex<Grants>>,
    callers: Mutex<Callers>,
    limits: Limits,
    exit: Arc<AtomicBool>,
    log: fn(&str),
}

/// Callers' credentials by unique bus name. The bus never gives a unique
/// name to a second connection, and a connection's uid and pid are fixed
/// when it connects, so a name's credentials stay true for as long as it
/// can send; asking the bus again costs every request a round trip through
/// dbus-daemon (a fifth of an idle grant here). PipeWire asks for every
/// thread it starts over one connection.
#[derive(Default)]
struct Callers(std::collections::HashMap<String, Caller>);

impl Callers {
    /// Names of connections that closed are never asked for again: the
    /// table is cleared when it is this full.
    const MOST: usize = 256;

    fn remember(&mut self, sender: String, caller: Caller) {
        if self.0.len() >= Self::MOST {
            self.0.clear();
        }
        self.0.insert(sender, caller);
    }
}

impl RealtimeKit {
    fn grants(&self) -> std::sync::MutexGuard<'_, Grants> {
        self.grants.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn callers(&self) -> std::sync::MutexGuard<'_, Callers> {
        self.callers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Who sent the message: remembered, or asked of the bus.
    async fn caller(
        &self,
        header: &Header<'_>,
        connection: &zbus::Connection,
    ) -> fdo::Result<Caller> {
        let sender = header
            .sender()
            .ok_or_else(|| fdo::Error::Failed("the message names no sender".into()))?
            .to_owned();
        if let Some(known) = self.callers().0.get(sender.as_str()) {
            return Ok(*known);
        }
        let caller = ask_bus(sender.clone(), connection).await?;
        self.callers().remember(sender.to_string(), caller);
        Ok(caller)
    }

    /// Logs what a request got and turns the outcome into RTKit's reply.
    fn answer(&self, what: String, outcome: Result<GrantKind, RtkitError>) -> fdo::Result<()> {
        match outcome {
            Ok(kind) => {
                (self.log)(&format!("{what}: {}", describe(&kind)));
                Ok(())
            }
            Err(e) => {
                (self.log)(&format!("{what}: refused: {e}"));
                Err(to_dbus(e))
            }
        }
    }
}

/// A sender's credentials from the bus daemon: one GetConnectionCredentials
/// round trip, on a proxy that caches no properties (caching would cost a
/// subscription and a GetAll per request).
async fn ask_bus(
    sender: zbus::names::UniqueName<'static>,
    connection: &zbus::Connection,
) -> fdo::Result<Caller> {
    let dbus = fdo::DBusProxy::builder(connection)
        .cache_properties(zbus::proxy::CacheProperties::No)
        .build()
        .await?;
    let credentials = dbus.get_connection_credentials(sender.into()).await?;
    let (Some(uid), Some(pid)) = (credentials.unix_user_id(), credentials.process_id()) else {
        return Err(fdo::Error::AccessDenied(
            "the bus does not know the caller's uid and pid".into(),
        ));
    };
    let pid =
        i32::try_from(pid).map_err(|_| fdo::Error::Failed(format!("the bus gave pid {pid}")))?;
    Ok(Caller { uid, pid })
}

#[zbus::interface(name = "org.freedesktop.RealtimeKit1")]
impl RealtimeKit {
    async fn make_thread_realtime(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &zbus::Connection,
        thread: u64,
        priority: u32,
    ) -> fdo::Result<()> {
        let caller = self.caller(&header, connection).await?;
        let outcome = self.grants().make_realtime(caller, None, thread, priority);
        self.answer(request(caller, None, thread, "realtime"), outcome)
    }

    #[zbus(name = "MakeThreadRealtimeWithPID")]
    async fn make_thread_realtime_with_pid(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &zbus::Connection,
        process: u64,
        thread: u64,
        priority: u32,
    ) -> fdo::Result<()> {
        let caller = self.caller(&header, connection).await?;
        let outcome = self
            .grants()
            .make_realtime(caller, Some(process), thread, priority);
        self.answer(request(caller, Some(process), thread, "realtime"), outcome)
    }

    async fn make_thread_high_priority(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &zbus::Connection,
        thread: u64,
        priority: i32,
    ) -> fdo::Result<()> {
        let caller = self.caller(&header, connection).await?;
        let outcome = self
            .grants()
            .make_high_priority(caller, None, thread, priority);
        self.answer(request(caller, None, thread, "high priority"), outcome)
    }

    #[zbus(name = "MakeThreadHighPriorityWithPID")]
    async fn make_thread_high_priority_with_pid(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &zbus::Connection,
        process: u64,
        thread: u64,
        priority: i32,
    ) -> fdo::Result<()> {
        let caller = self.caller(&header, connection).await?;
        let outcome = self
            .grants()
            .make_high_priority(caller, Some(process), thread, priority);
        self.answer(
            request(caller, Some(process), thread, "high priority"),
            outcome,
        )
    }

    async fn reset_known(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &zbus::Connection,
    ) -> fdo::Result<()> {
        let caller = self.caller(&header, connection).await?;
        let n = self.grants().reset_known(caller).map_err(to_dbus)?;
        (self.log)(&format!(
            "ResetKnown by uid {}: {n} thread(s) reset",
            caller.uid
        ));
        Ok(())
    }

    async fn reset_all(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &zbus::Connection,
    ) -> fdo::Result<()> {
        let caller = self.caller(&header, connection).await?;
        let n = self.grants().reset_all(caller).map_err(to_dbus)?;
        (self.log)(&format!(
            "ResetAll by uid {}: {n} thread(s) reset",
            caller.uid
        ));
        Ok(())
    }

    /// RTKit's daemon exits; tessera's stops answering on the bus and gives
    /// the name up (the grants stay, as RTKit's do when it exits).
    async fn exit(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] connection: &zbus::Connection,
    ) -> fdo::Result<()> {
        let caller = self.caller(&header, connection).await?;
        if caller.uid != 0 {
            return Err(fdo::Error::AccessDenied(format!(
                "Exit is root's (the caller is uid {})",
                caller.uid
            )));
        }
        self.exit.store(true, Ordering::Relaxed);
        Ok(())
    }

    #[zbus(property, name = "RTTimeUSecMax")]
    fn rttime_usec_max(&self) -> i64 {
        i64::try_from(self.limits.rttime_usec_max).unwrap_or(i64::MAX)
    }

    #[zbus(property, name = "MaxRealtimePriority")]
    fn max_realtime_priority(&self) -> i32 {
        i32::try_from(self.limits.max_realtime_priority).unwrap_or(i32::MAX)
    }

    #[zbus(property, name = "MinNiceLevel")]
    fn min_nice_level(&self) -> i32 {
        self.limits.min_nice_level
    }
}

fn request(caller: Caller, process: Option<u64>, thread: u64, what: &str) -> String {
    let process = process.map_or(format!("{}", caller.pid), |p| p.to_string());
    format!(
        "uid {} (pid {}) asked {what} for thread {thread} of process {process}",
        caller.uid, caller.pid
    )
}

fn describe(kind: &GrantKind) -> String {
    match kind {
        GrantKind::Reserved { cell, budget } => format!(
            "reserved in cell {cell} ({} µs every {} µs, adapting)",
            budget.runtime_ns / 1000,
            budget.period_ns / 1000
        ),
        GrantKind::Unguaranteed { priority, why } => {
            format!("SCHED_RR {priority}, UNGUARANTEED ({why})")
        }
        GrantKind::Nice { nice } => format!("nice {nice}"),
    }
}

/// RTKit's D-Bus errors: AccessDenied for a rule or a refusal, InvalidArgs
/// for arguments out of range, Failed otherwise; the text names the fix.
fn to_dbus(e: RtkitError) -> fdo::Error {
    let text = e.to_string();
    match e {
        RtkitError::Invalid { .. } => fdo::Error::InvalidArgs(text),
        RtkitError::Denied { .. } => fdo::Error::AccessDenied(text),
        RtkitError::Failed { .. } => fdo::Error::Failed(text),
    }
}

/// The interface while it is served.
pub struct Service {
    grants: Arc<Mutex<Grants>>,
}

impl Service {
    /// What every granted thread holds.
    pub fn status(&self) -> Vec<crate::grants::GrantStatus> {
        self.grants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .status()
    }
}

/// Owns the bus name and serves the interface over `broker` until `Exit`;
/// a thread adapts the reserved threads' budgets every [`INTERVAL`]. Fails
/// when the bus cannot be reached or another program (rtkit-daemon) owns
/// the name. `log` receives one line per request and per change.
pub fn serve(
    broker: Arc<Mutex<Broker>>,
    fallback: RtkitFallback,
    limits: Limits,
    log: fn(&str),
) -> Result<Service, RtkitError> {
    let grants = Arc::new(Mutex::new(Grants::new(broker, limits, fallback)));
    let exit = Arc::new(AtomicBool::new(false));
    let object = RealtimeKit {
        grants: Arc::clone(&grants),
        callers: Mutex::default(),
        limits,
        exit: Arc::clone(&exit),
        log,
    };
    let connection = connect(object)?;
    let adapting = Arc::clone(&grants);
    std::thread::Builder::new()
        .name("tessera-rtkit".into())
        .spawn(move || {
            while !exit.load(Ordering::Relaxed) {
                std::thread::sleep(INTERVAL);
                let lines = adapting.lock().unwrap_or_else(|p| p.into_inner()).adapt();
                lines.iter().for_each(|l| log(l));
            }
            log("Exit: the RealtimeKit1 name is given up; the grants stay");
            drop(connection);
        })
        .map_err(|e| RtkitError::failed(format!("start the adaptation thread: {e}"), ""))?;
    Ok(Service { grants })
}

fn connect(object: RealtimeKit) -> Result<zbus::blocking::Connection, RtkitError> {
    let unreachable = |e: zbus::Error| {
        RtkitError::failed(
            format!("serve {BUS_NAME} on the system bus: {e}"),
            "is dbus running (`systemctl status dbus`)? DBUS_SYSTEM_BUS_ADDRESS names another bus",
        )
    };
    let connection = zbus::blocking::connection::Builder::system()
        .and_then(|b| b.serve_at(OBJECT_PATH, object))
        .and_then(|b| b.build())
        .map_err(unreachable)?;
    // Never queued behind another owner: a daemon that does not answer
    // RTKit's calls must say so, not wait silently for the name.
    let taken = || {
        RtkitError::failed(
            format!("{BUS_NAME} is owned by another program (rtkit-daemon?)"),
            "stop it first (`systemctl stop rtkit-daemon`), or install tessera's unit, which replaces it (`tessera install`)",
        )
    };
    let reply = connection
        .request_name_with_flags(BUS_NAME, fdo::RequestNameFlags::DoNotQueue.into())
        .map_err(|e| match e {
            zbus::Error::NameTaken => taken(),
            zbus::Error::FDO(ref fdo) if matches!(**fdo, fdo::Error::AccessDenied(_)) => {
                RtkitError::denied(
                    format!("the bus refused {BUS_NAME} to this process: {e}"),
                    "run the daemon as root, and install the bus policy (`tessera install`)",
                )
            }
            other => unreachable(other),
        })?;
    match reply {
        fdo::RequestNameReply::PrimaryOwner | fdo::RequestNameReply::AlreadyOwner => Ok(connection),
        fdo::RequestNameReply::Exists | fdo::RequestNameReply::InQueue => Err(taken()),
    }
}
