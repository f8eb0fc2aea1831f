//! Loom model of the ring protocol (`tessera_channel::protocol`): the real
//! `ProducerRing` and `ConsumerRing` over loom's atomics, cells and a
//! futex made of a mutex and a condition variable. The model's waits never
//! time out, so a lost wake-up shows as a deadlock. Run with:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p tessera-channel --test loom --release
//! ```
//!
//! * messages arrive whole and in order through a ring that fills, and
//!   neither side sleeps through the other's progress;
//! * closing wakes a sleeping consumer, after the last message;
//! * bulk bytes stream across slots;
//! * closing the consumer wakes a producer waiting for room;
//! * a consumer that arms its ring and sleeps on a doorbell (an eventfd,
//!   here a counter under a mutex) is woken for every message.

#![cfg(loom)]
// The model's slots are loom's UnsafeCell, read and written only by the
// side that owns the slot at that point of the protocol.
#![allow(unsafe_code)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use std::time::Duration;
use tessera_channel::protocol::{
    ConsumerRing, FlagWord, IndexWord, ProducerRing, Readiness, RingEnd, RingMemory,
};
use tessera_channel::ChannelError;

/// Two-thread models explored with at most this many preemptions, unless
/// LOOM_MAX_PREEMPTIONS says otherwise: every interleaving of the full model
/// takes minutes per test; 5 takes seconds and exceeds the 2–3 loom
/// recommends.
const PREEMPTIONS: usize = 5;

/// Runs `f` under loom with the preemption bound above.
fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if std::env::var_os("LOOM_MAX_PREEMPTIONS").is_none() {
        builder.preemption_bound = Some(PREEMPTIONS);
    }
    builder.check(f);
}

/// Ignored by the model's futex, which sleeps until woken.
const FOREVER: Duration = Duration::from_secs(3600);
const SLOT_SIZE: usize = 2;

struct Index(AtomicU64);

impl IndexWord for Index {
    fn load(&self, order: Ordering) -> u64 {
        self.0.load(order)
    }
    fn store(&self, value: u64, order: Ordering) {
        self.0.store(value, order)
    }
}

/// A futex word: the kernel's compare-and-queue and its wake are atomic
/// with respect to each other, as the mutex makes them here.
struct Flag {
    word: AtomicU32,
    queue: Mutex<()>,
    woken: Condvar,
}

impl Flag {
    fn new() -> Flag {
        Flag {
            word: AtomicU32::new(0),
            queue: Mutex::new(()),
            woken: Condvar::new(),
        }
    }
}

impl FlagWord for Flag {
    fn load(&self, order: Ordering) -> u32 {
        self.word.load(order)
    }
    fn store(&self, value: u32, order: Ordering) {
        self.word.store(value, order)
    }
    fn wait(&self, expected: u32, _timeout: Duration) {
        let queued = self.queue.lock().unwrap();
        if self.word.load(Ordering::Relaxed) == expected {
            drop(self.woken.wait(queued).unwrap());
        }
    }
    fn wake(&self) {
        let _queue = self.queue.lock().unwrap();
        self.woken.notify_all();
    }
}

struct Slot {
    len: usize,
    bytes: [u8; SLOT_SIZE],
}

/// An eventfd: a count that a signal raises and a wait takes, the wait
/// sleeping while it is 0.
struct Doorbell {
    count: Mutex<u64>,
    rung: Condvar,
}

impl Doorbell {
    fn wait_and_take(&self) {
        let mut count = self.count.lock().unwrap();
        while *count == 0 {
            count = self.rung.wait(count).unwrap();
        }
        *count = 0;
    }
}

struct Ring {
    head: Index,
    tail: Index,
    flags: [Flag; 4],
    slots: Vec<UnsafeCell<Slot>>,
    doorbell: Doorbell,
}

/// Both ends' handle on one ring.
#[derive(Clone)]
struct Shared(Arc<Ring>);

fn ring(slots: usize) -> Shared {
    Shared(Arc::new(Ring {
        head: Index(AtomicU64::new(0)),
        tail: Index(AtomicU64::new(0)),
        flags: [Flag::new(), Flag::new(), Flag::new(), Flag::new()],
        doorbell: Doorbell {
            count: Mutex::new(0),
            rung: Condvar::new(),
        },
        slots: (0..slots)
            .map(|_| {
                UnsafeCell::new(Slot {
                    len: 0,
                    bytes: [0; SLOT_SIZE],
                })
            })
            .collect(),
    }))
}

impl RingMemory for Shared {
    type Index = Index;
    type Flag = Flag;
    fn head(&self) -> &Index {
        &self.0.head
    }
    fn tail(&self) -> &Index {
        &self.0.tail
    }
    fn consumer_sleeping(&self) -> &Flag {
        &self.0.flags[0]
    }
    fn producer_sleeping(&self) -> &Flag {
        &self.0.flags[1]
    }
    fn producer_closed(&self) -> &Flag {
        &self.0.flags[2]
    }
    fn consumer_closed(&self) -> &Flag {
        &self.0.flags[3]
    }
    fn fence(&self) {
        fence(Ordering::SeqCst);
    }
    fn ring_doorbell(&self) {
        *self.0.doorbell.count.lock().unwrap() += 1;
        self.0.doorbell.rung.notify_all();
    }
    fn slot_count(&self) -> u64 {
        self.0.slots.len() as u64
    }
    fn slot_size(&self) -> usize {
        SLOT_SIZE
    }
    // Loom's cells report any access to a slot that the indices do not
    // order after the other side's.
    fn write_slot(&self, slot: usize, bytes: &[u8]) {
        self.0.slots[slot].with_mut(|s| {
            let s = unsafe { &mut *s };
            s.len = bytes.len();
            s.bytes[..bytes.len()].copy_from_slice(bytes);
        });
    }
    fn slot_len(&self, slot: usize) -> usize {
        self.0.slots[slot].with(|s| unsafe { (*s).len })
    }
    fn read_slot(&self, slot: usize, offset: usize, out: &mut [u8]) {
        self.0.slots[slot].with(|s| {
            let s = unsafe { &*s };
            out.copy_from_slice(&s.bytes[offset..offset + out.len()]);
        });
    }
}

