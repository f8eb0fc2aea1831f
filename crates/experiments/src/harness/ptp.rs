//! linuxptp between a run's hosts: a `ptp4l -S` (software timestamping)
//! inside each host's network namespace on its interface, the first host
//! the grandmaster (priority1 127), the others slaves (slaveOnly 1), every
//! one with a configuration, a management socket and a log of its own in
//! the run's directory, AES67's media profile's rates (8 syncs and 2
//! announces a second), and `free_running 1`: the hosts are namespaces of
//! one machine and share its one `CLOCK_REALTIME`, which no ptp4l may
//! adjust — each slave's media clock adds the offset its ptp4l measures
//! instead ([`MediaClock::follow_free_running`]). A free-running slave's
//! port stays UNCALIBRATED unless told that its clock is synchronised by
//! other means (`SET SYNCHRONIZATION_UNCERTAIN_NP 0`, here the truth: the
//! media clock is); it is told so once it answers, and then goes SLAVE.
//!
//! It owns the ptp4l processes (stopped by their PIDs however the run
//! ends: [`Ptp`]'s drop, error or panic) and their directory (removed
//! then), and waits, for at most [`LOCK_TIMEOUT`], until the grandmaster
//! serves and every slave measures. It must never adjust a clock, signal a
//! process it did not start, or judge a result.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::servers::{log_tail, OwnedChild};
use tessera_services::aes67::clock::pmc;
use tessera_services::aes67::{ClockSource, MediaClock};
use tessera_workloads::lan::{End, HostId, Lan};

/// Debian's linuxptp.
const PTP4L: &str = "/usr/sbin/ptp4l";
/// The PTP domain every host runs in (the default profile's).
pub const DOMAIN: u8 = 0;
/// How long the grandmaster may take to serve and each slave to measure:
/// a ptp4l listens 1.5 s (3 announce intervals) before it chooses a
/// master, and a slave then needs a sync and a delay measurement.
pub const LOCK_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a ptp4l gets to exit after SIGTERM.
const GRACE: Duration = Duration::from_secs(3);
/// How often a waiting check looks again.
const POLL: Duration = Duration::from_millis(200);
/// The grandmaster's priority1 (below the default 128: it wins).
const GRANDMASTER_PRIORITY: u8 = 127;

/// A host that runs ptp4l: its namespace, its name, its interface.
#[derive(Debug, Clone)]
pub struct PtpHost {
    pub id: HostId,
    pub name: String,
    pub interface: String,
}

/// The ptp4l of one host.
struct Ptp4l {
    name: String,
    child: OwnedChild,
    uds: PathBuf,
    log: PathBuf,
}

/// The hosts' ptp4l, the first host's the grandmaster; stopped, and their
/// directory removed, when dropped.
pub struct Ptp {
    ptp4ls: Vec<Ptp4l>,
    dir: PathBuf,
}

/// The configuration of a free-running ptp4l with its management socket at
/// `uds`: the grandmaster's, or a slave's.
fn config(uds: &Path, grandmaster: bool) -> String {
    let role = match grandmaster {
        true => format!("priority1 {GRANDMASTER_PRIORITY}\n"),
        false => "slaveOnly 1\n".to_string(),
    };
    format!(
        "[global]\n{role}domainNumber {DOMAIN}\nuds_address {}\ntime_stamping software\n\
         free_running 1\nlogAnnounceInterval -1\nlogSyncInterval -3\nsummary_interval 4\n",
        uds.display()
    )
}

impl Ptp {
    /// Starts a ptp4l in each of `hosts` (the first the grandmaster), its
    /// files in `dir` (made here, removed when dropped). Stops those it
    /// started if one fails.
    pub fn start(lan: &Lan, hosts: &[PtpHost], dir: &Path) -> Result<Ptp, String> {
        if !Path::new(PTP4L).exists() {
            return Err(format!(
                "PTP between hosts needs linuxptp ({PTP4L}); fix: apt-get install linuxptp"
            ));
        }
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut ptp = Ptp {
            ptp4ls: Vec::new(),
            dir: dir.to_path_buf(),
        };
        for (k, host) in hosts.iter().enumerate() {
            ptp.ptp4ls.push(start_one(lan, host, dir, k == 0)?);
        }
        Ok(ptp)
    }

    /// Each host's media clock once its ptp4l serves (the grandmaster) or
    /// measures (a slave, told its clock is synchronised by other means),
    /// in the hosts' order; an error naming the host, with its log's tail,
    /// if one does not within [`LOCK_TIMEOUT`] or its ptp4l exits.
    pub fn clocks(&mut self) -> Result<Vec<MediaClock>, String> {
        let deadline = Instant::now() + LOCK_TIMEOUT;
        let mut clocks = Vec::new();
        for (k, ptp4l) in self.ptp4ls.iter_mut().enumerate() {
            clocks.push(ptp4l.await_clock(k == 0, deadline)?);
        }
        Ok(clocks)
    }

