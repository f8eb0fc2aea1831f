//! The ring protocol: a single-producer single-consumer ring of fixed-size
//! slots, its two indices, and the wake-up handshake, over any memory that
//! provides the shared words ([`RingMemory`]): a mapping two processes share
//! in tessera, loom's model in the tests (`tests/loom.rs`).
//!
//! It owns who may touch which slot when, and when a side may sleep. It
//! never blocks outside [`RingEnd::sleep`], never allocates, never makes a
//! system call except the wake of a sleeping peer, and never trusts the
//! peer's words: what the peer wrote is checked before it is used, and a
//! broken value is a [`ChannelError::Corrupt`], not a panic or a wild read.
//!
//! # Why the orderings are enough
//!
//! * **Publication.** The producer copies a message into a slot it owns,
//!   then stores the new `head` with `Release`. The consumer loads `head`
//!   with `Acquire`; once it reads that value, the slot's bytes happened
//!   before its reads. A message becomes visible by that single store, whole
//!   or not at all: a producer that dies mid-copy never stored it.
//! * **Reuse.** The consumer copies a message out, then stores the new
//!   `tail` with `Release`; the producer loads `tail` with `Acquire` before
//!   it writes the slot again, so the consumer's reads happened before the
//!   overwrite.
//! * **Ownership.** The producer writes only slots in `[head, tail +
//!   slots)`, the consumer reads only `[tail, head)`. Each keeps its own index
//!   privately (never reading it back from shared memory) and checks the
//!   peer's: it may only grow, and never by more than the ring holds.
//! * **Wake-ups (Dekker's pattern).** A side about to sleep stores
//!   `SLEEPING` into its flag, issues a `SeqCst` fence, re-checks the peer's
//!   index (and closed flag), and sleeps only while the flag still reads
//!   `SLEEPING` (futex semantics: the kernel compares and queues atomically
//!   with respect to a wake). The other side stores its index (or closed
//!   flag), issues a `SeqCst` fence, then loads the flag; if it reads
//!   `SLEEPING` it stores `AWAKE` and wakes. The two fences are ordered in
//!   the single total order of `SeqCst` operations. If the sleeper's comes
//!   first, the waker's load reads `SLEEPING` or a later value of the flag;
//!   a later value means the sleeper has stopped sleeping, and it re-checks
//!   after another fence before it sleeps again. If the waker's comes first,
//!   the sleeper's re-check sees the new index and it does not sleep. Either
//!   way no wake-up is lost. A wake arriving between the re-check and the
//!   futex wait finds the flag `AWAKE`, so the wait returns at once.
//!
//! The price on the real-time path: one fence per push and per pop (an
//! `mfence` on x86-64), a load of a line that changes only when the peer
//! sleeps, and a system call only when the peer does sleep. The loom model
//! checks these orderings, with waits that never time out, so that a lost
//! wake-up shows as a deadlock.

use crate::error::ChannelError;
use std::ops::RangeInclusive;
use std::sync::atomic::Ordering::{self, Acquire, Relaxed, Release};
use std::time::Duration;

/// A sleeping flag's value while its side is awake.
pub const AWAKE: u32 = 0;
/// A sleeping flag's value while its side sleeps, or is about to.
pub const SLEEPING: u32 = 1;
/// A closed flag's value once its side has let go of its end.
pub const CLOSED: u32 = 1;

/// A 64-bit index the two ends share.
pub trait IndexWord {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, value: u64, order: Ordering);
}

/// A 32-bit flag the two ends share, on which a side can sleep (a futex
/// word).
pub trait FlagWord {
    fn load(&self, order: Ordering) -> u32;
    fn store(&self, value: u32, order: Ordering);
    /// Sleeps while the word holds `expected`, at most `timeout`; may return
    /// early for any reason. The comparison and the sleep are atomic with
    /// respect to [`FlagWord::wake`], so a wake after the word changed is
    /// never lost.
    fn wait(&self, expected: u32, timeout: Duration);
    /// Wakes the thread sleeping in [`FlagWord::wait`], if any.
    fn wake(&self);
}

