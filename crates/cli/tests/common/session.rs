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
        cmd.env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", runtime)
            .env("XDG_RUNTIME_DIR", runtime)
            .current_dir(runtime)
            .uid(self.uid)
            .gid(self.gid)
            .stdin(Stdio::null());
        cmd
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        let _ = Command::new("userdel").arg(self.name).status();
    }
}
