//! What the audio-server tests share: whether a workspace program is
//! built beside the test. It must never start a server or touch the
//! machine.

/// Whether `program` of this workspace is built beside the test (else
/// the test is skipped, saying so, or failed under CI=true).
pub fn built(test: &str, program: &str) -> bool {
    let path = tessera_experiments::harness::servers::program_beside_us(program);
    if path.is_file() {
        return true;
    }
    let msg = format!(
        "SKIPPED {test}: {program} is not built (cargo build -p {})",
        package(program)
    );
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}, and CI=true requires it");
    }
    eprintln!("{msg}");
    false
}

/// The package that builds `program`.
fn package(program: &str) -> &str {
    match program {
        "tessera" => "tessera-cli",
        other => other,
    }
}
