//! The registry of services: which live process serves which name on which
//! Unix socket, and whom it admits. Clients open a service by name; the
//! broker checks the caller (SO_PEERCRED on the daemon's socket, or the
//! embedded caller's own credentials) against the service's policy before it
//! tells where the socket is, and the service checks again when it accepts
//! ([`ServicePolicy::allows`] with `tessera_channel::handover::admit`): the
//! socket is a file anyone who finds it may try.
//!
//! A policy admits the service's owner and root always, plus the uids and
//! gids it lists; an empty policy is the owner and root only. The gid is the
//! effective group the kernel records at connect (SO_PEERCRED), not the
//! caller's supplementary groups.
//!
//! An entry names its process by PID and start time, so a reused PID is
//! never taken for the service; a dead server's entry is stale and gives way
//! to the next registration or lookup of its name.
//!
//! It owns names, entries and the policy decision. It must never create,
//! remove or connect to a file (it only looks at the socket's type and
//! owner), and never take an identity from a request: callers' credentials
//! come from the kernel.

use crate::error::{BrokerError, ErrorCode};
use crate::state::ProcessId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use tessera_sys::ipc::PeerCredentials;

/// The longest service name, in bytes.
pub const MAX_SERVICE_NAME: usize = 64;

/// How many services one non-root user may have registered at once (a
/// shared daemon's state stays small whatever a client sends).
pub const MAX_SERVICES_PER_USER: usize = 64;

/// Whom a service admits besides its owner and root.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ServicePolicy {
    #[serde(default)]
    pub uids: Vec<u32>,
    /// Matched against the caller's effective gid (SO_PEERCRED's).
    #[serde(default)]
    pub gids: Vec<u32>,
}

impl ServicePolicy {
    /// Whether `caller` may use a service owned by `owner_uid`: root, the
    /// owner, a listed uid, or a listed gid.
    pub fn admits(&self, owner_uid: u32, caller: &PeerCredentials) -> bool {
        caller.uid == 0
            || caller.uid == owner_uid
            || self.uids.contains(&caller.uid)
            || self.gids.contains(&caller.gid)
    }

    /// The service's own check of a connection it accepted, for
    /// `handover::admit(&socket, |peer| policy.allows(peer))`: the owner is
    /// this process's effective user. The reason names the caller and the fix.
    pub fn allows(&self, caller: &PeerCredentials) -> Result<(), String> {
        let owner_uid = tessera_sys::caps::euid();
        if self.admits(owner_uid, caller) {
            return Ok(());
        }
        Err(format!(
            "{} may not use this service: it admits {}; {}",
            who(caller),
            self.describe(owner_uid),
            add_to_policy(caller, owner_uid)
        ))
    }

    /// Whom the policy admits, in words: "its owner (uid 0), root, uids 1000".
    pub fn describe(&self, owner_uid: u32) -> String {
        if self.uids.is_empty() && self.gids.is_empty() {
            return format!("only its owner (uid {owner_uid}) and root");
        }
        let mut parts = vec![format!("its owner (uid {owner_uid})"), "root".to_string()];
        for (kind, ids) in [("uid", &self.uids), ("gid", &self.gids)] {
            if !ids.is_empty() {
                let list: Vec<String> = ids.iter().map(u32::to_string).collect();
                parts.push(format!("{kind} {}", list.join(", ")));
            }
        }
        parts.join(", ")
    }
}

fn who(caller: &PeerCredentials) -> String {
    format!("uid {} (gid {})", caller.uid, caller.gid)
}

fn add_to_policy(caller: &PeerCredentials, owner_uid: u32) -> String {
    format!(
        "ask the service's owner (uid {owner_uid}) to add uid {} to its policy",
        caller.uid
    )
}

/// A registered service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceEntry {
    pub name: String,
    /// The socket the service listens on (absolute).
    pub socket: PathBuf,
    /// The serving process: PID and start time (/proc/PID/stat field 22).
    #[serde(flatten)]
    pub process: ProcessId,
    pub owner_uid: u32,
    pub policy: ServicePolicy,
}

impl ServiceEntry {
    /// Whether the process that registered it still runs (the same one,
    /// not a newcomer with its PID).
    pub fn is_alive(&self) -> bool {
        self.process.is_alive()
    }

    /// The broker's check of `caller` against the policy; a refusal names
    /// the service, the caller and the fix.
    pub fn admit(&self, caller: &PeerCredentials) -> Result<(), BrokerError> {
        if self.policy.admits(self.owner_uid, caller) {
            return Ok(());
        }
        Err(BrokerError::new(
            ErrorCode::Permission,
            format!(
                "service {:?} refuses {}: it admits {}",
                self.name,
                who(caller),
                self.policy.describe(self.owner_uid)
            ),
            add_to_policy(caller, self.owner_uid),
        ))
    }
}

/// A service as listed: its entry and whether its process still runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceInfo {
    #[serde(flatten)]
    pub entry: ServiceEntry,
    pub alive: bool,
}

