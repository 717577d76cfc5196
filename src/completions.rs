//! Shell completions and man pages, generated from the clap definitions so
//! they always list the flags the binary has.

use std::io::{self, Write};

use clap::CommandFactory;

use crate::config::Cli;
use crate::error::{Error, Result};

/// Writes the completion script for `shell` to stdout.
pub fn completions(shell: clap_complete::Shell) -> Result<()> {
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "walrelay", &mut out);
    write_stdout(&out)
}

/// Writes the roff man page of walrelay, or of one subcommand, to stdout.
pub fn man(subcommand: Option<&str>) -> Result<()> {
    let mut command = Cli::command();
    command.build();
    let (page, title) = match subcommand {
        None => (command, "walrelay".to_string()),
        Some(name) => {
            let names: Vec<String> = command
                .get_subcommands()
                .filter(|c| !c.is_hide_set())
                .map(|c| c.get_name().to_string())
                .collect();
            let found = command.find_subcommand(name).cloned().ok_or_else(|| {
                Error::permanent(format!(
                    "no subcommand {name:?}: use one of {}",
                    names.join(", ")
                ))
            })?;
            // The page is named walrelay-<subcommand>, as man(1) looks it up.
            (found, format!("walrelay-{name}"))
        }
    };
    let mut out = Vec::new();
    clap_mangen::Man::new(page)
        .title(title)
        .source(format!("walrelay {}", env!("CARGO_PKG_VERSION")))
        .render(&mut out)
        .map_err(|e| Error::permanent("cannot render the man page").with_source(e))?;
    write_stdout(&out)
}

fn write_stdout(bytes: &[u8]) -> Result<()> {
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(bytes)
        .and_then(|()| stdout.flush())
        .map_err(|e| Error::permanent("cannot write to stdout").with_source(e))
}
