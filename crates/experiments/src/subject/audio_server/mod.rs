//! The `audio-server` subject's run (seed 001 §4.4–4.6 on the real
//! servers): a private jackd2 or PipeWire ([`crate::harness::servers`]), `tessera
//! guard` as a child in the guard configurations, and `tessera-jack-peer`
//! hosting the load clients, which join the chain on the scenario's
//! timeline and time every cycle.
//!
//! It owns one configuration's processes and scratch directory: started
//! server first, then the clients' process (pinned like the server; its
//! clients open on the timeline once the release sends it t0), then the
//! guard; stopped the other way round — the clients end on their own at the
//! end of the run, the guard gets SIGTERM by its PID before the server does
//! — and the directory is removed, on error too. It must never signal a process it
//! did not start nor judge the numbers ([`figures`] reports them).
//!
//! A subject with `[subject.network_app]` runs as [`network_app`] instead:
//! two hosts, each a jackd with a network-audio client.

mod budgets;
mod figures;
mod ground_truth;
pub mod network_app;
mod workgroup;

pub use budgets::{BUDGET, THREAD_PREDICTED, THREAD_SET, THREAD_USED};
pub use figures::{report_section, Headline, CLIENT_END, END_TO_END, PERIOD};

use crate::harness::guard::{start_guard, GuardChild, GuardFiles};
use crate::harness::servers::{self, AudioServer, ServerSpec};
use crate::jack_peer::{peer_args, PeerClients};
use crate::scratch::Scratch;
use crate::subject::contract::{Measured, Running, Stopped, Watched, SCHEDULING};
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tessera_guard::guard::Kind as Reserved;
use tessera_jack_peer::record::PeerRecord;
use tessera_scenario::{
    AudioServerSubject, Configuration, Scenario, ServerKind, ServerSched, Subject,
};
use tessera_sys::proc::Pid;
use tessera_sys::sched::{self, Policy, Tid};
use tessera_why::ChainLink;

/// The workgroup of the load clients under `guard:workgroup`.
const WORKGROUP: &str = "audio-clients";

/// Where `tessera guard` puts its reservations and which broker it asks.
pub(crate) struct GuardPlace {
    /// Its `--core` (a CPU number, or `global`); None: the guard's default.
    pub core: Option<String>,
    /// The run directory of the broker it asks (`TESSERA_RUN_DIR`); None:
    /// the one `tessera_broker::Session::connect` finds.
    pub broker_dir: Option<PathBuf>,
    /// Whether it keeps its record (`--record`: the budgets' figures).
    pub record: bool,
}

/// One configuration's server, guard and clients. Fields drop in order:
/// clients, guard, server, scratch directory.
pub struct AudioServerRun {
    peer: Option<PeerClients>,
    guard: Option<GuardChild>,
    server: Option<AudioServer>,
    scratch: Scratch,
    subject: AudioServerSubject,
    sched: ServerSched,
    total: Duration,
    t0: Option<u64>,
}

/// What a run left for the metrics.
pub struct AudioServerData {
    pub subject: AudioServerSubject,
    pub sched: ServerSched,
    pub record: Result<PeerRecord, String>,
    /// The guard's record, in run time (s from t0).
    pub budgets: Option<Result<Vec<budgets::BudgetRow>, String>>,
    pub notes: Vec<String>,
}

impl AudioServerData {
    /// The clients' cycles over `window` (their figures, as a scenario's
    /// headline counts them: late, lost, xruns); None without a record.
    pub(crate) fn cycles_over(&self, window: &figures::Window) -> Option<Headline> {
        let record = self.record.as_ref().ok()?;
        Some(figures::measure(record, &self.subject, window).1)
    }
}

impl AudioServerRun {
    /// Starts the server (and the guard); the clients start at
    /// [`AudioServerRun::release`].
    pub fn start(scenario: &Scenario, config: &Configuration) -> Result<AudioServerRun, String> {
        let Subject::AudioServer(subject) = &scenario.subject else {
            unreachable!("called for audio-server subjects only")
        };
        let sched = config.server.clone().expect("validated with the subject");
        // A workgroup's members are under global EDF on the shared cores
        // unless placed on the scenario's core: a core partitioned for the
        // guard would leave them the others only (§4.5's ten clients on
        // one core, throttled in a third of their cycles), so their
        // server's threads join them there; a guard asked for `global`
        // goes there too.
        let global = matches!(&sched, ServerSched::Guard(g)
            if (g.workgroup && !g.workgroup_on_core) || g.global);
        let guard = GuardPlace {
            core: match scenario.core {
                _ if global => Some("global".to_string()),
                core => core.map(|c| c.to_string()),
            },
            broker_dir: None,
            record: true,
        };
        AudioServerRun::start_on(subject, sched, scenario.core, scenario.total(), &guard)
    }

