//! What the render service (and its baseline) and their clients say to
//! each other: control frames on the client's Unix socket ([`Hello`],
//! [`Welcome`], [`Control`], [`Reply`]) and the fixed-size records of the
//! two channels — a [`Draw`] request from the client, a [`Done`] action
//! back to it.
//!
//! A client groups requests into actions (seed 003 §3.2: one video frame);
//! the last request of an action carries [`Draw::END`], and the service
//! answers each action, not each request. Frames travel in a pool of slots
//! in shared memory the client hands over (the render service) or, for the
//! baseline, right after the request on the socket (a copy through the
//! kernel, as a traditional window server does).
//!
//! It owns the formats; it must never trust a slot, a row or a length a
//! peer sent without checking it against what was agreed at the hello.

use super::screen::{Rect, BYTES_PER_PIXEL, MAX_SIDE};
use serde::{Deserialize, Serialize};
use tessera_policy::sla::{Offer, Terms};

/// Most frame slots in a client's pool.
pub const MAX_POOL: usize = 64;
/// Largest `spin_ns` a request may carry (a second of rendering work).
pub const MAX_SPIN_NS: u32 = 1_000_000_000;

/// A client's first frame: who it is and the frames it will send.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    /// For status and logs, e.g. "player-3".
    pub name: String,
    /// Frame size in pixels.
    pub width: usize,
    pub height: usize,
    /// Frames that can be in flight at once (the pool's slots).
    pub slots: usize,
    /// Where its window goes; `None`: the next free tile.
    pub window: Option<Rect>,
}

impl Hello {
    /// Bytes of one frame.
    pub fn frame_bytes(&self) -> usize {
        self.width * self.height * BYTES_PER_PIXEL
    }

    /// Checks the sizes; the error names the value and the range.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=MAX_SIDE).contains(&self.width) || !(1..=MAX_SIDE).contains(&self.height) {
            return Err(format!(
                "{}×{} frames (fix: each side 1–{MAX_SIDE})",
                self.width, self.height
            ));
        }
        if !(1..=MAX_POOL).contains(&self.slots) {
            return Err(format!("{} slots (fix: give 1–{MAX_POOL})", self.slots));
        }
        if self.name.is_empty() || self.name.len() > 64 {
            return Err("a client name of 1–64 bytes is needed".into());
        }
        Ok(())
    }
}

/// Which kind of server answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ServerKind {
    /// Seed 003's service: frames in shared memory, requests over channels.
    Render,
    /// One thread, requests and frames over the socket, arrival order.
    Baseline,
}

/// The server's answer to a [`Hello`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Welcome {
    /// The client is in, best-effort. For [`ServerKind::Render`] the
    /// client then sends its pool's memfd (one byte with SCM_RIGHTS) and
    /// takes the two channels (requests: the producer end; completions: the
    /// consumer end).
    Welcome {
        server: ServerKind,
        client: u32,
        window: Rect,
    },
    Refused {
        reason: String,
    },
}

/// The first frame on a connection: a client's hello, or a one-off
/// request (status, snapshot) from anyone the policy admits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum First {
    Hello(Hello),
    Control(Control),
}

/// What a client may ask on its socket after the welcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Control {
    /// What service time could it guarantee for these terms?
    Terms(Terms),
    /// Make the last offer the client's SLA (its reservation).
    Accept,
    /// Counters of every client.
    Status,
    /// The screen as a PNG: a [`Reply::Snapshot`] and then that many bytes.
    Snapshot,
}

/// The server's answers on the socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reply {
    Offer(Offer),
    /// The SLA holds: its reservation and how its rendering task runs.
    Agreed {
        reservation: String,
    },
    Status(Status),
    Snapshot {
        bytes: usize,
    },
    Refused {
        reason: String,
    },
}

/// A [`ClientStatus::share`] without an SLA.
pub const BEST_EFFORT: &str = "best-effort";

