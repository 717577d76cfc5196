//! `WALRELAY_KAFKA_PROPERTIES` beneath `-X`.
//!
//! clap reads a flag's environment variable only when the flag is not on
//! the command line, so a single `-X debug=broker` made walrelay drop the
//! whole variable without a word: in a deployment that keeps
//! `security.protocol`, `sasl.*` or `acks` in the variable (from a Secret,
//! say), those went with it. The variable's properties now come first and
//! each `-X` after them, so a `-X` overrides a property of the variable and
//! the rest of the variable still applies.

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory};

use super::{parse_properties, Cli, Command, KafkaArgs};

/// The variable, as clap knows it from `-X`'s definition.
pub(super) const VARIABLE: &str = "WALRELAY_KAFKA_PROPERTIES";

impl Command {
    /// The Kafka flags of a command that talks to Kafka.
    fn kafka_args_mut(&mut self) -> Option<&mut KafkaArgs> {
        match self {
            Command::Run(args) => Some(&mut args.kafka),
            Command::Check(args) => Some(&mut args.run.kafka),
            Command::Replay(args) => Some(&mut args.run.kafka),
            Command::Audit(args) => Some(&mut args.run.kafka),
            Command::Redrive(args) => Some(&mut args.kafka),
            _ => None,
        }
    }
}

impl Cli {
    /// Puts the variable's properties before the `-X` typed, when clap left
    /// them out for those. `matches` are this command line's.
    pub(super) fn merge_environment_properties(
        &mut self,
        matches: &ArgMatches,
        variable: Option<&str>,
    ) -> Result<(), String> {
        let (Some((name, sub)), Some(variable)) = (matches.subcommand(), variable) else {
            return Ok(());
        };
        let has_properties = Cli::command()
            .find_subcommand(name)
            .is_some_and(|c| c.get_arguments().any(|a| a.get_id() == "kafka_properties"));
        if !has_properties || sub.value_source("kafka_properties") != Some(ValueSource::CommandLine)
        {
            return Ok(());
        }
        // Not shown: it may hold a secret.
        let from_environment =
            parse_properties(variable).map_err(|e| format!("{VARIABLE}: {e}; fix or unset it"))?;
        if let Some(kafka) = self.command.kafka_args_mut() {
            kafka.kafka_properties.insert(0, from_environment);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::FromArgMatches;

    fn parse(argv: &[&str], variable: Option<&str>) -> Result<Cli, String> {
        let matches = Cli::command().try_get_matches_from(argv).unwrap();
        let mut cli = Cli::from_arg_matches(&matches).unwrap();
        cli.merge_environment_properties(&matches, variable)?;
        Ok(cli)
    }

    const RUN: [&str; 6] = [
        "walrelay",
        "run",
        "--pg-url",
        "postgres://h/db",
        "--kafka-brokers",
        "k:9092",
    ];

    fn properties(cli: &Cli) -> Vec<(String, String)> {
        let Command::Run(args) = &cli.command else {
            panic!("not run");
        };
        args.kafka.properties()
    }

    #[test]
    fn a_typed_property_goes_on_top_of_the_variable_and_the_rest_of_it_stays() {
        let argv = [&RUN[..], &["-X", "linger.ms=5", "-X", "acks=1"]].concat();
        let cli = parse(&argv, Some("security.protocol=SASL_SSL,linger.ms=20")).unwrap();
        assert_eq!(
            properties(&cli),
            [
                ("security.protocol", "SASL_SSL"),
                ("linger.ms", "20"),
                ("linger.ms", "5"),
                ("acks", "1"),
            ]
            .map(|(k, v)| (k.to_string(), v.to_string()))
        );
    }

    #[test]
    fn without_a_typed_property_the_variable_is_read_once() {
        // clap read the variable itself here (it is not set in this test's
        // environment, so nothing is there to read twice).
        let cli = parse(&RUN, Some("linger.ms=20")).unwrap();
        assert!(properties(&cli).is_empty());
        let argv = [&RUN[..], &["-X", "linger.ms=5"]].concat();
        let cli = parse(&argv, None).unwrap();
        assert_eq!(
            properties(&cli),
            [("linger.ms".to_string(), "5".to_string())]
        );
    }

    #[test]
    fn a_bad_variable_beneath_typed_properties_is_named_without_its_value() {
        let argv = [&RUN[..], &["-X", "linger.ms=5"]].concat();
        let Err(e) = parse(&argv, Some("sasl.password:hunter5")) else {
            panic!("a bad variable was accepted");
        };
        assert!(e.contains(VARIABLE) && !e.contains("hunter5"), "{e}");
    }

    #[test]
    fn a_command_without_kafka_flags_is_left_alone() {
        let cli = parse(&["walrelay", "completions", "bash"], Some("linger.ms=5"));
        assert!(cli.is_ok());
    }
}
