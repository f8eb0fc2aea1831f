//! The `desktop` subject's run (issue 22): an ordinary user's PipeWire and
//! where its real-time rights come from. For each configuration it makes a
//! user of its own ([`SessionUser`]), a private system bus in a scratch
//! directory, what owns RTKit's name there (nothing; Debian's rtkit-daemon
//! with polkit, [`StockRtkit`]; or `tessera daemon` with `rtkit = true`,
//! [`PrivateDaemon::start_rtkit`]), then PipeWire as that user (its own
//! runtime directory, [`PipeWireServer::start_as`]), its pw-jack load
//! clients (`tessera-jack-peer`, as that user, waiting for t0), and under
//! `tessera+guard` root's `tessera guard pipewire --pid`. While the run
//! lasts it takes a census of the server's and the clients' threads every
//! second (their policies, the CPU their reservations hold).
//!
//! It owns all of that: stopped the other way round by their PIDs, the
//! polkit rule and the user removed, the directory too — on error as well
//! (fields drop in order). It must never signal a process it did not start
//! nor judge the numbers ([`figures`] reports them).

mod figures;

pub use figures::{report_section, CENSUS_NAMES, CYCLES, LATE, RESERVED, SKIPPED, TESSERA};

use crate::harness::daemon::PrivateDaemon;
use crate::harness::guard::{start_guard, GuardChild, GuardFiles};
use crate::harness::servers::{self, AudioServer, PipeWireServer, ServerSpec};
use crate::harness::session_user::SessionUser;
use crate::harness::stock_rtkit::StockRtkit;
use crate::jack_peer::{peer_args, PeerClients};
use crate::scratch::Scratch;
use crate::subject::audio_server::GraphChain;
use crate::subject::contract::{Measured, Running, Stopped, Watched};
use figures::{Census, DesktopData};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_jack_peer::record::PeerRecord;
use tessera_rtkit::private_bus::PrivateBus;
use tessera_scenario::{Configuration, DesktopSubject, Rights, Scenario, Subject};
use tessera_sys::proc::Pid;

/// The user every desktop run makes (and removes); one left by a killed
/// run is taken over.
const USER: &str = "tessera-desktop";
/// How often the threads' policies are taken.
const CENSUS_EVERY: Duration = Duration::from_secs(1);
/// The last census comes this long before the end (the clients end then).
const CENSUS_MARGIN: Duration = Duration::from_millis(300);

/// What owns RTKit's name on the private bus (held until the server has
/// stopped).
enum RightsHolder {
    Nobody,
    Stock { _daemons: StockRtkit },
    Tessera(PrivateDaemon),
}

/// One configuration's processes, in the order they stop: clients, guard,
/// server, RTKit's owner, bus, user, scratch directory.
pub(crate) struct DesktopRun {
    peer: Option<PeerClients>,
    guard: Option<GuardChild>,
    server: Option<AudioServer>,
    holder: RightsHolder,
    /// Held until the run ends: the bus every process of it is on.
    _bus: PrivateBus,
    /// Held until the run ends: its processes' user.
    _user: SessionUser,
    scratch: Scratch,
    /// The clients' record, in the user's runtime directory.
    record: PathBuf,
    subject: DesktopSubject,
    rights: Rights,
    warmup: Duration,
    total: Duration,
    t0: Option<u64>,
    censuses: Vec<(f64, Census)>,
}

