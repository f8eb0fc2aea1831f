//! The peer's command line: the topology, each client's load, when each
//! client opens and closes (a staircase, `--start-every 5`, or a list of
//! times, `--starts 15,30 --stops 60,60`), the time origin shared with the
//! caller (`--t0-ns`, CLOCK_MONOTONIC, given or read from stdin once the
//! clients that open at launch are open), the recording's length and the
//! workgroup whose members the loads become (`--workgroup NAME`, on one
//! core with `--workgroup-core N`). Or,
//! with `--net-listen` and `--net-send-to`, one network-audio client
//! instead of loads ([`NetOptions`]).
//!
//! It only parses and checks; it must never touch JACK.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::record::Topology;

/// Time the graph runs before recording starts when no origin is given
/// (JACK2's graph settles and the clients' threads page in their stacks).
pub const WARM_UP: Duration = Duration::from_millis(500);

pub const USAGE: &str = "usage: tessera-jack-peer --topology chain|fan-out [--loads 10] \
     [--load 0.05 | --load 0.1,0.1,...] [--start-every S | --starts S1,S2,...] [--stops T1,-,...] \
     [--t0-ns NS|stdin] [--monitor] [--workgroup NAME [--workgroup-core N]] [--seconds 20] \
     --out FILE\n  \
     or: tessera-jack-peer --net-listen ADDR:PORT --net-send-to ADDR:PORT [--jitter 4] \
     [--t0-ns NS|stdin] [--seconds 20] --out FILE (one network-audio client)\n  \
     (server: $JACK_DEFAULT_SERVER; under PipeWire run it through pw-jack; times in s from t0)";

#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub topology: Topology,
    pub loads: usize,
    /// Each load's work as a fraction of the period, one per load.
    pub load_fractions: Vec<f64>,
    /// When each load opens, from t0 (None: at launch, before t0).
    pub starts: Vec<Option<Duration>>,
    /// When each load closes, from t0 (None: at the end).
    pub stops: Vec<Option<Duration>>,
    /// The origin: recording runs from t0 for `seconds`.
    pub t0: Origin,
    /// An extra client, connected to nothing and doing nothing, open from
    /// launch to the end: it records every cycle and counts the xruns.
    pub monitor: bool,
    /// Every load's process thread joins this workgroup and marks its
    /// cycles (libtessera; the JACK bridge).
    pub workgroup: Option<String>,
    /// The workgroup's reservations on this core, partitioned (created
    /// with `tessera_workgroup_open_on`); None: global EDF.
    pub workgroup_core: Option<usize>,
    pub seconds: f64,
    pub out: PathBuf,
    /// One network-audio client instead of the loads.
    pub net: Option<NetOptions>,
}

/// The network-audio client: where it receives the other host's audio,
/// where it sends its own, and its jitter buffer's latency in periods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetOptions {
    pub listen: SocketAddr,
    pub send_to: SocketAddr,
    pub jitter: u32,
}

/// Periods the network client's jitter buffer holds by default.
const DEFAULT_JITTER: u32 = 4;
/// The largest jitter buffer, in periods.
const MAX_JITTER: u32 = 64;

impl Options {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
        let mut raw = Raw::default();
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            if flag == "--monitor" {
                raw.monitor = true;
                continue;
            }
            let value = args.next().ok_or(format!("{flag} needs a value"))?;
            raw.set(&flag, value)?;
        }
        raw.finish()
    }
}

/// Where t0 (CLOCK_MONOTONIC ns) comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Origin {
    /// [`WARM_UP`] after the clients that open at launch are open.
    #[default]
    AfterWarmUp,
    At(u64),
    /// A line on stdin, read once the clients that open at launch are open.
    Stdin,
}

#[derive(Default)]
struct Raw {
    topology: Option<Topology>,
    loads: Option<usize>,
    load: Option<Vec<f64>>,
    start_every: Option<f64>,
    starts: Option<Vec<Option<f64>>>,
    stops: Option<Vec<Option<f64>>>,
    t0: Origin,
    monitor: bool,
    workgroup: Option<String>,
    workgroup_core: Option<usize>,
    seconds: Option<f64>,
    out: Option<PathBuf>,
    listen: Option<SocketAddr>,
    send_to: Option<SocketAddr>,
    jitter: Option<u32>,
}

