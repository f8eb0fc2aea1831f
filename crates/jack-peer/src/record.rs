//! The peer's topologies and its output file, written here and read back
//! through [`PeerRecord::parse`] (by `tessera-experiments`' peer benchmark
//! and audio-server subject):
//!
//! ```text
//! # tessera-jack-peer 4
//! # topology chain
//! # clients load-01 load-02 ... [monitor]
//! # xruns 0
//! # hosting one process, one JACK2 client thread per client
//! # period 128 96000
//! # t0_ns 987000000000
//! # threads load-01=4242 load-02=4243 monitor=4240
//! # xrun_ns 987650000000 987660000000
//! # network at_ns=987000100000 cycles=75 sent=75 send_dropped=0 received=70 receive_dropped=0 underruns=1 late=1 overflow=0
//! # workgroup client=load-01 joined=0 cycles=7500 overruns=0 misses=1 budget_ns=480000 period_ns=5333333
//! client cycle_frames cycle_start_us jack_awake_us awake_ns finished_ns cpu_ns
//! 0 123456 987654321 987654322 987654322123 987654388000 66700
//! ```
//!
//! One row per client per recorded cycle, tab-separated (shown with spaces); `client` indexes
//! the `clients` line (graph order: the chain in order, or source, loads,
//! sink; then the monitor, if any, which is connected to nothing); `period`
//! is the buffer size and sample rate the server gave the clients; `t0_ns`
//! is the origin of the clients' start and stop times (CLOCK_MONOTONIC);
//! `threads` the thread that ran each client's process callback (0: it never
//! ran); `xrun_ns` when each counted xrun was notified (CLOCK_MONOTONIC; the
//! monitor's only). `cycle_frames` and `cycle_start_us` come from
//! `jack_get_cycle_times` (the frame count identifies the cycle across
//! clients); `jack_awake_us` is JACK's clock (`jack_get_time`) when the
//! callback woke, which maps `cycle_start_us` onto `CLOCK_MONOTONIC` (JACK2
//! may read another clock, e.g. `CLOCK_MONOTONIC_RAW`); `awake_ns`/`finished_ns` are `CLOCK_MONOTONIC` around the
//! process callback's body; `cpu_ns` is the callback's own work on the
//! thread CPU-time clock. `network` lines (format 3, the network-audio
//! client only) are its counters since launch at one moment, one line every
//! tenth of a second and one at the end: the cycles it ran, the packets it
//! sent and could not send (its send ring full, or the socket refused),
//! received and could not hand to the process callback, the cycles its
//! jitter buffer played silence once playing had begun (underruns), the
//! packets that reached it more than its latency after they were made, or
//! after their sequence number was played or skipped (late), and the held packets skipped because the stream ran too far
//! ahead (overflow); the network client writes no sample rows. `workgroup`
//! lines (format 4, `--workgroup` only) are each load's part in the
//! workgroup when recording stopped: its join's libtessera code (`joined`,
//! 0 reserved, 1 best-effort, negative refused; absent: its first cycle never came) and
//! libtessera's counts for its thread — cycles marked, overruns, misses —
//! with the budget of each member's reservation and its period. This module owns that format, its writer and its
//! reader; the reader never decides what a cycle means (its users group the
//! rows their own way).

use std::io::{self, Write};

/// Version written on the first line.
const FORMAT_VERSION: u32 = 4;

/// How the load clients are connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// system:capture → load-01 → … → load-N → system:playback.
    Chain,
    /// system:capture → source → N loads in parallel → sink → system:playback.
    FanOut,
}

impl Topology {
    pub fn parse(text: &str) -> Result<Topology, String> {
        match text {
            "chain" => Ok(Topology::Chain),
            "fan-out" => Ok(Topology::FanOut),
            other => Err(format!("unknown topology {other:?}: chain or fan-out")),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Topology::Chain => "chain",
            Topology::FanOut => "fan-out",
        }
    }

    /// Client names in graph order.
    pub fn client_names(self, loads: usize) -> Vec<String> {
        let load_names = (1..=loads).map(|k| format!("load-{k:02}"));
        match self {
            Topology::Chain => load_names.collect(),
            Topology::FanOut => std::iter::once("source".to_owned())
                .chain(load_names)
                .chain(std::iter::once("sink".to_owned()))
                .collect(),
        }
    }

