//! A test user of the test's own (`useradd --system`, removed when
//! dropped, also when a killed run left it: its name is the test's) and the commands it runs as in a login session of its own: a
//! runtime directory as logind gives (mode 0700, owned by the user) and
//! nothing of the test's environment. The user has no real-time rights: no
//! rtprio limit, no group, no polkit rule.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct TestUser {
    pub name: &'static str,
    pub uid: u32,
    pub gid: u32,
}

impl TestUser {
    pub fn create(name: &'static str) -> TestUser {
        // A user left by a killed run is taken over (and removed at the end).
        let _ = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .status();
        let id = |flag: &str| -> u32 {
            let out = Command::new("id").args([flag, name]).output().unwrap();
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .expect("the test user's id")
        };
        TestUser {
            name,
            uid: id("-u"),
            gid: id("-g"),
        }
    }

    /// The user's runtime directory `dir`, made if absent (its parent must
    /// let the user through).
    pub fn runtime_dir(&self, dir: &Path) -> PathBuf {
        if !dir.exists() {
            std::fs::create_dir(dir).unwrap();
            std::os::unix::fs::chown(dir, Some(self.uid), Some(self.gid)).unwrap();
            std::fs::set_permissions(dir, PermissionsExt::from_mode(0o700)).unwrap();
        }
        dir.to_path_buf()
    }

    /// `program` run as the user in the session whose runtime directory is
    /// `runtime`.
    pub fn command(&self, runtime: &Path, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        in_session(&mut cmd, runtime).uid(self.uid).gid(self.gid);
        cmd
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

/// `cmd` with nothing of the test's environment: the session's runtime
/// directory, a plain PATH, no input.
fn in_session<'a>(cmd: &'a mut Command, runtime: &Path) -> &'a mut Command {
    cmd.env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", runtime)
        .env("XDG_RUNTIME_DIR", runtime)
        .current_dir(runtime)
        .stdin(Stdio::null())
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(self.name).status();
    }
}
