//! Lays out the code walrelay runs in one stretch of its binary.
//!
//! The kernel maps a binary's code in 64 KiB windows around each page it
//! faults in, and keeps them mapped. Spread across 11 MiB of code, the
//! 2 MiB walrelay runs would keep most of its windows resident. Listed
//! first (`link/hot-functions.txt`, from `scripts/hot-functions.sh`), they
//! share a few windows instead: see docs/benchmarks.md, "Hot code together".
//!
//! Only rust-lld, the default linker of x86_64 Linux since Rust 1.90, is
//! given the list: another linker may not know the flag, and the layout
//! changes what is resident, never what runs.

use std::env;
use std::path::Path;

const ORDER: &str = "link/hot-functions.txt";

fn main() {
    println!("cargo:rerun-if-changed={ORDER}");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
    if !links_with_default_lld() {
        return;
    }
    let order = Path::new(&env::var("CARGO_MANIFEST_DIR").expect("set by cargo")).join(ORDER);
    println!(
        "cargo:rustc-link-arg-bin=walrelay=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    // Names the build no longer has (a renamed function) are not an error.
    println!("cargo:rustc-link-arg-bin=walrelay=-Wl,--no-warn-symbol-ordering");
    // The loader reads every relocation as it starts, and the pages stay
    // resident: packed (DT_RELR, glibc 2.36+), 715 KiB of them become a few.
    println!("cargo:rustc-link-arg-bin=walrelay=-Wl,-z,pack-relative-relocs");
}

/// True for an optimised x86_64 Linux build with no linker chosen by the
/// user, which links with rust-lld.
fn links_with_default_lld() -> bool {
    let var = |name: &str| env::var(name).unwrap_or_default();
    let flags = var("CARGO_ENCODED_RUSTFLAGS");
    var("TARGET") == "x86_64-unknown-linux-gnu"
        && var("PROFILE") == "release"
        && env::var_os("RUSTC_LINKER").is_none()
        && !flags.contains("linker")
        && !flags.contains("fuse-ld")
}
