//! Command-line flags (each with an env var), their validation, and the
//! settings derived from them.

mod delivery;
mod env_errors;
mod kafka_env;
mod lifecycle;
mod redrive;
mod retention;
mod run;
mod schema_registry;
mod secrets;
mod settings;

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use delivery::{Delivery, DeliveryArgs, ExactlyOnce};
pub use lifecycle::{AuditArgs, AuditFlags, ReplayArgs, ReplayFlags};
pub use redrive::{RedriveArgs, RedriveSettings};
pub use run::{
    FlowArgs, KafkaArgs, KafkaAuthMode, MappingArgs, PoisonArgs, RunArgs, SnapshotArgs, SourceArgs,
    WatchdogArgs,
};
pub use schema_registry::SchemaRegistryArgs;
pub use settings::{Flow, Settings, SnapshotPlan, Timeouts};

use crate::error::{Error, Result};
use crate::postgres::PgTarget;

#[derive(Parser)]
#[command(
    name = "walrelay",
    version,
    about = "Publishes a Postgres transactional outbox to Kafka through a pgoutput logical replication slot"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log lines on stderr: text for people, json for log pipelines (one object per line).
    #[arg(long, global = true, env = "WALRELAY_LOG_FORMAT", value_enum, default_value_t = crate::logging::LogFormat::Text)]
    pub log_format: crate::logging::LogFormat,
}

#[derive(Subcommand)]
pub enum Command {
    /// Stream outbox inserts to Kafka until stopped (SIGTERM or SIGINT).
    Run(Box<RunArgs>),
    /// Check Postgres and Kafka are ready for `run` (same flags) and print each failure's fix.
    Check(Box<CheckArgs>),
    /// Print the slot's state for people on call; exits non-zero when the slot is missing or lost.
    Status(StatusArgs),
    /// Publish the dead-letter topic's records again to their original topics; a second run sends nothing again.
    Redrive(Box<RedriveArgs>),
    /// Publish outbox rows again, as they are now, to the topics run would give them (same flags as run).
    Replay(Box<ReplayArgs>),
    /// Check that every outbox row of a time window has its event in its topic; exit 1 naming the missing (same flags as run).
    Audit(Box<AuditArgs>),
    /// Print the walrelay command equivalent to a Debezium connector with the outbox EventRouter.
    MigrateFromDebezium {
        /// The connector configuration: Kafka Connect JSON or a .properties file.
        config: std::path::PathBuf,
        /// Take over Debezium's pgoutput slot after it stopped, instead of a new slot.
        #[arg(long)]
        reuse_slot: bool,
    },
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) of walrelay or of one subcommand.
    Man {
        /// A subcommand, e.g. run, for its own page walrelay-run(1).
        subcommand: Option<String>,
    },
    /// Print every record of TOPICs as JSON lines once COUNT are in: the demo's reader (scripts/demo.sh), hidden.
    #[command(hide = true)]
    Tail {
        /// Kafka bootstrap servers.
        #[arg(long)]
        kafka_brokers: String,
        /// How many records to wait for, across the topics.
        #[arg(long, default_value_t = 1)]
        count: usize,
        /// How long to wait for them.
        #[arg(long, value_parser = parse_duration, default_value = "60s")]
        timeout: Duration,
        /// The topics, read from their start.
        #[arg(required = true)]
        topics: Vec<String>,
    },
}

/// The database, slot and publication: shared by `run` and `status`.
#[derive(Args, Clone)]
pub struct ConnArgs {
    /// Postgres connection: a URL (postgres://user:pass@host:5432/db) or key=value string.
    #[arg(long, env = "WALRELAY_PG_URL", hide_env_values = true)]
    pub pg_url: String,

    /// The logical replication slot; created with pgoutput if absent, never dropped.
    #[arg(long, env = "WALRELAY_SLOT", default_value = "walrelay")]
    pub slot: String,

    /// The publication; created for the table with publish = 'insert' if absent.
    #[arg(long, env = "WALRELAY_PUBLICATION", default_value = "walrelay")]
    pub publication: String,

    /// The table where walrelay remembers each slot (created if absent; sql/walrelay_state.sql for a least-privilege role).
    #[arg(long, env = "WALRELAY_STATE_TABLE", default_value = crate::postgres::state::DEFAULT_TABLE)]
    pub state_table: crate::postgres::names::TableName,

