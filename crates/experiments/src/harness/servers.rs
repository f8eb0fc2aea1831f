//! The audio servers experiments start — Debian's jackd2 on its dummy
//! driver under a private server name, PipeWire headless in a private
//! runtime directory (its Dummy-Driver, the quantum and rate forced through
//! its `settings` metadata), as root or as a session user who owns that
//! directory — and the child processes around them: where a
//! program is, how it starts pinned to a core, how it is stopped.
//!
//! It owns their lifecycle: a server is stopped by the PID it was started
//! with (SIGTERM, then SIGKILL) when its handle drops, error or not, and
//! what it leaves is removed (jackd's /dev/shm files of its private name,
//! PipeWire's runtime directory). It must never signal a process it did not
//! start, look a server up by name, or change the settings of any server
//! but its own.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tessera_sys::proc::{self, Pid};
use tessera_sys::sched;

use crate::harness::session_user::Owner;

/// How long a server may take to accept clients.
const READY_WAIT: Duration = Duration::from_secs(10);
/// How long a server may take to exit after SIGTERM before it is killed.
const SERVER_EXIT_WAIT: Duration = Duration::from_secs(3);
/// How often readiness and exits are looked at.
const POLL: Duration = Duration::from_millis(20);
/// How long a killed child gets to be reaped, before and after its
/// deadline threads are demoted.
const KILL_WAIT: Duration = Duration::from_secs(2);
/// Lines of a log quoted in an error.
const LOG_TAIL_LINES: usize = 8;

/// Distinguishes the servers one process starts.
static SEQUENCE: AtomicUsize = AtomicUsize::new(0);

pub(crate) fn unique(prefix: &str) -> String {
    let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// A program of this workspace beside the running executable (cargo builds
/// every binary into one directory; tests run from its `deps/`), else the
/// one on the PATH.
pub fn program_beside_us(name: &str) -> PathBuf {
    let exe = std::env::current_exe().ok();
    let dirs = exe
        .as_deref()
        .and_then(Path::parent)
        .into_iter()
        .flat_map(|dir| [Some(dir), dir.parent().filter(|_| dir.ends_with("deps"))])
        .flatten();
    for dir in dirs {
        let path = dir.join(name);
        if path.is_file() {
            return path;
        }
    }
    name.into()
}

/// Whether `program` can be run: a file at that path, or a name on the PATH.
pub fn is_program(program: &Path) -> bool {
    program.is_file() || tessera_sys::process::installed(&program.to_string_lossy())
}

/// Spawns `command` from a helper thread pinned to `core`, so that the
/// child and every thread it creates start with that affinity (a child
/// inherits the affinity of the thread that forked it). `package` is the
/// Debian package to name if the program is missing.
pub fn spawn_on(
    command: &mut Command,
    core: Option<usize>,
    package: &str,
) -> Result<Child, String> {
    let program = command.get_program().to_string_lossy().into_owned();
    let pin = || match core {
        Some(core) => tessera_sys::affinity::set_affinity(0, &[core])
            .map_err(|e| format!("pin {program} to CPU {core}: {e}")),
        None => Ok(()),
    };
    spawn_after(command, pin, &format!("Debian: apt-get install {package}"))
}

/// Spawns `command` from a helper thread that first runs `setup` (pins
/// itself, joins a cell): the child starts where that thread is, as a
/// child inherits the affinity and the cpuset of the thread that forked
/// it. `install` says how to get the program if it is missing.
pub fn spawn_after(
    command: &mut Command,
    setup: impl FnOnce() -> Result<(), String> + Send,
    install: &str,
) -> Result<Child, String> {
    let program = command.get_program().to_string_lossy().into_owned();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                setup()?;
                command.spawn().map_err(|e| match e.kind() {
                    std::io::ErrorKind::NotFound => {
                        format!("starting {program}: {e} ({install})")
                    }
                    _ => format!("starting {program}: {e}"),
                })
            })
            .join()
            .unwrap_or_else(|_| Err(format!("starting {program}: the helper thread panicked")))
    })
}

/// A child process this run started; stopped by its PID when dropped.
pub struct OwnedChild {
    child: Child,
    what: String,
    grace: Duration,
}

impl OwnedChild {
    pub fn new(child: Child, what: impl Into<String>, grace: Duration) -> OwnedChild {
        OwnedChild {
            child,
            what: what.into(),
            grace,
        }
    }

    pub fn pid(&self) -> Pid {
        self.child.id() as Pid
    }

    /// Its exit status, if it exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Waits until it exits or `deadline` passes.
    pub fn wait_until(&mut self, deadline: Instant) -> Option<ExitStatus> {
        loop {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(POLL);
        }
    }