    /// [`AudioServerRun::start`] from its parts: the server, its clients
    /// and (under `ServerSched::Guard`) the guard, placed as `guard` says;
    /// `core` is the scenario's, `total` the run's length.
    pub(crate) fn start_on(
        subject: &AudioServerSubject,
        sched: ServerSched,
        core: Option<usize>,
        total: Duration,
        guard: &GuardPlace,
    ) -> Result<AudioServerRun, String> {
        let program = PeerClients::program()?;
        let scratch = Scratch::create("tessera-audio")?;
        let pinned = pinned_core(&sched, core);
        let server = start_server(subject, &sched, pinned, &scratch)?;
        let peer = start_peer(
            &server,
            &program,
            subject,
            &sched,
            Cores {
                pinned,
                scenario: core,
            },
            total,
            &scratch,
        )?;
        let guard = match &sched {
            ServerSched::Guard(settings) => {
                let mut args = settings.args();
                if let Some(core) = &guard.core {
                    args.extend(["--core".to_string(), core.clone()]);
                }
                let mut files = guard_files(&scratch);
                if !guard.record {
                    files.record = None;
                }
                Some(start_guard(
                    &server,
                    &args,
                    &files,
                    total,
                    guard.broker_dir.as_deref(),
                )?)
            }
            ServerSched::Fifo(_) => None,
        };
        Ok(AudioServerRun {
            peer: Some(peer),
            guard,
            server: Some(server),
            scratch,
            subject: subject.clone(),
            sched,
            total,
            t0: None,
        })
    }

    /// The clients' process and the guard's, if there is one.
    pub(crate) fn pids(&self) -> (tessera_sys::proc::Pid, Option<tessera_sys::proc::Pid>) {
        let peer = self.peer.as_ref().map(PeerClients::pid).unwrap_or(0);
        (peer, self.guard.as_ref().map(|g| g.process.pid()))
    }

    /// The chain `chain` of `tessera run --why` ([`GraphChain`]), its late
    /// periods counted in [`END_TO_END`] and its clients ending late in
    /// [`CLIENT_END`].
    pub(crate) fn chain_threads(&self, chain: u32) -> Vec<Watched> {
        let record = self.guard.as_ref().map(|_| guard_record(&self.scratch));
        GraphChain {
            server: self.server.as_ref().map(AudioServer::pid),
            clients: self.peer.as_ref().map(PeerClients::pid),
            period: self.subject.period(),
            guard_record: record.as_deref(),
            rtkit_grants: false,
        }
        .threads(chain, END_TO_END, Some(CLIENT_END))
    }

    /// Starts the clients' timeline at `t0`.
    pub fn release(&mut self, t0: u64) -> Result<(), String> {
        self.peer.as_mut().expect("started").release(t0)?;
        self.t0 = Some(t0);
        Ok(())
    }

    /// Starts one more client in a process of its own, as an application
    /// joining the session does: `tessera-jack-peer` with one load client
    /// of `load`, released at once, for `seconds`. Stopped by its PID when
    /// dropped.
    pub(crate) fn start_application(
        &self,
        index: usize,
        load: f64,
        seconds: Duration,
    ) -> Result<PeerClients, String> {
        let server = self.server.as_ref().ok_or("the server has stopped")?;
        let mut command = server.client_command(&PeerClients::program()?);
        command
            .args(["--topology", "chain", "--loads", "1", "--load"])
            .arg(load.to_string())
            .args(["--t0-ns", "stdin", "--seconds"])
            .arg(seconds.as_secs_f64().to_string())
            .arg("--out")
            .arg(self.scratch.file(&format!("application-{index}.tsv")));
        let log = self.scratch.file(&format!("application-{index}.log"));
        let mut application = PeerClients::start(&mut command, None, &log)?;
        application.release(tessera_sys::clock::monotonic_ns())?;
        Ok(application)
    }

    /// Stops the clients now instead of waiting for the end of their
    /// timeline: the run was interrupted.
    pub fn cut_short(&mut self) {
        if let Some(peer) = self.peer.as_mut() {
            peer.cut_short();
        }
    }

