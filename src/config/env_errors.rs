//! Flag errors that name the environment variable a bad value came from:
//! clap names the flag alone, and an operator who never typed it looks for
//! it on the command line in vain.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser};

use super::Cli;

impl Cli {
    /// `Cli::parse`, with the variable named when a value read from the
    /// environment is refused.
    pub fn parse_naming_env() -> Self {
        let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
        match Cli::try_parse_from(&argv) {
            Ok(cli) => cli,
            Err(e) => {
                let typed: Vec<String> = argv
                    .iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect();
                match from_environment(&e, &typed) {
                    Some(var) => {
                        let _ = e.print();
                        eprintln!(
                            "\nnote: the value came from the environment variable {var}; fix or \
                             unset it"
                        );
                        std::process::exit(e.exit_code());
                    }
                    None => e.exit(),
                }
            }
        }
    }
}

/// The variable behind a refused value: the flag's env var, when it is set
/// and the flag was not typed.
fn from_environment(e: &clap::Error, typed: &[String]) -> Option<String> {
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let flag = format!("--{long}");
    if typed
        .iter()
        .any(|a| a == &flag || a.starts_with(&format!("{flag}=")))
    {
        return None;
    }
    let command = Cli::command();
    let env = command
        .get_subcommands()
        .chain(std::iter::once(&command))
        .flat_map(|c| c.get_arguments())
        .find(|a| a.get_long() == Some(long))?
        .get_env()?
        .to_string_lossy()
        .into_owned();
    std::env::var_os(&env).is_some().then_some(env)
}
