//! A user of a run's or a test's own (`useradd --system`, removed when
//! dropped; one left by a killed run of the same name is taken over and
//! removed too) and the commands it runs as in a login session of its
//! own: a runtime directory as logind gives (mode 0700, owned by the user)
//! and nothing of the caller's environment. The user has no real-time
//! rights: no rtprio limit, no group, no polkit rule.
//!
//! It owns that user: it must never remove or change a user it did not
//! create by its name.

use std::ffi::OsStr;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct SessionUser {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
}

impl SessionUser {
    /// Creates user `name` (a system user, no home, no shell).
    pub fn create(name: &str) -> Result<SessionUser, String> {
        // A user left by a killed run is taken over (and removed at the end).
        let _ = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let id = |flag: &str| -> Result<u32, String> {
            let out = Command::new("id")
                .args([flag, name])
                .output()
                .map_err(|e| format!("id {flag} {name}: {e}"))?;
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .map_err(|_| {
                    format!("user {name} could not be created (useradd, as root; Debian: passwd)")
                })
        };
        Ok(SessionUser {
            name: name.to_string(),
            uid: id("-u")?,
            gid: id("-g")?,
        })
    }

    /// The user's runtime directory `dir`, made if absent (its parent must
    /// let the user through).
    pub fn runtime_dir(&self, dir: &Path) -> Result<PathBuf, String> {
        if !dir.exists() {
            let made = std::fs::create_dir(dir)
                .and_then(|()| std::os::unix::fs::chown(dir, Some(self.uid), Some(self.gid)))
                .and_then(|()| std::fs::set_permissions(dir, PermissionsExt::from_mode(0o700)));
            made.map_err(|e| format!("the runtime directory {}: {e}", dir.display()))?;
        }
        Ok(dir.to_path_buf())
    }

    /// `program` run as the user in the session whose runtime directory is
    /// `runtime`.
    pub fn command(&self, runtime: &Path, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = Command::new(program);
        self.owner(Vec::new()).apply(&mut cmd, runtime);
        cmd
    }

    /// The user as the owner of programs run for it, with `env` added to
    /// its session's (e.g. the system bus's address).
    pub fn owner(&self, env: Vec<(String, OsString)>) -> Owner {
        Owner {
            uid: self.uid,
            gid: self.gid,
            env,
        }
    }

    /// The same with real-time rights of its own, without RTKit: the
    /// program runs with CAP_SYS_NICE (ambient, dropped to the user with
    /// `setpriv`), as `setcap cap_sys_nice+ep` gives it — which PipeWire's
    /// module-rt treats as an rtprio limit (the test machines' root lacks
    /// CAP_SYS_RESOURCE, so `prlimit --rtprio` cannot raise the limit).
    pub fn command_with_rt_rights(&self, runtime: &Path, program: &str) -> Command {
        let mut cmd = Command::new("setpriv");
        cmd.arg("--clear-groups")
            .arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .args(["--inh-caps=+sys_nice", "--ambient-caps=+sys_nice"])
            .arg(program);
        in_session(&mut cmd, runtime);
        cmd
    }
}

/// Whom a program runs as, in a session of its own: a user's ids and what
/// its session adds to the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub env: Vec<(String, OsString)>,
}

impl Owner {
    /// Makes `cmd` run as the owner in the session whose runtime directory
    /// is `runtime`, with nothing of the caller's environment.
    pub fn apply(&self, cmd: &mut Command, runtime: &Path) {
        in_session(cmd, runtime)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .uid(self.uid)
            .gid(self.gid);
    }
}

/// `cmd` with nothing of the caller's environment: the session's runtime
/// directory, a plain PATH, no input.
fn in_session<'a>(cmd: &'a mut Command, runtime: &Path) -> &'a mut Command {
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", runtime)
        .env("XDG_RUNTIME_DIR", runtime)
        .current_dir(runtime)
        .stdin(Stdio::null())
}

impl Drop for SessionUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel")
            .arg(&self.name)
            .stderr(Stdio::null())
            .status();
    }
}