    /// Waits for the clients to end, stops the guard and the server, and
    /// reads what they recorded.
    pub fn finish(mut self) -> AudioServerData {
        let mut notes: Vec<String> = self.wait_for_clients().into_iter().collect();
        let budgets = self.guard.take().map(|guard| {
            let (ending, budgets) = self.stop_guard(guard);
            notes.extend(ending);
            budgets
        });
        if let Some(server) = self.server.take() {
            server.stop();
        }
        let peer_log = self.scratch.file("peer.log");
        let record = match self.t0 {
            None => Err("the clients never started".to_string()),
            Some(_) => fs::read_to_string(self.scratch.file("peer.tsv"))
                .map_err(|e| {
                    format!(
                        "no record from the clients ({e}): {}",
                        servers::log_tail(&peer_log)
                    )
                })
                .and_then(|text| PeerRecord::parse(&text)),
        };
        AudioServerData {
            subject: self.subject.clone(),
            sched: self.sched.clone(),
            record,
            budgets,
            notes,
        }
    }

    /// Waits until the clients ended on their own (they stop at the end of
    /// the run), or stops them; a note if they failed.
    fn wait_for_clients(&mut self) -> Option<String> {
        let (peer, t0) = (self.peer.as_mut()?, self.t0?);
        peer.wait_for_end(t0, self.total)
    }

    /// Stops the guard (SIGTERM by its PID) and reads its record; a note
    /// if it did not end cleanly.
    fn stop_guard(
        &self,
        mut guard: GuardChild,
    ) -> (Option<String>, Result<Vec<budgets::BudgetRow>, String>) {
        let ending = guard.process.stop();
        let note = (!ending.contains("exit status: 0")).then(|| {
            let log = servers::log_tail(&self.scratch.file("guard.log"));
            format!("{ending}: {log}")
        });
        let origin = budgets::Origin {
            guard_started_ns: guard.started_ns,
            t0_ns: self.t0.unwrap_or(guard.started_ns),
        };
        (note, budgets::read(&guard_record(&self.scratch), &origin))
    }
}

/// The metrics and notes of a finished run; `t0` is the run's origin.
pub fn metrics(data: AudioServerData, scenario: &Scenario, t0: u64) -> Measured {
    let window = figures::Window::of_run(scenario, t0);
    let mut notes = data.notes;
    let record = match data.record {
        Ok(record) => record,
        Err(e) => {
            notes.insert(0, format!("not measured: {e}"));
            return Measured {
                notes,
                ..Measured::default()
            };
        }
    };
    let (mut metrics, mut headline, more) = figures::measure(&record, &data.subject, &window);
    notes.extend(more);
    let mut counters = Vec::new();
    match data.budgets {
        Some(Ok(rows)) => {
            let labels = budgets::labels(&record);
            let warmup_s = scenario.warmup.as_secs_f64();
            let (budgets, ratio) = budgets::metrics(&rows, &labels, warmup_s);
            metrics.extend(budgets.metrics);
            counters.extend(budgets.counters);
            headline.reserved_per_used = ratio;
            notes.extend(budgets.notes);
            let truths = ground_truth::compare(&rows, &record, t0, warmup_s);
            counters.extend(ground_truth::counters(&truths));
            notes.extend(ground_truth::note(&truths));
        }
        Some(Err(e)) => notes.push(format!("guard's record: {e}")),
        None => {}
    }
    counters.extend(workgroup::counters(&record));
    headline.sched = data.sched.describe();
    notes.insert(0, headline.note());
    counters.splice(0..0, headline.counters());
    Measured::new(metrics, counters, notes).label(SCHEDULING, &headline.sched)
}

/// An audio server's graph as a chain of `tessera run --why`: the
/// server's real-time threads drive it, the clients' process's are its
/// members, judged by the audio period (a late period is the last client
/// ending past it). Shared by the subjects that run a server and clients
/// (the audio server's, the desktop's).
pub(crate) struct GraphChain<'a> {
    pub server: Option<Pid>,
    pub clients: Option<Pid>,
    pub period: Duration,
    /// The guard's record, when a guard runs: which of the threads it
    /// reserved its program made real-time ([`on_the_graph`]).
    pub guard_record: Option<&'a Path>,
    /// Whether the programs' real-time threads hold reservations RTKit's
    /// interface granted: of any period, not only the audio period's (each
    /// thread's wake-ups teach it; PipeWire's data loop wakes several
    /// times a cycle), and never in the guard's record (the guard leaves
    /// a thread in another cell alone).
    pub rtkit_grants: bool,
}

