//! Rendering tasks (seed 003 §3.2): a thread that takes a client's draw
//! requests in order, copies the rows from the client's frame pool (shared
//! memory) into the client's virtual framebuffer, does the request's
//! rendering work, and at the end of an action clips the framebuffer into
//! the client's window on the screen and tells the client (t_fb).
//!
//! A client with an SLA has a task of its own, in its own reservation; the
//! best-effort share and the probing share are tasks that serve several
//! clients. The front-end ([`super::front`]) sends a client's requests to
//! one task at a time, so a client's [`Lane`] canvas is never wanted by two
//! tasks at once: its lock is never contended (and never taken by a thread
//! that is not a task). A task never allocates, prints or blocks but on its
//! wake-up word; it never picks its own scheduling (its setup hook does).

use super::screen::{composite, Geometry, Screen};
use super::wake::Wake;
use super::wire::{Done, Draw, Hello};
use rtrb::{Consumer, Producer};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tessera_sys::clock::thread_cpu_ns;
use tessera_sys::event::EventFd;
use tessera_sys::shm::SharedMapping;

/// Longest sleep of a task between two looks at its stop flag.
pub const TASK_POLL: Duration = Duration::from_millis(50);
/// Requests a task's queue holds.
pub const TASK_QUEUE: usize = 1024;

/// What a task touches of one client while it serves an action.
pub struct Canvas {
    /// The virtual framebuffer: the client's frame as drawn so far.
    vfb: Box<[u8]>,
    /// Where finished actions are reported to the client.
    done: tessera_channel::Producer,
    record: [u8; Done::SIZE],
    /// CPU time of the action being served so far.
    action_cpu_ns: u64,
}

/// Counters of one client, read by the status.
#[derive(Default)]
pub struct LaneCounters {
    pub actions: AtomicU64,
    pub probes: AtomicU64,
    pub late: AtomicU64,
    pub throttled: AtomicU64,
    pub malformed: AtomicU64,
}

/// One client as the serving threads know it.
pub struct Lane {
    pub client: u32,
    pub hello: Hello,
    pub geometry: Geometry,
    pool: SharedMapping,
    canvas: Mutex<Canvas>,
    pub counters: LaneCounters,
    /// Actions finished since the front-end last looked.
    pub completed: AtomicU32,
}

impl Lane {
    /// A client whose frames are in `pool` (checked to hold every slot)
    /// and whose finished actions go to `done`.
    pub fn new(
        client: u32,
        hello: Hello,
        geometry: Geometry,
        pool: SharedMapping,
        done: tessera_channel::Producer,
    ) -> Result<Lane, String> {
        let needed = hello.frame_bytes() * hello.slots;
        if pool.len() < needed {
            return Err(format!(
                "a frame pool of {} bytes, {needed} needed for {} slots of {}×{} (fix: size \
                 the memfd as slots × width × height × 3)",
                pool.len(),
                hello.slots,
                hello.width,
                hello.height
            ));
        }
        Ok(Lane {
            canvas: Mutex::new(Canvas {
                vfb: vec![0; hello.frame_bytes()].into_boxed_slice(),
                done,
                record: [0; Done::SIZE],
                action_cpu_ns: 0,
            }),
            client,
            hello,
            geometry,
            pool,
            counters: LaneCounters::default(),
            completed: AtomicU32::new(0),
        })
    }
}

/// A request on its way to a task.
pub struct Job {
    pub lane: Arc<Lane>,
    pub draw: Draw,
}

/// A probe's measured cost, from the probing task to the control thread.
#[derive(Debug, Clone, Copy)]
pub struct ProbeCost {
    pub client: u32,
    pub kind: u8,
    pub cpu_ns: u64,
}

/// The front-end's end of a task: its queue and wake-up word.
pub struct TaskLink {
    queue: Producer<Job>,
    wake: Arc<Wake>,
}

impl TaskLink {
    /// Queues a job and wakes the task; gives the job back if the queue is
    /// full.
    pub fn send(&mut self, job: Job) -> Result<(), Job> {
        self.queue
            .push(job)
            .map_err(|rtrb::PushError::Full(job)| job)?;
        self.wake.notify_one();
        Ok(())
    }
}

/// What every task shares.
#[derive(Clone)]
pub struct TaskShared {
    pub screen: Arc<Screen>,
    pub opacity: u16,
    /// Rung when an action is done (the front-end counts it against the
    /// client's outstanding requests).
    pub front_bell: Arc<EventFd>,
}