    /// Whether the client at `index` of `clients` is a load (the fan-out's
    /// source and sink only pass audio on).
    pub fn is_load(self, index: usize, clients: usize) -> bool {
        match self {
            Topology::Chain => true,
            Topology::FanOut => index != 0 && index + 1 != clients,
        }
    }

    /// Port connections (output, input) wiring `names` to the driver's ports.
    pub fn connections(self, names: &[String]) -> Vec<(String, String)> {
        let out = |n: &str| format!("{n}:out");
        let inp = |n: &str| format!("{n}:in");
        let first = names.first().map(String::as_str).unwrap_or_default();
        let last = names.last().map(String::as_str).unwrap_or_default();
        let mut wires = vec![("system:capture_1".to_owned(), inp(first))];
        match self {
            Topology::Chain => {
                wires.extend(names.windows(2).map(|w| (out(&w[0]), inp(&w[1]))));
            }
            Topology::FanOut => {
                for load in &names[1..names.len() - 1] {
                    wires.push((out(first), inp(load)));
                    wires.push((out(load), inp(last)));
                }
            }
        }
        wires.push((out(last), "system:playback_1".to_owned()));
        wires
    }
}

/// One client's timings in one cycle.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    pub cycle_frames: u32,
    pub cycle_start_us: u64,
    pub jack_awake_us: u64,
    pub awake_ns: u64,
    pub finished_ns: u64,
    pub cpu_ns: u64,
}

/// The network-audio client's counters since launch, at `at_ns`
/// (CLOCK_MONOTONIC).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetSnapshot {
    pub at_ns: u64,
    pub cycles: u64,
    pub sent: u64,
    pub send_dropped: u64,
    pub received: u64,
    /// Received but not handed to the process callback (its ring full).
    pub receive_dropped: u64,
    pub underruns: u64,
    pub late: u64,
    pub overflow: u64,
}

impl NetSnapshot {
    /// A `# network` line's `key=value` fields; unknown keys are skipped,
    /// a malformed field refuses the line.
    fn parse(fields: &str) -> Result<NetSnapshot, String> {
        let mut s = NetSnapshot::default();
        for (key, value) in key_values(fields, "network")? {
            let value: u64 = value.parse().map_err(|e| format!("network {key}: {e}"))?;
            match key {
                "at_ns" => s.at_ns = value,
                "cycles" => s.cycles = value,
                "sent" => s.sent = value,
                "send_dropped" => s.send_dropped = value,
                "received" => s.received = value,
                "receive_dropped" => s.receive_dropped = value,
                "underruns" => s.underruns = value,
                "late" => s.late = value,
                "overflow" => s.overflow = value,
                _ => {}
            }
        }
        Ok(s)
    }

    /// Its `network` line's fields.
    fn fields(&self) -> String {
        format!(
            "at_ns={} cycles={} sent={} send_dropped={} received={} receive_dropped={} \
             underruns={} late={} overflow={}",
            self.at_ns,
            self.cycles,
            self.sent,
            self.send_dropped,
            self.received,
            self.receive_dropped,
            self.underruns,
            self.late,
            self.overflow
        )
    }
}

/// A load client's part in the workgroup (`--workgroup`), when recording
/// stopped.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct WorkgroupMember {
    pub client: String,
    /// libtessera's code of its join (None: it never tried).
    pub joined: Option<i32>,
    pub cycles: u64,
    pub overruns: u64,
    pub misses: u64,
    /// Each member's reservation: its runtime per period.
    pub budget_ns: u64,
    pub period_ns: u64,
}

impl WorkgroupMember {
    fn parse(fields: &str) -> Result<WorkgroupMember, String> {
        let mut m = WorkgroupMember::default();
        for (key, value) in key_values(fields, "workgroup")? {
            let number = || -> Result<u64, String> {
                value.parse().map_err(|e| format!("workgroup {key}: {e}"))
            };
            match key {
                "client" => m.client = value.to_string(),
                "joined" => {
                    m.joined = Some(
                        value
                            .parse()
                            .map_err(|e| format!("workgroup joined: {e}"))?,
                    )
                }
                "cycles" => m.cycles = number()?,
                "overruns" => m.overruns = number()?,
                "misses" => m.misses = number()?,
                "budget_ns" => m.budget_ns = number()?,
                "period_ns" => m.period_ns = number()?,
                _ => {}
            }
        }
        Ok(m)
    }

