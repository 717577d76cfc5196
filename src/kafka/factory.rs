//! Where every Kafka client walrelay makes comes from: the producers of
//! `run`, `replay`, `redrive` and the snapshot, the consumers of the
//! position topic, of `redrive` and of `audit`, and the admin clients of
//! `run` and `check`, and `check`'s probe producers. Each gets its properties the same way (`client` for
//! a producer's, `consumer_config` for a consumer's), its login the same
//! way (SASL, OIDC and Kerberos through librdkafka's properties; the MSK
//! IAM token through `TokenContext` or `keep_admin_token`), and, when
//! librdkafka will not make it, the same error with every secret masked
//! (`secrets::client_refused`).

use std::sync::Arc;

use rdkafka::admin::AdminClient;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::{ClientConfig, FromClientConfigAndContext};
use rdkafka::error::KafkaResult;
use rdkafka::producer::{BaseProducer, ProducerContext};

use super::msk_iam::{keep_admin_token, TokenContext};
use super::polled::{self, Polled};
use super::properties::is_producer_only;
use super::secrets::client_refused;
use crate::error::Result;

/// A consumer's configuration: walrelay's `defaults` (the operator's `-X`
/// may override them), then the `operator`'s properties a consumer takes
/// (a producer's are left off: librdkafka would warn about each), then
/// walrelay's `required` settings, which nothing overrides.
pub fn consumer_config<'a>(
    defaults: &[(&str, &str)],
    operator: impl IntoIterator<Item = (&'a str, &'a str)>,
    required: &[(&str, &str)],
) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in defaults {
        config.set(*key, *value);
    }
    for (key, value) in operator {
        if !is_producer_only(key) {
            config.set(key, value);
        }
    }
    for (key, value) in required {
        config.set(*key, *value);
    }
    config
}

/// A consumer of `config` that logs in as every walrelay client does;
/// `what` names it in the error ("the Kafka consumer").
pub fn consumer<T>(config: &ClientConfig, what: &str) -> Result<T>
where
    T: FromClientConfigAndContext<TokenContext>,
{
    T::from_config_and_context(config, TokenContext).map_err(|e| client_refused(what, &e, config))
}

/// A producer of `config` with `context` (which answers the MSK IAM token
/// hook), and the thread that polls it.
pub fn producer<C: ProducerContext + 'static>(
    config: &ClientConfig,
    context: C,
) -> Result<Polled<C>> {
    polled::create(config, context).map_err(|e| client_refused("the Kafka producer", &e, config))
}

/// A producer its caller polls, or librdkafka's own error, for a probe
/// that words it in a report (`check`'s login and idempotence probes).
/// `context` watches what the probe looks for; it must answer the MSK IAM
/// token hook as `TokenContext` does (`msk_iam::oauth_token_hook!`), or
/// the probe would not log in as `run` does.
pub fn probe_producer<C: ProducerContext>(
    config: &ClientConfig,
    context: C,
) -> KafkaResult<BaseProducer<C>> {
    config.create_with_context(context)
}

/// An admin client with walrelay's properties and login, or librdkafka's
/// own error, for a caller that words it in a report (`check`).
pub fn admin(config: &ClientConfig) -> KafkaResult<Arc<AdminClient<DefaultClientContext>>> {
    let mut config = config.clone();
    // An admin client is a producer to librdkafka, which asks brokers to
    // auto-create topics it looks up: a lookup must not create one.
    config.set("allow.auto.create.topics", "false");
    let admin = Arc::new(config.create()?);
    keep_admin_token(&config, &admin);
    Ok(admin)
}

/// An admin client with walrelay's properties and login.
pub fn admin_client(config: &ClientConfig) -> Result<Arc<AdminClient<DefaultClientContext>>> {
    admin(config).map_err(|e| client_refused("the Kafka admin client", &e, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consumer_takes_the_operators_properties_less_a_producers_between_defaults_and_requirements(
    ) {
        let operator = [
            ("security.protocol", "SASL_SSL"),
            ("client.id", "theirs"),
            ("linger.ms", "20"),
            ("request.required.acks", "1"),
            ("group.id", "theirs"),
        ];
        let config = consumer_config(
            &[("client.id", "walrelay-audit")],
            operator,
            &[("group.id", "walrelay-audit")],
        );
        assert_eq!(config.get("security.protocol"), Some("SASL_SSL"));
        // The operator overrides a default, not a requirement.
        assert_eq!(config.get("client.id"), Some("theirs"));
        assert_eq!(config.get("group.id"), Some("walrelay-audit"));
        assert_eq!(config.get("linger.ms"), None);
        assert_eq!(config.get("request.required.acks"), None);
    }

    #[test]
    fn a_consumer_librdkafka_refuses_is_named_without_the_secret_it_was_given() {
        let config = consumer_config(
            &[("bootstrap.servers", "b:9092")],
            [("sasl.pasword", "hunter3")],
            &[],
        );
        let Err(error) = consumer::<rdkafka::consumer::BaseConsumer<TokenContext>>(
            &config,
            "the Kafka consumer",
        ) else {
            panic!("librdkafka took a misspelt property");
        };
        let text = error.report();
        assert!(text.contains("cannot create the Kafka consumer"), "{text}");
        assert!(!text.contains("hunter3"), "{text}");
    }
}