/// Checks a service name: 1 to [`MAX_SERVICE_NAME`] bytes of a-z, 0-9, '-',
/// '_' and '.'.
pub fn check_name(name: &str) -> Result<(), BrokerError> {
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b);
    if (1..=MAX_SERVICE_NAME).contains(&name.len()) && name.bytes().all(allowed) {
        return Ok(());
    }
    Err(BrokerError::new(
        ErrorCode::Invalid,
        format!(
            "service name {name:?} is not valid: it must be 1 to {MAX_SERVICE_NAME} bytes of a-z, 0-9, '-', '_' and '.'"
        ),
        "e.g. net, net.rx or my-synth",
    ))
}

/// Checks that `socket` is an absolute path to a Unix socket that `uid`
/// owns (root may register any socket).
pub fn check_socket(socket: &Path, uid: u32) -> Result<(), BrokerError> {
    if !socket.is_absolute() {
        return Err(BrokerError::new(
            ErrorCode::Invalid,
            format!("service socket {} is a relative path", socket.display()),
            "give the socket's absolute path (the broker may run in another directory)",
        ));
    }
    let meta = std::fs::metadata(socket).map_err(|e| {
        BrokerError::new(
            ErrorCode::Invalid,
            format!("service socket {}: {e}", socket.display()),
            "bind the service's listener before registering it",
        )
    })?;
    if !meta.file_type().is_socket() {
        return Err(BrokerError::new(
            ErrorCode::Invalid,
            format!("{} is not a Unix socket", socket.display()),
            "register the path the service's UnixListener is bound to",
        ));
    }
    if uid != 0 && meta.uid() != uid {
        return Err(BrokerError::new(
            ErrorCode::Permission,
            format!(
                "socket {} belongs to uid {}, not to you (uid {uid})",
                socket.display(),
                meta.uid()
            ),
            "register a socket your own service bound",
        ));
    }
    Ok(())
}

/// The services by name. Stale entries stay until a registration or lookup
/// of their name meets them (listings show them as not alive).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Services(BTreeMap<String, ServiceEntry>);

impl Services {
    /// Adds `entry`, replacing a stale entry of its name or one of the same
    /// process; refuses a name a live process holds.
    pub fn register(&mut self, entry: ServiceEntry) -> Result<(), BrokerError> {
        check_name(&entry.name)?;
        if let Some(held) = self.0.get(&entry.name) {
            if held.is_alive() && held.process != entry.process {
                return Err(Self::held_by(held));
            }
        }
        self.check_count(&entry)?;
        self.0.insert(entry.name.clone(), entry);
        Ok(())
    }

    fn held_by(held: &ServiceEntry) -> BrokerError {
        BrokerError::new(
            ErrorCode::Busy,
            format!(
                "service {:?} is already registered by pid {} (uid {}) on {}",
                held.name,
                held.process.pid,
                held.owner_uid,
                held.socket.display()
            ),
            format!(
                "stop that process (`kill {}`) or choose another name; a server that exited is replaced without asking",
                held.process.pid
            ),
        )
    }

    fn check_count(&self, entry: &ServiceEntry) -> Result<(), BrokerError> {
        let uid = entry.owner_uid;
        let held = self
            .0
            .values()
            .filter(|e| e.owner_uid == uid && e.name != entry.name && e.is_alive())
            .count();
        if uid != 0 && held >= MAX_SERVICES_PER_USER {
            return Err(BrokerError::new(
                ErrorCode::Quota,
                format!("uid {uid} already has {held} services registered"),
                "unregister services you no longer run",
            ));
        }
        Ok(())
    }

    /// Removes `name` for its owner or root.
    pub fn unregister(&mut self, name: &str, uid: u32) -> Result<ServiceEntry, BrokerError> {
        check_name(name)?;
        let entry = self.0.get(name).ok_or_else(|| self.unknown(name))?;
        if uid != 0 && entry.owner_uid != uid {
            return Err(BrokerError::new(
                ErrorCode::Permission,
                format!(
                    "service {name:?} belongs to uid {}, not to you (uid {uid})",
                    entry.owner_uid
                ),
                "only a service's owner or root may unregister it",
            ));
        }
        Ok(self.0.remove(name).expect("found above"))
    }

    /// The live service `name`; a stale entry is an error that says its
    /// server exited (remove it with [`Services::take_stale`]).
    pub fn lookup(&self, name: &str) -> Result<&ServiceEntry, BrokerError> {
        check_name(name)?;
        let entry = self.0.get(name).ok_or_else(|| self.unknown(name))?;
        if !entry.is_alive() {
            return Err(BrokerError::new(
                ErrorCode::NotFound,
                format!(
                    "service {name:?} is not running: its server (pid {}) exited without unregistering",
                    entry.process.pid
                ),
                format!("is `tessera serve {name}` running? start it"),
            ));
        }
        Ok(entry)
    }

    /// Removes `name`'s entry if its process is gone, and returns it.
    pub fn take_stale(&mut self, name: &str) -> Option<ServiceEntry> {
        match self.0.get(name) {
            Some(e) if !e.is_alive() => self.0.remove(name),
            _ => None,
        }
    }

