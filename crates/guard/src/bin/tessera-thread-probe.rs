//! `tessera-thread-probe`: a tiny program that behaves as audio programs do,
//! for testing and showing how tessera follows unmodified programs. It
//! starts `--threads N` threads; after `--delay-ms`, the first `--fifo K` of
//! them make themselves SCHED_FIFO (as JACK2, PipeWire, ALSA and RtAudio
//! code do with pthread_setschedparam); each thread then reports, as a line
//! on stdout, the policy it reads back for itself once it was moved (or
//! after `--report-after-ms`). With `--retakes N` those threads then set
//! SCHED_FIFO again N times, as a program that re-sets its policy does,
//! reporting each time. With `--busy PCT` the threads that stay at a normal
//! policy work PCT % of every 10 ms (a network or disk thread of an audio
//! program) instead of sleeping. It exits when stdin closes or after
//! `--seconds`, with `--exit-code`, each thread saying the CPU time it got.
//!
//! Lines: `probe pid=P`, `thread index=I tid=T name=N`, `fifo index=I
//! tid=T ok|error=E`, `policy index=I tid=T name=N rt=true|false
//! policy=POLICY` (again after each `retake index=I tid=T`), `cpu index=I
//! tid=T ms=M` (its CPU time over its life), `exit`.
//!
//! It changes only its own threads' scheduling, through tessera-sys.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_sys::sched::{self, Policy};

struct Options {
    threads: usize,
    fifo: usize,
    priority: u32,
    delay: Duration,
    report_after: Duration,
    seconds: f64,
    exit_code: i32,
    retakes: usize,
    busy_pct: f64,
}

const USAGE: &str = "usage: tessera-thread-probe [--threads N] [--fifo K] [--priority P] \
[--delay-ms D] [--report-after-ms R] [--retakes N] [--busy PCT] [--seconds S] [--exit-code C]\n\
e.g. tessera cell exec synth -- tessera-thread-probe --threads 3 --fifo 1";

fn parse() -> Result<Options, String> {
    let mut o = Options {
        threads: 3,
        fifo: 1,
        priority: 10,
        delay: Duration::from_millis(200),
        report_after: Duration::from_millis(500),
        seconds: 30.0,
        exit_code: 0,
        retakes: 0,
        busy_pct: 0.0,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    for pair in args.chunks(2) {
        let [flag, value] = pair else {
            return Err(format!("{} needs a value", pair[0]));
        };
        let number = |v: &str| v.parse::<f64>().map_err(|e| format!("{flag} {v}: {e}"));
        let ms = |v: &str| number(v).map(|n| Duration::from_secs_f64(n.max(0.0) / 1000.0));
        match flag.as_str() {
            "--threads" => o.threads = number(value)? as usize,
            "--fifo" => o.fifo = number(value)? as usize,
            "--priority" => o.priority = number(value)? as u32,
            "--delay-ms" => o.delay = ms(value)?,
            "--report-after-ms" => o.report_after = ms(value)?,
            "--seconds" => o.seconds = number(value)?,
            "--exit-code" => o.exit_code = number(value)? as i32,
            "--retakes" => o.retakes = number(value)? as usize,
            "--busy" => o.busy_pct = number(value)?.clamp(0.0, 100.0),
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(o)
}

/// One probe thread: announce, maybe become FIFO, report the policy it
/// reads back once moved, then wait for the end.
fn thread_body(index: usize, fifo: bool, o: &Options, start: Instant, stop: &AtomicBool) {
    let tid = tessera_sys::proc::current_tid();
    let name = format!("probe-{index}");
    println!("thread index={index} tid={tid} name={name}");
    sleep_until(start + o.delay, stop);
    let fifo = fifo.then_some(Policy::Fifo {
        priority: o.priority,
    });
    let set = fifo.and_then(|p| match sched::set_policy(0, &p) {
        Ok(()) => {
            println!("fifo index={index} tid={tid} ok");
            Some(p)
        }
        Err(e) => {
            println!("fifo index={index} tid={tid} error={e}");
            None
        }
    });
    report(index, tid, &name, set, o, stop);
    for _ in 0..o.retakes {
        let Some(p) = set else { break };
        // As a program that re-sets its own policy: takes a reservation back.
        if sched::set_policy(0, &p).is_ok() {
            println!("retake index={index} tid={tid}");
            report(index, tid, &name, set, o, stop);
        }
    }
    match set {
        None if o.busy_pct > 0.0 => work(o.busy_pct, stop),
        _ => {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let pid = tessera_sys::proc::current_pid();
    let cpu_ns = tessera_sys::proc::thread_cpu_ns(pid, tid).unwrap_or(0);
    println!("cpu index={index} tid={tid} ms={}", cpu_ns / 1_000_000);
}

/// Works `pct` % of every 10 ms period, by the wall clock, until stopped:
/// a thread held off the CPU simply does less.
fn work(pct: f64, stop: &AtomicBool) {
    const PERIOD: Duration = Duration::from_millis(10);
    let busy = PERIOD.mul_f64(pct / 100.0);
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let until = next + busy;
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        next += PERIOD;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}

/// Waits until someone moved the thread off the policy it `set` and the
/// new one held for 50 ms (a move passes through other policies), or the
/// report time is up; then prints the policy it reads back for itself.
fn report(index: usize, tid: i32, name: &str, set: Option<Policy>, o: &Options, stop: &AtomicBool) {
    const SETTLED: Duration = Duration::from_millis(50);
    let report_at = Instant::now() + o.report_after;
    let mut last = (sched::get_policy(0).unwrap_or(Policy::Idle), Instant::now());
    let policy = loop {
        let now = sched::get_policy(0).unwrap_or(Policy::Idle);
        if now != last.0 {
            last = (now, Instant::now());
        }
        let moved = set.is_some_and(|p| p != now) && last.1.elapsed() >= SETTLED;
        if moved || Instant::now() >= report_at || stop.load(Ordering::Relaxed) {
            break now;
        }
        // A thread that set a policy watches closely for the move; one that
        // did not stays idle (polling every 2 ms made it look busy).
        let poll = if set.is_some() { 2 } else { 20 };
        std::thread::sleep(Duration::from_millis(poll));
    };
    println!(
        "policy index={index} tid={tid} name={name} rt={} policy={policy}",
        policy.is_real_time()
    );
}

fn sleep_until(t: Instant, stop: &AtomicBool) {
    while Instant::now() < t && !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(2).min(t - Instant::now()));
    }
}

fn main() {
    let o = match parse() {
        Ok(o) => Arc::new(o),
        Err(e) => {
            eprintln!("tessera-thread-probe: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    println!("probe pid={}", std::process::id());
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut handles = Vec::new();
    for index in 0..o.threads {
        let (o, stop) = (Arc::clone(&o), Arc::clone(&stop));
        let spawned = std::thread::Builder::new()
            .name(format!("probe-{index}"))
            .spawn(move || thread_body(index, index < o.fifo, &o, start, &stop));
        match spawned {
            Ok(h) => handles.push(h),
            Err(e) => eprintln!("tessera-thread-probe: thread {index}: {e}"),
        }
    }
    let stdin_closed = Arc::new(AtomicBool::new(false));
    let closed = Arc::clone(&stdin_closed);
    let _ = std::thread::Builder::new()
        .name("probe-stdin".into())
        .spawn(move || {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            closed.store(true, Ordering::Relaxed);
        });
    let end = start + Duration::from_secs_f64(o.seconds.max(0.0));
    while !stdin_closed.load(Ordering::Relaxed) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    println!("exit");
    std::process::exit(o.exit_code);
}