/// Where a ring lives: the words the two ends share, the slots, and the
/// fence of the memory model the words obey.
pub trait RingMemory {
    type Index: IndexWord;
    type Flag: FlagWord;
    /// Messages published so far; written by the producer only.
    fn head(&self) -> &Self::Index;
    /// Messages consumed so far; written by the consumer only.
    fn tail(&self) -> &Self::Index;
    /// `SLEEPING` while the consumer sleeps waiting for messages.
    fn consumer_sleeping(&self) -> &Self::Flag;
    /// `SLEEPING` while the producer sleeps waiting for free slots.
    fn producer_sleeping(&self) -> &Self::Flag;
    /// `CLOSED` once the producer has let go of its end.
    fn producer_closed(&self) -> &Self::Flag;
    /// `CLOSED` once the consumer has let go of its end.
    fn consumer_closed(&self) -> &Self::Flag;
    /// A sequentially consistent fence of the words' memory model.
    fn fence(&self);
    /// Tells a consumer that sleeps elsewhere than on its flag (in an epoll
    /// over many rings' doorbell, after [`ConsumerRing::arm`]) that the
    /// ring changed. Called after every wake of a sleeping consumer; none
    /// by default.
    fn ring_doorbell(&self) {}
    /// How many slots the ring has: a power of two.
    fn slot_count(&self) -> u64;
    /// How many bytes a slot holds.
    fn slot_size(&self) -> usize;
    /// Records `bytes` (at most `slot_size`) and their length in `slot`.
    /// Only the producer calls it, on a slot it owns.
    fn write_slot(&self, slot: usize, bytes: &[u8]);
    /// The length the producer recorded in `slot`, unchecked.
    fn slot_len(&self, slot: usize) -> usize;
    /// Copies bytes `offset..offset + out.len()` (within `slot_size`) of
    /// `slot` into `out`. Only the consumer calls it, on a slot it owns.
    fn read_slot(&self, slot: usize, offset: usize, out: &mut [u8]);
}

/// Whether the operation a side waits for can go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// A free slot (producer) or a message (consumer) is there.
    Ready,
    /// The peer closed its end, and (for the consumer) the ring is drained.
    PeerClosed,
    NotYet,
}

/// What waiting needs from either end of a ring.
pub trait RingEnd {
    /// Whether this end can go ahead now; an error if the peer broke the
    /// protocol.
    fn readiness(&mut self) -> Result<Readiness, ChannelError>;
    /// Sleeps at most `timeout` unless this end can go ahead; may return
    /// early for any reason (the caller asks [`RingEnd::readiness`] again).
    fn sleep(&mut self, timeout: Duration);
}

/// The slot an index falls in.
fn slot_of(index: u64, slot_count: u64) -> usize {
    (index & (slot_count - 1)) as usize
}

/// The peer's index, loaded with `Acquire`, or `Corrupt` (saying `broken`)
/// outside the range the protocol allows it.
fn peer_index(
    word: &impl IndexWord,
    allowed: RangeInclusive<u64>,
    broken: &'static str,
) -> Result<u64, ChannelError> {
    let index = word.load(Acquire);
    match allowed.contains(&index) {
        true => Ok(index),
        false => Err(ChannelError::Corrupt(broken)),
    }
}

fn is_closed(flag: &impl FlagWord) -> bool {
    flag.load(Acquire) == CLOSED
}

/// The waking half of the handshake, after the store the peer waits for.
/// Returns whether it had to wake the peer.
fn wake_if_sleeping<M: RingMemory>(memory: &M, sleeping: &M::Flag) -> bool {
    memory.fence();
    if sleeping.load(Relaxed) != SLEEPING {
        return false;
    }
    sleeping.store(AWAKE, Relaxed);
    sleeping.wake();
    true
}

/// The sleeping half: announce, fence, re-check, sleep.
fn sleep_unless<M: RingMemory>(
    memory: &M,
    sleeping: &M::Flag,
    can_go_ahead: impl FnOnce() -> bool,
    timeout: Duration,
) {
    sleeping.store(SLEEPING, Relaxed);
    memory.fence();
    if !can_go_ahead() {
        sleeping.wait(SLEEPING, timeout);
    }
    sleeping.store(AWAKE, Relaxed);
}

/// The producer's end: fills free slots and publishes them.
pub struct ProducerRing<M: RingMemory> {
    memory: M,
    /// Messages published: ours, never read back from the shared word,
    /// which the peer could overwrite.
    head: u64,
    /// The consumer's tail as last read; read again only when the ring
    /// looks too full.
    tail_seen: u64,
    wake_ups: u64,
}