/// One client as the status shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientStatus {
    pub client: u32,
    pub name: String,
    pub pid: i32,
    /// [`BEST_EFFORT`] or the SLA's reservation.
    pub share: String,
    pub window: Rect,
    pub actions: u64,
    pub probes: u64,
    pub late: u64,
    /// Actions the front-end held back (request rate or outstanding).
    pub throttled: u64,
    /// Requests refused as malformed (bad slot or rows).
    pub malformed: u64,
}

impl ClientStatus {
    /// Whether it holds an SLA (its own task, in its own reservation).
    pub fn has_sla(&self) -> bool {
        self.share != BEST_EFFORT
    }
}

/// The server's status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    pub server: ServerKind,
    pub pid: u32,
    pub screen: (usize, usize),
    /// CPU the SLAs may take, in cores, and what they hold.
    pub capacity_cores: f64,
    pub committed_cores: f64,
    /// How the shared tasks run (best-effort share, probing share,
    /// front-end).
    pub tasks: Vec<String>,
    pub clients: Vec<ClientStatus>,
}

/// One request: draw `rows` rows from `first_row` of pool slot `slot` into
/// the client's virtual framebuffer, spending `spin_ns` of rendering work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Draw {
    /// The action it belongs to (the client's count).
    pub action: u32,
    pub slot: u16,
    /// Request kind, as in the client's terms (< `sla::MAX_KINDS`).
    pub kind: u8,
    pub flags: u8,
    pub first_row: u16,
    pub rows: u16,
    /// The seed's expensive requests: rendering work simulated by spinning
    /// this long on the serving thread's CPU clock.
    pub spin_ns: u32,
    /// When the client sent the action (t_req, `CLOCK_MONOTONIC` ns).
    pub sent_ns: u64,
    pub deadline_ns: u64,
}

impl Draw {
    /// The last request of its action: composite the window after it.
    pub const END: u8 = 1;
    /// A probe request: run on the probing share and measured.
    pub const PROBE: u8 = 2;
    /// Bytes of the record.
    pub const SIZE: usize = 32;

    pub fn ends_action(&self) -> bool {
        self.flags & Draw::END != 0
    }

    pub fn is_probe(&self) -> bool {
        self.flags & Draw::PROBE != 0
    }

    pub fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.action.to_le_bytes());
        out[4..6].copy_from_slice(&self.slot.to_le_bytes());
        out[6] = self.kind;
        out[7] = self.flags;
        out[8..10].copy_from_slice(&self.first_row.to_le_bytes());
        out[10..12].copy_from_slice(&self.rows.to_le_bytes());
        out[12..16].copy_from_slice(&self.spin_ns.to_le_bytes());
        out[16..24].copy_from_slice(&self.sent_ns.to_le_bytes());
        out[24..32].copy_from_slice(&self.deadline_ns.to_le_bytes());
    }

    pub fn decode(bytes: &[u8]) -> Option<Draw> {
        let bytes = bytes.get(..Draw::SIZE)?;
        let u16_at = |i: usize| u16::from_le_bytes([bytes[i], bytes[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap());
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
        Some(Draw {
            action: u32_at(0),
            slot: u16_at(4),
            kind: bytes[6],
            flags: bytes[7],
            first_row: u16_at(8),
            rows: u16_at(10),
            spin_ns: u32_at(12),
            sent_ns: u64_at(16),
            deadline_ns: u64_at(24),
        })
    }

    /// Whether the request stays inside what the hello agreed: a slot of
    /// the pool, rows of the frame, a sane amount of work.
    pub fn fits(&self, hello: &Hello) -> bool {
        usize::from(self.slot) < hello.slots
            && self.rows > 0
            && usize::from(self.first_row) + usize::from(self.rows) <= hello.height
            && usize::from(self.kind) < tessera_policy::sla::MAX_KINDS
            && self.spin_ns <= MAX_SPIN_NS
    }
}

/// One action done: when its last request reached the screen (t_fb).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Done {
    pub action: u32,
    pub slot: u16,
    pub flags: u8,
    pub sent_ns: u64,
    pub deadline_ns: u64,
    /// Copied to the screen (t_fb).
    pub shown_ns: u64,
    /// CPU time the action took on the serving thread.
    pub cpu_ns: u64,
}