/// Tries `attempt` until it is not `Full`/`Empty`, sleeping in between;
/// `Closed` when the peer closed while this side waited.
fn blocking<E: RingEnd, T>(
    end: &mut E,
    mut attempt: impl FnMut(&mut E) -> Result<T, ChannelError>,
) -> Result<T, ChannelError> {
    loop {
        match attempt(end) {
            Err(ChannelError::Full | ChannelError::Empty) => loop {
                match end.readiness().unwrap() {
                    Readiness::Ready => break,
                    Readiness::PeerClosed => return Err(ChannelError::Closed),
                    Readiness::NotYet => end.sleep(FOREVER),
                }
            },
            done => return done,
        }
    }
}

/// Runs `produce` on a producer's end of `shared` in a thread of the model.
fn producer_thread(
    shared: &Shared,
    produce: impl FnOnce(&mut ProducerRing<Shared>) + Send + 'static,
) -> thread::JoinHandle<()> {
    let mut producer = ProducerRing::new(shared.clone());
    thread::spawn(move || produce(&mut producer))
}

#[test]
fn messages_arrive_whole_and_in_order_through_a_full_ring() {
    model(|| {
        let shared = ring(1);
        let producer = producer_thread(&shared, |producer| {
            for m in 1..=2u8 {
                blocking(producer, |p| p.try_push(&[m, m + 10])).unwrap();
            }
        });
        let mut consumer = ConsumerRing::new(shared);
        for m in 1..=2u8 {
            let mut out = [0u8; SLOT_SIZE];
            let len = blocking(&mut consumer, |c| c.try_pop(&mut out)).unwrap();
            assert_eq!((len, out), (2, [m, m + 10]));
        }
        producer.join().unwrap();
    });
}

#[test]
fn closing_wakes_a_sleeping_consumer_after_the_last_message() {
    model(|| {
        let shared = ring(1);
        let producer = producer_thread(&shared, |producer| {
            producer.try_push(&[7]).unwrap();
            producer.close();
        });
        let mut consumer = ConsumerRing::new(shared);
        let mut out = [0u8; SLOT_SIZE];
        assert_eq!(blocking(&mut consumer, |c| c.try_pop(&mut out)).unwrap(), 1);
        assert_eq!(out[0], 7);
        assert!(matches!(
            blocking(&mut consumer, |c| c.try_pop(&mut out)),
            Err(ChannelError::Closed)
        ));
        producer.join().unwrap();
    });
}

#[test]
fn bulk_bytes_stream_across_slots() {
    model(|| {
        let shared = ring(1);
        let producer = producer_thread(&shared, |producer| {
            let mut rest: &[u8] = &[1, 2, 3];
            while !rest.is_empty() {
                let sent = blocking(producer, |p| match p.write_bytes(rest)? {
                    0 => Err(ChannelError::Full),
                    sent => Ok(sent),
                })
                .unwrap();
                rest = &rest[sent..];
            }
        });
        let mut consumer = ConsumerRing::new(shared);
        let mut received = Vec::new();
        while received.len() < 3 {
            let mut piece = [0u8; 2];
            let n = blocking(&mut consumer, |c| match c.read_bytes(&mut piece)? {
                0 => Err(ChannelError::Empty),
                n => Ok(n),
            })
            .unwrap();
            received.extend_from_slice(&piece[..n]);
        }
        assert_eq!(received, [1, 2, 3]);
        producer.join().unwrap();
    });
}

#[test]
fn closing_the_consumer_wakes_a_producer_waiting_for_room() {
    model(|| {
        let shared = ring(1);
        let consumer = {
            let consumer = ConsumerRing::new(shared.clone());
            thread::spawn(move || consumer.close())
        };
        let mut producer = ProducerRing::new(shared);
        producer.try_push(&[1]).unwrap();
        assert!(matches!(
            blocking(&mut producer, |p| p.try_push(&[2])),
            Err(ChannelError::Closed)
        ));
        consumer.join().unwrap();
    });
}

#[test]
fn a_consumer_sleeping_on_its_doorbell_is_woken_for_every_message() {
    model(|| {
        let shared = ring(1);
        let producer = producer_thread(&shared, |producer| {
            for m in 1..=2u8 {
                blocking(producer, |p| p.try_push(&[m])).unwrap();
            }
        });
        let mut consumer = ConsumerRing::new(shared.clone());
        let mut out = [0u8; SLOT_SIZE];
        for m in 1..=2u8 {
            loop {
                match consumer.try_pop(&mut out) {
                    Ok(_) => break,
                    Err(ChannelError::Empty) => {
                        if consumer.arm().unwrap() == Readiness::NotYet {
                            shared.0.doorbell.wait_and_take();
                        }
                        consumer.disarm();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
            assert_eq!(out[0], m);
        }
        producer.join().unwrap();
    });
}