impl DesktopRun {
    fn start(scenario: &Scenario, config: &Configuration) -> Result<DesktopRun, String> {
        let Subject::Desktop(subject) = &scenario.subject else {
            unreachable!("called for desktop subjects only")
        };
        let rights = config.desktop.expect("validated with the subject");
        let peer_program = PeerClients::program()?;
        let scratch = Scratch::create("tessera-desktop")?;
        let user = SessionUser::create(USER)?;
        let bus = PrivateBus::start(scratch.path()).map_err(|e| e.to_string())?;
        let holder = match rights {
            Rights::None => RightsHolder::Nobody,
            Rights::StockRtkit => RightsHolder::Stock {
                _daemons: StockRtkit::start(&bus.address, &user.name, scratch.path())?,
            },
            Rights::Tessera { .. } => {
                RightsHolder::Tessera(PrivateDaemon::start_rtkit(&bus.address)?)
            }
        };
        let owner = user.owner(vec![(
            "DBUS_SYSTEM_BUS_ADDRESS".into(),
            bus.address.clone().into(),
        )]);
        let spec = ServerSpec {
            frames: subject.frames,
            rate: subject.rate,
            priority: 0,
            core: None,
            log: scratch.file("pipewire.log"),
        };
        let pipewire = PipeWireServer::start_as(&spec, Some(owner))?;
        let record = pipewire.runtime_dir().join("peer.tsv");
        let server = AudioServer::PipeWire(pipewire);
        let total = scenario.total();
        let guard = match (&holder, rights) {
            (RightsHolder::Tessera(daemon), Rights::Tessera { guard: true }) => {
                let files = GuardFiles {
                    log: scratch.file("guard.log"),
                    record: Some(scratch.file("guard.csv")),
                };
                Some(start_guard(
                    &server,
                    &[],
                    &files,
                    total,
                    Some(daemon.dir()),
                )?)
            }
            _ => None,
        };
        let peer = start_peer(&server, &peer_program, subject, total, &record, &scratch)?;
        Ok(DesktopRun {
            peer: Some(peer),
            guard,
            server: Some(server),
            holder,
            _bus: bus,
            _user: user,
            scratch,
            record,
            subject: subject.clone(),
            rights,
            warmup: scenario.warmup,
            total,
            t0: None,
            censuses: Vec::new(),
        })
    }

    /// The server's and the clients' processes.
    fn pids(&self) -> (Option<Pid>, Option<Pid>) {
        (
            self.server.as_ref().map(AudioServer::pid),
            self.peer.as_ref().map(PeerClients::pid),
        )
    }

    /// Waits until the clients ended on their own (they stop at the end of
    /// the run), or stops them; a note if they failed.
    fn wait_for_clients(&mut self) -> Option<String> {
        let (peer, t0) = (self.peer.as_mut()?, self.t0?);
        peer.wait_for_end(t0, self.total)
    }

    fn finish(mut self) -> DesktopData {
        let mut notes: Vec<String> = self.wait_for_clients().into_iter().collect();
        let record = match self.t0 {
            None => Err("the clients never started".to_string()),
            Some(_) => std::fs::read_to_string(&self.record)
                .map_err(|e| {
                    let log = servers::log_tail(&self.scratch.file("peer.log"));
                    format!("no record from the clients ({e}): {log}")
                })
                .and_then(|text| PeerRecord::parse(&text)),
        };
        if let Some(mut guard) = self.guard.take() {
            let ending = guard.process.stop();
            if !ending.contains("exit status: 0") {
                let log = servers::log_tail(&self.scratch.file("guard.log"));
                notes.push(format!("{ending}: {log}"));
            }
        }
        if let Some(server) = self.server.take() {
            server.stop();
        }
        let holder = std::mem::replace(&mut self.holder, RightsHolder::Nobody);
        if let RightsHolder::Tessera(daemon) = holder {
            notes.extend(daemon.stop());
        }
        notes.extend(self.rights_log_lines());
        DesktopData {
            subject: self.subject.clone(),
            rights: self.rights,
            record,
            censuses: std::mem::take(&mut self.censuses),
            notes,
        }
    }

