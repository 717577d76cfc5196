//! A command's report on stdout (`audit`, `replay`, `status`, `check`,
//! `redrive`). Rust ignores SIGPIPE, so a write to a closed pipe
//! (`walrelay audit | head`) is an error, on which `println!` panics (exit
//! 101). Here it ends the command the way it ends any Unix filter: by
//! SIGPIPE, quietly. Only stdout's own writes do so; SIGPIPE stays ignored
//! for every socket walrelay writes to.

use std::fmt;
use std::io::{self, Write};

/// `println!` for a command's report: a closed pipe ends the command.
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::output::write(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Writes `args` to stdout; a closed pipe ends the process as SIGPIPE
/// would, another failure (a full disk) with a message and exit 1.
pub fn write(args: fmt::Arguments<'_>) {
    let mut out = io::stdout().lock();
    if let Err(e) = out.write_fmt(args) {
        if e.kind() == io::ErrorKind::BrokenPipe {
            // SAFETY: restores the default action of a signal and raises
            // it; nothing runs after it.
            unsafe {
                libc::signal(libc::SIGPIPE, libc::SIG_DFL);
                libc::raise(libc::SIGPIPE);
            }
        }
        eprintln!("walrelay: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}