impl<M: RingMemory> ProducerRing<M> {
    /// The producer's end of a new (all-zero) ring.
    pub fn new(memory: M) -> Self {
        ProducerRing {
            memory,
            head: 0,
            tail_seen: 0,
            wake_ups: 0,
        }
    }

    /// How many times this end woke a sleeping consumer (one system call
    /// each).
    pub fn wake_ups(&self) -> u64 {
        self.wake_ups
    }

    /// Puts one message (at most a slot) in the ring, or says `Full`.
    pub fn try_push(&mut self, message: &[u8]) -> Result<(), ChannelError> {
        let slot_size = self.memory.slot_size();
        if message.len() > slot_size {
            return Err(ChannelError::TooLarge {
                len: message.len(),
                slot_size,
            });
        }
        if self.free_slots(1)? == 0 {
            return Err(ChannelError::Full);
        }
        self.fill_next(message);
        self.publish();
        Ok(())
    }

    /// Writes as much of `bytes` as the free slots hold, a slot's worth per
    /// slot, published at once; returns how many bytes went (0 when full).
    pub fn write_bytes(&mut self, bytes: &[u8]) -> Result<usize, ChannelError> {
        let slot_size = self.memory.slot_size();
        let free = self.free_slots(bytes.len().div_ceil(slot_size) as u64)?;
        let mut written = 0;
        for chunk in bytes.chunks(slot_size).take(free as usize) {
            self.fill_next(chunk);
            written += chunk.len();
        }
        if written > 0 {
            self.publish();
        }
        Ok(written)
    }

    /// Lets go of this end: the consumer gets `Closed` once it has drained
    /// the ring.
    pub fn close(&self) {
        self.memory.producer_closed().store(CLOSED, Release);
        if wake_if_sleeping(&self.memory, self.memory.consumer_sleeping()) {
            self.memory.ring_doorbell();
        }
    }

    fn fill_next(&mut self, bytes: &[u8]) {
        let slot = slot_of(self.head, self.memory.slot_count());
        self.memory.write_slot(slot, bytes);
        self.head += 1;
    }

    /// Makes the filled slots visible with one release store, then wakes
    /// the consumer if it sleeps.
    fn publish(&mut self) {
        self.memory.head().store(self.head, Release);
        if wake_if_sleeping(&self.memory, self.memory.consumer_sleeping()) {
            self.memory.ring_doorbell();
            self.wake_ups += 1;
        }
    }

    /// Free slots, reading the consumer's tail again when the cached one
    /// shows fewer than `wanted`.
    fn free_slots(&mut self, wanted: u64) -> Result<u64, ChannelError> {
        let capacity = self.memory.slot_count();
        if capacity - (self.head - self.tail_seen) < wanted {
            self.tail_seen = self.consumer_tail()?;
        }
        Ok(capacity - (self.head - self.tail_seen))
    }

    /// The consumer's tail, checked: it never moves back, nor past our head.
    /// Acquired: the consumer's reads of the slots it gave back happened
    /// before, so they may be overwritten now.
    fn consumer_tail(&self) -> Result<u64, ChannelError> {
        peer_index(
            self.memory.tail(),
            self.tail_seen..=self.head,
            "the consumer's index moved back or past the producer's",
        )
    }

    fn consumer_closed(&self) -> bool {
        is_closed(self.memory.consumer_closed())
    }
}

impl<M: RingMemory> RingEnd for ProducerRing<M> {
    fn readiness(&mut self) -> Result<Readiness, ChannelError> {
        if self.consumer_closed() {
            return Ok(Readiness::PeerClosed);
        }
        Ok(match self.free_slots(1)? {
            0 => Readiness::NotYet,
            _ => Readiness::Ready,
        })
    }

    fn sleep(&mut self, timeout: Duration) {
        // The tail at which the ring is full (wraps harmlessly before the
        // first lap: the tail then never equals it).
        let full_at = self.head.wrapping_sub(self.memory.slot_count());
        let can_go_ahead = || self.consumer_closed() || self.memory.tail().load(Acquire) != full_at;
        sleep_unless(
            &self.memory,
            self.memory.producer_sleeping(),
            can_go_ahead,
            timeout,
        );
    }
}

