//! A ring in a mapping two processes share: the layout of the memfd (a
//! header of shared words, then the slots) and the [`RingMemory`] over it,
//! whose flags wake across processes (shared futexes).
//!
//! ```text
//! offset      what                                 written by
//! 0           magic, version, slot size, slots,    the creator, before the hand-over
//!             doorbell (u32: 1 if one follows)
//! 128         head (u64)                           producer
//! 256         tail (u64)                           consumer
//! 384         consumer sleeping (u32, futex word)  consumer; producer clears it
//! 512         producer sleeping (u32, futex word)  producer; consumer clears it
//! 640, 644    producer closed, consumer closed     their side, once
//! 768         slots: length (u32), 4 bytes of padding, bytes; each padded to 8
//! ```
//!
//! Each word a side writes often has a 128-byte line of its own (x86
//! prefetches lines in pairs), so the two sides never write one line.
//! It owns the layout and the checks of a received mapping; it must never
//! decide when a slot may be touched (the protocol's) nor trust the header
//! it did not write.

use crate::error::ChannelError;
use crate::protocol::{FlagWord, IndexWord, RingMemory};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;
use tessera_sys::event::EventFd;
use tessera_sys::futex;
use tessera_sys::shm::{SharedMapping, SharedMemory};

const MAGIC: u64 = u64::from_le_bytes(*b"tsschan\0");
const VERSION: u32 = 2;
const LINE: usize = 128;
const MAGIC_AT: usize = 0;
const VERSION_AT: usize = 8;
const SLOT_SIZE_AT: usize = 12;
const SLOT_COUNT_AT: usize = 16;
const DOORBELL_AT: usize = 20;
const HEAD_AT: usize = LINE;
const TAIL_AT: usize = 2 * LINE;
const CONSUMER_SLEEPING_AT: usize = 3 * LINE;
const PRODUCER_SLEEPING_AT: usize = 4 * LINE;
const PRODUCER_CLOSED_AT: usize = 5 * LINE;
const CONSUMER_CLOSED_AT: usize = 5 * LINE + 4;
const SLOTS_AT: usize = 6 * LINE;
/// A slot's length word and its padding, before its bytes.
const SLOT_HEADER: usize = 8;

/// The largest slot: a message bigger than this is bulk data, which
/// `write_bytes` spreads over slots.
pub const MAX_SLOT_SIZE: usize = 1 << 20;
/// The largest mapping a channel may ask for.
pub const MAX_MAPPING: usize = 1 << 30;

/// A ring's slot size and slot count, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    slot_size: usize,
    slot_count: usize,
}

impl Shape {
    /// `slots` slots of `slot_size` bytes: both at least 1, `slots` a power
    /// of two (an index becomes a slot by a mask, not a division), at most
    /// [`MAX_SLOT_SIZE`] bytes a slot and [`MAX_MAPPING`] bytes in all.
    pub fn new(slot_size: usize, slots: usize) -> Result<Shape, ChannelError> {
        let refuse = |why: String| Err(ChannelError::Setup(why));
        if slot_size == 0 || slot_size > MAX_SLOT_SIZE {
            return refuse(format!(
                "a slot size of {slot_size} bytes: it must be 1 to {MAX_SLOT_SIZE}"
            ));
        }
        if !slots.is_power_of_two() {
            return refuse(format!(
                "{slots} slots: the count must be a power of two, e.g. {}",
                slots.max(1).next_power_of_two()
            ));
        }
        let shape = Shape {
            slot_size,
            slot_count: slots,
        };
        match shape.stride().checked_mul(slots) {
            Some(bytes) if bytes <= MAX_MAPPING - SLOTS_AT => Ok(shape),
            _ => refuse(format!(
                "{slots} slots of {slot_size} bytes exceed {MAX_MAPPING} bytes of shared memory"
            )),
        }
    }

    pub fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// Bytes from one slot to the next.
    fn stride(&self) -> usize {
        SLOT_HEADER + self.slot_size.next_multiple_of(8)
    }

