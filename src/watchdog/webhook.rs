//! POSTs alert documents to `--alert-webhook`. A minimal HTTP/1.1 client over
//! plain TCP: alert receivers (Alertmanager's webhook relays, a local agent)
//! usually listen on the same host or network. Credentials in the URL
//! (`http://user:password@host/…`) go as HTTP Basic authentication, and
//! never into a message.

use std::time::Duration;

use base64::Engine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use prometheus::IntCounter;

use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::percent;

const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Webhook {
    host: String,
    port: u16,
    path: String,
    /// The `Authorization` header's value, from the URL's user and password.
    authorization: Option<String>,
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

impl std::fmt::Debug for Webhook {
    // Never the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("path", &self.path)
            .field(
                "authorization",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Webhook {
    /// Accepts `http://[user:password@]host[:port][/path]`.
    pub fn parse(url: &str) -> std::result::Result<Self, String> {
        let Some(rest) = url.strip_prefix("http://") else {
            let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
            return Err(format!(
                "--alert-webhook must start with http:// (it starts with {scheme:?}://; https \
                 is not supported: use a local relay)"
            ));
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (userinfo, authority) = match authority.rsplit_once('@') {
            Some((userinfo, host)) => (Some(userinfo), host),
            None => (None, authority),
        };
        let authorization = userinfo.map(|userinfo| {
            let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
            let pair = format!("{}:{}", percent::decode(user), percent::decode(password));
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(pair)
            )
        });
        let (host, port) = host_and_port(authority)?;
        Ok(Webhook {
            host: host.to_string(),
            port,
            path: path.to_string(),
            authorization,
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
        let authorization = self
            .authorization
            .as_ref()
            .map_or_else(String::new, |value| format!("Authorization: {value}\r\n"));
        let request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\nUser-Agent: walrelay\r\n\
             {authorization}\r\n{body}",
            self.path,
            self.host,
            body.len()
        );
        let exchange = async {
            let mut stream = TcpStream::connect((self.host.as_str(), self.port)).await?;
            stream.write_all(request.as_bytes()).await?;
            let mut response = Vec::new();
            stream.read_to_end(&mut response).await?;
            Ok::<_, std::io::Error>(response)
        };
        let response = tokio::time::timeout(TIMEOUT, exchange)
            .await
            .map_err(|_| Error::transient("alert webhook did not answer within 5s"))?
            .map_err(|e| Error::transient("cannot reach the alert webhook").with_source(e))?;
        let status_line = String::from_utf8_lossy(&response);
        let status = status_line.split_whitespace().nth(1).unwrap_or("");
        if !status.starts_with('2') {
            return Err(Error::transient(format!(
                "alert webhook answered HTTP {status}"
            )));
        }
        Ok(())
    }
}

/// The host (an IPv6 address without its brackets) and port of a URL's
/// authority. A host that could never be connected to is refused here, at
/// start-up, not at the first alert, when nobody is told.
fn host_and_port(authority: &str) -> std::result::Result<(&str, u16), String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let (ip, after) = bracketed.split_once(']').ok_or_else(|| {
                format!(
                    "--alert-webhook's host {authority:?} opens a [ it never closes: write an \
                     IPv6 address as http://[::1]:9000/path"
                )
            })?;
            if ip.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!(
                    "--alert-webhook's host [{ip}] is not an IPv6 address (http://[::1]:9000/path)"
                ));
            }
            match after {
                "" => (ip, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (ip, Some(port)),
                    None => return Err(format!("--alert-webhook has {after:?} after its host")),
                },
            }
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err("--alert-webhook names no host (http://host:port/path)".into());
    }
    let hostname = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    if host.parse::<std::net::Ipv6Addr>().is_err() && !host.chars().all(hostname) {
        return Err(format!(
            "--alert-webhook's host {host:?} is not a host name or address \
             (http://host:port/path; percent-encode a user or password with @, : or /)"
        ));
    }
    let port = match port {
        None => 80,
        Some(p) => p
            .parse()
            .map_err(|_| format!("--alert-webhook has an invalid port: {p:?}"))?,
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls_are_parsed_with_defaults() {
        let w = Webhook::parse("http://alerts.local:9000/hooks/walrelay").unwrap();
        assert_eq!(
            (w.host.as_str(), w.port, w.path.as_str()),
            ("alerts.local", 9000, "/hooks/walrelay")
        );
        let w = Webhook::parse("http://alerts.local").unwrap();
        assert_eq!((w.port, w.path.as_str()), (80, "/"));
        assert!(Webhook::parse("https://x").unwrap_err().contains("http://"));
        let w = Webhook::parse("http://[::1]:9000/hook").unwrap();
        assert_eq!((w.host.as_str(), w.port), ("::1", 9000));
        let w = Webhook::parse("http://[::1]").unwrap();
        assert_eq!((w.host.as_str(), w.port), ("::1", 80));
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
        assert_eq!((w.host.as_str(), w.port), ("alerts.local", 9000));
        // RFC 7617: base64 of "ops:p@ss-9".
        assert_eq!(w.authorization.as_deref(), Some("Basic b3BzOnBAc3MtOQ=="));
        assert!(!format!("{w:?}").contains("b3Bz"), "{w:?}");
        let refused = Webhook::parse("https://ops:p-9@alerts.local/hook").unwrap_err();
        assert!(!refused.contains("p-9"), "{refused}");
    }
}
