//! A traditional window server, the baseline of seed 003's experiments (in
//! the manner of Nano-X): one thread, clients on Unix sockets, each request
//! and its frame's rows read through the socket (a copy through the
//! kernel), served in the order they arrive, no reservation, no agreement.
//!
//! It speaks the render service's hello and records ([`super::wire`]) so
//! that the same clients and players drive both. It owns its screen and its
//! clients; it never reserves anything (where it runs is its setup hook's
//! business, e.g. a core of its own as the seed's cpuset gave Nano-X).

use super::screen::{composite, Geometry, Rect, Screen};
use super::wire::{
    ClientStatus, Control, Done, Draw, First, Hello, Reply, ServerKind, Status, Welcome,
};
use crate::control::{self, Policy, ThreadHook};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tessera_sys::clock::thread_cpu_ns;
use tessera_sys::event::{Epoll, Trigger};
use tessera_sys::ipc::{peer_credentials, PeerCredentials};

/// How long a client may take to send a whole request and its rows.
const PATIENCE: Duration = Duration::from_secs(2);

/// How the baseline runs.
#[derive(Clone)]
pub struct BaselineConfig {
    pub socket: PathBuf,
    pub screen_width: usize,
    pub screen_height: usize,
    pub scale: f32,
    pub opacity: u16,
    pub policy: Policy,
    /// Runs on the serving thread first (pin it to a core, …).
    pub setup: Option<ThreadHook>,
}

/// The running baseline; stopping (or dropping) it ends its thread and
/// removes its socket.
pub struct BaselineServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Option<()>>>,
    socket: PathBuf,
}