/// The consumer's end: copies published messages out and gives their slots
/// back.
pub struct ConsumerRing<M: RingMemory> {
    memory: M,
    /// Messages consumed: ours, never read back from the shared word.
    tail: u64,
    /// The producer's head as last read; read again only when the cached
    /// one shows too few messages.
    head_seen: u64,
    /// Bytes of the slot at `tail` already taken by [`Self::read_bytes`].
    read_offset: usize,
}

impl<M: RingMemory> ConsumerRing<M> {
    /// The consumer's end of a new (all-zero) ring.
    pub fn new(memory: M) -> Self {
        ConsumerRing {
            memory,
            tail: 0,
            head_seen: 0,
            read_offset: 0,
        }
    }

    /// Copies the next message (or what [`Self::read_bytes`] left of it)
    /// into `out` and returns its length, or says `Empty`.
    pub fn try_pop(&mut self, out: &mut [u8]) -> Result<usize, ChannelError> {
        if self.available(1)? == 0 {
            return Err(ChannelError::Empty);
        }
        let (slot, unread) = self.current_slot()?;
        if out.len() < unread {
            return Err(ChannelError::BufferTooSmall {
                len: out.len(),
                needed: unread,
            });
        }
        self.memory
            .read_slot(slot, self.read_offset, &mut out[..unread]);
        self.advance();
        self.give_back();
        Ok(unread)
    }

    /// Copies as many published bytes as `out` holds, across slots, and
    /// gives the emptied slots back at once; returns how many (0 when
    /// empty).
    pub fn read_bytes(&mut self, out: &mut [u8]) -> Result<usize, ChannelError> {
        let tail_before = self.tail;
        let mut filled = 0;
        while filled < out.len() && self.available(1)? > 0 {
            let (slot, unread) = self.current_slot()?;
            let n = unread.min(out.len() - filled);
            self.memory
                .read_slot(slot, self.read_offset, &mut out[filled..filled + n]);
            filled += n;
            self.read_offset += n;
            if n == unread {
                self.advance();
            }
        }
        if self.tail != tail_before {
            self.give_back();
        }
        Ok(filled)
    }

    /// Announces that this consumer is about to sleep elsewhere than on
    /// its flag: in one wait over many rings' doorbell (an eventfd the
    /// producers signal, see [`RingMemory::ring_doorbell`]). It is the first
    /// half of [`RingEnd::sleep`]'s handshake: the flag stored, a fence,
    /// the ring checked once more. Unless that says `NotYet`, the caller
    /// must not sleep. Otherwise a producer publishing after this either
    /// sees the flag and rings the doorbell (whose count outlives an early
    /// ring) or published before the check, which then saw it: the argument
    /// of the module doc, with the doorbell for the futex.
    pub fn arm(&mut self) -> Result<Readiness, ChannelError> {
        self.memory.consumer_sleeping().store(SLEEPING, Relaxed);
        self.memory.fence();
        self.readiness()
    }

    /// The memory the ring lives in.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Ends what [`Self::arm`] began, after the wait (or instead of it).
    pub fn disarm(&self) {
        self.memory.consumer_sleeping().store(AWAKE, Relaxed);
    }

    /// Lets go of this end: a producer waiting for room gets `Closed`.
    pub fn close(&self) {
        self.memory.consumer_closed().store(CLOSED, Release);
        wake_if_sleeping(&self.memory, self.memory.producer_sleeping());
    }

    /// The slot at the tail and how many of its bytes are unread, the
    /// length the producer recorded checked against the slot size.
    fn current_slot(&self) -> Result<(usize, usize), ChannelError> {
        let slot = slot_of(self.tail, self.memory.slot_count());
        let len = self.memory.slot_len(slot);
        if len > self.memory.slot_size() || len < self.read_offset {
            return Err(ChannelError::Corrupt(
                "a published slot's length is out of range",
            ));
        }
        Ok((slot, len - self.read_offset))
    }

    fn advance(&mut self) {
        self.tail += 1;
        self.read_offset = 0;
    }

    /// Gives the consumed slots back with one release store, then wakes
    /// the producer if it sleeps.
    fn give_back(&self) {
        // Release: our reads of those slots happen before the producer,
        // acquiring this tail, overwrites them.
        self.memory.tail().store(self.tail, Release);
        wake_if_sleeping(&self.memory, self.memory.producer_sleeping());
    }