    /// Its `workgroup` line's fields.
    fn fields(&self) -> String {
        let joined = self
            .joined
            .map(|code| format!(" joined={code}"))
            .unwrap_or_default();
        format!(
            "client={}{joined} cycles={} overruns={} misses={} budget_ns={} period_ns={}",
            self.client, self.cycles, self.overruns, self.misses, self.budget_ns, self.period_ns
        )
    }
}

/// A line's `key=value` fields; one without `=` refuses the line.
fn key_values<'a>(fields: &'a str, line: &str) -> Result<Vec<(&'a str, &'a str)>, String> {
    fields
        .split_whitespace()
        .map(|field| {
            field
                .split_once('=')
                .ok_or(format!("{line} field {field:?} is not key=value"))
        })
        .collect()
}

/// Writes the file: the header of `header` (its `rows` are what a reader
/// gets back; the writer's are `samples`, `samples[i]` client `i`'s).
pub fn write(mut out: impl Write, header: &PeerRecord, samples: &[Vec<Sample>]) -> io::Result<()> {
    writeln!(out, "# tessera-jack-peer {FORMAT_VERSION}")?;
    writeln!(out, "# topology {}", header.topology)?;
    writeln!(out, "# clients {}", header.clients.join(" "))?;
    writeln!(out, "# xruns {}", header.xruns)?;
    writeln!(out, "# hosting {}", header.hosting)?;
    writeln!(out, "# period {} {}", header.period.0, header.period.1)?;
    writeln!(out, "# t0_ns {}", header.t0_ns)?;
    let threads: Vec<String> = header
        .clients
        .iter()
        .zip(&header.threads)
        .map(|(name, tid)| format!("{name}={tid}"))
        .collect();
    writeln!(out, "# threads {}", threads.join(" "))?;
    let xruns: Vec<String> = header.xrun_ns.iter().map(u64::to_string).collect();
    writeln!(out, "# xrun_ns {}", xruns.join(" "))?;
    for snapshot in &header.network {
        writeln!(out, "# network {}", snapshot.fields())?;
    }
    for member in &header.workgroup {
        writeln!(out, "# workgroup {}", member.fields())?;
    }
    writeln!(
        out,
        "client\tcycle_frames\tcycle_start_us\tjack_awake_us\tawake_ns\tfinished_ns\tcpu_ns"
    )?;
    for (client, rows) in samples.iter().enumerate() {
        for s in rows {
            writeln!(
                out,
                "{client}\t{}\t{}\t{}\t{}\t{}\t{}",
                s.cycle_frames,
                s.cycle_start_us,
                s.jack_awake_us,
                s.awake_ns,
                s.finished_ns,
                s.cpu_ns
            )?;
        }
    }
    out.flush()
}

/// One client's row in one cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerRow {
    /// Index into [`PeerRecord::clients`].
    pub client: usize,
    /// JACK's frame count at the cycle's start: the same for every client
    /// of a cycle.
    pub frames: u32,
    /// The cycle's start on CLOCK_MONOTONIC, ns.
    pub start_ns: u64,
    pub awake_ns: u64,
    pub finished_ns: u64,
    /// CPU time of the process callback.
    pub cpu_ns: u64,
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PeerRecord {
    /// A [`Topology`]'s name, or `network` for the network-audio client.
    pub topology: String,
    pub clients: Vec<String>,
    pub xruns: u64,
    pub hosting: String,
    /// Frames per period and rate the server gave (format 2; 0 before).
    pub period: (u32, u32),
    /// Origin of the clients' start times, CLOCK_MONOTONIC ns (format 2).
    pub t0_ns: u64,
    /// The thread that ran each client (0: it never ran; format 2).
    pub threads: Vec<i32>,
    /// When each counted xrun was notified, CLOCK_MONOTONIC ns (format 2).
    pub xrun_ns: Vec<u64>,
    /// The network-audio client's counters over time (format 3; empty for
    /// load clients).
    pub network: Vec<NetSnapshot>,
    /// Each load's part in the workgroup (format 4; empty without
    /// `--workgroup`).
    pub workgroup: Vec<WorkgroupMember>,
    pub rows: Vec<PeerRow>,
}

impl PeerRecord {
    /// The audio period the server gave, ns (None before format 2).
    pub fn period_ns(&self) -> Option<u64> {
        match self.period {
            (frames, rate) if frames > 0 && rate > 0 => {
                Some(u64::from(frames) * 1_000_000_000 / u64::from(rate))
            }
            _ => None,
        }
    }