    fn unknown(&self, name: &str) -> BrokerError {
        let running: Vec<&str> = self
            .0
            .values()
            .filter(|e| e.is_alive())
            .map(|e| e.name.as_str())
            .collect();
        let running = match running.is_empty() {
            true => "no services are running".to_string(),
            false => format!("running services: {}", running.join(", ")),
        };
        BrokerError::new(
            ErrorCode::NotFound,
            format!("no service named {name:?} is registered ({running})"),
            format!("start it with `tessera serve {name}`"),
        )
    }

    /// Every entry, with whether its process still runs.
    pub fn list(&self) -> Vec<ServiceInfo> {
        self.0
            .values()
            .map(|e| ServiceInfo {
                entry: e.clone(),
                alive: e.is_alive(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(uid: u32, gid: u32) -> PeerCredentials {
        PeerCredentials { pid: 1, uid, gid }
    }

    fn entry(name: &str, owner_uid: u32, policy: ServicePolicy) -> ServiceEntry {
        ServiceEntry {
            name: name.into(),
            socket: "/run/x.sock".into(),
            process: ProcessId::of(tessera_sys::proc::current_pid()).unwrap(),
            owner_uid,
            policy,
        }
    }

    #[test]
    fn names_are_checked() {
        for good in ["net", "net.rx", "my-synth_2", &"n".repeat(MAX_SERVICE_NAME)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "Net",
            "net/rx",
            "net rx",
            "né",
            &"n".repeat(MAX_SERVICE_NAME + 1),
        ] {
            let e = check_name(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::Invalid);
            assert!(e.message.contains("a-z, 0-9"), "{}", e.message);
        }
    }

    #[test]
    fn the_empty_policy_admits_the_owner_and_root_only() {
        let p = ServicePolicy::default();
        assert!(p.admits(1000, &caller(1000, 1000)));
        assert!(p.admits(1000, &caller(0, 0)));
        assert!(!p.admits(1000, &caller(1001, 1000)));
        assert_eq!(p.describe(1000), "only its owner (uid 1000) and root");
    }

    #[test]
    fn a_policy_admits_its_uids_and_gids() {
        let p = ServicePolicy {
            uids: vec![12345],
            gids: vec![29],
        };
        assert!(p.admits(0, &caller(12345, 12345)));
        assert!(p.admits(0, &caller(2000, 29)));
        assert!(!p.admits(0, &caller(2000, 2000)));
        assert_eq!(p.describe(0), "its owner (uid 0), root, uid 12345, gid 29");
    }

    #[test]
    fn a_refusal_names_the_service_the_caller_and_the_fix() {
        let policy = ServicePolicy {
            uids: vec![12345],
            gids: vec![],
        };
        let e = entry("net", 0, policy.clone())
            .admit(&caller(2000, 2000))
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::Permission);
        assert!(
            e.message
                .contains("service \"net\" refuses uid 2000 (gid 2000)"),
            "{}",
            e.message
        );
        assert_eq!(
            e.fix,
            "ask the service's owner (uid 0) to add uid 2000 to its policy"
        );
        let own = ServicePolicy::default();
        let stranger = tessera_sys::caps::euid().wrapping_add(1);
        let reason = own.allows(&caller(stranger, 4242)).unwrap_err();
        assert!(
            reason.contains(&format!(
                "uid {stranger} (gid 4242) may not use this service"
            )) && reason.ends_with(&format!("add uid {stranger} to its policy")),
            "{reason}"
        );
        assert!(own.allows(&caller(0, 0)).is_ok(), "root is always admitted");
    }

    #[test]
    fn a_live_name_is_refused_and_the_same_process_replaces_its_own() {
        let mut s = Services::default();
        s.register(entry("net", 0, ServicePolicy::default()))
            .unwrap();
        let mut other = entry("net", 0, ServicePolicy::default());
        other.process.pid = 1; // init: alive, and not this process
        other.process.start_time = tessera_sys::proc::start_time(1).unwrap();
        let e = s.register(other).unwrap_err();
        assert!(e.message.contains(&format!(
            "already registered by pid {}",
            tessera_sys::proc::current_pid()
        )));
        assert!(e.fix.contains("kill"), "{}", e.fix);
        let mut again = entry("net", 0, ServicePolicy::default());
        again.socket = "/run/y.sock".into();
        s.register(again).unwrap();
        assert_eq!(s.lookup("net").unwrap().socket, Path::new("/run/y.sock"));
    }

    #[test]
    fn a_stale_entry_is_reported_then_taken() {
        let mut s = Services::default();
        let mut dead = entry("net", 0, ServicePolicy::default());
        dead.process.start_time += 1; // the PID, but not the process
        s.register(dead).unwrap();
        assert!(!s.list()[0].alive);
        let e = s.lookup("net").unwrap_err();
        assert!(e.message.contains("exited without unregistering"));
        assert!(s.take_stale("net").is_some());
        assert!(s.list().is_empty());
        assert!(s
            .lookup("net")
            .unwrap_err()
            .message
            .contains("no service named \"net\" is registered (no services are running)"));
    }
}