impl GraphChain<'_> {
    /// Its threads now, links of chain `chain`: its late periods count in
    /// `metric`, its clients ending late in `thread_metric`.
    pub(crate) fn threads(
        &self,
        chain: u32,
        metric: &str,
        thread_metric: Option<&str>,
    ) -> Vec<Watched> {
        let reserved = self.guard_record.map(budgets::kinds);
        let reserved = reserved.as_ref();
        [(self.server, true), (self.clients, false)]
            .into_iter()
            .filter_map(|(pid, driver)| Some((pid?, driver)))
            .flat_map(|(pid, driver)| {
                let threads = cycling_threads(pid, self.period, self.rtkit_grants);
                let unrecorded = !driver || self.rtkit_grants;
                on_the_graph(&threads, driver, reserved, unrecorded)
                    .into_iter()
                    .map(move |tid| Watched {
                        tid,
                        metric: metric.into(),
                        deadline: Some(self.period),
                        period: Some(self.period),
                        budget: None,
                        chain: Some(ChainLink { chain, driver }),
                        thread_metric: thread_metric.map(Into::into),
                    })
            })
            .collect()
    }
}

/// The threads of `pid` that run the audio cycle: under SCHED_FIFO or
/// SCHED_RR, or a SCHED_DEADLINE reservation of the audio `period` (the
/// guard's reservations of a process's other busy threads have periods of
/// their own), or of any period with `any_period`.
fn cycling_threads(pid: Pid, period: Duration, any_period: bool) -> Vec<Cycling> {
    let threads = tessera_sys::proc::threads_of(pid).unwrap_or_default();
    threads
        .into_iter()
        .filter_map(|tid| match sched::get_policy(tid) {
            Ok(Policy::Fifo { .. } | Policy::RoundRobin { .. }) => Some(Cycling {
                tid,
                reserved: false,
            }),
            Ok(Policy::Deadline(p)) if any_period || p.period == period => Some(Cycling {
                tid,
                reserved: true,
            }),
            _ => None,
        })
        .collect()
}

/// A thread that runs once an audio period, as far as its policy says.
struct Cycling {
    tid: Tid,
    /// Under SCHED_DEADLINE (the guard's, a workgroup's).
    reserved: bool,
}

/// Which of a process's `threads` run the graph. Under the guard
/// (`reserved`: the kinds its record names so far) a server's thread not
/// real-time may be reserved at the audio period too without being on the
/// audio path — PipeWire's main loop, with an application share or
/// adopted as in step with the graph while it serves the guard's
/// client listings — and as a second driver it opened periods of its own. So a
/// server's reservation counts once the record calls it real-time, or
/// graph when the server has no real-time thread (a PipeWire without RT
/// rights: its data loop is adopted). A reservation the record does not
/// name counts when `unrecorded` says so: a client's (a workgroup
/// member's is the broker's), and RTKit's grants; a server's the guard
/// has not recorded yet otherwise waits for the next look. A reservation
/// the record calls a share never counts.
fn on_the_graph(
    threads: &[Cycling],
    server: bool,
    reserved: Option<&HashMap<Tid, Reserved>>,
    unrecorded: bool,
) -> Vec<Tid> {
    let Some(kinds) = reserved else {
        return threads.iter().map(|t| t.tid).collect();
    };
    let kind = |t: &Cycling| kinds.get(&t.tid).copied();
    let real_time = |t: &Cycling| match (t.reserved, kind(t)) {
        (false, _) | (true, Some(Reserved::RealTime)) => true,
        (true, None) => unrecorded,
        (true, Some(_)) => false,
    };
    let server_real_time = server && threads.iter().any(real_time);
    threads
        .iter()
        .filter(|t| real_time(t) || (kind(t) == Some(Reserved::Graph) && !server_real_time))
        .map(|t| t.tid)
        .collect()
}

/// The core the server and its clients start pinned to: the scenario's
/// under plain FIFO; none under the guard, which places each real-time
/// thread on its own core in a reservation. (Cells of the tasks may have
/// made the scenario's core an exclusive cpuset already: nothing outside
/// them can be pinned there.)
fn pinned_core(sched: &ServerSched, core: Option<usize>) -> Option<usize> {
    match sched {
        ServerSched::Fifo(_) => core,
        ServerSched::Guard(_) => None,
    }
}

/// The subject's server as this configuration runs it, pinned to `core`,
/// logging into the scratch directory.
fn server_spec(
    subject: &AudioServerSubject,
    sched: &ServerSched,
    core: Option<usize>,
    scratch: &Scratch,
) -> ServerSpec {
    ServerSpec {
        frames: subject.frames,
        rate: subject.rate,
        priority: sched.jack_priority(subject).unwrap_or(subject.priority),
        core,
        log: scratch.file("server.log"),
    }
}

fn start_server(
    subject: &AudioServerSubject,
    sched: &ServerSched,
    core: Option<usize>,
    scratch: &Scratch,
) -> Result<AudioServer, String> {
    let spec = server_spec(subject, sched, core, scratch);
    match subject.server {
        ServerKind::Jack => {
            servers::JackServer::start(Path::new("jackd"), &spec).map(AudioServer::Jack)
        }
        ServerKind::PipeWire => servers::PipeWireServer::start(&spec).map(AudioServer::PipeWire),
    }
}