    /// What stock rtkit-daemon said about its grants, refusals and
    /// demotions, as a note (its log is removed with the scratch
    /// directory).
    fn rights_log_lines(&self) -> Vec<String> {
        if self.rights != Rights::StockRtkit {
            return Vec::new();
        }
        let log =
            std::fs::read_to_string(self.scratch.file("rtkit-daemon.log")).unwrap_or_default();
        let lines = |what: &str| log.lines().filter(|l| l.contains(what)).count();
        let refusals: Vec<&str> = log
            .lines()
            .filter(|l| l.contains("denied") || l.contains("Failed"))
            .take(3)
            .collect();
        vec![format!(
            "rtkit-daemon: {} thread(s) made real-time, {} high priority, {} demotion(s){}",
            lines("RT at priority"),
            lines("high priority at nice level"),
            lines("Demoting"),
            match refusals.is_empty() {
                true => String::new(),
                false => format!("; refused: {}", refusals.join(" | ")),
            }
        )]
    }
}

/// `tessera-jack-peer` (through pw-jack, as the server's owner) with the
/// subject's clients, recording into `record`, waiting for t0 on stdin.
fn start_peer(
    server: &AudioServer,
    program: &Path,
    subject: &DesktopSubject,
    total: Duration,
    record: &Path,
    scratch: &Scratch,
) -> Result<PeerClients, String> {
    let mut command = server.client_command(program);
    command.args(peer_args(&subject.audio(), total));
    command.arg("--out").arg(record);
    PeerClients::start(&mut command, None, &scratch.file("peer.log"))
}

/// `[subject] kind = "desktop"`.
pub(crate) struct Kind;

impl crate::subject::contract::Subject for Kind {
    fn runs(&self, scenario: &Scenario, _config: &Configuration) -> bool {
        matches!(scenario.subject, Subject::Desktop(_))
    }

    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String> {
        Ok(Box::new(DesktopRun::start(scenario, config)?))
    }

    fn report_section(
        &self,
        results: &tessera_measure::RunResults,
        dir: &Path,
    ) -> Result<String, String> {
        report_section(results, dir)
    }
}

impl Running for DesktopRun {
    fn release(&mut self, t0: u64) -> Result<(), String> {
        self.peer.as_mut().expect("started").release(t0)?;
        self.t0 = Some(t0);
        Ok(())
    }

    /// A census every [`CENSUS_EVERY`] from the end of the warm-up until
    /// shortly before the clients end.
    fn advance(&mut self, elapsed_ns: u64) -> Result<Option<u64>, String> {
        let first = self.warmup;
        let last = self.total.saturating_sub(CENSUS_MARGIN);
        let elapsed = Duration::from_nanos(elapsed_ns);
        if elapsed < first {
            return Ok(Some(first.as_nanos() as u64));
        }
        if elapsed > last {
            return Ok(None);
        }
        let (server, clients) = self.pids();
        let census = Census::take(server, clients);
        self.censuses.push((elapsed.as_secs_f64(), census));
        let next = elapsed + CENSUS_EVERY;
        Ok((next <= last).then_some(next.as_nanos() as u64))
    }

    /// The user's PipeWire and its clients as one chain, judged by the
    /// audio period: the threads their rights made real-time (SCHED_RR
    /// from RTKit, a reservation of the period it learned from tessera's);
    /// with no rights, none (every miss is then "unknown").
    fn watched(&self) -> Vec<Watched> {
        let record = self.guard.as_ref().map(|_| self.scratch.file("guard.csv"));
        let (server, clients) = self.pids();
        GraphChain {
            server,
            clients,
            period: self.subject.period(),
            guard_record: record.as_deref(),
            rtkit_grants: matches!(self.holder, RightsHolder::Tessera(_)),
        }
        .threads(0, figures::END_TO_END, None)
    }

    fn cut_short(&mut self) {
        if let Some(peer) = self.peer.as_mut() {
            peer.cut_short();
        }
    }

    fn stop(self: Box<Self>, _notes: &mut Vec<String>) -> Box<dyn Stopped> {
        Box::new(self.finish())
    }
}

impl Stopped for DesktopData {
    fn measure(self: Box<Self>, scenario: &Scenario, t0: u64) -> Measured {
        figures::measure(*self, scenario, t0)
    }
}
