//! Which values on a command line are secrets.

use super::Command;
use crate::percent::url_password;

impl Command {
    /// The flags of `run`, for the commands that take them all.
    fn run_args(&self) -> Option<&super::RunArgs> {
        match self {
            Command::Run(args) => Some(args),
            Command::Check(args) => Some(&args.run),
            Command::Replay(args) => Some(&args.run),
            Command::Audit(args) => Some(&args.run),
            _ => None,
        }
    }

    /// The `-X` properties of a command that talks to Kafka.
    pub fn kafka_properties(&self) -> Vec<(String, String)> {
        match self {
            Command::Redrive(args) => args.kafka.properties(),
            other => other
                .run_args()
                .map(|args| args.kafka.properties())
                .unwrap_or_default(),
        }
    }

    /// The secrets this command line carries, for the logs to mask: the
    /// Postgres password (as typed and decoded, or from PGPASSWORD), the
    /// alert webhook's and the value of every librdkafka property not known
    /// to hold no secret (`kafka::secrets`): a misspelt `sasl.password` too.
    pub fn secrets(&self) -> Vec<String> {
        let pg_url = match self {
            Command::Status(args) => Some(&args.conn.pg_url),
            other => other.run_args().map(|args| &args.conn.pg_url),
        };
        let properties = self.kafka_properties();
        let mut secrets = Vec::new();
        if let Some(url) = pg_url {
            secrets.extend(pg_passwords(url));
            secrets.extend(super::pg_password_from_env());
        }
        let webhook = self
            .run_args()
            .and_then(|args| args.watchdog.alert_webhook.as_deref());
        if let Some(password) = webhook.and_then(url_password) {
            // As written, and as the receiver reads it.
            secrets.push(crate::percent::decode(&password));
            secrets.push(password);
        }
        if let Some(args) = self.run_args() {
            secrets.extend(args.schema_registry.secrets());
        }
        if self.uses_aws() {
            // The AWS credential chain's first link.
            secrets.extend(
                [
                    "AWS_SECRET_ACCESS_KEY",
                    "AWS_SESSION_TOKEN",
                    "AWS_ACCESS_KEY_ID",
                ]
                .iter()
                .filter_map(|name| std::env::var(name).ok()),
            );
        }
        let pg_primary_url = self
            .run_args()
            .and_then(|args| args.pg_primary_url.as_deref());
        secrets.extend(pg_primary_url.into_iter().flat_map(pg_passwords));
        secrets.extend(crate::kafka::secrets::secret_values(
            properties.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ));
        secrets
    }
}

impl Command {
    /// `--pg-auth rds-iam` or `--kafka-auth msk-iam`: AWS credentials in play.
    fn uses_aws(&self) -> bool {
        let pg = match self {
            Command::Status(args) => Some(args.conn.pg_auth),
            other => other.run_args().map(|args| args.conn.pg_auth),
        };
        let kafka = match self {
            Command::Redrive(args) => Some(args.kafka.kafka_auth),
            other => other.run_args().map(|args| args.kafka.kafka_auth),
        };
        pg == Some(super::PgAuthMode::RdsIam) || kafka == Some(super::KafkaAuthMode::MskIam)
    }
}

fn pg_passwords(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Ok(config) = url.parse::<tokio_postgres::Config>() {
        if let Some(password) = config.get_password() {
            found.push(String::from_utf8_lossy(password).into_owned());
        }
    }
    // The percent-encoded form, as it appears in the URL itself.
    found.extend(url_password(url));
    found
}

#[cfg(test)]
mod tests {
    use super::super::Cli;
    use clap::Parser;

    fn secrets(argv: &[&str]) -> Vec<String> {
        let cli = Cli::try_parse_from(argv).unwrap();
        cli.command.secrets()
    }

    #[test]
    fn the_alert_webhooks_password_is_a_secret() {
        let found = secrets(&[
            "walrelay",
            "run",
            "--pg-url",
            "postgres://u@h/db",
            "--kafka-brokers",
            "k:9092",
            "--alert-webhook",
            "http://ops:hook%2Fpass@alerts:8080/hook",
        ]);
        assert_eq!(
            found,
            vec!["hook/pass".to_string(), "hook%2Fpass".to_string()]
        );
    }

    #[test]
    fn the_schema_registrys_password_and_token_are_secrets() {
        let found = secrets(&[
            "walrelay",
            "run",
            "--pg-url",
            "postgres://u@h/db",
            "--kafka-brokers",
            "k:9092",
            "--schema-registry-url",
            "http://reg:8081",
            "--schema-registry-basic-auth-user-info",
            "svc:reg-s3cret",
            "--schema-registry-bearer-token",
            "tok-123",
            "--schema-registry-oauth-client-secret",
            "client-s3cret",
        ]);
        assert_eq!(
            found,
            vec![
                "reg-s3cret".to_string(),
                "tok-123".to_string(),
                "client-s3cret".to_string()
            ]
        );
    }

    #[test]
    fn the_postgres_password_is_a_secret_in_both_spellings() {
        let found = secrets(&[
            "walrelay",
            "run",
            "--pg-url",
            "postgres://u:p%40ss-word@h:5432/db",
            "--kafka-brokers",
            "k:9092",
        ]);
        assert!(found.contains(&"p@ss-word".to_string()), "{found:?}");
        assert!(found.contains(&"p%40ss-word".to_string()), "{found:?}");
    }

    #[test]
    fn the_primarys_password_is_a_secret_too() {
        let found = secrets(&[
            "walrelay",
            "check",
            "--pg-url",
            "postgres://u@standby/db",
            "--pg-primary-url",
            "postgres://u:pr%40mary-pass@primary/db",
            "--kafka-brokers",
            "k:9092",
        ]);
        assert_eq!(found, vec!["pr@mary-pass", "pr%40mary-pass"]);
    }

    #[test]
    fn aws_credentials_in_the_environment_are_secrets_when_walrelay_signs_with_them() {
        // Set for this test alone: no other test reads it.
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "aws-secret-in-env");
        let argv = |auth| {
            secrets(&[
                "walrelay",
                "status",
                "--pg-url",
                "postgres://u@h/db",
                "--pg-auth",
                auth,
            ])
        };
        assert!(argv("rds-iam").contains(&"aws-secret-in-env".to_string()));
        assert!(!argv("password").contains(&"aws-secret-in-env".to_string()));
        std::env::remove_var("AWS_SECRET_ACCESS_KEY");
    }

    #[test]
    fn credential_properties_are_secrets_and_others_are_not() {
        let found = secrets(&[
            "walrelay",
            "status",
            "--pg-url",
            "host=h password=kv-secret dbname=db",
        ]);
        assert_eq!(found, vec!["kv-secret".to_string()]);
        let found = secrets(&[
            "walrelay",
            "run",
            "--pg-url",
            "postgres://u@h/db",
            "--kafka-brokers",
            "k:9092",
            "-X",
            "sasl.password=kafka-secret",
            "-X",
            "linger.ms=50",
            "-X",
            "sasl.pasword=typo-secret",
        ]);
        assert_eq!(found, ["kafka-secret", "typo-secret"]);
    }
}
