//! walrelay's one HTTP/1.1 client, for the few small JSON exchanges it has
//! with HTTP services: the alert webhook (`watchdog::webhook`) and the
//! schema registry (`registry::client`). One request per connection
//! (`Connection: close`), over plain TCP or TLS (OpenSSL, which walrelay
//! links anyway). Credentials in the URL (`http://user:password@host/…`)
//! become the `Authorization` header and never show in a message or a
//! `Debug` print.

use std::pin::Pin;
use std::time::Duration;

use base64::Engine;
use openssl::ssl::SslConnector;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_openssl::SslStream;

use crate::percent;

/// Where requests go: a URL's scheme, host, port and path, parsed once.
#[derive(Clone)]
pub struct Endpoint {
    /// Over TLS (`https://`) with this connector.
    tls: Option<SslConnector>,
    host: String,
    port: u16,
    /// The URL's path without a trailing `/` (`/apis/ccompat/v7`), or `/`
    /// alone for a webhook that posts to the root.
    path: String,
    /// The `Authorization` header's value.
    authorization: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    // Never the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("tls", &self.tls.is_some())
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

/// A request's body and its media type.
#[derive(Clone, Copy)]
pub struct Body<'a> {
    pub content_type: &'a str,
    pub text: &'a str,
}

/// An HTTP answer: the status and the body (de-chunked).
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

impl Response {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Why no answer came.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("an answer that is not HTTP")]
    Malformed,
}

impl Endpoint {
    /// Accepts `http[s]://[user:password@]host[:port][/path]`; `flag` names
    /// the setting in every refusal. `https` is taken only with a TLS
    /// connector to use for it.
    pub fn parse(url: &str, flag: &str, tls: Option<SslConnector>) -> Result<Self, String> {
        let (rest, default_port, tls) = if let Some(rest) = url.strip_prefix("http://") {
            (rest, 80, None)
        } else if let (Some(rest), Some(tls)) = (url.strip_prefix("https://"), tls) {
            (rest, 443, Some(tls))
        } else {
            let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
            return Err(format!(
                "{flag} must start with http:// (it starts with {scheme:?}://; https is not \
                 supported: use a local relay)"
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
            basic(&percent::decode(user), &percent::decode(password))
        });
        let (host, port) = host_and_port(authority, flag, default_port)?;
        Ok(Endpoint {
            tls,
            host: host.to_string(),
            port,
            path: path.to_string(),
            authorization,
        })
    }

    /// The same endpoint with this `Authorization` header instead.
    pub fn with_authorization(self, value: String) -> Self {
        Endpoint {
            authorization: Some(value),
            ..self
        }
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn authorization(&self) -> Option<&str> {
        self.authorization.as_deref()
    }

    /// One exchange: `method` on the URL's path followed by `path`, a JSON
    /// body when given, the whole answer within `timeout`.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        timeout: Duration,
    ) -> Result<Response, Failure> {
        let body = body.map(|text| Body {
            content_type: "application/json",
            text,
        });
        let authorization = self.authorization.as_deref();
        self.exchange(method, path, body, authorization, timeout)
            .await
    }

    /// `request` with a body of any type, and `authorization` in place of
    /// the endpoint's own (a token that changes: `registry::login`).
    pub async fn exchange(
        &self,
        method: &str,
        path: &str,
        body: Option<Body<'_>>,
        authorization: Option<&str>,
        timeout: Duration,
    ) -> Result<Response, Failure> {
        let target = match (self.path.trim_end_matches('/'), path) {
            ("", "") => "/".to_string(),
            (base, path) => format!("{base}{path}"),
        };
        let authorization =
            authorization.map_or_else(String::new, |value| format!("Authorization: {value}\r\n"));
        let (content_type, body) =
            body.map_or(("application/json", ""), |b| (b.content_type, b.text));
        let content = if body.is_empty() && method == "GET" {
            String::new()
        } else {
            format!(
                "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
                body.len()
            )
        };
        let request = format!(
            "{method} {target} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\n\
             {content}Connection: close\r\nUser-Agent: walrelay\r\n{authorization}\r\n{body}",
            self.host
        );
        let exchange = async {
            let tcp = TcpStream::connect((self.host.as_str(), self.port)).await?;
            match &self.tls {
                None => talk(tcp, &request).await,
                Some(connector) => {
                    let ssl = connector
                        .configure()
                        .and_then(|c| c.into_ssl(&self.host))
                        .map_err(|e| Failure::Tls(e.to_string()))?;
                    let mut stream =
                        SslStream::new(ssl, tcp).map_err(|e| Failure::Tls(e.to_string()))?;
                    Pin::new(&mut stream)
                        .connect()
                        .await
                        .map_err(|e| Failure::Tls(e.to_string()))?;
                    talk(stream, &request).await
                }
            }
        };
        tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| Failure::Timeout(timeout))?
    }
}

