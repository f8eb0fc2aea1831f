//! The daemon's configuration (/etc/tessera/daemon.toml): who may use the
//! socket and how much bandwidth each user may hold (AQuoSA's supervisor).
//!
//! ```toml
//! # Let members of group "audio" connect (default: owner and root only).
//! socket_group = "audio"
//! # Bandwidth (in cores) any non-root user may hold in total.
//! default_quota = 0.5
//! [quota]
//! alice = 1.5      # by user name
//! 1001 = 0.25      # or by uid
//! # Own org.freedesktop.RealtimeKit1 on the system bus and answer its
//! # realtime requests with reservations (docs/desktop.md).
//! rtkit = true
//! # What a request admission refuses gets: RTKit's own SCHED_RR ("fifo",
//! # labelled unguaranteed) or an error naming the reason ("refuse").
//! rtkit_fallback = "fifo"
//! # RTKit's limits (these are RTKit 0.13's defaults).
//! [rtkit_limits]
//! max_realtime_priority = 20
//! min_nice_level = -15
//! rttime_usec_max = 200000
//! actions_per_burst = 25
//! burst_sec = 20
//! threads_per_user = 25
//! # Keep every user's session PipeWire guarded (docs/guard.md).
//! [[guard]]
//! server = "pipewire"
//! user = "*"
//! ```
//!
//! It must never grant root anything: root has no quota.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;
use tessera_policy::rap::RapConfig;
use tessera_policy::Bandwidth;

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Group allowed to connect; the socket is then mode 0660.
    #[serde(default)]
    pub socket_group: Option<String>,
    /// Let every local user connect (mode 0666); quotas still apply.
    #[serde(default)]
    pub socket_world: bool,
    /// Bandwidth in cores a non-root user without an entry may hold.
    #[serde(default)]
    pub default_quota: Option<f64>,
    /// Per-user quotas by name or uid.
    #[serde(default)]
    pub quota: BTreeMap<String, f64>,
    /// Audio servers the daemon keeps guarded (`tessera guard`).
    #[serde(default)]
    pub guard: Vec<GuardEntry>,
    /// How often the monitor samples every cell, ms.
    #[serde(default = "default_monitor_ms")]
    pub monitor_interval_ms: u64,
    /// The RAP service's adaptation of budgets (off unless `enabled`).
    #[serde(default)]
    pub adaptation: RapConfig,
    /// Answer RTKit's D-Bus interface with reservations.
    #[serde(default)]
    pub rtkit: bool,
    /// What an RTKit request that admission refuses gets.
    #[serde(default)]
    pub rtkit_fallback: RtkitFallback,
    /// RTKit's limits, as its daemon's command line sets them.
    #[serde(default)]
    pub rtkit_limits: RtkitLimits,
}

/// RTKit's limits on realtime requests (rtkit-daemon's options; its
/// defaults). Its clients read the first three back as properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RtkitLimits {
    /// The highest SCHED_RR priority granted (RTKit's fallback uses it).
    pub max_realtime_priority: u32,
    /// The lowest nice level granted.
    pub min_nice_level: i32,
    /// The largest hard RLIMIT_RTTIME a requesting process may have, µs.
    pub rttime_usec_max: u64,
    /// Requests per user in one burst window.
    pub actions_per_burst: u32,
    pub burst_sec: u64,
    /// Threads one user may hold granted.
    pub threads_per_user: usize,
}

impl Default for RtkitLimits {
    fn default() -> RtkitLimits {
        RtkitLimits {
            max_realtime_priority: 20,
            min_nice_level: -15,
            rttime_usec_max: 200_000,
            actions_per_burst: 25,
            burst_sec: 20,
            threads_per_user: 25,
        }
    }
}

