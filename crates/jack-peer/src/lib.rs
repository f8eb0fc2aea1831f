//! The library part of the JACK peer: its record (`record`), the file the
//! `tessera-jack-peer` binary writes and the experiments read through the
//! same definition. The binary's clients live beside it in `main.rs`; this
//! library must never start a client.

pub mod record;