    /// Bytes of the whole mapping.
    pub fn mapping_len(&self) -> usize {
        SLOTS_AT + self.stride() * self.slot_count
    }

    fn slot_at(&self, slot: usize) -> usize {
        SLOTS_AT + slot * self.stride()
    }
}

/// A ring in a shared mapping.
pub struct MappedRing {
    mapping: SharedMapping,
    shape: Shape,
    /// The consumer's doorbell, when it waits on one (both ends hold it;
    /// the producer rings it).
    doorbell: Option<EventFd>,
}

impl MappedRing {
    /// Maps a new channel's memory and records its shape (the creator's
    /// side; the hand-over after it orders these stores before the peer's
    /// loads).
    /// `doorbell`: the consumer waits on it, and it is handed over after
    /// the memory.
    pub fn create(
        memory: &SharedMemory,
        shape: Shape,
        doorbell: Option<EventFd>,
    ) -> Result<MappedRing, ChannelError> {
        let mapping = memory.map()?;
        let word = |at| mapping.word_u32(at);
        mapping.word_u64(MAGIC_AT).store(MAGIC, Ordering::Relaxed);
        word(VERSION_AT).store(VERSION, Ordering::Relaxed);
        word(SLOT_SIZE_AT).store(shape.slot_size as u32, Ordering::Relaxed);
        word(SLOT_COUNT_AT).store(shape.slot_count as u32, Ordering::Relaxed);
        word(DOORBELL_AT).store(doorbell.is_some() as u32, Ordering::Relaxed);
        Ok(MappedRing {
            mapping,
            shape,
            doorbell,
        })
    }

    /// Maps received memory, checking the shape its header records against
    /// its size: a header that does not fit is refused before any slot is
    /// touched.
    pub fn open(memory: &SharedMemory) -> Result<MappedRing, ChannelError> {
        if memory.len() < SLOTS_AT {
            return Err(not_a_channel(format!(
                "{} bytes is too small",
                memory.len()
            )));
        }
        let mapping = memory.map()?;
        let word = |at| mapping.word_u32(at).load(Ordering::Relaxed);
        if mapping.word_u64(MAGIC_AT).load(Ordering::Relaxed) != MAGIC {
            return Err(not_a_channel("its header has no channel magic".into()));
        }
        if word(VERSION_AT) != VERSION {
            return Err(not_a_channel(format!(
                "layout version {} (this is version {VERSION})",
                word(VERSION_AT)
            )));
        }
        let shape = Shape::new(word(SLOT_SIZE_AT) as usize, word(SLOT_COUNT_AT) as usize)?;
        if shape.mapping_len() != memory.len() {
            return Err(not_a_channel(format!(
                "its header describes {} bytes, the memfd has {}",
                shape.mapping_len(),
                memory.len()
            )));
        }
        Ok(MappedRing {
            mapping,
            shape,
            doorbell: None,
        })
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Whether the creator said a doorbell follows the memory.
    pub fn expects_doorbell(&self) -> bool {
        self.mapping.word_u32(DOORBELL_AT).load(Ordering::Relaxed) == 1
    }

    pub fn attach_doorbell(&mut self, doorbell: EventFd) {
        self.doorbell = Some(doorbell);
    }

    pub fn doorbell(&self) -> Option<&EventFd> {
        self.doorbell.as_ref()
    }
}

fn not_a_channel(why: String) -> ChannelError {
    ChannelError::Setup(format!("the received memory is not a channel: {why}"))
}

impl RingMemory for MappedRing {
    type Index = AtomicU64;
    type Flag = AtomicU32;

    fn head(&self) -> &AtomicU64 {
        self.mapping.word_u64(HEAD_AT)
    }

    fn tail(&self) -> &AtomicU64 {
        self.mapping.word_u64(TAIL_AT)
    }