impl RtkitLimits {
    /// Checks the ranges RTKit's clients can live with.
    pub fn validate(&self) -> Result<(), String> {
        if !(1..=99).contains(&self.max_realtime_priority) {
            return Err(format!(
                "max_realtime_priority = {} (fix: give 1 to 99; RTKit's is 20)",
                self.max_realtime_priority
            ));
        }
        if !(-20..=19).contains(&self.min_nice_level) {
            return Err(format!(
                "min_nice_level = {} (fix: give -20 to 19; RTKit's is -15)",
                self.min_nice_level
            ));
        }
        if self.actions_per_burst == 0 || self.burst_sec == 0 || self.threads_per_user == 0 {
            return Err(
                "actions_per_burst, burst_sec and threads_per_user must be at least 1 (fix: RTKit's are 25, 20 and 25)"
                    .into(),
            );
        }
        Ok(())
    }
}

/// What an RTKit realtime request gets when admission refuses its
/// reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RtkitFallback {
    /// RTKit's own answer: SCHED_RR at the asked priority, with
    /// RESET_ON_FORK, labelled unguaranteed.
    #[default]
    Fifo,
    /// An error naming why admission refused.
    Refuse,
}

fn default_monitor_ms() -> u64 {
    1000
}

impl Default for Config {
    fn default() -> Config {
        Config {
            socket_group: None,
            socket_world: false,
            default_quota: None,
            quota: BTreeMap::new(),
            guard: Vec::new(),
            monitor_interval_ms: default_monitor_ms(),
            adaptation: RapConfig::default(),
            rtkit: false,
            rtkit_fallback: RtkitFallback::default(),
            rtkit_limits: RtkitLimits::default(),
        }
    }
}

/// A `[[guard]]` table: a server the daemon keeps a `tessera guard` for,
/// started again whenever it ends (the server may come and go).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardEntry {
    /// "jackd" or "pipewire".
    pub server: String,
    /// The JACK server name (jackd -n); "default" if absent.
    #[serde(default)]
    pub name: Option<String>,
    /// Let the reservations use spare bandwidth (GRUB).
    #[serde(default)]
    pub reclaim: bool,
    /// A fixed budget, % of the period, instead of adapting.
    #[serde(default)]
    pub fixed: Option<u32>,
    /// Headroom over the prediction, %.
    #[serde(default)]
    pub increment: Option<u32>,
    /// PipeWire only: guard the session PipeWire of this user ("*": of
    /// every user but root), one `tessera guard --pid` per daemon as they
    /// start and stop. Absent: the daemon's own user's.
    #[serde(default)]
    pub user: Option<String>,
}

/// Whose PipeWire daemons a `[[guard]]` entry with `user` follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Users {
    /// Every user but root ("*").
    AllButRoot,
    Uid(u32),
}

impl Users {
    pub fn contains(&self, uid: u32) -> bool {
        match self {
            Users::AllButRoot => uid != 0,
            Users::Uid(u) => *u == uid,
        }
    }
}

impl GuardEntry {
    /// The `tessera guard` arguments this entry stands for.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec!["guard".to_string(), self.server.clone()];
        if let Some(name) = &self.name {
            args.extend(["--server".into(), name.clone()]);
        }
        if self.reclaim {
            args.push("--reclaim".into());
        }
        if let Some(pct) = self.fixed {
            args.extend(["--fixed".into(), pct.to_string()]);
        }
        if let Some(pct) = self.increment {
            args.extend(["--increment".into(), pct.to_string()]);
        }
        args.push("--quiet".into());
        args
    }

    /// The arguments of the guard of one server, the process `pid`.
    pub fn args_for_pid(&self, pid: i32) -> Vec<String> {
        let mut args = self.args();
        args.splice(2..2, ["--pid".to_string(), pid.to_string()]);
        args
    }

    /// Whose servers the entry follows (None: one server, found by
    /// `tessera guard` itself), or why `user` is wrong.
    pub fn users(&self) -> Result<Option<Users>, String> {
        let Some(user) = &self.user else {
            return Ok(None);
        };
        if self.server != "pipewire" {
            return Err(format!(
                "[[guard]] user = {user:?} is for server = \"pipewire\" (a session's PipeWire), \
                 not {:?}; remove `user`",
                self.server
            ));
        }
        match user.as_str() {
            "*" => Ok(Some(Users::AllButRoot)),
            name => user_id(name)
                .map(|uid| Some(Users::Uid(uid)))
                .ok_or_else(|| {
                    format!(
                        "[[guard]] user = {name:?}: no such user in /etc/passwd; \
                     give an existing user's name, or \"*\" for every user's PipeWire"
                    )
                }),
        }
    }
}

