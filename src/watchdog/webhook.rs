//! POSTs alert documents to `--alert-webhook`. A minimal HTTP/1.1 client over
//! plain TCP: alert receivers (Alertmanager's webhook relays, a local agent)
//! usually listen on the same host or network.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::error::{Error, Result};

const TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct Webhook {
    host: String,
    port: u16,
    path: String,
}

impl Webhook {
    /// Accepts `http://host[:port][/path]`.
    pub fn parse(url: &str) -> std::result::Result<Self, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("--alert-webhook {url:?} must start with http:// (https is not supported; use a local relay)")
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let (host, port) = match authority.rsplit_once(':') {
            Some((h, p)) => (
                h,
                p.parse()
                    .map_err(|_| format!("--alert-webhook has an invalid port: {p:?}"))?,
            ),
            None => (authority, 80),
        };
        if host.is_empty() {
            return Err(format!("--alert-webhook {url:?} names no host"));
        }
        Ok(Webhook {
            host: host.to_string(),
            port,
            path: path.to_string(),
        })
    }

    pub async fn post(&self, body: &serde_json::Value) -> Result<()> {
        let body = body.to_string();
        let request = format!(
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\nUser-Agent: walrelay\r\n\r\n{body}",
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
    }
}
