//! `tessera synth`: render the Migrator Synthesizer to a WAV file, and
//! benchmark its DSP against the deadline and against Faust. Thin: the sound
//! and the benchmark live in `tessera_synth`; this file parses and prints.

use crate::failure::{failed, Failure};
use crate::parse::invalid;
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use tessera_broker::BrokerError;
use tessera_synth::bench::{self, Timing};
use tessera_synth::wav::{self, SampleFormat};
use tessera_synth::{
    Gesture, GesturePlayer, Kernel, PadInput, Synth, SynthConfig, BLOCK, CHANNELS, DEADLINE_NS,
    PADS,
};

#[derive(Subcommand)]
pub enum SynthCommand {
    /// Render the synthesizer, played by fixed pads or a gesture file, to an 8-channel WAV file.
    #[command(after_help = "Examples:\n  \
        tessera synth render --seconds 10 --pads 0-31 --pressure 0.8 --seed 7 --out synth.wav\n  \
        tessera synth render --pads 0,3,8-11 --x 0.6 --y 0.9 --format i16 --out micro.wav\n  \
        tessera synth render --gesture take1.txt --seconds 30 --out take1.wav\n\n\
        Gesture file: lines of `time pad x y pressure` (seconds; pad 0-31; x, y, pressure in [0, 1]).")]
    Render(RenderArgs),
    /// Time the DSP: ns and cycles per oscillator-sample (AVX2, portable, Faust) and the full load against the 1.4059 ms deadline.
    #[command(after_help = "Examples:\n  \
        flock /tmp/tessera-machine.lock tessera synth bench\n  \
        tessera synth bench --pads 16 --oscillators 200 --work-factor 2\n\n\
        Cycles are TSC ticks (reference cycles; perf's core-cycle counter is not available on every VM).")]
    Bench(BenchArgs),
}

/// The synthesizer's shape, shared by render and bench.
#[derive(Args)]
pub struct ShapeArgs {
    /// Random seed (same seed and input, same output).
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Oscillators per object.
    #[arg(long, default_value_t = 100)]
    pub oscillators: usize,
    /// Load multiplier: silent ballast oscillators, for experiments near the deadline.
    #[arg(long, default_value_t = 1.0)]
    pub work_factor: f32,
    /// Mean seconds between two migrations of an oscillator.
    #[arg(long, default_value_t = 5.0)]
    pub migration: f32,
}

impl ShapeArgs {
    fn config(&self) -> SynthConfig {
        SynthConfig {
            seed: self.seed,
            oscillators_per_object: self.oscillators,
            work_factor: self.work_factor,
            migration_seconds: self.migration,
            ..SynthConfig::default()
        }
    }
}

/// What the SLABS plays: pads held down, or a gesture file.
#[derive(Args)]
pub struct InputArgs {
    /// Pads held down: a list of pads and ranges, e.g. 0-31 or 0,3,8-11.
    #[arg(long, default_value = "0-31")]
    pub pads: String,
    #[arg(long, default_value_t = 0.8)]
    pub pressure: f32,
    /// Finger x on the held pads: the gaussian's width.
    #[arg(long, default_value_t = 0.3)]
    pub x: f32,
    /// Finger y on the held pads: which of the pad's 4 tables.
    #[arg(long, default_value_t = 0.1)]
    pub y: f32,
    /// Play this gesture file (`time pad x y pressure` lines) instead of held pads.
    #[arg(long)]
    pub gesture: Option<PathBuf>,
}

/// The held pads of the arguments, or their gesture file.
pub fn gesture(input: &InputArgs) -> Result<Gesture, BrokerError> {
    if let Some(path) = &input.gesture {
        let text = std::fs::read_to_string(path).map_err(|e| {
            invalid(
                format!("{}: {e}", path.display()),
                "give a readable gesture file",
            )
        })?;
        return Gesture::parse(&text)
            .map_err(|e| invalid(e.to_string(), "lines are `time pad x y pressure`"));
    }
    let held = PadInput {
        x: input.x,
        y: input.y,
        pressure: input.pressure,
    };
    Ok(Gesture::fixed(crate::parse::pads(&input.pads)?, held))
}

#[derive(Args)]
pub struct RenderArgs {
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    #[command(flatten)]
    pub input: InputArgs,
    #[arg(long, default_value = "synth.wav")]
    pub out: PathBuf,
    /// Sample format: f32 or i16.
    #[arg(long, default_value = "f32")]
    pub format: String,
    #[command(flatten)]
    pub shape: ShapeArgs,
}

#[derive(Args)]
pub struct BenchArgs {
    /// Pads pressed in the full-load row (the seed's full load is 32).
    #[arg(long, default_value_t = 32)]
    pub pads: usize,
    /// Blocks timed per row.
    #[arg(long, default_value_t = 20_000)]
    pub blocks: usize,
    #[command(flatten)]
    pub shape: ShapeArgs,
}

pub fn run(command: SynthCommand) -> Result<ExitCode, Failure> {
    match command {
        SynthCommand::Render(args) => render(args),
        SynthCommand::Bench(args) => bench(args),
    }
}

fn render(args: RenderArgs) -> Result<ExitCode, Failure> {
    let format = match args.format.as_str() {
        "f32" => SampleFormat::Float32,
        "i16" => SampleFormat::Int16,
        other => {
            return Err(invalid(format!("format {other:?}"), "--format f32 or --format i16").into())
        }
    };
    let gesture = gesture(&args.input)?;
    let mut synth = Synth::new(args.shape.config())
        .map_err(|e| invalid(e.to_string(), "see tessera synth render --help"))?;
    let mut player = GesturePlayer::new(gesture);
    let summary =
        wav::render(&mut synth, &mut player, args.seconds, &args.out, format).map_err(|e| {
            failed(
                format!("{}: {e}", args.out.display()),
                "check the output path",
            )
        })?;
    println!(
        "wrote {} ({} frames, 8 channels, {} Hz, {}; kernel {})",
        args.out.display(),
        summary.frames,
        synth.config().sample_rate,
        args.format,
        synth.kernel().name()
    );
    println!("channel  peak     rms");
    for c in 0..CHANNELS {
        println!("{c:>7}  {:.4}  {:.4}", summary.peak[c], summary.rms[c]);
    }
    println!("object-blocks processed: {}", summary.objects_processed);
    Ok(ExitCode::SUCCESS)
}

/// One row of the benchmark's table.
fn row(name: &str, timing: &Timing) {
    println!(
        "{name:<34} {:>8.3} ns  {:>7.3} cycles",
        timing.ns_per_sample(),
        timing.ticks_per_sample()
    );
}

fn bench(args: BenchArgs) -> Result<ExitCode, Failure> {
    if args.pads > PADS || args.blocks == 0 {
        return Err(invalid(
            format!("{} pads, {} blocks", args.pads, args.blocks),
            "--pads 0..=32, --blocks >= 1",
        )
        .into());
    }
    let oscillators = args.shape.oscillators;
    println!(
        "one object: {oscillators} oscillators x {BLOCK} frames, {} blocks per row",
        args.blocks
    );
    println!("{:<34} per oscillator-sample", "");
    if let Some(simd) = Kernel::avx2_fma() {
        row(
            "tessera bank, avx2+fma",
            &bench::bank(simd, oscillators, args.blocks),
        );
    } else {
        println!("{:<34} (no AVX2+FMA on this CPU)", "tessera bank, avx2+fma");
    }
    row(
        "tessera bank, portable",
        &bench::bank(Kernel::portable(), oscillators, args.blocks),
    );
    match bench::faust(oscillators, args.blocks) {
        Some(timing) => row("faust migrator.dsp (os.osc)", &timing),
        None => println!(
            "{:<34} skipped: `faust` was not installed when tessera was built",
            "faust migrator.dsp"
        ),
    }

    let load = bench::full_load(args.shape.config(), args.pads, args.blocks)
        .map_err(|e| invalid(e.to_string(), "see tessera synth bench --help"))?;
    println!(
        "\nfull load: {} pads x {} oscillators (work factor {}), migrations every {} s, kernel {}",
        args.pads,
        oscillators,
        args.shape.work_factor,
        args.shape.migration,
        Kernel::detect().name()
    );
    row("whole synth (process)", &load.timing);
    let mean = load.mean_ns();
    let at = |q: f64| load.quantile_ns(q);
    println!(
        "block time    mean {:>8.1} us  p50 {:>8.1} us  p99 {:>8.1} us  max {:>8.1} us",
        mean / 1e3,
        at(0.5) / 1e3,
        at(0.99) / 1e3,
        at(1.0) / 1e3
    );
    println!(
        "of the {:.4} ms deadline: mean {:.2}%  p99 {:.2}%  max {:.2}%  (budget: 10%)",
        DEADLINE_NS / 1e6,
        100.0 * mean / DEADLINE_NS,
        100.0 * at(0.99) / DEADLINE_NS,
        100.0 * at(1.0) / DEADLINE_NS
    );
    println!(
        "cycles: TSC ticks at {:.3} GHz (reference cycles, not core cycles)",
        load.timing.tick_ghz()
    );
    Ok(ExitCode::SUCCESS)
}