pub const DEFAULT_PATH: &str = "/etc/tessera/daemon.toml";

impl Config {
    /// Loads the config; a missing default file means the defaults.
    pub fn load(path: Option<&Path>) -> Result<Config, String> {
        let (path, required) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (Path::new(DEFAULT_PATH).to_path_buf(), false),
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Config::default())
            }
            Err(e) => return Err(format!("read {}: {e}", path.display())),
        };
        let config: Config = toml::from_str(&text).map_err(|e| {
            format!(
                "{}: {e}(fix: see the example in docs/daemon.md)",
                path.display()
            )
        })?;
        if let Some(g) = config
            .guard
            .iter()
            .find(|g| !matches!(g.server.as_str(), "jackd" | "pipewire"))
        {
            return Err(format!(
                "{}: [[guard]] server {:?} is not \"jackd\" or \"pipewire\"",
                path.display(),
                g.server
            ));
        }
        for g in &config.guard {
            g.users().map_err(|e| format!("{}: {e}", path.display()))?;
        }
        if !(100..=60_000).contains(&config.monitor_interval_ms) {
            return Err(format!(
                "{}: monitor_interval_ms = {} (fix: give 100 to 60000)",
                path.display(),
                config.monitor_interval_ms
            ));
        }
        config
            .rtkit_limits
            .validate()
            .map_err(|e| format!("{}: [rtkit_limits] {e}", path.display()))?;
        config
            .adaptation
            .validate()
            .map_err(|e| format!("{}: [adaptation] {e}", path.display()))?;
        for (user, q) in &config.quota {
            if !(0.0..=1024.0).contains(q) {
                return Err(format!(
                    "{}: quota for {user} is {q}; give cores between 0 and the machine's count",
                    path.display()
                ));
            }
        }
        Ok(config)
    }

    /// The quota of `uid` (None: unlimited). Root is never limited.
    pub fn quota_of(&self, uid: u32) -> Option<Bandwidth> {
        if uid == 0 {
            return None;
        }
        let name = user_name(uid);
        let by_name = name.as_deref().and_then(|n| self.quota.get(n));
        by_name
            .or_else(|| self.quota.get(&uid.to_string()))
            .copied()
            .or(self.default_quota)
            .map(Bandwidth::from_fraction)
    }
}

/// A user's name from /etc/passwd (no NSS: the daemon must not block on it).
pub fn user_name(uid: u32) -> Option<String> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[2] == uid.to_string()).then(|| f[0].to_string())
    })
}

/// A user's id from /etc/passwd.
pub fn user_id(name: &str) -> Option<u32> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[0] == name)
            .then(|| f[2].parse().ok())
            .flatten()
    })
}

