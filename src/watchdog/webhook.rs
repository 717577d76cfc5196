//! POSTs alert documents to `--alert-webhook`, over plain HTTP (`http`):
//! alert receivers (Alertmanager's webhook relays, a local agent) usually
//! listen on the same host or network. Credentials in the URL
//! (`http://user:password@host/…`) go as HTTP Basic authentication, and
//! never into a message.

use std::time::Duration;

use prometheus::IntCounter;

use crate::error::{Error, Result};
use crate::http::{Endpoint, Failure};
use crate::metrics::Metrics;

const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Debug)]
pub struct Webhook {
    endpoint: Endpoint,
    /// Alerts the webhook did not take (`walrelay_alerts_undelivered_total`).
    undelivered: Option<IntCounter>,
}

/// Registers `walrelay_alerts_undelivered_total`: an alert nobody received
/// must show somewhere an operator looks (`WalrelayAlertsUndelivered`).
pub fn register_undelivered(metrics: &Metrics) -> IntCounter {
    let counter = IntCounter::new(
        "walrelay_alerts_undelivered_total",
        "Alerts POSTed to --alert-webhook that it did not take (no answer in 5 s, no \
         connection, or an answer other than 2xx); each is logged as a warning.",
    )
    .expect("valid metric");
    metrics
        .registry()
        .register(Box::new(counter.clone()))
        .expect("registered once");
    counter
}

impl Webhook {
    /// Accepts `http://[user:password@]host[:port][/path]`.
    pub fn parse(url: &str) -> std::result::Result<Self, String> {
        Ok(Webhook {
            endpoint: Endpoint::parse(url, "--alert-webhook", None)?,
            undelivered: None,
        })
    }

    /// The same webhook, counting what it fails to deliver in `undelivered`.
    pub fn counting(self, undelivered: IntCounter) -> Self {
        Webhook {
            undelivered: Some(undelivered),
            ..self
        }
    }

    pub async fn post(&self, body: &serde_json::Value) -> Result<()> {
        let posted = self.exchange(body).await;
        if let (Err(_), Some(undelivered)) = (&posted, &self.undelivered) {
            undelivered.inc();
        }
        posted
    }

    async fn exchange(&self, body: &serde_json::Value) -> Result<()> {
        let body = body.to_string();
        let response = self
            .endpoint
            .request("POST", "", Some(&body), TIMEOUT)
            .await
            .map_err(|e| match e {
                Failure::Timeout(_) => Error::transient("alert webhook did not answer within 5s"),
                e => Error::transient("cannot reach the alert webhook").with_source(e),
            })?;
        if !response.is_success() {
            return Err(Error::transient(format!(
                "alert webhook answered HTTP {}",
                response.status
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls_are_parsed_with_defaults() {
        let w = Webhook::parse("http://alerts.local:9000/hooks/walrelay")
            .unwrap()
            .endpoint;
        assert_eq!(
            (w.host(), w.port(), w.path()),
            ("alerts.local", 9000, "/hooks/walrelay")
        );
        let w = Webhook::parse("http://alerts.local").unwrap().endpoint;
        assert_eq!((w.port(), w.path()), (80, "/"));
        assert!(Webhook::parse("https://x").unwrap_err().contains("http://"));
        let w = Webhook::parse("http://[::1]:9000/hook").unwrap().endpoint;
        assert_eq!((w.host(), w.port()), ("::1", 9000));
        let w = Webhook::parse("http://[::1]").unwrap().endpoint;
        assert_eq!((w.host(), w.port()), ("::1", 80));
    }

    #[test]
    fn a_webhook_url_that_could_never_be_reached_is_refused_at_start_up() {
        for url in [
            "http://u:pw@[bad",
            "http://[nothost]:80/",
            "http://[::1]x/",
            "http://alerts local/",
            "http://:9000/",
            "http://alerts.local:http/",
            "http://a:b:80/",
        ] {
            let e = Webhook::parse(url).unwrap_err();
            assert!(e.starts_with("--alert-webhook"), "{url}: {e}");
            assert!(!e.contains("pw"), "{url}: the password is in {e}");
        }
    }

    #[test]
    fn credentials_become_basic_authentication_and_no_message_shows_them() {
        let w = Webhook::parse("http://ops:p%40ss-9@alerts.local:9000/hook").unwrap();
        assert_eq!(
            (w.endpoint.host(), w.endpoint.port()),
            ("alerts.local", 9000)
        );
        // RFC 7617: base64 of "ops:p@ss-9".
        assert_eq!(w.endpoint.authorization(), Some("Basic b3BzOnBAc3MtOQ=="));
        assert!(!format!("{w:?}").contains("b3Bz"), "{w:?}");
        let refused = Webhook::parse("https://ops:p-9@alerts.local/hook").unwrap_err();
        assert!(!refused.contains("p-9"), "{refused}");
    }
}
