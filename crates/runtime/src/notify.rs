//! Miss and overrun notifications: workers push fixed-size notices into one
//! SPSC queue each (`rtrb`) and wake a non-real-time notification thread,
//! which calls the application's [`Notifications`].
//!
//! This module owns that thread and the queues. A worker must never wait for
//! it: when a queue is full the notice is dropped and counted (the task's
//! statistics still count the miss).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tessera_sys::futex;

use crate::task::TaskId;

/// A job that missed its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Miss {
    pub task: TaskId,
    pub job: u64,
    pub release_ns: u64,
    pub deadline_ns: u64,
    /// How far past the deadline: at completion for a late job, at the
    /// moment of the drop for a dropped one.
    pub lateness: Duration,
    /// The job never ran: its deadline passed before it could start.
    pub dropped: bool,
}

/// A worker's reservation ran out of runtime (SIGXCPU from
/// `SCHED_FLAG_DL_OVERRUN`), noticed after a job or while idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overrun {
    pub worker: usize,
    /// The job that was running when the overrun was noticed, if any.
    pub task: Option<TaskId>,
    pub job: Option<u64>,
    /// Overrun signals this worker received since the last report.
    pub signals: u64,
}

/// The application's callbacks. They run on the notification thread, never
/// on a worker, so they may allocate, lock and print.
pub trait Notifications: Send + 'static {
    fn on_miss(&mut self, _miss: &Miss) {}
    fn on_overrun(&mut self, _overrun: &Overrun) {}
}

/// Callbacks that ignore everything.
pub struct NoNotifications;
impl Notifications for NoNotifications {}

#[derive(Debug, Clone, Copy)]
pub(crate) enum Notice {
    Miss(Miss),
    Overrun(Overrun),
}

#[derive(Default)]
struct Shared {
    /// Bumped after every push; the notification thread waits on it.
    seq: AtomicU32,
    stop: AtomicBool,
    dropped: AtomicU64,
}

/// A worker's end: never blocks, never allocates.
pub(crate) struct Notifier {
    queue: rtrb::Producer<Notice>,
    shared: Arc<Shared>,
}

impl Notifier {
    pub fn send(&mut self, notice: Notice) {
        if self.queue.push(notice).is_err() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.shared.seq.fetch_add(1, Ordering::Release);
        futex::wake(&self.shared.seq, 1);
    }
}

/// The control thread's end.
pub(crate) struct NotifyThread {
    shared: Arc<Shared>,
    thread: JoinHandle<()>,
}

/// How long the notification thread sleeps between checks of its stop flag.
const POLL: Duration = Duration::from_millis(50);

/// Starts the notification thread with one queue of `capacity` per worker.
pub(crate) fn start(
    mut callbacks: Box<dyn Notifications>,
    workers: usize,
    capacity: usize,
) -> std::io::Result<(Vec<Notifier>, NotifyThread)> {
    let shared = Arc::new(Shared::default());
    let (producers, mut consumers): (Vec<_>, Vec<_>) = (0..workers)
        .map(|_| rtrb::RingBuffer::new(capacity))
        .unzip();
    let delivery_shared = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("tessera-rt-notify".into())
        .spawn(move || deliver(&mut *callbacks, &mut consumers, &delivery_shared))?;
    let notifiers = producers
        .into_iter()
        .map(|queue| Notifier {
            queue,
            shared: Arc::clone(&shared),
        })
        .collect();
    Ok((notifiers, NotifyThread { shared, thread }))
}

fn deliver(
    callbacks: &mut dyn Notifications,
    queues: &mut [rtrb::Consumer<Notice>],
    shared: &Shared,
) {
    loop {
        let seen = shared.seq.load(Ordering::Acquire);
        // Read the flag before draining: notices pushed before stop() are
        // then all delivered by this last drain.
        let stopping = shared.stop.load(Ordering::Acquire);
        for queue in queues.iter_mut() {
            while let Ok(notice) = queue.pop() {
                match notice {
                    Notice::Miss(m) => callbacks.on_miss(&m),
                    Notice::Overrun(o) => callbacks.on_overrun(&o),
                }
            }
        }
        if stopping {
            return;
        }
        futex::wait(&shared.seq, seen, Some(POLL));
    }
}

impl NotifyThread {
    /// Delivers what is queued, stops the thread, and returns how many
    /// notices were dropped because the queues were full.
    pub fn stop(self) -> Result<u64, ()> {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.seq.fetch_add(1, Ordering::Release);
        futex::wake_all(&self.shared.seq);
        self.thread.join().map_err(drop)?;
        Ok(self.shared.dropped.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    struct Forward(mpsc::Sender<Miss>);
    impl Notifications for Forward {
        fn on_miss(&mut self, miss: &Miss) {
            let _ = self.0.send(*miss);
        }
    }

    fn miss(job: u64) -> Miss {
        Miss {
            task: TaskId(0),
            job,
            release_ns: 0,
            deadline_ns: 0,
            lateness: Duration::ZERO,
            dropped: true,
        }
    }

    #[test]
    fn every_queued_notice_is_delivered_before_stop_returns() {
        let (tx, rx) = mpsc::channel();
        let (mut notifiers, thread) = start(Box::new(Forward(tx)), 2, 8).unwrap();
        notifiers[0].send(Notice::Miss(miss(1)));
        notifiers[1].send(Notice::Miss(miss(2)));
        assert_eq!(thread.stop(), Ok(0));
        let mut jobs: Vec<u64> = rx.try_iter().map(|m| m.job).collect();
        jobs.sort_unstable();
        assert_eq!(jobs, vec![1, 2]);
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let (tx, _rx) = mpsc::channel();
        let (mut notifiers, thread) = start(Box::new(Forward(tx)), 1, 1).unwrap();
        // With the notification thread stopped, nothing drains the queue.
        let shared = Arc::clone(&notifiers[0].shared);
        thread.stop().unwrap();
        notifiers[0].send(Notice::Miss(miss(1)));
        notifiers[0].send(Notice::Miss(miss(2)));
        assert_eq!(shared.dropped.load(Ordering::Relaxed), 1);
    }
}
