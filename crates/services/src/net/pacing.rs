//! The service's capacity in one direction, shared by its serving threads:
//! a virtual finish time that each datagram pushes forward by its
//! transmission time at the capacity, so that the service never does more
//! work than its capacity and the queues stay inside the service, where
//! mClock orders them, not in the kernel's or the link's FIFO.
//!
//! One atomic word, taken by compare-and-swap: the real-time thread and
//! the bulk thread share it without a lock. It must never sleep; a caller
//! told "not yet" decides when to look again.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// How far ahead of now the finish time may run: a burst of this much
/// work goes at once (a package of 16 datagrams arrives together).
const BURST_NS: u64 = 200_000;

pub struct SharedPacer {
    /// Bits per second.
    rate_bps: u64,
    /// `CLOCK_MONOTONIC` ns at which the work taken so far is done.
    finish_ns: AtomicU64,
}

/// The time `bytes` take at `rate_bps`, in ns (at least 1).
pub fn transmission_ns(bytes: usize, rate_bps: u64) -> u64 {
    let bits = bytes as u128 * 8 * 1_000_000_000;
    (bits / rate_bps.max(1) as u128).max(1) as u64
}

impl SharedPacer {
    pub fn new(rate_bps: u64) -> SharedPacer {
        SharedPacer {
            rate_bps,
            finish_ns: AtomicU64::new(0),
        }
    }

    pub fn rate_bps(&self) -> u64 {
        self.rate_bps
    }

    /// Takes `bytes` of capacity at `now_ns`, or says when to ask again.
    pub fn take(&self, now_ns: u64, bytes: usize) -> Result<(), u64> {
        let cost = transmission_ns(bytes, self.rate_bps);
        let mut finish = self.finish_ns.load(Relaxed);
        loop {
            if finish > now_ns + BURST_NS {
                return Err(finish - BURST_NS);
            }
            let next = finish.max(now_ns) + cost;
            match self
                .finish_ns
                .compare_exchange_weak(finish, next, Relaxed, Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(seen) => finish = seen,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gigabit_carries_a_1500_byte_datagram_in_12_microseconds() {
        assert_eq!(transmission_ns(1500, 1_000_000_000), 12_000);
    }

    #[test]
    fn work_beyond_the_burst_waits_for_the_capacity() {
        let pacer = SharedPacer::new(1_000_000_000);
        let now = 1_000_000_000;
        let mut taken = 0;
        while pacer.take(now, 1500).is_ok() {
            taken += 1;
        }
        // One at now, then one every 12 µs while the finish time stays
        // within 200 µs of now.
        assert_eq!(taken, 17);
        let again = pacer.take(now, 1500).unwrap_err();
        assert!(again > now && again <= now + 12_000, "{again}");
        assert!(pacer.take(again, 1500).is_ok());
    }
}
