//! Lays out the code walrelay runs in one stretch of its binary.
//!
//! The kernel maps a binary's code in 64 KiB windows around each page it
//! faults in, and keeps them mapped. Spread across 11 MiB of code, the
//! 2.3 MiB walrelay runs kept most of its windows resident. Listed first
//! (`link/hot-functions.txt`, from `scripts/hot-functions.sh`), they share
//! a few windows instead: see docs/benchmarks.md, "Hot code together".
//!
//! The layout changes what is resident, never what runs, so a linker that
//! does not take these flags (rust-lld, the default of rustup's x86_64
//! Linux toolchains, does; GNU ld and a distribution's rustc may not) gets
//! none of them, with a warning, rather than a failed build.

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const ORDER: &str = "link/hot-functions.txt";
const TARGET: &str = "x86_64-unknown-linux-gnu";

fn main() {
    println!("cargo:rerun-if-changed={ORDER}");
    for var in [
        "RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
        "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let var = |name: &str| env::var(name).unwrap_or_default();
    // The list names the functions of an optimised x86_64 Linux build.
    if var("PROFILE") != "release" || var("TARGET") != TARGET || var("HOST") != TARGET {
        return;
    }
    let order = Path::new(&var("CARGO_MANIFEST_DIR")).join(ORDER);
    let mut args = vec![
        format!("-Wl,--symbol-ordering-file={}", order.display()),
        // Names the build no longer has (a renamed function) are not an error.
        "-Wl,--no-warn-symbol-ordering".to_string(),
    ];
    // The loader reads every relocation as it starts, and the pages stay
    // resident: packed (DT_RELR), 715 KiB of them become 15. The binary
    // then needs glibc 2.36 or later to start, so they are packed only when
    // built on one, where it most likely runs (`cargo install`, the image).
    if glibc_at_least(2, 36) {
        args.push("-Wl,-z,pack-relative-relocs".to_string());
    }
    if !links(&args) {
        println!(
            "cargo:warning=the linker does not take {args:?}: walrelay is linked without its \
             hot functions together, and rests a few MiB larger (docs/architecture.md)"
        );
        return;
    }
    for arg in args {
        println!("cargo:rustc-link-arg-bin=walrelay={arg}");
    }
}

/// Whether rustc, with this build's flags and linker, links an empty
/// program given `args`.
fn links(args: &[String]) -> bool {
    let out = PathBuf::from(env::var("OUT_DIR").expect("set by cargo"));
    let source = out.join("link_probe.rs");
    if std::fs::write(&source, "fn main() {}\n").is_err() {
        return false;
    }
    let mut rustc = Command::new(env::var("RUSTC").unwrap_or_else(|_| "rustc".into()));
    let flags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    rustc.args(flags.split('\x1f').filter(|flag| !flag.is_empty()));
    if let Some(linker) = env::var_os("RUSTC_LINKER") {
        rustc
            .arg("-C")
            .arg(format!("linker={}", linker.to_string_lossy()));
    }
    rustc
        .args(["--target", TARGET, "-o"])
        .arg(out.join("link_probe"))
        .arg(&source)
        .args(args.iter().map(|arg| format!("-Clink-arg={arg}")))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    rustc.status().is_ok_and(|status| status.success())
}

/// The host's glibc, which is the target's here (HOST == TARGET).
fn glibc_at_least(major: u32, minor: u32) -> bool {
    let Ok(output) = Command::new("getconf").arg("GNU_LIBC_VERSION").output() else {
        return false;
    };
    // "glibc 2.36"
    let text = String::from_utf8_lossy(&output.stdout);
    let mut version = text
        .trim()
        .trim_start_matches("glibc ")
        .split('.')
        .map(|part| part.parse::<u32>().unwrap_or(0));
    let found = (version.next().unwrap_or(0), version.next().unwrap_or(0));
    found >= (major, minor)
}