impl BaselineServer {
    pub fn start(config: BaselineConfig) -> Result<BaselineServer, super::service::ServerError> {
        use super::service::ServerError;
        super::service::check_scale(config.scale)?;
        let listener = control::listen(&config.socket).map_err(|source| ServerError::Listen {
            path: config.socket.clone(),
            source,
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let server = Baseline {
            screen: Screen::new(config.screen_width, config.screen_height),
            listener,
            clients: Vec::new(),
            next_client: 1,
            stop: stop.clone(),
            config: config.clone(),
        };
        let thread = control::spawn_after_setup("render-baseline", config.setup, move || {
            control::run_control(&mut { server })
        })
        .map_err(ServerError::Task)?;
        Ok(BaselineServer {
            stop,
            thread: Some(thread),
            socket: config.socket,
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

impl Drop for BaselineServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// A client of the baseline.
struct Client {
    stream: UnixStream,
    caller: PeerCredentials,
    id: u32,
    hello: Hello,
    geometry: Geometry,
    vfb: Vec<u8>,
    action_cpu_ns: u64,
    actions: u64,
    late: u64,
}

struct Baseline {
    screen: Screen,
    listener: UnixListener,
    clients: Vec<Option<Client>>,
    next_client: u32,
    stop: Arc<AtomicBool>,
    config: BaselineConfig,
}

impl control::ControlLoop for Baseline {
    fn listener(&self) -> &UnixListener {
        &self.listener
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn accept(&mut self, epoll: &Epoll) {
        Baseline::accept(self, epoll);
    }

    fn serve(&mut self, index: usize) {
        if self.serve_request(index).is_err() {
            self.clients[index] = None;
        }
    }
}

impl Baseline {
    fn accept(&mut self, epoll: &Epoll) {
        while let Ok((stream, _)) = self.listener.accept() {
            let Ok(caller) = peer_credentials(&stream) else {
                continue;
            };
            if stream.set_nonblocking(false).is_err()
                || stream.set_read_timeout(Some(PATIENCE)).is_err()
            {
                continue;
            }
            if let Err(reason) = (self.config.policy)(&caller) {
                let _ = control::send(&stream, &Welcome::Refused { reason });
                continue;
            }
            match control::receive::<First>(&stream) {
                Ok(First::Hello(hello)) => self.welcome(epoll, stream, caller, hello),
                Ok(First::Control(Control::Status)) => {
                    let _ = control::send(&stream, &Reply::Status(self.status()));
                }
                Ok(First::Control(Control::Snapshot)) => {
                    let _ = super::service::send_snapshot(&stream, &self.screen);
                }
                Ok(First::Control(_)) => {
                    let reason = "the baseline server makes no agreements".to_string();
                    let _ = control::send(&stream, &Reply::Refused { reason });
                }
                Err(e) => {
                    let reason = format!("{e}; fix: speak the render service's protocol");
                    let _ = control::send(&stream, &Welcome::Refused { reason });
                }
            }
        }
    }

    fn welcome(
        &mut self,
        epoll: &Epoll,
        stream: UnixStream,
        caller: PeerCredentials,
        hello: Hello,
    ) {
        if let Err(reason) = hello.check() {
            let _ = control::send(&stream, &Welcome::Refused { reason });
            return;
        }
        let count = self.clients.iter().flatten().count();
        let window = hello.window.unwrap_or_else(|| {
            let side = |n: usize| ((n as f32 * self.config.scale) as usize).max(1);
            Rect::tile(
                count,
                side(hello.width),
                side(hello.height),
                (self.screen.width(), self.screen.height()),
            )
        });
        let id = self.next_client;
        self.next_client += 1;
        let welcome = Welcome::Welcome {
            server: ServerKind::Baseline,
            client: id,
            window,
        };
        if control::send(&stream, &welcome).is_err() {
            return;
        }
        let index = control::free_slot(&mut self.clients);
        if epoll
            .add(stream.as_fd(), index as u64, Trigger::Level)
            .is_err()
        {
            return;
        }
        self.clients[index] = Some(Client {
            geometry: Geometry::new(hello.width, hello.height, window, &self.screen),
            vfb: vec![0; hello.frame_bytes()],
            stream,
            caller,
            id,
            hello,
            action_cpu_ns: 0,
            actions: 0,
            late: 0,
        });
    }

    /// One request of client `index` and its rows, served now; an error
    /// ends the client (it left, or broke the protocol).
    fn serve_request(&mut self, index: usize) -> std::io::Result<()> {
        let Some(client) = self.clients.get_mut(index).and_then(Option::as_mut) else {
            return Ok(());
        };
        let start = thread_cpu_ns();
        let mut record = [0u8; Draw::SIZE];
        (&client.stream).read_exact(&mut record)?;
        let draw = Draw::decode(&record)
            .filter(|d| d.fits(&client.hello))
            .ok_or_else(|| std::io::Error::other("a malformed request"))?;
        let stride = client.hello.width * super::BYTES_PER_PIXEL;
        let first = usize::from(draw.first_row) * stride;
        let len = usize::from(draw.rows) * stride;
        (&client.stream).read_exact(&mut client.vfb[first..first + len])?;
        super::tasks::spin_cpu(start, u64::from(draw.spin_ns));
        if draw.ends_action() {
            composite(
                &client.vfb,
                &client.geometry,
                &self.screen,
                self.config.opacity,
            );
        }
        client.action_cpu_ns += thread_cpu_ns() - start;
        if !draw.ends_action() {
            return Ok(());
        }
        let done = Done::shown_now(&draw, std::mem::take(&mut client.action_cpu_ns));
        client.actions += 1;
        client.late += u64::from(done.late());
        let mut out = [0u8; Done::SIZE];
        done.encode(&mut out);
        (&client.stream).write_all(&out)
    }

    fn status(&self) -> Status {
        Status {
            server: ServerKind::Baseline,
            pid: std::process::id(),
            screen: (self.screen.width(), self.screen.height()),
            capacity_cores: 0.0,
            committed_cores: 0.0,
            tasks: vec!["one thread, arrival order, no reservation".into()],
            clients: self
                .clients
                .iter()
                .flatten()
                .map(|c| ClientStatus {
                    client: c.id,
                    name: c.hello.name.clone(),
                    pid: c.caller.pid,
                    share: "arrival order".into(),
                    window: c.geometry.rect,
                    actions: c.actions,
                    probes: 0,
                    late: c.late,
                    throttled: 0,
                    malformed: 0,
                })
                .collect(),
        }
    }
}
