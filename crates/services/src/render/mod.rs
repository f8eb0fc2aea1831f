//! The render (GUI) services: seed 000 §4.1's in-process compositor and
//! seed 003's render service as a process of its own.
//!
//! - [`screen`]: the framebuffer, windows, compositing and PNG snapshots;
//! - [`compositor`]: the in-process compositor of the music demo's Cell F
//!   (clients registered before it starts, front-end EDF among them);
//! - [`service`]: the render service process's control thread — clients,
//!   their pools and channels, SLAs and their reservations; `front`: the
//!   front-end task that enforces SLAs and hands requests out earliest
//!   deadline first; `tasks`: the rendering tasks;
//! - [`baseline`]: a traditional single-threaded server (Nano-X's manner),
//!   for comparison;
//! - [`wire`]: hello, control frames and the channel records;
//! - [`client`]: the client library (both servers);
//! - [`wake`]: a serving thread's wake-up word.

pub mod baseline;
pub mod client;
pub mod compositor;
mod front;
pub mod host;
pub mod screen;
pub mod service;
mod tasks;
pub mod wake;
pub mod wire;

pub use compositor::{
    ClientReport, ClientSpec, FrameSample, Render, RenderClient, RenderConfig, RenderError,
    RenderReport, RenderService, Submit, ThreadReport, MAX_SLOTS, POLL,
};
pub use screen::{Rect, Screen, BYTES_PER_PIXEL, MAX_SIDE};
