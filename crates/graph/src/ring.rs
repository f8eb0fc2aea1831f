//! SPSC ring buffers for handing data from a node (real-time) to a non-RT
//! thread (disk, network, UI) and back: a documented face over `rtrb`.
//!
//! Create the ring off the real-time path with [`spsc`], move the
//! [`Producer`] into the node and the [`Consumer`] into the other thread.
//! On the real-time side use only the non-blocking calls: `push`,
//! `write_chunk_uninit`/`write_chunk` (bulk), `slots`, `is_full`; each is a few
//! atomic loads and stores, never allocates and never waits. When the ring is
//! full the real-time side must drop or count the data, never spin for room.
//! The non-RT side polls with `pop`/`read_chunk` (and sleeps between polls
//! or waits on its own wake-up). This module owns nothing else; it must never
//! grow a blocking API.

pub use rtrb::chunks::{ChunkError, ReadChunk, WriteChunk, WriteChunkUninit};
pub use rtrb::{Consumer, PopError, Producer, PushError};

/// A ring of `capacity` elements, allocated now (off the real-time path).
pub fn spsc<T>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    rtrb::RingBuffer::new(capacity)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_ring_refuses_instead_of_blocking() {
        let (mut producer, mut consumer) = spsc::<u32>(2);
        producer.push(1).unwrap();
        producer.push(2).unwrap();
        assert_eq!(producer.push(3), Err(PushError::Full(3)));
        assert_eq!(consumer.pop(), Ok(1));
        assert_eq!(consumer.pop(), Ok(2));
        assert_eq!(consumer.pop(), Err(PopError::Empty));
    }

    #[test]
    fn bulk_transfer_of_samples() {
        let (mut producer, mut consumer) = spsc::<f32>(8);
        let chunk = producer.write_chunk_uninit(4).unwrap();
        assert_eq!(chunk.fill_from_iter([0.5f32; 4]), 4);
        let read = consumer.read_chunk(4).unwrap();
        assert_eq!(read.into_iter().collect::<Vec<_>>(), [0.5; 4]);
    }
}
