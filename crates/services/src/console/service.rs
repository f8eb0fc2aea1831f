//! The console service as a process's job (seed 000 §2): an acceptor
//! thread that admits writers on a Unix socket (SO_PEERCRED against the
//! service's policy) and hands each a channel of its own, and the console
//! thread that writes every writer's lines out after its name and pid; and
//! [`connect`], a writer's way in.
//!
//! A writer asks with one control frame (its name, its ring's length) and
//! is granted or refused in one; on a grant the service creates the channel
//! and hands its producing end over the same socket, which then closes: the
//! channel is the whole conversation. A writer that dies is noticed by its
//! pidfd ([`super::WriterEnd::Died`]); a service that dies leaves its
//! writers dropping lines, never waiting.
//!
//! It owns the socket, the admission of writers and the threads. It never
//! decides where the console thread runs (its setup hook does), and its
//! acceptor never touches a channel once handed to the console thread.

use super::reader::{Reader, Source, Style};
use super::writer::{ConsoleWriter, SLOT};
use super::{Console, ConsoleError, ConsoleReport};
use crate::control::{self, Policy, ThreadHook};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_broker::Session;
use tessera_channel::{Channel, Producer};
use tessera_sys::event::{Epoll, Readiness, Trigger};
use tessera_sys::ipc::peer_credentials;

/// Lines a writer's ring holds when it [`connect`]s: 10 s of 100 lines a
/// second, should the console stall.
pub const WRITER_LINES: usize = 1024;
/// The most lines a writer's ring may hold.
pub const MAX_WRITER_LINES: usize = 1 << 16;
/// The most writers the service holds open at once.
pub const MAX_WRITERS: usize = 256;
/// The longest writer name, in bytes.
pub const MAX_WRITER_NAME: usize = 64;
/// How long a writer waits for the service's answer.
const PATIENCE: Duration = Duration::from_secs(5);
/// How long the service waits for a writer's request.
const FRAME_PATIENCE: Duration = Duration::from_secs(2);

/// A writer's request.
#[derive(Debug, Serialize, Deserialize)]
struct Hello {
    /// What its lines are prefixed with.
    writer: String,
    /// Its ring's length: a power of two up to [`MAX_WRITER_LINES`].
    lines: usize,
}

/// The service's answer; on a grant, the channel's hand-over follows.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Answer {
    Granted,
    Refused { reason: String },
}

/// Connects a writer named `writer` to the console service `service`: the
/// path of its socket (anything with a '/'), or the name it registered with
/// the broker, which checks this process against the service's policy first
/// (the service checks again). Its lines appear as `writer[pid]: line`.
pub fn connect(service: &str, writer: &str) -> Result<ConsoleWriter, ConsoleError> {
    let stream = match service.contains('/') {
        true => UnixStream::connect(service).map_err(|source| ConsoleError::Unreachable {
            path: service.into(),
            source,
        })?,
        false => Session::connect()?.open_service(service)?,
    };
    stream
        .set_read_timeout(Some(PATIENCE))
        .map_err(|e| ConsoleError::Wire(e.into()))?;
    let hello = Hello {
        writer: writer.into(),
        lines: WRITER_LINES,
    };
    // A service that refuses the caller says so before it reads: its answer
    // is worth more than a failed send.
    let sent = control::send(&stream, &hello);
    match control::receive::<Answer>(&stream) {
        Ok(Answer::Granted) => Ok(ConsoleWriter::new(Producer::open_from(&stream)?)),
        Ok(Answer::Refused { reason }) => Err(ConsoleError::Refused(reason)),
        Err(e) => Err(sent.err().unwrap_or(e).into()),
    }
}

/// How the service runs.
pub struct ServiceConfig {
    /// Where writers connect.
    pub socket: PathBuf,
    /// Where the lines go.
    pub sink: Box<dyn Write + Send>,
    /// The console thread's setup (join the console's cell).
    pub setup: Option<ThreadHook>,
    /// Who may write.
    pub policy: Policy,
}

/// A running console service; stopping (or dropping) it ends its threads
/// and removes its socket.
pub struct ConsoleService {
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<Option<()>>>,
    console: Option<Console>,
    socket: PathBuf,
}