    /// Published messages not yet consumed, reading the producer's head
    /// again when the cached one shows fewer than `wanted`.
    fn available(&mut self, wanted: u64) -> Result<u64, ChannelError> {
        if self.head_seen - self.tail < wanted {
            self.head_seen = self.producer_head()?;
        }
        Ok(self.head_seen - self.tail)
    }

    /// The producer's head, checked: it never moves back, nor more than a
    /// ring ahead of our tail. Acquired: the bytes of every slot published
    /// up to it happened before.
    fn producer_head(&self) -> Result<u64, ChannelError> {
        peer_index(
            self.memory.head(),
            self.head_seen..=self.tail + self.memory.slot_count(),
            "the producer's index moved back or more than a ring ahead",
        )
    }

    fn producer_closed(&self) -> bool {
        is_closed(self.memory.producer_closed())
    }
}

impl<M: RingMemory> RingEnd for ConsumerRing<M> {
    fn readiness(&mut self) -> Result<Readiness, ChannelError> {
        if self.available(1)? > 0 {
            return Ok(Readiness::Ready);
        }
        if !self.producer_closed() {
            return Ok(Readiness::NotYet);
        }
        // The producer published its last messages before it closed (both
        // release stores, in that order): look once more.
        Ok(match self.available(1)? {
            0 => Readiness::PeerClosed,
            _ => Readiness::Ready,
        })
    }

