//! The file `tessera-jack-peer` writes (its `record` module owns the
//! format): header lines, then one row per client per recorded cycle, each
//! row's cycle start placed on CLOCK_MONOTONIC.
//!
//! It only parses; it must never decide what a cycle means (the benchmark
//! and the audio-server subject group the rows their own way) and must stay
//! in step with the writer.

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
    pub rows: Vec<PeerRow>,
}

/// The network-audio client's counters since its launch, at `at_ns`
/// (CLOCK_MONOTONIC): a `# network` line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetSnapshot {
    pub at_ns: u64,
    pub cycles: u64,
    pub sent: u64,
    pub send_dropped: u64,
    pub received: u64,
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
        for field in fields.split_whitespace() {
            let (key, value) = field
                .split_once('=')
                .ok_or(format!("network field {field:?} is not key=value"))?;
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
}

impl PeerRecord {
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
            clients,
            rows,
        })
    }

    /// The index of the client named `name`.
    pub fn client(&self, name: &str) -> Option<usize> {
        self.clients.iter().position(|c| c == name)
    }
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
    // JACK's clock may not be CLOCK_MONOTONIC: place its cycle start
    // relative to the moment the callback woke, read on both clocks.
    let start_ns = awake_ns.saturating_sub(jack_awake_us.saturating_sub(start_us) * 1_000);
    Some(PeerRow {
        client: client as usize,
        frames: frames as u32,
        start_ns,
        awake_ns,
        finished_ns,
        cpu_ns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