    /// Stops every slave's ptp4l (the grandmaster's runs on): what a host
    /// that loses PTP sees. Notes of how each ended.
    pub fn stop_slaves(&mut self) -> Vec<String> {
        self.ptp4ls.iter_mut().skip(1).map(Ptp4l::stop).collect()
    }

    /// Stops them all; notes of how each ended.
    pub fn stop(mut self) -> Vec<String> {
        self.ptp4ls.iter_mut().map(Ptp4l::stop).collect()
    }
}

impl Drop for Ptp {
    fn drop(&mut self) {
        // Each child is stopped by its PID as it drops, before the files go.
        self.ptp4ls.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts host `host`'s ptp4l, its files in `dir`.
fn start_one(lan: &Lan, host: &PtpHost, dir: &Path, grandmaster: bool) -> Result<Ptp4l, String> {
    let file = |ext: &str| dir.join(format!("ptp4l-{}.{ext}", host.name));
    let (uds, cfg, log) = (file("sock"), file("cfg"), file("log"));
    std::fs::write(&cfg, config(&uds, grandmaster))
        .map_err(|e| format!("{}: {e}", cfg.display()))?;
    let out = File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out
        .try_clone()
        .map_err(|e| format!("{}: {e}", log.display()))?;
    let child = lan
        .command(End::Host(host.id), PTP4L)
        .map_err(|e| e.to_string())?
        .arg("-f")
        .arg(&cfg)
        .args(["-i", &host.interface, "-S", "-m"])
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("starting ptp4l in host {}: {e}", host.name))?;
    let what = format!("ptp4l of host {} (pid {})", host.name, child.id());
    Ok(Ptp4l {
        name: host.name.clone(),
        child: OwnedChild::new(child, what, GRACE),
        uds,
        log,
    })
}

impl Ptp4l {
    /// Waits until this ptp4l serves as grandmaster, or measures as a
    /// slave: its media clock then.
    fn await_clock(&mut self, grandmaster: bool, deadline: Instant) -> Result<MediaClock, String> {
        let mut told = grandmaster;
        let mut last = String::from("its management socket did not appear");
        loop {
            if let Some(status) = self.child.exited() {
                return Err(self.failed(&format!("ptp4l exited ({status})")));
            }
            if !told && self.uds.exists() {
                told = pmc(&self.uds, DOMAIN, &["SET SYNCHRONIZATION_UNCERTAIN_NP 0"]).is_ok();
            }
            if told {
                let clock = MediaClock::follow_free_running(&self.uds, DOMAIN);
                if ready(&clock, grandmaster) {
                    return Ok(clock);
                }
                last = clock.label();
            }
            if Instant::now() >= deadline {
                let role = if grandmaster {
                    "serve as grandmaster"
                } else {
                    "measure as a slave"
                };
                return Err(self.failed(&format!(
                    "ptp4l did not {role} within {LOCK_TIMEOUT:?} (its clock: {last})"
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    fn failed(&self, what: &str) -> String {
        format!(
            "PTP on host {}: {what}; its log: {}",
            self.name,
            log_tail(&self.log)
        )
    }

    fn stop(&mut self) -> String {
        self.child.stop()
    }
}

/// Whether `clock` is what a host's ptp4l gives once running: the
/// grandmaster's own, or a slave's following one that has measured.
fn ready(clock: &MediaClock, grandmaster: bool) -> bool {
    match (clock.source(), clock.ptp_following()) {
        (ClockSource::Ptp { port_state, .. }, None) => grandmaster && port_state == "MASTER",
        (ClockSource::Ptp { .. }, Some(following)) => !grandmaster && following.locked,
        (ClockSource::System { .. }, _) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grandmaster_wins_and_slaves_only_follow_all_free_running() {
        let uds = Path::new("/run/x/ptp4l-a.sock");
        let gm = config(uds, true);
        assert!(
            gm.contains("priority1 127\n") && !gm.contains("slaveOnly"),
            "{gm}"
        );
        let slave = config(uds, false);
        assert!(slave.contains("slaveOnly 1\n") && !slave.contains("priority1"));
        for text in [gm, slave] {
            for line in [
                "uds_address /run/x/ptp4l-a.sock\n",
                "time_stamping software\n",
                "free_running 1\n",
                "logSyncInterval -3\n",
            ] {
                assert!(text.contains(line), "{line:?} in {text}");
            }
        }
    }
}