impl ConsoleService {
    /// Starts the console thread (after its setup), binds the socket and
    /// starts the acceptor.
    pub fn start(config: ServiceConfig) -> Result<ConsoleService, ConsoleError> {
        let reader = Reader::new(config.sink, Style::Named, Vec::new());
        let ended = reader.ended_writers();
        let (newcomers, arrivals) = std::sync::mpsc::channel();
        // Dropped on an error below, it ends its thread.
        let console = Console::start(reader, config.setup, Some(arrivals))?;
        let listener = control::listen(&config.socket).map_err(|source| ConsoleError::Listen {
            path: config.socket.clone(),
            source,
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let mut service = ConsoleService {
            stop: Arc::clone(&stop),
            acceptor: None,
            console: Some(console),
            socket: config.socket,
        };
        let acceptor = Acceptor {
            listener,
            policy: config.policy,
            newcomers,
            handed: 0,
            ended,
            stop,
        };
        service.acceptor = Some(
            control::spawn_after_setup("tessera-con-acc", None, move || acceptor.run())
                .map_err(ConsoleError::Thread)?,
        );
        Ok(service)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Takes no more writers, writes out what the writers queued, and
    /// reports every writer.
    pub fn stop(mut self) -> Result<ConsoleReport, ConsoleError> {
        self.halt()
    }

    fn halt(&mut self) -> Result<ConsoleReport, ConsoleError> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let _ = std::fs::remove_file(&self.socket);
        match self.console.take() {
            // Every writer the acceptor handed over is taken by the
            // console's last pass.
            Some(console) => console.stop().map_err(ConsoleError::Thread),
            None => Ok(ConsoleReport::default()),
        }
    }
}

impl Drop for ConsoleService {
    fn drop(&mut self) {
        let _ = self.halt();
    }
}

/// The acceptor thread: admits writers and hands their channels over.
struct Acceptor {
    listener: UnixListener,
    policy: Policy,
    newcomers: Sender<Source>,
    /// Writers handed to the console thread so far.
    handed: usize,
    /// Writers whose channels the console thread has closed so far.
    ended: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Acceptor {
    fn run(mut self) {
        let Ok(epoll) = Epoll::new() else {
            return;
        };
        if epoll.add(self.listener.as_fd(), 0, Trigger::Level).is_err() {
            return;
        }
        let mut ready = [Readiness::EMPTY; 1];
        while !self.stop.load(Ordering::Relaxed) {
            if !matches!(epoll.wait(&mut ready, Duration::from_millis(100)), Ok(n) if n > 0) {
                continue;
            }
            while let Ok((stream, _)) = self.listener.accept() {
                match self.admit(&stream) {
                    Ok(source) => {
                        self.handed += 1;
                        // The console thread outlives this one.
                        let _ = self.newcomers.send(source);
                    }
                    Err(Failure::Refused) => {}
                    Err(Failure::After(why)) => {
                        eprintln!(
                            "tessera serve console: a writer's channel was not handed over: {why}"
                        )
                    }
                }
            }
        }
    }

    /// Who connected and what they ask, checked; the grant and the channel.
    fn admit(&self, stream: &UnixStream) -> Result<Source, Failure> {
        let refuse = |reason: String| {
            let _ = control::send(stream, &Answer::Refused { reason });
            Failure::Refused
        };
        let caller = peer_credentials(stream).map_err(|e| Failure::After(e.to_string()))?;
        (self.policy)(&caller).map_err(refuse)?;
        stream
            .set_read_timeout(Some(FRAME_PATIENCE))
            .map_err(|e| Failure::After(e.to_string()))?;
        let hello = match control::receive::<Hello>(stream) {
            Ok(hello) => hello,
            Err(control::WireError::Malformed(e)) => {
                return Err(refuse(format!(
                    "a malformed request ({e}); fix: connect through \
                     tessera_services::console::connect"
                )))
            }
            Err(e) => return Err(Failure::After(e.to_string())),
        };
        check(&hello).map_err(refuse)?;
        let open = self.handed - self.ended.load(Ordering::Relaxed);
        if open >= MAX_WRITERS {
            return Err(refuse(format!(
                "the console holds {MAX_WRITERS} writers already; fix: let one go, or start \
                 another console service (`tessera serve console --name NAME`)"
            )));
        }
        let after = |e: &dyn std::fmt::Display| Failure::After(e.to_string());
        control::send(stream, &Answer::Granted).map_err(|e| after(&e))?;
        let channel = Channel::create(&format!("console.{}", self.handed + 1), SLOT, hello.lines)
            .and_then(|c| c.hand_over_producer(stream))
            .map_err(|e| after(&e))?;
        Ok(Source::new(channel, hello.writer))
    }
}

/// Why a connection got no channel.
enum Failure {
    /// The writer was told why.
    Refused,
    /// After the grant, or before a request could be read: the connection
    /// ends, the writer's `connect` fails on it.
    After(String),
}

/// A request's name and ring, or what is wrong with them and the fix.
fn check(hello: &Hello) -> Result<(), String> {
    let name = &hello.writer;
    if name.is_empty() || name.len() > MAX_WRITER_NAME || name.chars().any(char::is_control) {
        return Err(format!(
            "writer name {name:?}; fix: name the writer with 1 to {MAX_WRITER_NAME} bytes \
             without control characters"
        ));
    }
    if !hello.lines.is_power_of_two() || hello.lines > MAX_WRITER_LINES {
        return Err(format!(
            "a ring of {} lines; fix: ask for a power of two up to {MAX_WRITER_LINES}",
            hello.lines
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::{WriterEnd, WriterReport};
    use std::sync::Mutex;
    use std::time::Instant;

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn start(test: &str, policy: Policy) -> (ConsoleService, Shared) {
        let socket = std::env::temp_dir().join(format!(
            "tessera-console-{}-{test}.sock",
            std::process::id()
        ));
        let sink = Shared::default();
        let service = ConsoleService::start(ServiceConfig {
            socket,
            sink: Box::new(sink.clone()),
            setup: None,
            policy,
        })
        .unwrap();
        (service, sink)
    }

    fn path(service: &ConsoleService) -> &str {
        service.socket().to_str().unwrap()
    }

    #[test]
    fn writers_lines_arrive_named_in_order_and_their_ends_are_reported() {
        let (service, sink) = start("named", Arc::new(|_| Ok(())));
        let mut a = connect(path(&service), "alpha").unwrap();
        let mut b = connect(path(&service), "beta").unwrap();
        assert_eq!(a.console_pid(), std::process::id() as i32);
        for i in 0..50 {
            assert!(a.line(format_args!("a {i}")));
            assert!(b.line(format_args!("b {i}")));
        }
        drop(a);
        let give_up = Instant::now() + Duration::from_secs(10);
        let text = || String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        while !text().contains("alpha") || !text().contains("closed") {
            assert!(Instant::now() < give_up, "{}", text());
            std::thread::sleep(Duration::from_millis(10));
        }
        let report = service.stop().unwrap();
        let pid = std::process::id() as i32;
        let writer = |name: &str, end| WriterReport {
            name: name.into(),
            pid,
            lines: 50,
            dropped: 0,
            end,
        };
        assert_eq!(
            report.writers,
            vec![
                writer("alpha", WriterEnd::Closed),
                writer("beta", WriterEnd::Open)
            ]
        );
        let text = text();
        let alpha: Vec<&str> = text.lines().filter(|l| l.starts_with("alpha[")).collect();
        assert_eq!(alpha.len(), 50);
        assert_eq!(alpha[7], format!("alpha[{pid}]: a 7"));
        assert!(text.contains(&format!(
            "console: alpha[{pid}] closed: 50 lines, 0 dropped"
        )));
        // Gone: the writer drops, and says so, without waiting.
        let start = Instant::now();
        for _ in 0..2 * WRITER_LINES {
            b.line(format_args!("after"));
        }
        assert!(start.elapsed() < Duration::from_secs(1));
        assert_eq!(b.dropped(), WRITER_LINES as u64);
    }

    #[test]
    fn refusals_say_why() {
        let (service, _) = start("refused", Arc::new(|_| Err("not you".into())));
        match connect(path(&service), "w") {
            Err(ConsoleError::Refused(reason)) => assert_eq!(reason, "not you"),
            other => panic!("{:?}", other.err()),
        }
        let (service, _) = start("bad-name", Arc::new(|_| Ok(())));
        match connect(path(&service), "two\nlines") {
            Err(ConsoleError::Refused(reason)) => assert!(reason.contains("fix:"), "{reason}"),
            other => panic!("{:?}", other.err()),
        }
        assert!(matches!(
            connect("/nonexistent/console.sock", "w"),
            Err(ConsoleError::Unreachable { .. })
        ));
    }
}