    /// What it wrote to its stdout (piped at spawn), once it has exited.
    pub fn take_stdout(&mut self) -> Option<String> {
        use std::io::Read;
        let mut out = String::new();
        self.child.stdout.take()?.read_to_string(&mut out).ok()?;
        Some(out)
    }

    /// Writes `line` to its stdin (piped at spawn) and closes it.
    pub fn tell(&mut self, line: &str) -> Result<(), String> {
        use std::io::Write;
        let mut stdin = self
            .child
            .stdin
            .take()
            .ok_or(format!("{}: no stdin to write to", self.what))?;
        writeln!(stdin, "{line}").map_err(|e| format!("{}: {e}", self.what))
    }

    /// Asks it to exit (its stdin closed, SIGTERM to its PID), kills it
    /// after the grace time; says how it ended.
    pub fn stop(&mut self) -> String {
        drop(self.child.stdin.take());
        if let Some(status) = self.exited() {
            return format!("{} had exited ({status})", self.what);
        }
        let _ = tessera_sys::process::terminate(self.pid());
        match self.wait_until(Instant::now() + self.grace) {
            Some(status) => format!("{} stopped ({status})", self.what),
            None => {
                let _ = self.child.kill();
                let reaped = self.reap_after_kill();
                format!(
                    "{} killed: no exit {:?} after SIGTERM{reaped}",
                    self.what, self.grace
                )
            }
        }
    }

    /// Waits for the killed child, bounded: a thread left SCHED_DEADLINE
    /// that the kernel stopped replenishing never runs to die (2026-12-02,
    /// §4.5: two members of a workgroup, throttled since the clients
    /// closed, held `tessera run` four minutes until set SCHED_OTHER by
    /// hand), so the child's deadline threads are demoted once, and if it
    /// is still not gone it is left, said so, rather than waited for.
    fn reap_after_kill(&mut self) -> String {
        if self.wait_until(Instant::now() + KILL_WAIT).is_some() {
            return String::new();
        }
        let stuck: Vec<_> = proc::threads_of(self.pid())
            .unwrap_or_default()
            .into_iter()
            .filter(|&tid| sched::demote_from_deadline(tid).unwrap_or(false))
            .collect();
        match self.wait_until(Instant::now() + KILL_WAIT) {
            Some(_) if stuck.is_empty() => String::new(),
            Some(_) => format!(
                "; its SCHED_DEADLINE thread(s) {stuck:?} had to be set SCHED_OTHER to let it exit (a reservation the kernel no longer replenished)"
            ),
            None => format!(
                "; still not gone {:?} after SIGKILL (threads {stuck:?} demoted from SCHED_DEADLINE): left unreaped",
                KILL_WAIT * 2
            ),
        }
    }
}

impl Drop for OwnedChild {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last lines of a log file, for an error message.
pub fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join(" | ")
}

/// A log file for a child's stdout and stderr.
pub(crate) fn log_to(path: &Path) -> Result<(Stdio, Stdio), String> {
    let file = fs::File::create(path).map_err(|e| format!("create {}: {e}", path.display()))?;
    let copy = file
        .try_clone()
        .map_err(|e| format!("open {}: {e}", path.display()))?;
    Ok((file.into(), copy.into()))
}

/// What a server runs at and where.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSpec {
    pub frames: u32,
    pub rate: u32,
    /// jackd's `-P` (PipeWire sets its own priority).
    pub priority: u32,
    /// The server, and everything it starts, pinned to this CPU.
    pub core: Option<usize>,
    /// Its stdout and stderr.
    pub log: PathBuf,
}

/// Waits until `ready` holds, failing early if the server exits.
pub(crate) fn await_ready(
    process: &mut OwnedChild,
    log: &Path,
    what: &str,
    ready: impl Fn() -> bool,
) -> Result<(), String> {
    let give_up = Instant::now() + READY_WAIT;
    while !ready() {
        if let Some(status) = process.exited() {
            return Err(format!(
                "{what} exited at start ({status}): {}",
                log_tail(log)
            ));
        }
        if Instant::now() >= give_up {
            return Err(format!(
                "{what} not ready after {READY_WAIT:?}: {}",
                log_tail(log)
            ));
        }
        std::thread::sleep(POLL);
    }
    Ok(())
}

/// JACK2 keeps 8 servers in its registry (/dev/shm/jack-shm-registry) and
/// reclaims the entry of a killed server only for a server of the same
/// name: after 8 killed servers of other names no jackd starts.
fn explain_full_registry(error: String) -> String {
    match error.contains("Too many servers already active") {
        true => format!(
            "{error} (JACK's server registry is full of killed servers: with no jackd \
             running, remove it: rm -r /dev/shm/jack-shm-registry /dev/shm/jack_db-*)"
        ),
        false => error,
    }
}

