//! A JACK2 client that is told of the server's xruns, clients and period
//! without taking part in the graph.
//!
//! Why `unsafe` here: the `jack` crate registers a process callback for
//! every client it activates, and JACK2 runs each client with one in every
//! cycle of the graph — the guard's client would be one more node in the
//! user's chain, its thread woken 188 times a second at 256 frames for
//! nothing JACK2 does not also say by notice (measured on Debian 12's
//! jackd2: a client with no process callback is never woken by the cycle,
//! and still hears xruns, clients and buffer sizes on libjack's notice
//! thread). So this module calls libjack's C API itself (through the
//! crate's own `jack_sys`): it registers the notice callbacks only, and
//! reads the frame time of the cycle in progress from JACK2's shared
//! engine state when asked. Every block states why it is sound.
//!
//! The callbacks only bump atomics; the module must never register a
//! process callback, connect ports or change the server's settings.
#![allow(unsafe_code)]

use super::Heard;
use crate::{fail, GuardError};
use jack::jack_sys as j;
use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// An active JACK2 client with notice callbacks only. Dropping it closes
/// the client (libjack deactivates it first), after which no callback runs.
pub struct Notices {
    // Dropped first: the callbacks' argument points into `_heard`, which
    // must outlive the client.
    client: jack::Client,
    _heard: Arc<Heard>,
}

impl Notices {
    /// Registers the notice callbacks on `client` (opened, not active),
    /// then activates it.
    pub fn activate(client: jack::Client, heard: Arc<Heard>) -> Result<Notices, GuardError> {
        let raw = client.raw();
        let arg = Arc::as_ptr(&heard) as *mut c_void;
        // SAFETY: `raw` is an open, inactive client, owned by `client`,
        // which this struct closes before it drops `heard`, so `arg`
        // points to a live `Heard` whenever libjack calls back; each
        // callback matches the C signature it is registered as, reads
        // `arg` only as `&Heard`, and touches nothing but its atomics.
        let registered = unsafe {
            [
                j::jack_set_xrun_callback(raw, Some(on_xrun), arg),
                j::jack_set_client_registration_callback(raw, Some(on_client), arg),
                j::jack_set_buffer_size_callback(raw, Some(on_buffer_size), arg),
                j::jack_set_sample_rate_callback(raw, Some(on_sample_rate), arg),
            ]
        };
        if registered.iter().any(|&r| r != 0) {
            return Err(fail(
                "libjack refused the guard's notice callbacks",
                "is the server JACK2 (jackd)? PipeWire's JACK is guarded with `tessera guard pipewire`",
            ));
        }
        // SAFETY: the callbacks are registered on this open client.
        if unsafe { j::jack_activate(raw) } != 0 {
            return Err(fail("could not activate the guard's JACK client", ""));
        }
        Ok(Notices {
            client,
            _heard: heard,
        })
    }

    /// The frame time at the start of the cycle in progress: JACK2 keeps
    /// it in its shared engine state, advancing one period per cycle the
    /// driver runs, so its advance counts the graph's cycles.
    pub fn cycle_frame(&self) -> jack::Frames {
        // SAFETY: the client is open while `self` lives; JACK2 reads the
        // frame timer from shared memory, with no lock and from any thread
        // (the JACK API reserves this call for the process callback, which
        // this client has none of; on JACK2 it is read the same way).
        unsafe { j::jack_last_frame_time(self.client.raw()) }
    }
}

/// The `Heard` a callback's `arg` points to.
///
/// # Safety
/// `arg` must be the pointer [`Notices::activate`] registered, while the
/// client is open.
unsafe fn heard<'a>(arg: *mut c_void) -> &'a Heard {
    // SAFETY: the caller's contract: `arg` came from `Arc::as_ptr` of a
    // `Heard` that outlives the client.
    unsafe { &*(arg as *const Heard) }
}

unsafe extern "C" fn on_xrun(arg: *mut c_void) -> c_int {
    // SAFETY: libjack passes back the registered `arg`.
    unsafe { heard(arg) }.xruns.fetch_add(1, Ordering::Relaxed);
    0
}

unsafe extern "C" fn on_client(_name: *const c_char, registered: c_int, arg: *mut c_void) {
    // SAFETY: libjack passes back the registered `arg`.
    unsafe { heard(arg) }.client_registered(registered != 0);
}

unsafe extern "C" fn on_buffer_size(frames: j::jack_nframes_t, arg: *mut c_void) -> c_int {
    // SAFETY: libjack passes back the registered `arg`.
    unsafe { heard(arg) }
        .frames
        .store(frames, Ordering::Relaxed);
    0
}

unsafe extern "C" fn on_sample_rate(rate: j::jack_nframes_t, arg: *mut c_void) -> c_int {
    // SAFETY: libjack passes back the registered `arg`.
    unsafe { heard(arg) }.rate.store(rate, Ordering::Relaxed);
    0
}

impl Drop for Notices {
    fn drop(&mut self) {
        // SAFETY: the client is open; deactivated, it is called back no
        // more, before its fields drop (closing would deactivate it too).
        unsafe { j::jack_deactivate(self.client.raw()) };
    }
}
