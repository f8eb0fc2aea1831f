//! What can go wrong on a channel, and what to do about it.
//!
//! The variants a real-time caller meets (`Full`, `Empty`, `TooLarge`,
//! `BufferTooSmall`, `Corrupt`) carry no heap data, so returning them never
//! allocates. This module must never hide a peer's failure as an empty
//! ring: a dead, closed or misbehaving peer has a variant of its own.

/// A channel operation's failure.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    #[error("the ring is full")]
    Full,
    #[error("the ring is empty")]
    Empty,
    #[error("a message of {len} bytes does not fit a slot of {slot_size} bytes")]
    TooLarge { len: usize, slot_size: usize },
    #[error("a buffer of {len} bytes cannot hold the next message of {needed} bytes")]
    BufferTooSmall { len: usize, needed: usize },
    #[error("the channel made no progress within the timeout")]
    TimedOut,
    #[error("the peer process (pid {pid}) has died")]
    PeerGone { pid: i32 },
    #[error("the peer closed its end of the channel")]
    Closed,
    #[error("the peer broke the ring protocol: {0}")]
    Corrupt(&'static str),
    #[error("the service refused the channel: {reason}")]
    Refused { reason: String },
    #[error("channel set-up: {0}")]
    Setup(String),
    #[error("{0}")]
    Kernel(#[from] tessera_sys::Error),
    #[error("the channel's socket: {0}")]
    Socket(#[from] std::io::Error),
}

impl ChannelError {
    /// What the caller (or the user) can do about it.
    pub fn fix(&self) -> &str {
        match self {
            ChannelError::Full => "wait for room (push_wait, wait_writable) or use a larger ring",
            ChannelError::Empty => "wait for a message (pop_wait, wait_readable)",
            ChannelError::TooLarge { .. } => {
                "send it as bytes (write_bytes), or create the channel with larger slots"
            }
            ChannelError::BufferTooSmall { .. } => "pop into a buffer of the channel's slot size",
            ChannelError::TimedOut => "wait longer, or check that the peer is still working",
            ChannelError::PeerGone { .. } => {
                "restart the peer and open a new channel; what it had not published is lost"
            }
            ChannelError::Closed => "open a new channel to exchange more",
            ChannelError::Corrupt(_) => "distrust the peer: drop the channel and report the peer",
            ChannelError::Refused { .. } => {
                "ask the service's administrator to allow your user in the service's policy"
            }
            ChannelError::Setup(_) => "see the message for the limit that was exceeded",
            ChannelError::Kernel(e) => &e.fix,
            ChannelError::Socket(_) => "check that the peer is still connected to the socket",
        }
    }
}
