//! The replication connection's socket: TCP or a Unix socket to one host of
//! `--pg-url`, with TLS negotiated as `sslmode` says.

use std::time::Duration;

use bytes::BytesMut;
use postgres_protocol::message::frontend;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio_openssl::SslStream;
use tokio_postgres::config::Host;

use super::{describe_target, tls, PgTarget};
use crate::error::{Error, Result};

/// A byte stream to the server, plain or TLS, TCP or Unix.
pub trait Socket: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Socket for T {}

/// Opens a socket to one host. `Ok(Err(_))` is a host that does not answer,
/// after which the next host is worth a try; `Err(_)` (TLS refused or not
/// verified) is not.
pub async fn open(
    target: &PgTarget,
    host: &Host,
    port: u16,
) -> Result<std::result::Result<Box<dyn Socket>, std::io::Error>> {
    let timeout = target
        .config
        .get_connect_timeout()
        .copied()
        .unwrap_or(Duration::from_secs(10));
    let attempt = async {
        match host {
            Host::Tcp(name) => {
                let stream = TcpStream::connect((name.as_str(), port)).await?;
                stream.set_nodelay(true)?;
                watch_for_dead_peer(&stream, &target.config)?;
                Ok::<_, std::io::Error>((Box::new(stream) as Box<dyn Socket>, Some(name)))
            }
            // Like libpq, no TLS over a Unix socket.
            Host::Unix(dir) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                Ok((
                    Box::new(UnixStream::connect(path).await?) as Box<dyn Socket>,
                    None,
                ))
            }
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok((socket, Some(name)))) => Ok(Ok(negotiate_tls(socket, name, target).await?)),
        Ok(Ok((socket, None))) => Ok(Ok(socket)),
        Ok(Err(e)) => Ok(Err(e)),
        Err(_) => Ok(Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no answer within {timeout:?}"),
        ))),
    }
}

/// The same TCP keepalive and user timeout as the SQL connection.
fn watch_for_dead_peer(stream: &TcpStream, config: &tokio_postgres::Config) -> std::io::Result<()> {
    let socket = socket2::SockRef::from(stream);
    if config.get_keepalives() {
        let mut keepalive = socket2::TcpKeepalive::new().with_time(config.get_keepalives_idle());
        if let Some(interval) = config.get_keepalives_interval() {
            keepalive = keepalive.with_interval(interval);
        }
        if let Some(retries) = config.get_keepalives_retries() {
            keepalive = keepalive.with_retries(retries);
        }
        socket.set_tcp_keepalive(&keepalive)?;
    }
    socket.set_tcp_user_timeout(config.get_tcp_user_timeout().copied())
}

/// Asks for TLS (SSLRequest) as `sslmode` says, and wraps the socket.
async fn negotiate_tls(
    mut socket: Box<dyn Socket>,
    host: &str,
    target: &PgTarget,
) -> Result<Box<dyn Socket>> {
    let Some(config) = target.tls.configure()? else {
        return Ok(socket);
    };
    let mut request = BytesMut::new();
    frontend::ssl_request(&mut request);
    socket.write_all(&request).await.map_err(connection_lost)?;
    let mut answer = [0u8; 1];
    socket
        .read_exact(&mut answer)
        .await
        .map_err(connection_lost)?;
    if answer[0] != b'S' {
        if target.uses_token() {
            return Err(super::auth::no_tls_for_token(target));
        }
        if target.tls.required() {
            return Err(Error::permanent(format!(
                "Postgres at {} does not accept TLS, but --pg-url asks for sslmode={:?}: \
                 turn on ssl in postgresql.conf or lower sslmode",
                describe_target(&target.config),
                target.tls.mode()
            )));
        }
        return Ok(socket);
    }
    let handshake_failed = |e: &dyn std::fmt::Display| {
        let text = e.to_string();
        Error::new(
            tls::handshake_error_kind(&text),
            format!(
                "TLS handshake with Postgres at {} failed: {e}; check sslmode and sslrootcert \
             (verify-full needs a certificate that names the host)",
                describe_target(&target.config)
            ),
        )
    };
    let ssl = config.into_ssl(host).map_err(|e| handshake_failed(&e))?;
    let mut stream = SslStream::new(ssl, socket).map_err(|e| handshake_failed(&e))?;
    std::pin::Pin::new(&mut stream)
        .connect()
        .await
        .map_err(|e| handshake_failed(&e))?;
    Ok(Box::new(stream))
}

fn connection_lost(e: std::io::Error) -> Error {
    Error::transient("lost the replication connection to Postgres").with_source(e)
}
