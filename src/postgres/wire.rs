//! A minimal Postgres frontend for the replication connection, built on
//! `postgres-protocol`: connect, authenticate, run a command in the simple
//! query protocol and enter CopyBoth mode. Upstream tokio-postgres cannot
//! speak CopyBoth, so this small piece is ours.

use std::time::Duration;

use bytes::{Buf, BytesMut};
use fallible_iterator::FallibleIterator;
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::{backend::Message, frontend};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio_postgres::config::{Host, TargetSessionAttrs};

use super::socket::{self, ReadHold, Socket};
use super::{classify_sqlstate, describe_target, PgTarget};
use crate::error::{Error, Result};

/// Postgres never sends a message larger than 1 GiB; a bigger length is corruption.
const MAX_MESSAGE_LEN: usize = 1 << 30;
/// Each read asks the kernel for at least this much. Messages split off the
/// front of the buffer leave less room behind them, and a read into the
/// little left would be a system call for a few bytes, and a TCP window
/// update sent back to the walsender for each (docs/benchmarks.md).
const MIN_READ: usize = 64 * 1024;
/// How much room a read is given when it has less than `MIN_READ`: in a new
/// buffer while messages split from the old one still live, else in the old
/// one, its consumed front reclaimed.
const READ_SIZE: usize = 256 * 1024;

/// An error the server sent, with the fields operators need.
#[derive(Debug, Clone)]
pub struct ServerError {
    pub code: String,
    pub message: String,
    pub detail: Option<String>,
    pub hint: Option<String>,
}