/// A jackd started here under a private name.
pub struct JackServer {
    process: OwnedChild,
    name: String,
}

impl JackServer {
    /// `jackd -n <private name> -R -P <priority> -d dummy -r RATE -p FRAMES`,
    /// ready for clients when this returns.
    pub fn start(program: &Path, spec: &ServerSpec) -> Result<JackServer, String> {
        let name = unique("tessera");
        let (out, err) = log_to(&spec.log)?;
        let mut command = Command::new(program);
        command
            .env("JACK_NO_AUDIO_RESERVATION", "1")
            .env("JACK_DEFAULT_SERVER", &name)
            .args(["-n", &name, "-R", "-P", &spec.priority.to_string()])
            .args(["-d", "dummy", "-r", &spec.rate.to_string()])
            .args(["-p", &spec.frames.to_string()])
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let child = spawn_on(&mut command, spec.core, "jackd2")?;
        let mut server = JackServer {
            process: OwnedChild::new(child, format!("jackd {name:?}"), SERVER_EXIT_WAIT),
            name,
        };
        let socket = server.socket();
        await_ready(&mut server.process, &spec.log, "jackd", || socket.exists())
            .map_err(explain_full_registry)?;
        Ok(server)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> Pid {
        self.process.pid()
    }

    /// The environment a client of this server needs.
    pub fn client_env(&self) -> Vec<(String, OsString)> {
        vec![("JACK_DEFAULT_SERVER".into(), self.name.clone().into())]
    }

    /// The socket jackd listens on once it accepts clients.
    fn socket(&self) -> PathBuf {
        let uid = tessera_sys::caps::euid();
        PathBuf::from(format!("/dev/shm/jack_{}_{uid}_0", self.name))
    }

    /// jackd's files of this server's name in /dev/shm (its sockets and
    /// semaphores), which a jackd that was killed leaves behind.
    fn leftovers(&self) -> Vec<PathBuf> {
        let uid = tessera_sys::caps::euid();
        let prefixes = [
            format!("jack_{}_{uid}_", self.name),
            format!("jack_sem.{uid}_{}_", self.name),
        ];
        let entries = fs::read_dir("/dev/shm").into_iter().flatten().flatten();
        entries
            .map(|e| e.path())
            .filter(|p| {
                let file = p.file_name().map(|f| f.to_string_lossy().into_owned());
                file.is_some_and(|f| prefixes.iter().any(|x| f.starts_with(x)))
            })
            .collect()
    }

    /// Stops jackd now; says how it ended.
    pub fn stop(mut self) -> String {
        self.process.stop()
    }
}

impl Drop for JackServer {
    fn drop(&mut self) {
        self.process.stop();
        for path in self.leftovers() {
            let _ = fs::remove_file(path);
        }
    }
}

/// A PipeWire daemon started here, headless, in a runtime directory of its
/// own: its socket, and so its settings, are this run's only. Its clients
/// and tools run as its owner.
pub struct PipeWireServer {
    process: OwnedChild,
    runtime_dir: PathBuf,
    /// The session user it runs as (None: this process's user).
    owner: Option<Owner>,
}

impl PipeWireServer {
    /// `pipewire` with a private XDG_RUNTIME_DIR, its quantum and rate
    /// forced to the spec's and checked; ready for clients when this
    /// returns.
    pub fn start(spec: &ServerSpec) -> Result<PipeWireServer, String> {
        PipeWireServer::start_as(spec, None)
    }

    /// [`PipeWireServer::start`] as `owner`, whose runtime directory it
    /// makes (mode 0700, the owner's).
    pub fn start_as(spec: &ServerSpec, owner: Option<Owner>) -> Result<PipeWireServer, String> {
        let runtime_dir = std::env::temp_dir().join(unique("tessera-pw"));
        create_private_dir(&runtime_dir)?;
        if let Some(o) = &owner {
            std::os::unix::fs::chown(&runtime_dir, Some(o.uid), Some(o.gid)).map_err(|e| {
                let _ = fs::remove_dir_all(&runtime_dir);
                format!("chown {}: {e}", runtime_dir.display())
            })?;
        }
        let (out, err) = log_to(&spec.log)?;
        let mut command = Command::new("pipewire");
        as_owner(&mut command, owner.as_ref(), &runtime_dir);
        command.stdin(Stdio::null()).stdout(out).stderr(err);
        // From here on, the handle removes the directory whatever happens.
        let child = spawn_on(&mut command, spec.core, "pipewire").inspect_err(|_| {
            let _ = fs::remove_dir_all(&runtime_dir);
        })?;
        let mut server = PipeWireServer {
            process: OwnedChild::new(child, "pipewire", SERVER_EXIT_WAIT),
            runtime_dir,
            owner,
        };
        let socket = server.runtime_dir.join("pipewire-0");
        await_ready(&mut server.process, &spec.log, "pipewire", || {
            socket.exists()
        })?;
        server.force_clock(spec.frames, spec.rate)?;
        Ok(server)
    }