impl Raw {
    fn set(&mut self, flag: &str, value: String) -> Result<(), String> {
        let number = |v: &str| -> Result<f64, String> {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or(format!("{flag} {v}: not a number ≥ 0"))
        };
        let list = |v: &str| -> Result<Vec<Option<f64>>, String> {
            v.split(',')
                .map(|item| match item.trim() {
                    "-" => Ok(None),
                    x => number(x).map(Some),
                })
                .collect()
        };
        match flag {
            "--topology" => self.topology = Some(Topology::parse(&value)?),
            "--loads" => self.loads = Some(number(&value)? as usize),
            "--load" => {
                let all = list(&value)?;
                self.load = Some(all.into_iter().map(|x| x.unwrap_or(0.0)).collect());
            }
            "--start-every" => self.start_every = Some(number(&value)?),
            "--starts" => self.starts = Some(list(&value)?),
            "--stops" => self.stops = Some(list(&value)?),
            "--t0-ns" if value == "stdin" => self.t0 = Origin::Stdin,
            "--t0-ns" => self.t0 = Origin::At(value.parse().map_err(|e| format!("{flag}: {e}"))?),
            "--seconds" => self.seconds = Some(number(&value)?),
            "--workgroup" => self.workgroup = Some(value),
            "--workgroup-core" => {
                let core = value
                    .trim()
                    .parse()
                    .map_err(|e| format!("{flag} {value}: {e}"))?;
                self.workgroup_core = Some(core);
            }
            "--out" => self.out = Some(value.into()),
            "--net-listen" => self.listen = Some(address(flag, &value)?),
            "--net-send-to" => self.send_to = Some(address(flag, &value)?),
            "--jitter" => self.jitter = Some(number(&value)? as u32),
            _ => return Err(format!("unknown flag {flag}")),
        }
        Ok(())
    }

    fn finish(self) -> Result<Options, String> {
        let loads = self
            .loads
            .or(self.load.as_ref().filter(|l| l.len() > 1).map(Vec::len))
            .unwrap_or(10);
        if loads == 0 {
            return Err("--loads must be at least 1".into());
        }
        let out = self.out.ok_or("--out is required")?;
        let load_fractions = per_load(self.load, loads, 0.05, "--load")?;
        if load_fractions.iter().any(|f| *f >= 1.0) {
            return Err("--load: each load is a fraction of the period, below 1".into());
        }
        let starts = match (self.start_every, self.starts) {
            (Some(_), Some(_)) => return Err("give --start-every or --starts, not both".into()),
            (Some(every), None) => (0..loads).map(|k| Some(k as f64 * every)).collect(),
            (None, Some(list)) => exactly(list, loads, "--starts")?,
            (None, None) => vec![None; loads],
        };
        let stops = match self.stops {
            Some(list) => exactly(list, loads, "--stops")?,
            None => vec![None; loads],
        };
        for (k, (start, stop)) in starts.iter().zip(&stops).enumerate() {
            if let (Some(stop), start) = (stop, start.unwrap_or(0.0)) {
                if *stop <= start {
                    return Err(format!("load {}: --stops must be after its start", k + 1));
                }
            }
        }
        let time = |v: Option<f64>| v.map(Duration::from_secs_f64);
        let net = net_options(self.listen, self.send_to, self.jitter)?;
        if net.is_some() && self.workgroup.is_some() {
            return Err("--workgroup is for load clients, not the network client".into());
        }
        if self.workgroup_core.is_some() && self.workgroup.is_none() {
            return Err("--workgroup-core places a workgroup: give --workgroup NAME too".into());
        }
        Ok(Options {
            topology: self.topology.unwrap_or(Topology::Chain),
            loads,
            load_fractions,
            starts: starts.into_iter().map(time).collect(),
            stops: stops.into_iter().map(time).collect(),
            t0: self.t0,
            monitor: self.monitor,
            workgroup: self.workgroup,
            workgroup_core: self.workgroup_core,
            seconds: self.seconds.unwrap_or(20.0),
            out,
            net,
        })
    }
}

fn address(flag: &str, value: &str) -> Result<SocketAddr, String> {
    value
        .trim()
        .parse()
        .map_err(|_| format!("{flag} {value}: not an ADDRESS:PORT"))
}

