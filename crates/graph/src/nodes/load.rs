//! A synthetic load (the thesis's dnl): busy for a set fraction of the period,
//! measured on the thread's CPU-time clock, so time spent descheduled does not
//! count as work. Passes its audio input `in` through to `out`, so loads can be
//! chained like the clients of the experiments.

use tessera_sys::clock;

use crate::node::{Node, ProcessContext};
use crate::port::PortSpec;

/// Spins until this thread consumed `fraction × period` of CPU time.
pub struct Load {
    fraction: f64,
}

impl Load {
    /// `fraction` of the period, e.g. 0.1 for 10 %; clamped to 0..=1.
    pub fn new(fraction: f64) -> Self {
        Load {
            fraction: fraction.clamp(0.0, 1.0),
        }
    }
}

impl Node for Load {
    fn ports(&self) -> Vec<PortSpec> {
        vec![PortSpec::audio_in("in"), PortSpec::audio_out("out")]
    }

    fn process(&mut self, ctx: &mut ProcessContext<'_>) {
        let busy_ns = (self.fraction * ctx.period_ns() as f64) as u64;
        let start = clock::thread_cpu_ns();
        while clock::thread_cpu_ns().saturating_sub(start) < busy_ns {
            std::hint::spin_loop();
        }
        let input = ctx.audio_in(0);
        ctx.audio_out(0).copy_from_slice(input);
    }
}