    pub fn pid(&self) -> Pid {
        self.process.pid()
    }

    /// The environment a client of this server needs (JACK clients also
    /// need PipeWire's libjack: run them through `pw-jack`).
    pub fn client_env(&self) -> Vec<(String, OsString)> {
        ["XDG_RUNTIME_DIR", "PIPEWIRE_RUNTIME_DIR"]
            .into_iter()
            .map(|k| (k.to_string(), self.runtime_dir.clone().into_os_string()))
            .collect()
    }

    /// `pw-metadata -n settings 0 clock.force-rate RATE` and
    /// `clock.force-quantum FRAMES`, then reads them back.
    fn force_clock(&self, frames: u32, rate: u32) -> Result<(), String> {
        let settings = [
            ("clock.force-rate", rate.to_string()),
            ("clock.force-quantum", frames.to_string()),
        ];
        for (key, value) in &settings {
            self.metadata(&["-n", "settings", "0", key, value])?;
        }
        let shown = self.metadata(&["-n", "settings"])?;
        for (key, value) in &settings {
            if !shown.contains(&format!("key:'{key}' value:'{value}'")) {
                return Err(format!(
                    "PipeWire did not take {key} = {value}; its settings: {}",
                    shown.lines().collect::<Vec<_>>().join(" | ")
                ));
            }
        }
        Ok(())
    }

    /// PipeWire's program `program` (pw-cli, a second `pipewire`, …) as a
    /// client of this server only.
    pub fn pipewire_command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        as_owner(&mut command, self.owner.as_ref(), &self.runtime_dir);
        command
    }

    /// Its runtime directory (its owner's to write in).
    pub fn runtime_dir(&self) -> &Path {
        &self.runtime_dir
    }

    fn metadata(&self, args: &[&str]) -> Result<String, String> {
        let output = self
            .pipewire_command("pw-metadata")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("pw-metadata: {e} (Debian: apt-get install pipewire-bin)"))?;
        if !output.status.success() {
            return Err(format!(
                "pw-metadata {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Stops PipeWire now; says how it ended.
    pub fn stop(mut self) -> String {
        self.process.stop()
    }
}

impl Drop for PipeWireServer {
    fn drop(&mut self) {
        self.process.stop();
        let _ = fs::remove_dir_all(&self.runtime_dir);
    }
}

/// Makes a PipeWire program run as `owner` (if any), pointed at the
/// private runtime directory only.
fn as_owner(command: &mut Command, owner: Option<&Owner>, runtime_dir: &Path) {
    if let Some(owner) = owner {
        owner.apply(command, runtime_dir);
    }
    private_environment(command, runtime_dir);
}

/// Points a PipeWire program at the private runtime directory only (no
/// session bus, no other remote).
fn private_environment(command: &mut Command, runtime_dir: &Path) {
    command
        .env("XDG_RUNTIME_DIR", runtime_dir)
        .env("PIPEWIRE_RUNTIME_DIR", runtime_dir)
        .env_remove("PIPEWIRE_REMOTE")
        .env_remove("DBUS_SESSION_BUS_ADDRESS");
}

fn create_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("create {}: {e}", dir.display()))
}

/// Either server, started and stopped the same way.
pub enum AudioServer {
    Jack(JackServer),
    PipeWire(PipeWireServer),
}

impl AudioServer {
    pub fn pid(&self) -> Pid {
        match self {
            AudioServer::Jack(s) => s.pid(),
            AudioServer::PipeWire(s) => s.pid(),
        }
    }

    pub fn client_env(&self) -> Vec<(String, OsString)> {
        match self {
            AudioServer::Jack(s) => s.client_env(),
            AudioServer::PipeWire(s) => s.client_env(),
        }
    }

    /// A command running JACK client `program` against this server
    /// (through `pw-jack` for PipeWire).
    pub fn client_command(&self, program: &Path) -> Command {
        let mut command = match self {
            AudioServer::Jack(_) => Command::new(program),
            AudioServer::PipeWire(_) => {
                let mut c = Command::new("pw-jack");
                c.arg(program);
                c
            }
        };
        if let AudioServer::PipeWire(s) = self {
            as_owner(&mut command, s.owner.as_ref(), &s.runtime_dir);
        }
        command.envs(self.client_env());
        command
    }

    pub fn stop(self) -> String {
        match self {
            AudioServer::Jack(s) => s.stop(),
            AudioServer::PipeWire(s) => s.stop(),
        }
    }
}