/// A group's id from /etc/group.
pub fn group_id(name: &str) -> Option<u32> {
    let groups = std::fs::read_to_string("/etc/group").ok()?;
    groups.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() > 2 && f[0] == name)
            .then(|| f[2].parse().ok())
            .flatten()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_by_name_uid_and_default() {
        let c: Config =
            toml::from_str("default_quota = 0.5\n[quota]\nroot = 0.1\n4242 = 0.25\n").unwrap();
        assert_eq!(c.quota_of(0), None, "root is never limited");
        assert_eq!(c.quota_of(4242), Some(Bandwidth::from_fraction(0.25)));
        assert_eq!(c.quota_of(4243), Some(Bandwidth::from_fraction(0.5)));
        assert_eq!(Config::default().quota_of(1000), None);
    }

    #[test]
    fn guard_tables_become_guard_commands() {
        let c: Config = toml::from_str(
            "[[guard]]\nserver = \"jackd\"\nname = \"studio\"\nreclaim = true\n\n[[guard]]\nserver = \"pipewire\"\nfixed = 40\n",
        )
        .unwrap();
        assert_eq!(
            c.guard[0].args(),
            [
                "guard",
                "jackd",
                "--server",
                "studio",
                "--reclaim",
                "--quiet"
            ]
        );
        assert_eq!(
            c.guard[1].args(),
            ["guard", "pipewire", "--fixed", "40", "--quiet"]
        );
        assert!(toml::from_str::<Config>("[[guard]]\nserver = \"jackd\"\nbudget = 1\n").is_err());
    }

    #[test]
    fn a_users_pipewire_guard_names_a_user_or_every_user() {
        let entry =
            |text: &str| -> GuardEntry { toml::from_str::<Config>(text).unwrap().guard.remove(0) };
        let every = entry("[[guard]]\nserver = \"pipewire\"\nuser = \"*\"\n");
        assert_eq!(every.users(), Ok(Some(Users::AllButRoot)));
        assert!(!Users::AllButRoot.contains(0) && Users::AllButRoot.contains(1000));
        let root = entry("[[guard]]\nserver = \"pipewire\"\nuser = \"root\"\n");
        assert_eq!(root.users(), Ok(Some(Users::Uid(0))));
        assert_eq!(
            root.args_for_pid(4242),
            ["guard", "pipewire", "--pid", "4242", "--quiet"]
        );
        let mine = entry("[[guard]]\nserver = \"pipewire\"\n");
        assert_eq!(mine.users(), Ok(None));

        let nobody = entry("[[guard]]\nserver = \"pipewire\"\nuser = \"no-such-user-here\"\n");
        let e = nobody.users().unwrap_err();
        assert!(e.contains("no such user") && e.contains("\"*\""), "{e}");
        let jack = entry("[[guard]]\nserver = \"jackd\"\nuser = \"*\"\n");
        let e = jack.users().unwrap_err();
        assert!(
            e.contains("is for server = \"pipewire\"") && e.contains("remove `user`"),
            "{e}"
        );
    }

    #[test]
    fn a_config_with_a_wrong_user_does_not_load() {
        let dir = std::env::temp_dir().join(format!("tessera-config-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("daemon.toml");
        std::fs::write(&path, "[[guard]]\nserver = \"jackd\"\nuser = \"root\"\n").unwrap();
        let loaded = Config::load(Some(&path));
        std::fs::write(&path, "[[guard]]\nserver = \"pipewire\"\nuser = \"*\"\n").unwrap();
        let good = Config::load(Some(&path));
        let _ = std::fs::remove_dir_all(&dir);
        let e = loaded.unwrap_err();
        assert!(e.starts_with(&path.display().to_string()), "{e}");
        assert!(e.contains("remove `user`"), "{e}");
        assert_eq!(good.unwrap().guard[0].user.as_deref(), Some("*"));
    }

    #[test]
    fn rtkit_is_off_by_default_and_falls_back_to_fifo() {
        let c: Config = toml::from_str("").unwrap();
        assert!(!c.rtkit);
        assert_eq!(c.rtkit_fallback, RtkitFallback::Fifo);
        let c: Config = toml::from_str("rtkit = true\nrtkit_fallback = \"refuse\"\n").unwrap();
        assert!(c.rtkit);
        assert_eq!(c.rtkit_fallback, RtkitFallback::Refuse);
        assert!(toml::from_str::<Config>("rtkit_fallback = \"nice\"").is_err());
        let c: Config = toml::from_str("[rtkit_limits]\nactions_per_burst = 1000\n").unwrap();
        assert_eq!(c.rtkit_limits.actions_per_burst, 1000);
        assert_eq!(
            c.rtkit_limits.max_realtime_priority, 20,
            "the rest as RTKit's"
        );
        assert!(c.rtkit_limits.validate().is_ok());
        let zero = RtkitLimits {
            threads_per_user: 0,
            ..RtkitLimits::default()
        };
        assert!(zero.validate().is_err());
        assert!(toml::from_str::<Config>("[rtkit_limits]\nmax_prio = 3\n").is_err());
    }

    #[test]
    fn unknown_keys_are_refused() {
        assert!(toml::from_str::<Config>("quotas = 1").is_err());
    }
}