impl Done {
    /// The action was malformed and dropped; its slot is free again.
    pub const REFUSED: u8 = 1;
    pub const SIZE: usize = 40;

    /// The report of `draw`'s action, shown now, which took `cpu_ns`.
    pub fn shown_now(draw: &Draw, cpu_ns: u64) -> Done {
        Done {
            action: draw.action,
            slot: draw.slot,
            flags: 0,
            sent_ns: draw.sent_ns,
            deadline_ns: draw.deadline_ns,
            shown_ns: tessera_sys::clock::monotonic_ns(),
            cpu_ns,
        }
    }

    /// End-to-end service time, t_fb − t_req (seed 003 §5.1).
    pub fn service_ns(&self) -> u64 {
        self.shown_ns.saturating_sub(self.sent_ns)
    }

    pub fn late(&self) -> bool {
        self.shown_ns > self.deadline_ns
    }

    pub fn encode(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.action.to_le_bytes());
        out[4..6].copy_from_slice(&self.slot.to_le_bytes());
        out[6] = self.flags;
        out[7] = 0;
        out[8..16].copy_from_slice(&self.sent_ns.to_le_bytes());
        out[16..24].copy_from_slice(&self.deadline_ns.to_le_bytes());
        out[24..32].copy_from_slice(&self.shown_ns.to_le_bytes());
        out[32..40].copy_from_slice(&self.cpu_ns.to_le_bytes());
    }

    pub fn decode(bytes: &[u8]) -> Option<Done> {
        let bytes = bytes.get(..Done::SIZE)?;
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap());
        Some(Done {
            action: u32::from_le_bytes(bytes[0..4].try_into().unwrap()),
            slot: u16::from_le_bytes([bytes[4], bytes[5]]),
            flags: bytes[6],
            sent_ns: u64_at(8),
            deadline_ns: u64_at(16),
            shown_ns: u64_at(24),
            cpu_ns: u64_at(32),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            name: "p".into(),
            width: 352,
            height: 288,
            slots: 4,
            window: None,
        }
    }

    #[test]
    fn records_round_trip() {
        let draw = Draw {
            action: 7,
            slot: 3,
            kind: 1,
            flags: Draw::END | Draw::PROBE,
            first_row: 144,
            rows: 144,
            spin_ns: 3_000_000,
            sent_ns: u64::MAX - 1,
            deadline_ns: 12,
        };
        let mut bytes = [0u8; Draw::SIZE];
        draw.encode(&mut bytes);
        assert_eq!(Draw::decode(&bytes), Some(draw));
        assert_eq!(Draw::decode(&bytes[..Draw::SIZE - 1]), None);
        let done = Done {
            action: 7,
            slot: 3,
            flags: 0,
            sent_ns: 10,
            deadline_ns: 20,
            shown_ns: 25,
            cpu_ns: 4,
        };
        let mut bytes = [0u8; Done::SIZE];
        done.encode(&mut bytes);
        assert_eq!(Done::decode(&bytes), Some(done));
        assert_eq!((done.service_ns(), done.late()), (15, true));
    }

    #[test]
    fn requests_outside_the_hello_do_not_fit() {
        let good = Draw {
            slot: 3,
            first_row: 0,
            rows: 288,
            ..Draw::default()
        };
        assert!(good.fits(&hello()));
        for bad in [
            Draw { slot: 4, ..good },
            Draw { rows: 0, ..good },
            Draw {
                first_row: 1,
                ..good
            },
            Draw { kind: 8, ..good },
            Draw {
                spin_ns: MAX_SPIN_NS + 1,
                ..good
            },
        ] {
            assert!(!bad.fits(&hello()), "{bad:?}");
        }
    }

    #[test]
    fn bad_hellos_name_the_value() {
        let e = Hello {
            slots: 0,
            ..hello()
        }
        .check()
        .unwrap_err();
        assert!(e.contains("0 slots"), "{e}");
        assert!(Hello {
            width: 0,
            ..hello()
        }
        .check()
        .is_err());
        assert!(hello().check().is_ok());
    }
}
