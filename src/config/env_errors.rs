//! Flag errors that name the environment variable a bad value came from:
//! clap names the flag alone, and an operator who never typed it looks for
//! it on the command line in vain. And that never show the value refused
//! for a flag that may carry a secret (`-X sasl.password:…`, a typo).

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{Arg, CommandFactory, FromArgMatches};

use super::Cli;

impl Cli {
    /// `Cli::parse`, with the variable named when a value read from the
    /// environment is refused.
    ///
    /// `WALRELAY_KAFKA_PROPERTIES` also applies beneath typed `-X`
    /// (`kafka_env`).
    pub fn parse_naming_env() -> Self {
        let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let parsed = Cli::command()
            .try_get_matches_from(&argv)
            .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
        match parsed {
            Ok((mut cli, matches)) => {
                let variable = std::env::var(super::kafka_env::VARIABLE).ok();
                if let Err(e) = cli.merge_environment_properties(&matches, variable.as_deref()) {
                    eprintln!("error: {e}");
                    std::process::exit(2);
                }
                cli
            }
            Err(mut e) => {
                hide_secret_value(&mut e);
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

/// The long name (without `--`) of the flag whose value `e` refuses.
fn refused_flag(e: &clap::Error) -> Option<String> {
    if !matches!(
        e.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(arg)) = e.get(ContextKind::InvalidArg) else {
        return None;
    };
    Some(
        arg.split_whitespace()
            .next()?
            .strip_prefix("--")?
            .to_string(),
    )
}

/// The flag `--long` of any subcommand.
fn flag(long: &str) -> Option<Arg> {
    let command = Cli::command();
    let found = command
        .get_subcommands()
        .chain(std::iter::once(&command))
        .flat_map(|c| c.get_arguments())
        .find(|a| a.get_long() == Some(long))
        .cloned();
    found
}

/// The refused value left out, for a flag whose environment value is
/// hidden from --help (`--pg-url`, `-X`, `--alert-webhook`): such a value
/// may hold a password, misspelt or not.
fn hide_secret_value(e: &mut clap::Error) {
    let secret = refused_flag(e)
        .and_then(|long| flag(&long))
        .is_some_and(|arg| arg.is_hide_env_values_set());
    if secret {
        e.insert(
            ContextKind::InvalidValue,
            ContextValue::String(crate::logging::MASK.into()),
        );
    }
}

/// The variable behind a refused value: the flag's env var, when it is set
/// and the flag was not typed.
fn from_environment(e: &clap::Error, typed: &[String]) -> Option<String> {
    let long = refused_flag(e)?;
    let flag_name = format!("--{long}");
    if typed
        .iter()
        .any(|a| a == &flag_name || a.starts_with(&format!("{flag_name}=")))
    {
        return None;
    }
    let env = flag(&long)?.get_env()?.to_string_lossy().into_owned();
    std::env::var_os(&env).is_some().then_some(env)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn a_refused_value_of_a_flag_that_may_hold_a_secret_is_not_shown() {
        let mut e = Cli::try_parse_from([
            "walrelay",
            "check",
            "--pg-url",
            "postgres://h/db",
            "--kafka-brokers",
            "k:9092",
            "-X",
            "sasl.password:hunter5",
        ])
        .err()
        .unwrap();
        hide_secret_value(&mut e);
        let text = e.render().to_string();
        assert!(!text.contains("hunter5"), "{text}");
        assert!(text.contains("--kafka-property"), "{text}");
        assert!(text.contains("expected key=value"), "{text}");
    }
}