    /// How walrelay logs in to Postgres: the password of --pg-url (or PGPASSWORD), or an RDS/Aurora IAM token signed for each connection and sent over TLS.
    #[arg(long, env = "WALRELAY_PG_AUTH", value_enum, default_value_t = PgAuthMode::Password)]
    pub pg_auth: PgAuthMode,
}

/// How walrelay logs in to Postgres (`--pg-auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PgAuthMode {
    /// The password of --pg-url, or PGPASSWORD.
    Password,
    /// An RDS/Aurora IAM token from the AWS credential chain.
    RdsIam,
}

/// The AWS region tokens are signed for: shared by `--pg-auth rds-iam` and `--kafka-auth msk-iam`.
#[derive(Args, Clone, Debug)]
#[command(next_help_heading = "AWS")]
pub struct AwsArgs {
    /// The AWS region of the database and the MSK cluster, for --pg-auth rds-iam and --kafka-auth msk-iam [default: AWS_REGION, else AWS_DEFAULT_REGION].
    #[arg(long, env = "WALRELAY_AWS_REGION")]
    pub aws_region: Option<String>,
}

#[derive(Args, Clone)]
pub struct StatusArgs {
    #[command(flatten)]
    pub conn: ConnArgs,

    #[command(flatten)]
    pub aws: AwsArgs,

    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Clone)]
pub struct CheckArgs {
    #[command(flatten)]
    pub run: RunArgs,

    /// Print JSON (name, status, detail, fix of each check) instead of a checklist.
    #[arg(long, env = "WALRELAY_CHECK_JSON")]
    pub json: bool,
}

impl ConnArgs {
    /// Parses the Postgres URL, with how to log in, and checks the slot name.
    pub fn validate(&self, aws: &AwsArgs) -> Result<PgTarget> {
        let mut pg = PgTarget::parse(&self.pg_url)?;
        if self.pg_auth == PgAuthMode::RdsIam {
            let region = crate::postgres::auth::aws_region(aws.aws_region.as_deref())?;
            pg = pg.with_rds_iam(region)?;
        } else if pg.config.get_password().is_none() {
            // libpq's rule: PGPASSWORD when the connection string has no
            // password, so that a command line (or a printed one) can name the
            // database without its secret.
            if let Some(password) = pg_password_from_env() {
                pg.config.password(password);
            }
        }
        let valid_slot = !self.slot.is_empty()
            && self.slot.len() <= 63
            && self
                .slot
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid_slot {
            return Err(Error::permanent(format!(
                "--slot {:?} is not a valid slot name: use up to 63 lower-case letters, digits and underscores",
                self.slot
            )));
        }
        Ok(pg)
    }
}

/// The environment variable libpq reads the password from.
pub const PG_PASSWORD_ENV: &str = "PGPASSWORD";

/// The password in PGPASSWORD, if set and not empty (libpq ignores an empty one).
pub fn pg_password_from_env() -> Option<String> {
    std::env::var(PG_PASSWORD_ENV)
        .ok()
        .filter(|password| !password.is_empty())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Source {
    /// INSERTs into the outbox table.
    Table,
    /// Transactional pg_logical_emit_message(true, prefix, content) calls: no table at all.
    Messages,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnUpdate {
    /// Log a warning and go on.
    Warn,
    /// Log an error and go on.
    Error,
    /// Stop walrelay.
    Fatal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MissingField {
    /// Stop with an error naming the column.
    Error,
    /// Leave the header or envelope field out.
    Ignore,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnPoison {
    /// Stop with an error naming the event; the slot stays before it.
    Halt,
    /// Publish it to --dead-letter-topic with the reason in headers, and go on.
    DeadLetter,
}

/// The key=value pairs of one `-X` (or of `WALRELAY_KAFKA_PROPERTIES`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Properties(pub Vec<(String, String)>);

/// Pairs separated by commas. A comma starts a new pair only when what
/// follows is itself `name=…`; otherwise it belongs to the value, so lists
/// such as `debug=broker,topic` or `ssl.cipher.suites=A,B` pass whole.
/// `\,` is a comma that never separates.
fn parse_properties(s: &str) -> std::result::Result<Properties, String> {
    let is_name = |name: &str| {
        !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    const ESCAPED_COMMA: char = '\u{0}';
    let s = s.replace("\\,", &ESCAPED_COMMA.to_string());
    let mut pairs: Vec<(String, String)> = Vec::new();
    for segment in s.split(',') {
        match segment.split_once('=') {
            Some((key, value)) if is_name(key.trim()) => {
                pairs.push((key.trim().to_string(), value.to_string()))
            }
            _ => match pairs.last_mut() {
                Some((_, value)) => {
                    value.push(',');
                    value.push_str(segment);
                }
                None => {
                    // Not shown: it may be a password with a typo in it.
                    return Err(
                        "expected key=value, e.g. -X linger.ms=5 (what was given is not \
                                shown: it may hold a secret)"
                            .to_string(),
                    );
                }
            },
        }
    }
    for (_, value) in &mut pairs {
        *value = value.replace(ESCAPED_COMMA, ",");
    }
    Ok(Properties(pairs))
}

/// Bytes with an optional unit: 1048576, 512MiB, 1GB, 10 GiB.
fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (number, unit) = s.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("expected a size like 512MiB or 1073741824, got {s:?}"))?;
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "kib" | "k" => 1 << 10,
        "mb" => 1_000_000,
        "mib" | "m" => 1 << 20,
        "gb" => 1_000_000_000,
        "gib" | "g" => 1 << 30,
        "tb" => 1_000_000_000_000,
        "tib" | "t" => 1 << 40,
        other => {
            return Err(format!(
                "unknown size unit {other:?} (use B, KiB, MiB, GiB, TiB, kB, MB, GB, TB)"
            ))
        }
    };
    number
        .checked_mul(factor)
        .ok_or_else(|| format!("size {s:?} is too large"))
}

fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 10s, 2m)"))
}