impl std::fmt::Display for ServerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code)?;
        if let Some(detail) = &self.detail {
            write!(f, "; {detail}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "; hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ServerError {}

impl ServerError {
    pub fn from_fields(fields: postgres_protocol::message::backend::ErrorFields<'_>) -> Self {
        let mut err = ServerError {
            code: String::new(),
            message: String::new(),
            detail: None,
            hint: None,
        };
        let mut fields = fields;
        while let Ok(Some(field)) = fields.next() {
            let value = String::from_utf8_lossy(field.value_bytes()).into_owned();
            match field.type_() {
                b'C' => err.code = value,
                b'M' => err.message = value,
                b'D' => err.detail = Some(value),
                b'H' => err.hint = Some(value),
                _ => {}
            }
        }
        err
    }

    pub fn into_error(self, context: &str) -> Error {
        Error::new(classify_sqlstate(&self.code), context).with_source(self)
    }
}

/// The server refused the replication connection; a role without
/// REPLICATION is told how to get it, and an IAM login what it needs.
fn refused(error: ServerError, target: &PgTarget) -> Error {
    let config = &target.config;
    if let Some(fix) = super::auth::refused_login_fix(target, &error.code) {
        return error
            .clone()
            .into_error("Postgres refused the replication connection")
            .with_note(&format!("; {fix}"));
    }
    if error.code != "42501" {
        return error.into_error("Postgres refused the replication connection");
    }
    let role = config.get_user().unwrap_or("postgres");
    Error::permanent(format!(
        "Postgres refused the replication connection: role {role} may not stream from a slot \
         without the REPLICATION attribute; {}",
        super::replication_grant(role)
    ))
    .with_source(error)
}

/// The session settings pgoutput writes values with: timestamps in ISO
/// (for --field-timestamp), floats exact, and bytea in hex whatever the
/// server's default, so it decodes to raw bytes. A SQL session that reads
/// rows as the stream would give them (`lifecycle::rows`) sets the same.
pub const OUTPUT_SETTINGS: &[(&str, &str)] = &[
    ("DateStyle", "ISO, MDY"),
    ("extra_float_digits", "3"),
    ("bytea_output", "hex"),
];

/// A connection in `replication=database` mode, before or during streaming.
/// Its two halves can be driven independently once streaming starts.
pub struct WireConnection {
    pub reader: WireReader,
    pub writer: WireWriter,
}

pub struct WireReader {
    socket: ReadHalf<Box<dyn Socket>>,
    buf: BytesMut,
    /// The socket's wake-ups while reads pause.
    hold: ReadHold,
}

pub struct WireWriter {
    socket: WriteHalf<Box<dyn Socket>>,
    buf: BytesMut,
}

impl WireReader {
    /// Data that arrives from now on wakes nobody (`ReadHold`).
    pub fn hold_reads(&self) {
        self.hold.hold();
    }

    /// Arrivals wake the reader again, and what waits already does now.
    pub fn release_reads(&self) -> Result<()> {
        self.hold.release().map_err(|e| {
            Error::transient(
                "cannot lower the replication socket's receive low-water mark after a \
                 --read-batch-window pause; reconnecting",
            )
            .with_source(e)
        })
    }
}

impl WireConnection {
    /// Connects to the first host of `--pg-url` that answers and, like
    /// tokio-postgres on the SQL connection, has the `target_session_attrs`
    /// asked for, so both connections end up on the same server.
    pub async fn connect(target: &PgTarget) -> Result<Self> {
        // With --pg-auth rds-iam: a token signed now, for the one host.
        let login = super::auth::login_config(target).await?;
        let config = &target.config;
        let hosts = config.get_hosts();
        if hosts.is_empty() {
            return Err(Error::permanent(
                "--pg-url names no host: add host=... (or postgres://user@HOST/db)",
            ));
        }
        let ports = config.get_ports();
        let wanted = config.get_target_session_attrs();
        let mut last_error = None;
        for (i, host) in hosts.iter().enumerate() {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            let (socket, hold) = match socket::open(target, host, port).await? {
                Ok(opened) => opened,
                Err(e) => {
                    last_error = Some(
                        Error::transient(format!(
                            "cannot reach Postgres at {}",
                            describe_target(config)
                        ))
                        .with_source(e),
                    );
                    continue;
                }
            };
            let (read_half, write_half) = tokio::io::split(socket);
            let mut conn = WireConnection {
                reader: WireReader {
                    socket: read_half,
                    buf: BytesMut::with_capacity(64 * 1024),
                    hold,
                },
                writer: WireWriter {
                    socket: write_half,
                    buf: BytesMut::with_capacity(1024),
                },
            };
            // A host that is starting up or shutting down is skipped, as
            // libpq does; a refused login is not.
            let fits = match conn.startup(&login, target).await {
                Ok(()) => match wanted {
                    TargetSessionAttrs::ReadWrite => conn.read_only().await.map(|ro| !ro),
                    TargetSessionAttrs::ReadOnly => conn.read_only().await,
                    _ => Ok(true),
                },
                Err(e) => Err(e),
            };
            match fits {
                Ok(true) => return Ok(conn),
                Ok(false) => {}
                Err(e) if e.is_transient() => {
                    last_error = Some(e);
                    continue;
                }
                Err(e) => return Err(e),
            }
            conn.writer.terminate().await;
            last_error = Some(Error::transient(format!(
                "Postgres host {} (port {port}) is not {} (target_session_attrs); \
                 no host of --pg-url is",
                host_name(host),
                if wanted == TargetSessionAttrs::ReadWrite {
                    "read-write"
                } else {
                    "read-only"
                }
            )));
        }
        Err(last_error.expect("at least one host was tried"))
    }

    /// `SHOW transaction_read_only`, the test tokio-postgres and libpq use;
    /// a replication connection accepts SHOW.
    async fn read_only(&mut self) -> Result<bool> {
        let row = self
            .query_row("SHOW transaction_read_only", "transaction_read_only")
            .await?;
        Ok(row.first().and_then(Option::as_deref) == Some("on"))
    }

    /// Runs a command in the simple query protocol and returns its one row
    /// as text; `what` names it in errors.
    pub async fn query_row(&mut self, command: &str, what: &str) -> Result<Vec<Option<String>>> {
        frontend::query(command, &mut self.writer.buf).map_err(protocol_error)?;
        self.writer.flush().await?;
        let mut values = None;
        loop {
            match self.reader.read_message().await? {
                Message::DataRow(row) => {
                    let mut ranges = row.ranges();
                    let mut out = Vec::new();
                    while let Some(range) = ranges.next().map_err(protocol_error)? {
                        out.push(
                            range.map(|r| String::from_utf8_lossy(&row.buffer()[r]).into_owned()),
                        );
                    }
                    values = Some(out);
                }
                Message::ErrorResponse(body) => {
                    return Err(ServerError::from_fields(body.fields())
                        .into_error(&format!("cannot read {what}")));
                }
                Message::ReadyForQuery(_) => {
                    return values.ok_or_else(|| unexpected(&format!("a row of {what}")))
                }
                _ => {}
            }
        }
    }

    async fn startup(&mut self, config: &tokio_postgres::Config, target: &PgTarget) -> Result<()> {
        let user = config.get_user().ok_or_else(|| {
            Error::permanent("--pg-url names no user: add user=NAME (or postgres://NAME@host/db)")
        })?;
        let mut params = vec![("user", user), ("replication", "database")];
        if let Some(db) = config.get_dbname() {
            params.push(("database", db));
        }
        params.push((
            "application_name",
            config.get_application_name().unwrap_or("walrelay"),
        ));
        params.extend_from_slice(OUTPUT_SETTINGS);
        frontend::startup_message(params, &mut self.writer.buf).map_err(protocol_error)?;
        self.writer.flush().await?;

        let password = config.get_password();
        let missing_password = || {
            Error::permanent(
                "Postgres asks for a password but --pg-url has none and PGPASSWORD is not \
                 set: set PGPASSWORD, or add password=... or postgres://user:password@host/db",
            )
        };
        let mut scram: Option<sasl::ScramSha256> = None;
        loop {
            match self.reader.read_message().await? {
                Message::AuthenticationOk => break,
                Message::AuthenticationCleartextPassword => {
                    let password = password.ok_or_else(missing_password)?;
                    frontend::password_message(password, &mut self.writer.buf)
                        .map_err(protocol_error)?;
                    self.writer.flush().await?;
                }
                Message::AuthenticationMd5Password(body) => {
                    let password = password.ok_or_else(missing_password)?;
                    let hash = md5_hash(user.as_bytes(), password, body.salt());
                    frontend::password_message(hash.as_bytes(), &mut self.writer.buf)
                        .map_err(protocol_error)?;
                    self.writer.flush().await?;
                }
                Message::AuthenticationSasl(body) => {
                    let password = password.ok_or_else(missing_password)?;
                    let mut mechanisms = body.mechanisms();
                    let mut has_scram = false;
                    while let Some(m) = mechanisms.next().map_err(protocol_error)? {
                        has_scram |= m == sasl::SCRAM_SHA_256;
                    }
                    if !has_scram {
                        return Err(Error::permanent(
                            "Postgres offers no SASL mechanism walrelay supports (SCRAM-SHA-256)",
                        ));
                    }
                    let client =
                        sasl::ScramSha256::new(password, sasl::ChannelBinding::unsupported());
                    frontend::sasl_initial_response(
                        sasl::SCRAM_SHA_256,
                        client.message(),
                        &mut self.writer.buf,
                    )
                    .map_err(protocol_error)?;
                    self.writer.flush().await?;
                    scram = Some(client);
                }
                Message::AuthenticationSaslContinue(body) => {
                    let client = scram.as_mut().ok_or_else(|| unexpected("SASL continue"))?;
                    client.update(body.data()).map_err(|e| {
                        Error::permanent("SCRAM authentication failed").with_source(e)
                    })?;
                    frontend::sasl_response(client.message(), &mut self.writer.buf)
                        .map_err(protocol_error)?;
                    self.writer.flush().await?;
                }
                Message::AuthenticationSaslFinal(body) => {
                    let client = scram.as_mut().ok_or_else(|| unexpected("SASL final"))?;
                    client.finish(body.data()).map_err(|e| {
                        Error::permanent("SCRAM server signature did not verify").with_source(e)
                    })?;
                }
                Message::ErrorResponse(body) => {
                    return Err(refused(ServerError::from_fields(body.fields()), target));
                }
                _ => {
                    return Err(Error::permanent(
                        "Postgres asked for an authentication method walrelay does not support \
                         (use scram-sha-256, md5 or password in pg_hba.conf)",
                    ))
                }
            }
        }
        loop {
            match self.reader.read_message().await? {
                Message::ReadyForQuery(_) => return Ok(()),
                Message::ErrorResponse(body) => {
                    return Err(refused(ServerError::from_fields(body.fields()), target));
                }
                _ => {}
            }
        }
    }

    /// Sends a replication command and waits for CopyBoth mode.
    pub async fn start_copy_both(&mut self, command: &str) -> Result<()> {
        frontend::query(command, &mut self.writer.buf).map_err(protocol_error)?;
        self.writer.flush().await?;
        loop {
            let message = match self.reader.read_frame().await? {
                Frame::CopyBothResponse => return Ok(()),
                Frame::Message(message) => message,
            };
            match message {
                Message::ErrorResponse(body) => {
                    return Err(ServerError::from_fields(body.fields())
                        .into_error("Postgres refused to start replication"));
                }
                Message::NoticeResponse(_) | Message::ParameterStatus(_) => {}
                _ => return Err(unexpected("a reply to START_REPLICATION")),
            }
        }
    }
}

/// postgres-protocol does not know CopyBothResponse ('W'), so it is picked out here.
pub enum Frame {
    CopyBothResponse,
    Message(Message),
}

impl WireReader {
    /// Reads one backend message. Cancel-safe: bytes already read stay buffered.
    pub async fn read_message(&mut self) -> Result<Message> {
        match self.read_frame().await? {
            Frame::Message(message) => Ok(message),
            Frame::CopyBothResponse => Err(unexpected("a message other than CopyBothResponse")),
        }
    }

    pub async fn read_frame(&mut self) -> Result<Frame> {
        loop {
            if self.buf.len() >= 5 {
                let len = (&self.buf[1..5]).get_u32() as usize;
                if len > MAX_MESSAGE_LEN {
                    return Err(Error::transient(format!(
                        "Postgres sent a message of {len} bytes; the stream is corrupt"
                    )));
                }
                if self.buf[0] == b'W' && self.buf.len() > len {
                    self.buf.advance(len + 1);
                    return Ok(Frame::CopyBothResponse);
                }
            }
            if let Some(message) = Message::parse(&mut self.buf).map_err(protocol_error)? {
                return Ok(Frame::Message(message));
            }
            if self.buf.capacity() - self.buf.len() < MIN_READ {
                // Moves at most a part of one message to the new buffer.
                self.buf.reserve(READ_SIZE);
            }
            let n = self
                .socket
                .read_buf(&mut self.buf)
                .await
                .map_err(connection_lost)?;
            if n == 0 {
                return Err(Error::transient(
                    "Postgres closed the replication connection",
                ));
            }
        }
    }
}

impl WireWriter {
    /// Queues a CopyData message; `flush` sends it.
    pub fn queue_copy_data(&mut self, payload: &[u8]) -> Result<()> {
        frontend::CopyData::new(payload)
            .map_err(protocol_error)?
            .write(&mut self.buf);
        Ok(())
    }

    pub async fn flush(&mut self) -> Result<()> {
        self.socket
            .write_all(&self.buf)
            .await
            .map_err(connection_lost)?;
        self.buf.clear();
        self.socket.flush().await.map_err(connection_lost)
    }

    /// Leaves CopyBoth mode and closes the session politely; errors no longer matter.
    pub async fn terminate(mut self) {
        frontend::copy_done(&mut self.buf);
        frontend::terminate(&mut self.buf);
        let _ = tokio::time::timeout(Duration::from_secs(2), self.flush()).await;
    }
}

fn protocol_error(e: std::io::Error) -> Error {
    Error::transient("Postgres protocol error on the replication connection").with_source(e)
}

fn connection_lost(e: std::io::Error) -> Error {
    Error::transient("lost the replication connection to Postgres").with_source(e)
}

fn host_name(host: &Host) -> String {
    match host {
        Host::Tcp(name) => name.clone(),
        Host::Unix(dir) => dir.display().to_string(),
    }
}

fn unexpected(what: &str) -> Error {
    Error::transient(format!(
        "unexpected message from Postgres while waiting for {what}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy_data(len: usize, fill: u8) -> Vec<u8> {
        let mut out = BytesMut::new();
        frontend::CopyData::new(&vec![fill; len][..])
            .unwrap()
            .write(&mut out);
        out.to_vec()
    }

    /// Reads split messages at any byte, and one message can span many reads.
    #[tokio::test]
    async fn messages_larger_than_a_read_and_split_across_reads_arrive_whole() {
        let (mut theirs, ours) = tokio::io::duplex(4096);
        let socket: Box<dyn Socket> = Box::new(ours);
        let (read_half, _write_half) = tokio::io::split(socket);
        let mut reader = WireReader {
            socket: read_half,
            buf: BytesMut::with_capacity(64),
            hold: ReadHold::default(),
        };
        let sizes = [
            10,
            READ_SIZE * 3 + 7,
            1,
            MIN_READ - 3,
            5000,
            MIN_READ,
            0,
            70_000,
        ];
        let sent: Vec<Vec<u8>> = (0..200)
            .map(|i| copy_data(sizes[i % sizes.len()], i as u8))
            .collect();
        let writer = {
            let stream = sent.concat();
            tokio::spawn(async move {
                // Odd-sized writes, so that messages break at every kind of place.
                for chunk in stream.chunks(3001) {
                    theirs.write_all(chunk).await.unwrap();
                }
            })
        };
        for (i, expected) in sent.iter().enumerate() {
            let Message::CopyData(body) = reader.read_message().await.unwrap() else {
                panic!("message {i} is not CopyData");
            };
            assert_eq!(body.data().len(), expected.len() - 5, "message {i}");
            assert!(body.data().iter().all(|&b| b == i as u8), "message {i}");
        }
        writer.await.unwrap();
    }
}