/// The cores of a configuration: the one its processes start pinned to,
/// and the scenario's.
struct Cores {
    pinned: Option<usize>,
    scenario: Option<usize>,
}

/// `tessera-jack-peer` (`program`) with the subject's clients, pinned like
/// the server, waiting for t0 on its stdin; its loads in [`WORKGROUP`]
/// when the configuration says so (the broker the guard asks, found the
/// same way), on the scenario's core under `workgroup=core`.
fn start_peer(
    server: &AudioServer,
    program: &Path,
    subject: &AudioServerSubject,
    sched: &ServerSched,
    cores: Cores,
    total: Duration,
    scratch: &Scratch,
) -> Result<PeerClients, String> {
    let mut command = server.client_command(program);
    command.args(peer_args(subject, total));
    if let ServerSched::Guard(g) = sched {
        if g.workgroup {
            command.args(["--workgroup", WORKGROUP]);
        }
        if let Some(core) = cores.scenario.filter(|_| g.workgroup_on_core) {
            command.args(["--workgroup-core".to_string(), core.to_string()]);
        }
    }
    command.arg("--out").arg(scratch.file("peer.tsv"));
    PeerClients::start(&mut command, cores.pinned, &scratch.file("peer.log"))
}

/// Where the guard of a configuration logs and records: its scratch
/// directory.
fn guard_files(scratch: &Scratch) -> GuardFiles {
    GuardFiles {
        log: scratch.file("guard.log"),
        record: Some(guard_record(scratch)),
    }
}

/// Where the guard keeps its record (`--record`) in a run's scratch.
fn guard_record(scratch: &Scratch) -> PathBuf {
    scratch.file("guard.csv")
}

/// `[subject] kind = "audio-server"` without a network application.
pub(crate) struct Kind;

impl crate::subject::contract::Subject for Kind {
    fn runs(&self, scenario: &Scenario, _config: &Configuration) -> bool {
        matches!(&scenario.subject, Subject::AudioServer(a) if a.network.is_none())
    }

    fn start(
        &self,
        scenario: &Scenario,
        config: &Configuration,
    ) -> Result<Box<dyn Running>, String> {
        Ok(Box::new(AudioServerRun::start(scenario, config)?))
    }

    fn report_section(
        &self,
        results: &tessera_measure::RunResults,
        _dir: &Path,
    ) -> Result<String, String> {
        Ok(report_section(results))
    }
}

impl Running for AudioServerRun {
    fn release(&mut self, t0: u64) -> Result<(), String> {
        AudioServerRun::release(self, t0)
    }

    fn watched(&self) -> Vec<Watched> {
        self.chain_threads(0)
    }

    fn cut_short(&mut self) {
        AudioServerRun::cut_short(self);
    }

    fn stop(self: Box<Self>, _notes: &mut Vec<String>) -> Box<dyn Stopped> {
        Box::new(self.finish())
    }
}

impl Stopped for AudioServerData {
    fn measure(self: Box<Self>, scenario: &Scenario, t0: u64) -> Measured {
        metrics(*self, scenario, t0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_share_or_adopted_main_loop_is_not_on_the_graph() {
        let thread = |tid, reserved| Cycling { tid, reserved };
        let kinds = HashMap::from([
            (2, Reserved::RealTime),
            (3, Reserved::Share),
            (4, Reserved::Graph),
        ]);
        let kinds = Some(&kinds);
        let all = [
            thread(1, false),
            thread(2, true),
            thread(3, true),
            thread(4, true),
            thread(5, true),
        ];
        // A server with a real-time thread: its adopted main loop (4), its
        // share (3) and a thread not recorded yet (5) are left out.
        assert_eq!(on_the_graph(&all, true, kinds, false), [1, 2]);
        // Without real-time rights the adopted threads run the graph.
        assert_eq!(on_the_graph(&all[2..], true, kinds, false), [4]);
        // A client's unrecorded reservation is a workgroup member's.
        assert_eq!(on_the_graph(&all, false, kinds, true), [1, 2, 4, 5]);
        assert_eq!(
            on_the_graph(&all, true, None, false),
            [1, 2, 3, 4, 5],
            "no guard"
        );
        // A server whose data loop holds RTKit's grant (5, which the guard
        // leaves alone): that is its real-time thread, and the adopted
        // main loop (4) is left out.
        assert_eq!(on_the_graph(&all[2..], true, kinds, true), [5]);
    }
}
