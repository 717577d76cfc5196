//! The flags of `walrelay redrive`, and the settings built from them.

use clap::Args;
use rdkafka::config::ClientConfig;

use super::KafkaArgs;
use crate::error::{Error, Result};
use crate::kafka::client::client_config;
use crate::kafka::factory::consumer_config;
use crate::kafka::topics::TopicPolicy;
use crate::outbox::routing::validate_topic;

#[derive(Args, Clone)]
pub struct RedriveArgs {
    #[command(flatten)]
    pub kafka: KafkaArgs,

    #[command(flatten)]
    pub aws: super::AwsArgs,

    /// The dead-letter topic to read (the --dead-letter-topic of walrelay run).
    #[arg(
        long,
        help_heading = "Redrive",
        env = "WALRELAY_DEAD_LETTER_TOPIC",
        default_value = "walrelay.dead-letter"
    )]
    pub dead_letter_topic: String,

    /// max.message.bytes of the dead-letter topic, if redrive has to create it, and the largest record it sends back there.
    #[arg(
        long,
        help_heading = "Redrive",
        env = "WALRELAY_DEAD_LETTER_MAX_MESSAGE_BYTES",
        default_value_t = 8_388_608
    )]
    pub dead_letter_max_message_bytes: usize,

    /// The consumer group that keeps redrive's position in the dead-letter topic, so a second run sends nothing again.
    #[arg(
        long,
        env = "WALRELAY_REDRIVE_GROUP",
        default_value = "walrelay.redrive"
    )]
    pub group: String,

    /// Redrive only records whose event_type header is one of these (repeat or comma-separate); the others go back to the end of the dead-letter topic unchanged.
    #[arg(
        long,
        env = "WALRELAY_REDRIVE_FILTER_EVENT_TYPE",
        value_delimiter = ','
    )]
    pub filter_event_type: Vec<String>,

    /// Print what would be sent, skipped or failed; send nothing and leave the group's position where it is.
    #[arg(long, help_heading = "Redrive", env = "WALRELAY_REDRIVE_DRY_RUN")]
    pub dry_run: bool,

    /// Print JSON lines (one per record with --dry-run, then a summary) instead of text.
    #[arg(long, help_heading = "Redrive", env = "WALRELAY_REDRIVE_JSON")]
    pub json: bool,
}

/// What `redrive` runs with.
pub struct RedriveSettings {
    pub dead_letter_topic: String,
    pub group: String,
    /// Empty: every record.
    pub event_types: Vec<String>,
    pub dry_run: bool,
    pub json: bool,
    /// For the producer: run's configuration, one record per batch (below).
    pub producer: ClientConfig,
    /// For the reader of the dead-letter topic.
    pub consumer: ClientConfig,
    pub topics: TopicPolicy,
}

impl RedriveArgs {
    pub fn settings(&self) -> Result<RedriveSettings> {
        validate_topic(&self.dead_letter_topic)
            .map_err(|e| Error::permanent(format!("--dead-letter-topic: {e}")))?;
        if self.group.trim().is_empty() {
            return Err(Error::permanent(
                "--group is empty: name the consumer group that keeps redrive's position, \
                 e.g. walrelay.redrive",
            ));
        }
        if self.filter_event_type.iter().any(|t| t.is_empty()) {
            return Err(Error::permanent(
                "--filter-event-type has an empty entry: give event types separated by commas, \
                 e.g. OrderPlaced,OrderShipped",
            ));
        }
        let properties = self.kafka.client_properties(&self.aws)?;
        let brokers = super::settings::kafka_brokers(&self.kafka.kafka_brokers, &properties)?;
        let mut producer = client_config(&brokers, &properties, self.dead_letter_max_message_bytes);
        crate::kafka::client::require_workable(&producer)?;
        // One record per batch: the dead-letter topic holds records a broker
        // refused, and a broker refuses a whole batch for one record too
        // large, so each refusal must be the record's own. -X may override.
        // (batch.size too: the topic manager checks it against each topic's limit.)
        for key in ["batch.num.messages", "batch.size"] {
            if !properties.iter().any(|(k, _)| k == key) {
                producer.set(key, "1");
            }
        }
        let consumer = consumer_config(
            &[
                ("bootstrap.servers", &brokers),
                ("client.id", "walrelay-redrive"),
                ("group.id", &self.group),
                // The position moves only when redrive commits it, after
                // Kafka acknowledged what it sent.
                ("enable.auto.commit", "false"),
                ("enable.auto.offset.store", "false"),
                ("auto.offset.reset", "earliest"),
            ],
            properties.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            &[],
        );
        let topics = super::settings::topic_policy(
            &self.kafka,
            &self.dead_letter_topic,
            self.dead_letter_max_message_bytes,
        )?;
        Ok(RedriveSettings {
            dead_letter_topic: self.dead_letter_topic.clone(),
            group: self.group.clone(),
            event_types: self.filter_event_type.clone(),
            dry_run: self.dry_run,
            json: self.json,
            producer,
            consumer,
            topics,
        })
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::super::{Cli, Command};
    use super::*;

    fn redrive(extra: &[&str]) -> RedriveArgs {
        let mut argv = vec!["walrelay", "redrive", "--kafka-brokers", "k:9092"];
        argv.extend_from_slice(extra);
        let Command::Redrive(args) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("expected redrive");
        };
        *args
    }

    #[test]
    fn redrive_reads_run_s_dead_letter_topic_in_its_own_group_by_default() {
        let s = redrive(&[]).settings().unwrap();
        assert_eq!(s.dead_letter_topic, "walrelay.dead-letter");
        assert_eq!(s.group, "walrelay.redrive");
        assert!(s.event_types.is_empty() && !s.dry_run);
        assert_eq!(s.consumer.get("group.id"), Some("walrelay.redrive"));
        assert_eq!(s.consumer.get("enable.auto.commit"), Some("false"));
        assert_eq!(s.producer.get("enable.idempotence"), Some("true"));
        assert_eq!(s.producer.get("batch.num.messages"), Some("1"));
    }

    #[test]
    fn security_properties_reach_both_clients_and_producer_ones_only_the_producer() {
        let s = redrive(&["-X", "security.protocol=SASL_SSL", "-X", "linger.ms=20"])
            .settings()
            .unwrap();
        assert_eq!(s.consumer.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(s.producer.get("security.protocol"), Some("SASL_SSL"));
        assert_eq!(s.producer.get("linger.ms"), Some("20"));
        assert_eq!(s.consumer.get("linger.ms"), None);
    }

    #[test]
    fn a_producer_that_would_report_no_delivery_is_refused() {
        // Redrive moves its group's position only after Kafka acknowledged.
        let Err(e) = redrive(&["-X", "delivery.report.only.error=true"]).settings() else {
            panic!("a producer reporting failures alone was accepted");
        };
        assert!(e.to_string().contains("remove it"), "{e}");
    }

    #[test]
    fn event_types_are_comma_separated_and_an_empty_one_is_refused() {
        let s = redrive(&["--filter-event-type", "A,B", "--filter-event-type", "C"])
            .settings()
            .unwrap();
        assert_eq!(s.event_types, ["A", "B", "C"]);
        let Err(e) = redrive(&["--filter-event-type", "A,,B"]).settings() else {
            panic!("an empty event type was accepted");
        };
        assert!(e.to_string().contains("OrderPlaced,OrderShipped"), "{e}");
    }
}