    pub fn parse(text: &str) -> Result<PeerRecord, String> {
        let header = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("# {key}")))
                .map(str::trim)
        };
        let required = |key: &str| header(key).ok_or(format!("no `# {key}` line"));
        let numbers = |key: &str| -> Result<Vec<u64>, String> {
            header(key)
                .unwrap_or_default()
                .split_whitespace()
                .map(|v| v.parse().map_err(|e| format!("{key} {v:?}: {e}")))
                .collect()
        };
        let period = match numbers("period")?.as_slice() {
            [frames, rate] => (*frames as u32, *rate as u32),
            _ => (0, 0),
        };
        let clients: Vec<String> = required("clients")?.split(' ').map(String::from).collect();
        let threads = header("threads")
            .unwrap_or_default()
            .split_whitespace()
            .map(|pair| {
                pair.rsplit_once('=')
                    .and_then(|(_, t)| t.parse().ok())
                    .unwrap_or(0)
            })
            .collect();
        let network = text
            .lines()
            .filter_map(|l| l.strip_prefix("# network "))
            .map(NetSnapshot::parse)
            .collect::<Result<Vec<_>, _>>()?;
        let workgroup = text
            .lines()
            .filter_map(|l| l.strip_prefix("# workgroup "))
            .map(WorkgroupMember::parse)
            .collect::<Result<Vec<_>, _>>()?;
        let rows = text
            .lines()
            .filter(|l| !l.starts_with('#') && !l.starts_with("client"))
            .map(parse_row)
            .collect::<Option<Vec<PeerRow>>>()
            .ok_or("a malformed sample row")?;
        if let Some(bad) = rows.iter().find(|r| r.client >= clients.len()) {
            return Err(format!("row of client {} of {}", bad.client, clients.len()));
        }
        Ok(PeerRecord {
            topology: required("topology")?.to_string(),
            xruns: required("xruns")?
                .parse()
                .map_err(|e| format!("xruns: {e}"))?,
            hosting: required("hosting")?.to_string(),
            period,
            t0_ns: numbers("t0_ns")?.first().copied().unwrap_or(0),
            threads,
            xrun_ns: numbers("xrun_ns")?,
            network,
            workgroup,
            clients,
            rows,
        })
    }

    /// The index of the client named `name`.
    pub fn client(&self, name: &str) -> Option<usize> {
        self.clients.iter().position(|c| c == name)
    }
}

/// A cycle's start on CLOCK_MONOTONIC (ns): JACK's clock may be another
/// (`jack_get_time`), so its cycle start (`start_us`) is placed relative to
/// the moment the callback woke, read on both clocks (`awake_ns`,
/// `jack_awake_us`).
pub fn cycle_start_ns(awake_ns: u64, jack_awake_us: u64, start_us: u64) -> u64 {
    awake_ns.saturating_sub(jack_awake_us.saturating_sub(start_us) * 1_000)
}