/// A task before it runs.
pub struct Task {
    queue: Consumer<Job>,
    wake: Arc<Wake>,
    stop: Arc<AtomicBool>,
    shared: TaskShared,
    /// The probing task reports each action's cost here.
    probes: Option<Producer<ProbeCost>>,
}

/// The handle that stops a task.
#[derive(Clone)]
pub struct TaskStop {
    stop: Arc<AtomicBool>,
    wake: Arc<Wake>,
}

impl TaskStop {
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.wake.notify_all();
    }
}

/// A new task, its link and its stop handle.
pub fn task(shared: TaskShared, probes: Option<Producer<ProbeCost>>) -> (Task, TaskLink, TaskStop) {
    let (producer, consumer) = rtrb::RingBuffer::new(TASK_QUEUE);
    let wake = Arc::new(Wake::default());
    let stop = Arc::new(AtomicBool::new(false));
    let task = Task {
        queue: consumer,
        wake: wake.clone(),
        stop: stop.clone(),
        shared,
        probes,
    };
    let link = TaskLink {
        queue: producer,
        wake: wake.clone(),
    };
    (task, link, TaskStop { stop, wake })
}

impl Task {
    /// Serves until stopped.
    pub fn run(mut self) {
        let _real_time = tessera_rtguard::RtGuard::enter();
        while !self.stop.load(Ordering::Relaxed) {
            let seen = self.wake.seen();
            match self.queue.pop() {
                Ok(job) => self.serve(job),
                Err(_) => self.wake.sleep(seen, TASK_POLL),
            }
        }
    }

    fn serve(&mut self, job: Job) {
        let start = thread_cpu_ns();
        let lane = &job.lane;
        let draw = job.draw;
        // Uncontended: the front-end gives a client's requests to one task
        // at a time (module doc).
        let mut canvas = lane.canvas.lock().unwrap_or_else(|p| p.into_inner());
        let stride = lane.hello.width * super::BYTES_PER_PIXEL;
        let first = usize::from(draw.first_row) * stride;
        let len = usize::from(draw.rows) * stride;
        let offset = usize::from(draw.slot) * lane.hello.frame_bytes() + first;
        lane.pool
            .copy_out(offset, &mut canvas.vfb[first..first + len]);
        spin_cpu(start, u64::from(draw.spin_ns));
        if draw.ends_action() {
            composite(
                &canvas.vfb,
                &lane.geometry,
                &self.shared.screen,
                self.shared.opacity,
            );
        }
        // The action's cost includes its compositing: the reservation an
        // SLA is sized from must cover it.
        canvas.action_cpu_ns += thread_cpu_ns() - start;
        if draw.ends_action() {
            self.report(lane, &mut canvas, draw);
        }
    }

    /// The action is on the screen: tell the client, count it.
    fn report(&mut self, lane: &Lane, canvas: &mut Canvas, draw: Draw) {
        let done = Done::shown_now(&draw, std::mem::take(&mut canvas.action_cpu_ns));
        // Counted (and a probe's cost handed on) before the client hears of
        // the action: what it asks next must already see it.
        let counters = &lane.counters;
        counters.actions.fetch_add(1, Ordering::Relaxed);
        counters
            .late
            .fetch_add(u64::from(done.late()), Ordering::Relaxed);
        if draw.is_probe() {
            counters.probes.fetch_add(1, Ordering::Relaxed);
            if let Some(probes) = &mut self.probes {
                let _ = probes.push(ProbeCost {
                    client: lane.client,
                    kind: draw.kind,
                    cpu_ns: done.cpu_ns,
                });
            }
        }
        done.encode(&mut canvas.record);
        let Canvas {
            done: to_client,
            record,
            ..
        } = canvas;
        // A client that stopped reading (or died) loses its reports only.
        let _ = to_client.try_push(record.as_slice());
        lane.completed.fetch_add(1, Ordering::Release);
        self.shared.front_bell.signal();
    }
}

/// Works until `spin_ns` of this thread's CPU time have passed since
/// `start`: the seed's expensive rendering requests. Time spent preempted
/// does not count, so a request costs the same CPU however it is scheduled.
pub(super) fn spin_cpu(start: u64, spin_ns: u64) {
    if spin_ns == 0 {
        return;
    }
    let mut x = 0x9e37_79b9_u64;
    while thread_cpu_ns().saturating_sub(start) < spin_ns {
        for _ in 0..256 {
            x = std::hint::black_box(x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1));
        }
    }
}