/// The network client's options: both addresses, or neither.
fn net_options(
    listen: Option<SocketAddr>,
    send_to: Option<SocketAddr>,
    jitter: Option<u32>,
) -> Result<Option<NetOptions>, String> {
    let jitter = jitter.unwrap_or(DEFAULT_JITTER);
    if !(1..=MAX_JITTER).contains(&jitter) {
        return Err(format!("--jitter {jitter}: give 1 to {MAX_JITTER} periods"));
    }
    match (listen, send_to) {
        (Some(listen), Some(send_to)) => Ok(Some(NetOptions {
            listen,
            send_to,
            jitter,
        })),
        (None, None) => Ok(None),
        _ => Err("a network client needs both --net-listen and --net-send-to".into()),
    }
}

/// One value for every load, or one per load.
fn per_load(
    values: Option<Vec<f64>>,
    loads: usize,
    default: f64,
    flag: &str,
) -> Result<Vec<f64>, String> {
    match values {
        None => Ok(vec![default; loads]),
        Some(one) if one.len() == 1 => Ok(vec![one[0]; loads]),
        Some(each) => exactly(each, loads, flag),
    }
}

fn exactly<T>(list: Vec<T>, loads: usize, flag: &str) -> Result<Vec<T>, String> {
    if list.len() == loads {
        Ok(list)
    } else {
        Err(format!(
            "{flag} has {} values for {loads} loads",
            list.len()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &str) -> Result<Options, String> {
        Options::parse(args.split_whitespace().map(String::from))
    }

    #[test]
    fn the_benchmark_flags_keep_their_meaning() {
        let o = parse("--topology fan-out --loads 3 --load 0.05 --seconds 2 --out x").unwrap();
        assert_eq!((o.topology, o.loads, o.seconds), (Topology::FanOut, 3, 2.0));
        assert_eq!(o.load_fractions, [0.05; 3]);
        assert!(o.starts.iter().chain(&o.stops).all(Option::is_none));
        assert!(!o.monitor && o.t0 == Origin::AfterWarmUp);
        assert_eq!(o.workgroup, None);
        let o = parse("--loads 1 --workgroup studio --out x").unwrap();
        assert_eq!(o.workgroup.as_deref(), Some("studio"));
    }

    #[test]
    fn a_staircase_starts_one_load_every_step() {
        let o = parse("--loads 3 --start-every 5 --monitor --t0-ns 7 --out x").unwrap();
        let s: Vec<f64> = o.starts.iter().map(|s| s.unwrap().as_secs_f64()).collect();
        assert_eq!(s, [0.0, 5.0, 10.0]);
        assert!(o.monitor && o.t0 == Origin::At(7));
        let o = parse("--t0-ns stdin --out x").unwrap();
        assert_eq!(o.t0, Origin::Stdin);
    }

    #[test]
    fn lists_give_each_load_its_own_load_start_and_stop() {
        let o = parse("--load 0.1,0.2 --starts 15,30 --stops 60,- --out x").unwrap();
        assert_eq!(o.loads, 2);
        assert_eq!(o.load_fractions, [0.1, 0.2]);
        assert_eq!(o.stops[0], Some(Duration::from_secs(60)));
        assert_eq!(o.stops[1], None);
    }

    #[test]
    fn bad_lists_are_refused() {
        assert!(parse("--loads 3 --starts 1,2 --out x")
            .unwrap_err()
            .contains("2 values for 3"));
        assert!(parse("--loads 1 --starts 5 --stops 4 --out x")
            .unwrap_err()
            .contains("after its start"));
        assert!(parse("--loads 2 --start-every 1 --starts 0,1 --out x").is_err());
        assert!(parse("--loads 2").unwrap_err().contains("--out"));
        assert!(parse("--load 1.5 --out x").is_err());
    }

    #[test]
    fn a_network_client_needs_both_addresses() {
        let o = parse("--net-listen 10.0.0.1:4000 --net-send-to 10.0.0.2:4000 --out x").unwrap();
        let net = o.net.unwrap();
        assert_eq!((net.listen.port(), net.jitter), (4000, DEFAULT_JITTER));
        let o = parse("--net-listen 0.0.0.0:1 --net-send-to 10.0.0.2:4000 --jitter 2 --out x");
        assert_eq!(o.unwrap().net.unwrap().jitter, 2);
        assert!(parse("--net-listen 10.0.0.1:4000 --out x")
            .unwrap_err()
            .contains("both"));
        assert!(parse("--net-listen nowhere --out x").is_err());
        assert!(
            parse("--net-listen 0.0.0.0:1 --net-send-to 0.0.0.0:2 --jitter 0 --out x")
                .unwrap_err()
                .contains("1 to 64")
        );
        assert!(parse("--out x").unwrap().net.is_none());
    }
}
