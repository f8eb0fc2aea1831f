//! The committed include/tessera.h is what cbindgen makes of the C ABI
//! now: a change to the ABI that forgets the header fails here. With
//! TESSERA_BLESS=1 the header is rewritten instead.

use std::path::Path;

#[test]
fn the_committed_header_is_current() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate")
        .write(&mut generated);
    let generated = String::from_utf8(generated).unwrap();
    let path = crate_dir.join("include/tessera.h");
    if std::env::var_os("TESSERA_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/tessera.h is stale: run `TESSERA_BLESS=1 cargo test -p libtessera --test header`"
    );
}
