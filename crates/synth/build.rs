//! Compiles `faust/migrator.dsp` to Rust with Debian's `faust` when it is
//! installed, so the benchmark can compare tessera's oscillator bank with the
//! seed's tool. Without `faust` the crate builds the same, minus the Faust
//! voice (`cfg(tessera_faust)` stays unset). Generated code goes to OUT_DIR
//! only; it is never committed.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tessera_faust)");
    println!("cargo::rerun-if-changed=faust/migrator.dsp");
    println!("cargo::rerun-if-env-changed=PATH");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let generated = out.join("migrator_faust.rs");
    let compiled = Command::new("faust")
        .args(["-lang", "rust", "faust/migrator.dsp", "-o"])
        .arg(&generated)
        .status();
    match compiled {
        Ok(status) if status.success() => {
            strip_optional_derive(&generated);
            println!("cargo::rustc-cfg=tessera_faust");
        }
        Ok(status) => {
            println!("cargo::warning=faust failed ({status}): the Faust voice is left out")
        }
        // Not installed: the ordinary case on a machine without the seed's tool.
        Err(_) => {}
    }
}

/// Removes the generated `cfg_attr(feature = "default-boxed", ...)`: this
/// crate boxes the DSP itself and has no such feature.
fn strip_optional_derive(generated: &PathBuf) {
    let code = std::fs::read_to_string(generated).expect("faust wrote its output");
    let kept: Vec<&str> = code
        .lines()
        .filter(|line| !line.contains("feature = \"default-boxed\""))
        .collect();
    std::fs::write(generated, kept.join("\n")).expect("OUT_DIR is writable");
}
