//! Creates each topic walrelay routes to before it first produces there.
//! Production clusters usually disable auto-creation; a user without the
//! right to create topics must have created them already, and is told so.

use std::collections::HashSet;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use tracing::info;

use crate::error::{Error, Result};

const ADMIN_TIMEOUT: Duration = Duration::from_secs(30);

pub struct TopicManager {
    admin: AdminClient<DefaultClientContext>,
    partitions: i32,
    /// -1 asks the broker for its default (KIP-464).
    replication_factor: i32,
    known: HashSet<String>,
}

impl TopicManager {
    pub fn new(
        config: &ClientConfig,
        partitions: i32,
        replication_factor: Option<i32>,
    ) -> Result<Self> {
        let admin = config.create().map_err(|e| {
            Error::permanent("cannot create the Kafka admin client; check the -X properties")
                .with_source(e)
        })?;
        Ok(TopicManager {
            admin,
            partitions,
            replication_factor: replication_factor.unwrap_or(-1),
            known: HashSet::new(),
        })
    }

    /// Makes sure `topic` exists. Cheap after the first call for a topic.
    pub async fn ensure(&mut self, topic: &str) -> Result<()> {
        if self.known.contains(topic) {
            return Ok(());
        }
        let new_topic = NewTopic::new(
            topic,
            self.partitions,
            TopicReplication::Fixed(self.replication_factor),
        );
        let options = AdminOptions::new().operation_timeout(Some(ADMIN_TIMEOUT));
        let results = self
            .admin
            .create_topics([&new_topic], &options)
            .await
            .map_err(|e| {
                Error::transient(format!("cannot reach Kafka to create topic {topic}"))
                    .with_source(e)
            })?;
        for result in results {
            match result {
                Ok(_) => info!(topic, partitions = self.partitions, "created topic"),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((_, code))
                    if matches!(
                        code,
                        RDKafkaErrorCode::TopicAuthorizationFailed
                            | RDKafkaErrorCode::ClusterAuthorizationFailed
                    ) =>
                {
                    if !self.exists(topic).await? {
                        return Err(Error::permanent(format!(
                            "topic {topic} does not exist and walrelay may not create it ({code}): \
                             create the topic, or grant walrelay's principal CREATE on the cluster"
                        )));
                    }
                }
                Err((_, code))
                    if matches!(
                        code,
                        RDKafkaErrorCode::InvalidReplicationFactor
                            | RDKafkaErrorCode::InvalidPartitions
                            | RDKafkaErrorCode::PolicyViolation
                            | RDKafkaErrorCode::InvalidConfig
                    ) =>
                {
                    return Err(Error::permanent(format!(
                        "Kafka refused to create topic {topic} ({code}): adjust \
                         --topic-partitions / --topic-replication-factor, or create the topic yourself"
                    )));
                }
                Err((_, code)) => {
                    return Err(Error::transient(format!(
                        "Kafka could not create topic {topic}: {code}"
                    )))
                }
            }
        }
        self.known.insert(topic.to_string());
        Ok(())
    }

    async fn exists(&self, topic: &str) -> Result<bool> {
        // fetch_metadata blocks; this is rare (only for a topic walrelay may not create).
        let metadata = tokio::task::block_in_place(|| {
            self.admin
                .inner()
                .fetch_metadata(Some(topic), ADMIN_TIMEOUT)
        })
        .map_err(|e| {
            Error::transient(format!("cannot read metadata of topic {topic}")).with_source(e)
        })?;
        Ok(metadata
            .topics()
            .iter()
            .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()))
    }
}
