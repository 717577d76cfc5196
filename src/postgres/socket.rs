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

/// What may wait in the kernel during a hold before it wakes walrelay:
/// a backlog that big is worth reading at once. With Linux's default
/// `tcp_rmem` this is under half the receive buffer, which the kernel then
/// leaves as it was; with a smaller buffer it grows the buffer to fit.
const HOLD_BYTES: libc::c_int = 32 * 1024;

/// Keeps data that arrives while walrelay pauses its reads
/// (`--read-batch-window`) from waking it. A socket registered with epoll
/// wakes its thread for every arrival, read or not, so a pause alone saves
/// only the reads; with the receive low-water mark raised (`SO_RCVLOWAT`)
/// the kernel signals nothing until the pause ends, and lowering it
/// signals what already waits (Linux 4.19 and later). Linux and TCP only:
/// elsewhere, and on a Unix socket (which ignores the mark for readiness),
/// a hold does nothing and a pause saves what it can.
#[derive(Debug, Default)]
pub struct ReadHold(Option<std::os::fd::RawFd>);

impl ReadHold {
    /// The hold of `stream`, whose reader is the only one to use it: the
    /// descriptor is used only while that reader, and so the socket, lives.
    fn of(stream: &TcpStream) -> Self {
        if cfg!(target_os = "linux") {
            ReadHold(Some(std::os::fd::AsRawFd::as_raw_fd(stream)))
        } else {
            ReadHold(None)
        }
    }

    /// Arrivals wake nobody until HOLD_BYTES wait. A hold that fails only
    /// costs the wake-ups it would have saved.
    pub fn hold(&self) {
        if let Err(e) = self.set_low_water_mark(HOLD_BYTES) {
            tracing::warn!(error = %e, "cannot hold the replication socket's wake-ups during --read-batch-window");
        }
    }

    /// Back to waking at the first byte. An error leaves the mark raised,
    /// which would delay reads until HOLD_BYTES wait: the session must end.
    pub fn release(&self) -> std::io::Result<()> {
        self.set_low_water_mark(1)
    }

    fn set_low_water_mark(&self, bytes: libc::c_int) -> std::io::Result<()> {
        let Some(fd) = self.0 else { return Ok(()) };
        // SAFETY: the descriptor is the socket's, which lives as long as the
        // reader that owns this hold (see `of`); setsockopt reads one int.
        let failed = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVLOWAT,
                std::ptr::from_ref(&bytes).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        } != 0;
        if failed {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Opens a socket to one host. `Ok(Err(_))` is a host that does not answer,
/// after which the next host is worth a try; `Err(_)` (TLS refused or not
/// verified) is not.
pub async fn open(
    target: &PgTarget,
    host: &Host,
    port: u16,
) -> Result<std::result::Result<(Box<dyn Socket>, ReadHold), std::io::Error>> {
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
                let hold = ReadHold::of(&stream);
                Ok::<_, std::io::Error>((Box::new(stream) as Box<dyn Socket>, Some(name), hold))
            }
            // Like libpq, no TLS over a Unix socket.
            Host::Unix(dir) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                Ok((
                    Box::new(UnixStream::connect(path).await?) as Box<dyn Socket>,
                    None,
                    ReadHold::default(),
                ))
            }
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok((socket, Some(name), hold))) => {
            Ok(Ok((negotiate_tls(socket, name, target).await?, hold)))
        }
        Ok(Ok((socket, None, hold))) => Ok(Ok((socket, hold))),
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
             (verify-full needs a certificate that names the host; sslrootcert=system takes \
             the system's trust store)",
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

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    use super::ReadHold;

    /// Bytes the kernel holds for `stream`, read or not.
    fn queued(stream: &TcpStream) -> libc::c_int {
        let mut bytes: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int for a socket descriptor we own.
        unsafe { libc::ioctl(stream.as_raw_fd(), libc::FIONREAD, &mut bytes) };
        bytes
    }

    #[tokio::test]
    async fn held_reads_are_not_woken_by_arrivals_and_are_woken_at_once_on_release() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut server = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (reader, _) = listener.accept().await.unwrap();
        let hold = ReadHold::of(&reader);
        // As in a session: the pause starts after a read found nothing.
        let nothing = reader.try_read(&mut [0; 1]).unwrap_err();
        assert_eq!(nothing.kind(), std::io::ErrorKind::WouldBlock);

        hold.hold();
        server.write_all(&[b'x'; 100]).await.unwrap();
        for _ in 0..200 {
            if queued(&reader) == 100 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(queued(&reader), 100, "the bytes never arrived");
        let woken = tokio::time::timeout(Duration::from_millis(100), reader.readable()).await;
        assert!(woken.is_err(), "an arrival woke a held reader");

        hold.release().unwrap();
        tokio::time::timeout(Duration::from_secs(5), reader.readable())
            .await
            .expect("the release did not signal the bytes already waiting")
            .unwrap();
    }
}
