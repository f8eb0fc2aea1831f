//! Gives the shared library its versioned soname, so that programs link
//! against `libtessera.so.0` and a later incompatible ABI can be `.so.1`.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtessera.so.0");
}