/// RFC 7617 Basic authentication's header value.
pub fn basic(user: &str, password: &str) -> String {
    let pair = format!("{user}:{password}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

async fn talk<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &str,
) -> Result<Response, Failure> {
    stream.write_all(request.as_bytes()).await?;
    let mut raw = Vec::new();
    // A TLS peer may close without close_notify; what came is the answer.
    if let Err(e) = stream.read_to_end(&mut raw).await {
        if raw.is_empty() {
            return Err(e.into());
        }
    }
    parse_response(&raw)
}

fn parse_response(raw: &[u8]) -> Result<Response, Failure> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or(Failure::Malformed)?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(Failure::Malformed)?;
    let chunked = head.lines().any(|line| {
        let line = line.to_ascii_lowercase();
        line.starts_with("transfer-encoding:") && line.contains("chunked")
    });
    let rest = &raw[end + 4..];
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

/// A chunked body's data (RFC 9112 §7.1), as far as it goes.
fn dechunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&rest[..eol]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let Ok(size) = usize::from_str_radix(size_text, 16) else {
            break;
        };
        rest = &rest[eol + 2..];
        if size == 0 || rest.len() < size {
            break;
        }
        body.extend_from_slice(&rest[..size]);
        rest = rest.get(size + 2..).unwrap_or(&[]);
    }
    body
}

/// The host (an IPv6 address without its brackets) and port of a URL's
/// authority. A host that could never be connected to is refused here, at
/// start-up, not at the first request, when nobody is told.
fn host_and_port<'a>(
    authority: &'a str,
    flag: &str,
    default_port: u16,
) -> Result<(&'a str, u16), String> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let (ip, after) = bracketed.split_once(']').ok_or_else(|| {
                format!(
                    "{flag}'s host {authority:?} opens a [ it never closes: write an \
                     IPv6 address as http://[::1]:9000/path"
                )
            })?;
            if ip.parse::<std::net::Ipv6Addr>().is_err() {
                return Err(format!(
                    "{flag}'s host [{ip}] is not an IPv6 address (http://[::1]:9000/path)"
                ));
            }
            match after {
                "" => (ip, None),
                _ => match after.strip_prefix(':') {
                    Some(port) => (ip, Some(port)),
                    None => return Err(format!("{flag} has {after:?} after its host")),
                },
            }
        }
        None => match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err(format!("{flag} names no host (http://host:port/path)"));
    }
    let hostname = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    if host.parse::<std::net::Ipv6Addr>().is_err() && !host.chars().all(hostname) {
        return Err(format!(
            "{flag}'s host {host:?} is not a host name or address \
             (http://host:port/path; percent-encode a user or password with @, : or /)"
        ));
    }
    let port = match port {
        None => default_port,
        Some(p) => p
            .parse()
            .map_err(|_| format!("{flag} has an invalid port: {p:?}"))?,
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_with_defaults() {
        let e = Endpoint::parse("http://alerts.local:9000/hooks/walrelay", "--x", None).unwrap();
        assert_eq!(
            (e.host(), e.port(), e.path()),
            ("alerts.local", 9000, "/hooks/walrelay")
        );
        let e = Endpoint::parse("http://alerts.local", "--x", None).unwrap();
        assert_eq!((e.port(), e.path()), (80, "/"));
        assert!(Endpoint::parse("https://x", "--x", None)
            .unwrap_err()
            .contains("http://"));
        let e = Endpoint::parse("http://[::1]:9000/hook", "--x", None).unwrap();
        assert_eq!((e.host(), e.port()), ("::1", 9000));
    }

    #[test]
    fn a_chunked_answer_is_read_whole() {
        // RFC 9112 §7.1: hex size, CRLF, data, CRLF; a zero size ends it.
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"id\r\n5\r\n\":12}\r\n0\r\n\r\n";
        let response = parse_response(raw).unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.text(), "{\"id\":12}");
    }
}
