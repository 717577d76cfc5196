//! `walrelay check`'s look at what an acknowledgement is worth. walrelay
//! confirms a position once Kafka acknowledges with `acks=all`, which waits
//! only for the in-sync replicas: with a replication factor of 1, or
//! `min.insync.replicas = 1`, an acknowledged event lives on one disk, and
//! losing that broker loses it after the slot has moved past it.

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::metadata::Metadata;

use super::Check;
use crate::config::Settings;

const NAME: &str = "kafka.durability";

/// Warns when existing outbox topics (the names `routed` matches), or the
/// topics walrelay would create, keep an acknowledged event on fewer than
/// two brokers.
pub async fn check(
    admin: &AdminClient<DefaultClientContext>,
    metadata: &Metadata,
    settings: &Settings,
    routed: &regex::Regex,
    timeout: std::time::Duration,
) -> Check {
    let pattern = routed;
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let mut weak = Vec::new();
    let mut seen = Vec::new();

    let topics: Vec<(&str, usize)> = metadata
        .topics()
        .iter()
        .filter(|t| pattern.is_match(t.name()) || t.name() == settings.dead_letter_topic())
        .map(|t| {
            let replicas = t.partitions().iter().map(|p| p.replicas().len()).min();
            (t.name(), replicas.unwrap_or(0))
        })
        .collect();
    let specifiers: Vec<ResourceSpecifier<'_>> = topics
        .iter()
        .map(|(name, _)| ResourceSpecifier::Topic(name))
        .collect();
    let min_isr = match admin.describe_configs(&specifiers, &options).await {
        Ok(results) => results
            .into_iter()
            .map(|r| r.ok().and_then(|c| number(&c, "min.insync.replicas")))
            .collect(),
        Err(_) => vec![None; topics.len()],
    };
    for ((name, replicas), min_isr) in topics.iter().zip(min_isr) {
        seen.push(format!(
            "{name}: replication factor {replicas}, min.insync.replicas {}",
            min_isr.map_or("?".to_string(), |m| m.to_string())
        ));
        if let Some(problem) = weakness(*replicas as i64, min_isr) {
            weak.push(format!("{name} ({problem})"));
        }
    }

    // What walrelay creates: the flag, or the broker's defaults.
    let broker = metadata.brokers().first().map(|b| b.id());
    let defaults = match broker {
        Some(id) => admin
            .describe_configs([&ResourceSpecifier::Broker(id)], &options)
            .await
            .ok()
            .and_then(|mut r| r.pop())
            .and_then(|r| r.ok()),
        None => None,
    };
    let factor = settings
        .topics
        .replication_factor
        .map(i64::from)
        .or_else(|| {
            defaults
                .as_ref()
                .and_then(|c| number(c, "default.replication.factor"))
        });
    let default_isr = defaults
        .as_ref()
        .and_then(|c| number(c, "min.insync.replicas"));
    if settings.topics.create {
        seen.push(format!(
            "new topics: replication factor {}, min.insync.replicas {}",
            factor.map_or("?".to_string(), |f| f.to_string()),
            default_isr.map_or("?".to_string(), |m| m.to_string())
        ));
        if let Some(problem) = factor.and_then(|f| weakness(f, default_isr)) {
            weak.push(format!("topics walrelay creates ({problem})"));
        }
    }

    if weak.is_empty() {
        return Check::pass(NAME, seen.join("; "));
    }
    Check::warn(
        NAME,
        format!(
            "an event Kafka acknowledges (acks=all) may live on a single broker for {}: losing \
             it loses events walrelay has already confirmed to Postgres",
            weak.join(", ")
        ),
        "for production, create the outbox topics with replication factor 3 and \
         min.insync.replicas=2 (--topic-replication-factor 3, and min.insync.replicas on the \
         broker or the topics)",
    )
}

/// Why this replication leaves an acknowledged record on one broker.
fn weakness(replication_factor: i64, min_isr: Option<i64>) -> Option<String> {
    if replication_factor <= 1 {
        return Some(format!("replication factor {replication_factor}"));
    }
    match min_isr {
        Some(m) if m <= 1 => Some("min.insync.replicas 1".to_string()),
        _ => None,
    }
}

fn number(config: &rdkafka::admin::ConfigResource, key: &str) -> Option<i64> {
    config.get(key)?.value.as_deref()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::weakness;

    #[test]
    fn one_replica_or_one_in_sync_replica_is_weak() {
        assert!(weakness(1, Some(1)).is_some());
        assert!(weakness(3, Some(1)).is_some());
        assert!(weakness(3, Some(2)).is_none());
        assert!(weakness(3, None).is_none(), "unknown is not a warning");
    }
}
