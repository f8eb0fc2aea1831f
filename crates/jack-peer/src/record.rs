//! The peer's topologies and its output file, which `tessera-experiments`
//! (`peer` module) parses:
//!
//! ```text
//! # tessera-jack-peer 2
//! # topology chain
//! # clients load-01 load-02 ... [monitor]
//! # xruns 0
//! # hosting one process, one JACK2 client thread per client
//! # period 128 96000
//! # t0_ns 987000000000
//! # threads load-01=4242 load-02=4243 monitor=4240
//! # xrun_ns 987650000000 987660000000
//! # network at_ns=987000100000 cycles=75 sent=75 send_dropped=0 received=70 receive_dropped=0 underruns=1 late=1 overflow=0
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
//! ahead (overflow); the network client writes no sample rows. This module owns that format and must stay
//! in step with its parser.

use std::io::{self, Write};

/// Version written on the first line.
const FORMAT_VERSION: u32 = 3;

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

pub struct Header {
    /// A [`Topology`]'s name, or `network` for the network-audio client.
    pub topology: &'static str,
    pub clients: Vec<String>,
    pub xruns: u64,
    pub hosting: String,
    /// Frames per period and sample rate, as the server told the clients.
    pub period: (u32, u32),
    pub t0_ns: u64,
    /// The process thread of each client (0: it never ran).
    pub threads: Vec<i32>,
    pub xrun_ns: Vec<u64>,
    /// The network-audio client's counters over time (empty for loads).
    pub network: Vec<NetSnapshot>,
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

/// Writes the file; `samples[i]` are client `i`'s rows.
pub fn write(mut out: impl Write, header: &Header, samples: &[Vec<Sample>]) -> io::Result<()> {
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
        let header = Header {
            topology: Topology::Chain.name(),
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
        assert!(text.ends_with("0\t64\t1\t2\t1500\t2000\t400\n"));
    }
}