/// A `walrelay run` command line with a database and brokers that need not
/// exist, plus `extra`: for tests of what the flags become.
#[cfg(test)]
pub(crate) fn run_args(extra: &[&str]) -> RunArgs {
    let mut argv = vec![
        "walrelay",
        "run",
        "--pg-url",
        "postgres://u:hunter2@localhost/db",
        "--kafka-brokers",
        "localhost:9092",
    ];
    argv.extend_from_slice(extra);
    let Command::Run(args) = Cli::try_parse_from(argv).unwrap().command else {
        panic!("expected run");
    };
    *args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "aws")]
    #[test]
    fn with_rds_iam_the_primary_logs_in_with_a_token_of_its_own_host_too() {
        let argv = [
            "walrelay",
            "run",
            "--pg-url",
            "postgres://relay@replica.example.com/app?sslmode=require",
            "--pg-primary-url",
            "postgres://relay@primary.example.com/app?sslmode=require",
            "--pg-auth",
            "rds-iam",
            "--aws-region",
            "eu-west-1",
            "--kafka-brokers",
            "localhost:9092",
        ];
        let Command::Run(args) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("expected run");
        };
        let s = Settings::from_args(&args).unwrap();
        let rds = crate::postgres::PgAuth::RdsIam {
            region: "eu-west-1".into(),
        };
        assert_eq!(s.pg.auth, rds);
        assert_eq!(s.pg_primary.expect("a primary").auth, rds);
    }

    #[test]
    fn defaults_follow_the_documented_values() {
        let a = run_args(&[]);
        let s = Settings::from_args(&a).unwrap();
        assert_eq!(s.tables_text(), "public.outbox");
        assert_eq!(s.slot, "walrelay");
        assert_eq!(s.watchdog.lag_warn_bytes, 1 << 30);
        assert_eq!(s.mapping.route_by, "event_type");
        assert_eq!(s.router.topic("X").unwrap(), "outbox.event.X");
        assert_eq!(s.metrics_addr.to_string(), "127.0.0.1:9187");
        assert_eq!(s.topics.partitions, 3);
        assert!(s.failover_slot);
    }

    #[test]
    fn several_outbox_tables_are_repeated_or_comma_separated_and_each_named_once() {
        let s = Settings::from_args(&run_args(&[
            "--table",
            "app.outbox,billing.outbox",
            "--table",
            "o",
        ]))
        .unwrap();
        assert_eq!(s.tables_text(), "app.outbox, billing.outbox, public.o");
        let Err(twice) = Settings::from_args(&run_args(&["--table", "outbox,public.outbox"]))
        else {
            panic!("a table named twice was accepted");
        };
        assert!(twice.to_string().contains("twice"), "{twice}");
    }

    #[test]
    fn an_empty_broker_list_or_entry_is_refused_with_an_example() {
        let with_brokers = |list: &str| {
            let mut args = run_args(&[]);
            args.kafka.kafka_brokers = list.to_string();
            args
        };
        for list in ["", " ", "kafka-1:9092,", "a:1,,b:2"] {
            let Err(e) = Settings::from_args(&with_brokers(list)) else {
                panic!("--kafka-brokers {list:?} was accepted");
            };
            let text = e.to_string();
            assert!(
                text.contains("--kafka-brokers") && text.contains("kafka-1:9092,kafka-2:9092"),
                "{text}"
            );
        }
        assert!(Settings::from_args(&with_brokers("a:1,b:2")).is_ok());
    }

    #[test]
    fn failover_slot_is_on_unless_turned_off_explicitly() {
        assert!(run_args(&["--failover-slot"]).source.failover_slot);
        assert!(!run_args(&["--failover-slot=false"]).source.failover_slot);
        assert!(!run_args(&["--failover-slot", "false"]).source.failover_slot);
    }

    #[test]
    fn kafka_properties_repeat_and_keep_equals_signs_in_values() {
        let a = run_args(&["-X", "linger.ms=5", "-X", "sasl.jaas.config=a=b"]);
        assert_eq!(
            a.kafka.properties(),
            vec![
                ("linger.ms".into(), "5".into()),
                ("sasl.jaas.config".into(), "a=b".into())
            ]
        );
    }

    #[test]
    fn an_alias_is_the_same_property_as_its_name_and_a_later_one_wins() {
        let a = run_args(&[
            "-X",
            "request.required.acks=1",
            "-X",
            "acks=all,max.in.flight=5",
            "-X",
            "auto.commit.enable=false",
        ]);
        assert_eq!(
            a.kafka.properties(),
            vec![
                ("acks".into(), "1".into()),
                ("acks".into(), "all".into()),
                ("max.in.flight.requests.per.connection".into(), "5".into()),
                // A topic property of the legacy consumer, not an alias of
                // the global enable.auto.commit.
                ("auto.commit.enable".into(), "false".into()),
            ]
        );
        let settings =
            Settings::from_args(&run_args(&["-X", "metadata.broker.list= localhost:9092"]))
                .unwrap();
        assert_eq!(
            settings.kafka.get("bootstrap.servers"),
            Some(" localhost:9092")
        );
        assert_eq!(settings.kafka.get("metadata.broker.list"), None);
    }

    #[test]
    fn compression_in_any_spelling_leaves_a_records_size_to_the_broker() {
        let compressed = |extra: &[&str]| {
            Settings::from_args(&run_args(extra))
                .unwrap()
                .topics
                .compressed
        };
        assert!(!compressed(&[]));
        assert!(!compressed(&["-X", "compression.type=none"]));
        assert!(!compressed(&["-X", "topic.compression.codec=inherit"]));
        for given in [
            "compression.type=gzip",
            "compression.codec=lz4",
            "topic.compression.codec=zstd",
            "topic.compression.type=snappy",
        ] {
            assert!(compressed(&["-X", given]), "{given}");
        }
    }

    #[test]
    fn brokers_named_by_a_property_as_well_as_by_the_flag_must_be_the_same() {
        let Err(e) = Settings::from_args(&run_args(&["-X", "metadata.broker.list=other:9092"]))
        else {
            panic!("two lists of brokers were accepted");
        };
        let e = e.to_string();
        assert!(
            e.contains("other:9092")
                && e.contains("localhost:9092")
                && e.contains("--kafka-brokers"),
            "{e}"
        );
    }

    #[test]
    fn a_property_given_under_another_name_wins_over_walrelays_default_at_every_start() {
        let args = run_args(&[
            "-X",
            "max.in.flight=5,queue.buffering.max.ms=7",
            "-X",
            "topic.partitioner=consistent",
        ]);
        // Each start's map of properties has an order of its own: with both
        // names in it, some of these had run with walrelay's own values.
        for _ in 0..32 {
            let settings = Settings::from_args(&args).unwrap();
            let native = settings.kafka.create_native_config().unwrap();
            let get = |name| native.get(name).unwrap();
            assert_eq!(get("max.in.flight.requests.per.connection"), "5");
            assert_eq!(get("linger.ms"), "7");
            assert_eq!(get("partitioner"), "consistent");
        }
    }

    #[test]
    fn a_comma_separates_properties_but_stays_inside_a_list_value() {
        let a = run_args(&["-X", "debug=broker,topic,msg", "-X", "acks=all,linger.ms=1"]);
        assert_eq!(
            a.kafka.properties(),
            vec![
                ("debug".into(), "broker,topic,msg".into()),
                ("acks".into(), "all".into()),
                ("linger.ms".into(), "1".into())
            ]
        );
        assert!(parse_properties("broker,topic").is_err());
        assert_eq!(
            parse_properties(r"sasl.oauthbearer.extensions=a=1\,b=2").unwrap(),
            Properties(vec![(
                "sasl.oauthbearer.extensions".into(),
                "a=1,b=2".into()
            )])
        );
    }

    #[test]
    fn debug_output_hides_the_password() {
        let a = run_args(&["-X", "sasl.password=topsecret"]);
        let text = format!("{a:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("topsecret"), "{text}");
    }

    #[test]
    fn sizes_accept_binary_and_decimal_units() {
        assert_eq!(parse_bytes("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_bytes("1GB").unwrap(), 1_000_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert!(parse_bytes("12 parsecs").is_err());
    }

    #[test]
    fn invalid_slot_name_is_rejected_with_the_rule() {
        let Err(err) = Settings::from_args(&run_args(&["--slot", "My-Slot"])) else {
            panic!("an invalid slot name was accepted");
        };
        assert!(err.to_string().contains("lower-case letters"), "{err}");
    }

    #[test]
    fn json_with_schema_combinations_it_cannot_write_are_refused_at_start_up() {
        // JsonSchemaData's schema of an expanded payload is written as Debezium writes it.
        let expanded = [
            "--value-format",
            "json-with-schema",
            "--expand-json-payload",
        ];
        assert!(Settings::from_args(&run_args(&expanded)).is_ok());
        let err = refused(&["--key-format", "json-with-schema", "--source", "messages"]);
        assert!(err.contains("--source messages"), "{err}");
        let envelope = [
            "--value-format",
            "json-with-schema",
            "--fields-additional-placement",
            "t:envelope",
        ];
        let err = refused(&envelope);
        assert!(err.contains("--schema-topic-prefix"), "{err}");
        let named = [&envelope[..], &["--schema-topic-prefix", "dbserver1"]].concat();
        assert!(Settings::from_args(&run_args(&named)).is_ok());
    }

    #[test]
    fn extended_headers_need_the_logical_name_and_a_table() {
        let err = refused(&["--extended-headers"]);
        assert!(err.contains("--schema-topic-prefix"), "{err}");
        let named = ["--extended-headers", "--schema-topic-prefix", "dbserver1"];
        let err = refused(&[&named[..], &["--source", "messages"]].concat());
        assert!(err.contains("--source messages"), "{err}");
        let settings = Settings::from_args(&run_args(&named)).unwrap();
        assert!(settings.mapping.extended_headers.is_some());
    }

    /// Why `extra` is refused at start-up.
    fn refused(extra: &[&str]) -> String {
        Settings::from_args(&run_args(extra))
            .err()
            .unwrap()
            .to_string()
    }

    #[test]
    fn cloudevents_are_refused_at_start_where_debeziums_task_would_fail_every_event() {
        let ce = [
            "--value-format",
            "cloudevents",
            "--schema-topic-prefix",
            "dbserver1",
        ];
        let err = refused(&ce);
        assert!(err.contains("add --expand-json-payload"), "{err}");
        let expanded = [&ce[..], &["--expand-json-payload"]].concat();
        let err = refused(&expanded);
        assert!(err.contains("event_type:header:type"), "{err}");
        let typed = [
            &expanded[..],
            &["--fields-additional-placement", "type:header"],
        ]
        .concat();
        assert!(Settings::from_args(&run_args(&typed)).is_ok());
        let err = refused(
            &[
                &typed[..],
                &["--fields-additional-placement", "type:header,t:envelope"],
            ]
            .concat(),
        );
        assert!(err.contains("envelope"), "{err}");
        let err = refused(&["--key-format", "cloudevents"]);
        assert!(err.contains("value format"), "{err}");
        let err = refused(&["--metadata-headers", "--schema-topic-prefix", "p"]);
        assert!(err.contains("--header-format json-with-schema"), "{err}");
        let err = refused(&["--metadata-headers", "--header-format", "json"]);
        assert!(err.contains("--schema-topic-prefix"), "{err}");
        let err = refused(&["--header-format", "json", "--source", "messages"]);
        assert!(err.contains("--source messages"), "{err}");
    }
}
