//! Nodes shipped with the engine: [`Passthrough`], [`Sine`], [`Mixer`] and
//! [`Load`]. Each owns only its own processing; none allocates in `process`.

mod load;
mod mixer;
mod passthrough;
mod sine;

pub use load::Load;
pub use mixer::Mixer;
pub use passthrough::Passthrough;
pub use sine::Sine;