fn parse_row(line: &str) -> Option<PeerRow> {
    let f: Vec<u64> = line
        .split('\t')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let [client, frames, start_us, jack_awake_us, awake_ns, finished_ns, cpu_ns] = f[..] else {
        return None;
    };
    Some(PeerRow {
        client: client as usize,
        frames: frames as u32,
        start_ns: cycle_start_ns(awake_ns, jack_awake_us, start_us),
        awake_ns,
        finished_ns,
        cpu_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fan_out_wires_source_to_every_load_and_every_load_to_the_sink() {
        let names = Topology::FanOut.client_names(3);
        assert_eq!(names, ["source", "load-01", "load-02", "load-03", "sink"]);
        let wires = Topology::FanOut.connections(&names);
        assert_eq!(wires.len(), 2 + 2 * 3);
        assert!(wires.contains(&("source:out".into(), "load-02:in".into())));
        assert!(wires.contains(&("load-03:out".into(), "sink:in".into())));
        assert!(!Topology::FanOut.is_load(0, 5) && Topology::FanOut.is_load(1, 5));
    }

    #[test]
    fn chain_wires_each_load_to_the_next() {
        let names = Topology::Chain.client_names(3);
        let wires = Topology::Chain.connections(&names);
        assert_eq!(
            wires,
            [
                ("system:capture_1".into(), "load-01:in".into()),
                ("load-01:out".into(), "load-02:in".into()),
                ("load-02:out".into(), "load-03:in".into()),
                ("load-03:out".into(), "system:playback_1".into()),
            ]
        );
    }

    #[test]
    fn file_has_a_header_and_one_row_per_sample() {
        let header = PeerRecord {
            topology: Topology::Chain.name().into(),
            clients: vec!["load-01".into()],
            xruns: 2,
            hosting: "one process".into(),
            period: (64, 48_000),
            t0_ns: 5,
            threads: vec![77],
            xrun_ns: vec![9, 10],
            network: vec![NetSnapshot {
                at_ns: 8,
                received: 3,
                underruns: 1,
                ..NetSnapshot::default()
            }],
            workgroup: vec![WorkgroupMember {
                client: "load-01".into(),
                joined: Some(0),
                cycles: 7,
                misses: 1,
                budget_ns: 480_000,
                period_ns: 5_333_333,
                ..WorkgroupMember::default()
            }],
            rows: Vec::new(),
        };
        let sample = Sample {
            cycle_frames: 64,
            cycle_start_us: 1,
            jack_awake_us: 2,
            awake_ns: 1_500,
            finished_ns: 2_000,
            cpu_ns: 400,
        };
        let mut out = Vec::new();
        write(&mut out, &header, &[vec![sample]]).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("# xruns 2\n"));
        assert!(text.contains("# period 64 48000\n# t0_ns 5\n# threads load-01=77\n"));
        assert!(text.contains("# xrun_ns 9 10\n# network at_ns=8 cycles=0 sent=0 send_dropped=0 received=3 receive_dropped=0 underruns=1 late=0 overflow=0\n"));
        assert!(text.contains("# workgroup client=load-01 joined=0 cycles=7 overruns=0 misses=1 budget_ns=480000 period_ns=5333333\n"));
        assert!(text.ends_with("0\t64\t1\t2\t1500\t2000\t400\n"));
        let back = PeerRecord::parse(&text).unwrap();
        assert_eq!(back.workgroup, header.workgroup);
        assert_eq!(back.network, header.network);
    }

    #[test]
    fn format_2_headers_and_rows() {
        let text = "# tessera-jack-peer 2\n# topology chain\n# clients load-01 monitor\n\
                    # xruns 1\n# hosting one process\n# period 128 96000\n# t0_ns 500\n\
                    # threads load-01=11 monitor=0\n# xrun_ns 900\n\
                    client\tcycle_frames\tcycle_start_us\tjack_awake_us\tawake_ns\tfinished_ns\tcpu_ns\n\
                    0\t128\t1000\t1002\t5002000\t5070000\t66000\n";
        let r = PeerRecord::parse(text).unwrap();
        assert_eq!((r.period, r.t0_ns, r.xruns), ((128, 96_000), 500, 1));
        assert_eq!(
            (r.threads.as_slice(), r.xrun_ns.as_slice()),
            (&[11, 0][..], &[900][..])
        );
        assert_eq!(r.rows[0].start_ns, 5_000_000);
        assert_eq!(r.client("monitor"), Some(1));
    }

    #[test]
    fn format_1_has_no_period_and_bad_rows_are_refused() {
        let text = "# topology chain\n# clients a\n# xruns 0\n# hosting x\n";
        let r = PeerRecord::parse(text).unwrap();
        assert_eq!((r.period, r.t0_ns, r.rows.len()), ((0, 0), 0, 0));
        assert!(PeerRecord::parse(&format!("{text}1\t2\n")).is_err());
        assert!(PeerRecord::parse(&format!("{text}3\t1\t1\t1\t1\t1\t1\n")).is_err());
    }

    #[test]
    fn format_3_network_lines_give_the_counters_over_time() {
        let text = "# tessera-jack-peer 3\n# topology network\n# clients netapp\n# xruns 0\n\
                    # hosting x\n# network at_ns=5 cycles=1 received=0 underruns=0\n\
                    # network at_ns=9 cycles=4 received=3 underruns=1 late=2 future=7\n";
        let r = PeerRecord::parse(text).unwrap();
        assert_eq!(r.network.len(), 2);
        assert_eq!(
            (r.network[1].at_ns, r.network[1].received, r.network[1].late),
            (9, 3, 2)
        );
        let bad = text.replace("late=2", "late=two");
        assert!(PeerRecord::parse(&bad).unwrap_err().contains("late"));
    }
}