    fn consumer_sleeping(&self) -> &AtomicU32 {
        self.mapping.word_u32(CONSUMER_SLEEPING_AT)
    }

    fn producer_sleeping(&self) -> &AtomicU32 {
        self.mapping.word_u32(PRODUCER_SLEEPING_AT)
    }

    fn producer_closed(&self) -> &AtomicU32 {
        self.mapping.word_u32(PRODUCER_CLOSED_AT)
    }

    fn consumer_closed(&self) -> &AtomicU32 {
        self.mapping.word_u32(CONSUMER_CLOSED_AT)
    }

    fn fence(&self) {
        fence(Ordering::SeqCst);
    }

    fn ring_doorbell(&self) {
        if let Some(doorbell) = &self.doorbell {
            doorbell.signal();
        }
    }

    fn slot_count(&self) -> u64 {
        self.shape.slot_count as u64
    }

    fn slot_size(&self) -> usize {
        self.shape.slot_size
    }

    fn write_slot(&self, slot: usize, bytes: &[u8]) {
        let at = self.shape.slot_at(slot);
        self.mapping
            .word_u32(at)
            .store(bytes.len() as u32, Ordering::Relaxed);
        self.mapping.copy_in(at + SLOT_HEADER, bytes);
    }

    fn slot_len(&self, slot: usize) -> usize {
        let at = self.shape.slot_at(slot);
        self.mapping.word_u32(at).load(Ordering::Relaxed) as usize
    }

    fn read_slot(&self, slot: usize, offset: usize, out: &mut [u8]) {
        let at = self.shape.slot_at(slot) + SLOT_HEADER + offset;
        self.mapping.copy_out(at, out);
    }
}

impl IndexWord for AtomicU64 {
    fn load(&self, order: Ordering) -> u64 {
        AtomicU64::load(self, order)
    }

    fn store(&self, value: u64, order: Ordering) {
        AtomicU64::store(self, value, order)
    }
}

/// A flag in a shared mapping: its sleeper may be in another process, so
/// the futex operations are the shared (not `_PRIVATE`) ones.
impl FlagWord for AtomicU32 {
    fn load(&self, order: Ordering) -> u32 {
        AtomicU32::load(self, order)
    }

    fn store(&self, value: u32, order: Ordering) {
        AtomicU32::store(self, value, order)
    }

    fn wait(&self, expected: u32, timeout: Duration) {
        futex::wait_shared(self, expected, Some(timeout));
    }

    fn wake(&self) {
        futex::wake_shared(self, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_are_checked() {
        assert!(Shape::new(0, 4).is_err());
        assert!(Shape::new(8, 3).is_err());
        assert!(Shape::new(MAX_SLOT_SIZE + 1, 1).is_err());
        assert!(Shape::new(MAX_SLOT_SIZE, 1 << 12).is_err());
        let shape = Shape::new(5, 4).unwrap();
        assert_eq!(shape.mapping_len(), SLOTS_AT + 4 * 16);
    }

    #[test]
    fn an_opened_ring_has_the_creators_shape() {
        let shape = Shape::new(24, 8).unwrap();
        let memory = SharedMemory::create("tessera-test", shape.mapping_len()).unwrap();
        MappedRing::create(&memory, shape, None).unwrap();
        assert_eq!(MappedRing::open(&memory).unwrap().shape(), shape);
    }

    #[test]
    fn memory_without_a_channel_header_is_refused() {
        let memory = SharedMemory::create("tessera-test", 4096).unwrap();
        let err = MappedRing::open(&memory).err().expect("refused");
        assert!(err.to_string().contains("magic"), "{err}");
    }

    #[test]
    fn a_header_that_does_not_match_the_size_is_refused() {
        let shape = Shape::new(8, 4).unwrap();
        let memory = SharedMemory::create("tessera-test", shape.mapping_len() + 8).unwrap();
        MappedRing::create(&memory, shape, None).unwrap();
        assert!(MappedRing::open(&memory).is_err());
    }
}