    fn sleep(&mut self, timeout: Duration) {
        let can_go_ahead =
            || self.producer_closed() || self.memory.head().load(Acquire) != self.tail;
        sleep_unless(
            &self.memory,
            self.memory.consumer_sleeping(),
            can_go_ahead,
            timeout,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, AtomicU64};
    use std::sync::Mutex;

    /// A ring in this process's memory: std atomics (whose futex words work
    /// within a process too) and locked slots.
    struct LocalRing {
        head: AtomicU64,
        tail: AtomicU64,
        flags: [AtomicU32; 4],
        slots: Vec<Mutex<Vec<u8>>>,
        slot_size: usize,
    }

    impl LocalRing {
        fn new(slot_size: usize, slots: usize) -> LocalRing {
            LocalRing {
                head: AtomicU64::new(0),
                tail: AtomicU64::new(0),
                flags: Default::default(),
                slots: (0..slots).map(|_| Mutex::new(Vec::new())).collect(),
                slot_size,
            }
        }
    }

    impl RingMemory for &LocalRing {
        type Index = AtomicU64;
        type Flag = AtomicU32;
        fn head(&self) -> &AtomicU64 {
            &self.head
        }
        fn tail(&self) -> &AtomicU64 {
            &self.tail
        }
        fn consumer_sleeping(&self) -> &AtomicU32 {
            &self.flags[0]
        }
        fn producer_sleeping(&self) -> &AtomicU32 {
            &self.flags[1]
        }
        fn producer_closed(&self) -> &AtomicU32 {
            &self.flags[2]
        }
        fn consumer_closed(&self) -> &AtomicU32 {
            &self.flags[3]
        }
        fn fence(&self) {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
        fn slot_count(&self) -> u64 {
            self.slots.len() as u64
        }
        fn slot_size(&self) -> usize {
            self.slot_size
        }
        fn write_slot(&self, slot: usize, bytes: &[u8]) {
            *self.slots[slot].lock().unwrap() = bytes.to_vec();
        }
        fn slot_len(&self, slot: usize) -> usize {
            self.slots[slot].lock().unwrap().len()
        }
        fn read_slot(&self, slot: usize, offset: usize, out: &mut [u8]) {
            out.copy_from_slice(&self.slots[slot].lock().unwrap()[offset..offset + out.len()]);
        }
    }

    #[test]
    fn a_ring_holds_exactly_its_slots() {
        let ring = LocalRing::new(4, 2);
        let (mut producer, mut consumer) = (ProducerRing::new(&ring), ConsumerRing::new(&ring));
        let mut out = [0u8; 4];
        assert!(matches!(
            consumer.try_pop(&mut out),
            Err(ChannelError::Empty)
        ));
        producer.try_push(b"a").unwrap();
        producer.try_push(b"bc").unwrap();
        assert!(matches!(producer.try_push(b"d"), Err(ChannelError::Full)));
        assert_eq!(consumer.try_pop(&mut out).unwrap(), 1);
        assert_eq!(&out[..1], b"a");
        producer.try_push(b"d").unwrap();
        assert_eq!(consumer.try_pop(&mut out).unwrap(), 2);
        assert_eq!(&out[..2], b"bc");
    }

    #[test]
    fn oversized_messages_and_small_buffers_are_refused_without_loss() {
        let ring = LocalRing::new(4, 2);
        let (mut producer, mut consumer) = (ProducerRing::new(&ring), ConsumerRing::new(&ring));
        assert!(matches!(
            producer.try_push(b"12345"),
            Err(ChannelError::TooLarge {
                len: 5,
                slot_size: 4
            })
        ));
        producer.try_push(b"1234").unwrap();
        let mut small = [0u8; 3];
        assert!(matches!(
            consumer.try_pop(&mut small),
            Err(ChannelError::BufferTooSmall { needed: 4, .. })
        ));
        assert_eq!(consumer.try_pop(&mut [0u8; 4]).unwrap(), 4);
    }

    #[test]
    fn bytes_cross_slots_and_pops_take_the_rest_of_a_slot() {
        let ring = LocalRing::new(4, 4);
        let (mut producer, mut consumer) = (ProducerRing::new(&ring), ConsumerRing::new(&ring));
        assert_eq!(producer.write_bytes(b"0123456789abcdefXYZ").unwrap(), 16);
        let mut out = [0u8; 6];
        assert_eq!(consumer.read_bytes(&mut out).unwrap(), 6);
        assert_eq!(&out, b"012345");
        assert_eq!(consumer.try_pop(&mut out).unwrap(), 2);
        assert_eq!(&out[..2], b"67");
        assert_eq!(producer.write_bytes(b"XYZ").unwrap(), 3);
        let mut rest = [0u8; 16];
        assert_eq!(consumer.read_bytes(&mut rest).unwrap(), 11);
        assert_eq!(&rest[..11], b"89abcdefXYZ");
    }

    #[test]
    fn a_closed_producer_is_seen_after_the_last_message() {
        let ring = LocalRing::new(4, 2);
        let (mut producer, mut consumer) = (ProducerRing::new(&ring), ConsumerRing::new(&ring));
        producer.try_push(b"last").unwrap();
        producer.close();
        assert_eq!(consumer.readiness().unwrap(), Readiness::Ready);
        consumer.try_pop(&mut [0u8; 4]).unwrap();
        assert_eq!(consumer.readiness().unwrap(), Readiness::PeerClosed);
    }

    fn is_corrupt<T>(result: Result<T, ChannelError>) -> bool {
        matches!(result, Err(ChannelError::Corrupt(_)))
    }

    #[test]
    fn a_peers_broken_words_are_corrupt_never_followed() {
        // A head more than a ring ahead of the consumer.
        let ring = LocalRing::new(4, 2);
        ring.head.store(3, Ordering::Release);
        assert!(is_corrupt(ConsumerRing::new(&ring).try_pop(&mut [0u8; 4])));
        // A recorded length beyond the slot.
        let ring = LocalRing::new(4, 2);
        *ring.slots[0].lock().unwrap() = vec![0; 9];
        ring.head.store(1, Ordering::Release);
        assert!(is_corrupt(
            ConsumerRing::new(&ring).read_bytes(&mut [0u8; 16])
        ));
        // A tail past the producer's head.
        let ring = LocalRing::new(4, 2);
        let mut producer = ProducerRing::new(&ring);
        producer.write_bytes(b"abcdefgh").unwrap();
        ring.tail.store(5, Ordering::Release);
        assert!(is_corrupt(producer.try_push(b"c")));
    }

    #[test]
    fn a_sleeping_consumer_is_woken_once_by_a_push() {
        let ring = LocalRing::new(4, 2);
        let (mut producer, mut consumer) = (ProducerRing::new(&ring), ConsumerRing::new(&ring));
        std::thread::scope(|s| {
            let sleeper = s.spawn(move || {
                while consumer.readiness().unwrap() == Readiness::NotYet {
                    consumer.sleep(Duration::from_secs(10));
                }
            });
            while ring.flags[0].load(Ordering::Acquire) != SLEEPING {
                std::thread::yield_now();
            }
            producer.try_push(b"x").unwrap();
            sleeper.join().unwrap();
        });
        assert_eq!(producer.wake_ups(), 1);
    }
}
