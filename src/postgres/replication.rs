//! The replication stream: `START_REPLICATION … LOGICAL` on a
//! `replication=database` connection, the XLogData/keepalive framing inside
//! CopyBoth, and the standby status updates that move the slot.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::message::backend::Message;

use super::lsn::Lsn;
pub use super::names::{quote_ident, quote_literal};
use super::state::ServerId;
use super::wire::{ServerError, WireConnection, WireReader, WireWriter};
use super::PgTarget;
use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicationMessage {
    /// One pgoutput message and the WAL range it came from.
    XLogData {
        wal_start: Lsn,
        wal_end: Lsn,
        data: Bytes,
    },
    /// The server's current WAL end; `reply_requested` asks for a status update now.
    Keepalive { wal_end: Lsn, reply_requested: bool },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed replication message: {0}")]
pub struct FramingError(String);

/// Splits a CopyData payload of the replication stream into its parts.
pub fn parse_copy_data(mut data: Bytes) -> std::result::Result<ReplicationMessage, FramingError> {
    if data.is_empty() {
        return Err(FramingError("empty CopyData".into()));
    }
    match data.get_u8() {
        b'w' => {
            if data.len() < 24 {
                return Err(FramingError(format!(
                    "XLogData header needs 24 bytes, got {}",
                    data.len()
                )));
            }
            let wal_start = Lsn(data.get_u64());
            let wal_end = Lsn(data.get_u64());
            let _server_clock = data.get_i64();
            Ok(ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                data,
            })
        }
        b'k' => {
            if data.len() != 17 {
                return Err(FramingError(format!(
                    "keepalive must be 17 bytes, got {}",
                    data.len()
                )));
            }
            let wal_end = Lsn(data.get_u64());
            let _server_clock = data.get_i64();
            Ok(ReplicationMessage::Keepalive {
                wal_end,
                reply_requested: data.get_u8() == 1,
            })
        }
        other => Err(FramingError(format!(
            "unknown replication message type 0x{other:02x}"
        ))),
    }
}

pub struct ReplicationStream {
    reader: WireReader,
}

impl ReplicationStream {
    /// Data that arrives from now on wakes nobody, until `release_reads`.
    pub fn hold_reads(&self) {
        self.reader.hold_reads();
    }

    /// Arrivals wake walrelay again, and what waits already does now.
    pub fn release_reads(&self) -> Result<()> {
        self.reader.release_reads()
    }

    /// The next message from the server. Cancel-safe.
    pub async fn next(&mut self) -> Result<ReplicationMessage> {
        loop {
            match self.reader.read_message().await? {
                Message::CopyData(body) => {
                    // Framing is checked by TCP and TLS on the way: a bad
                    // frame would come again, so it stops walrelay.
                    return parse_copy_data(body.into_bytes()).map_err(|e| {
                        Error::permanent(
                            "Postgres sent a replication message walrelay cannot read; \
                             walrelay stopped and the slot stays before it",
                        )
                        .with_source(e)
                    });
                }
                Message::ErrorResponse(body) => {
                    return Err(ServerError::from_fields(body.fields())
                        .into_error("the replication stream failed"))
                }
                Message::CopyDone => {
                    return Err(Error::transient("Postgres ended the replication stream"))
                }
                Message::NoticeResponse(_) | Message::ParameterStatus(_) => {}
                // The server ends the command after its CopyDone on shutdown.
                Message::CommandComplete(_) | Message::ReadyForQuery(_) => {
                    return Err(Error::transient("Postgres ended the replication stream"))
                }
                _ => {
                    return Err(Error::transient(
                        "unexpected message from Postgres during replication",
                    ))
                }
            }
        }
    }
}

/// Sends standby status updates: the only way the slot ever moves.
pub struct StatusSender {
    writer: WireWriter,
    buf: BytesMut,
}

impl StatusSender {
    /// Reports `received` as written and `confirmed` as flushed and applied.
    /// The walsender advances the slot's `confirmed_flush_lsn` to `confirmed`.
    /// `reply_requested` asks it for a keepalive at once: proof it is alive.
    pub async fn send(
        &mut self,
        received: Lsn,
        confirmed: Lsn,
        reply_requested: bool,
    ) -> Result<()> {
        self.buf.clear();
        self.buf.put_u8(b'r');
        self.buf.put_u64(received.max(confirmed).0);
        self.buf.put_u64(confirmed.0);
        self.buf.put_u64(confirmed.0);
        self.buf.put_i64(crate::clock::pg_now_us());
        self.buf.put_u8(u8::from(reply_requested));
        self.writer.queue_copy_data(&self.buf)?;
        self.writer.flush().await
    }

    pub async fn close(self) {
        self.writer.terminate().await;
    }
}

/// A replication connection before streaming starts.
pub struct ReplicationConnection {
    conn: WireConnection,
}

/// What `IDENTIFY_SYSTEM` says about the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemInfo {
    pub server: ServerId,
    /// The server's WAL flush position: nothing it sends lies beyond it.
    pub flushed: Lsn,
}

/// Opens a replication connection to the server `--pg-url` picks, within
/// the same start-up limit as an SQL connection (`setup::startup_timeout`).
pub async fn connect(target: &PgTarget) -> Result<ReplicationConnection> {
    let conn = super::setup::within_startup(target, WireConnection::connect(target)).await?;
    Ok(ReplicationConnection { conn })
}

impl ReplicationConnection {
    /// The server's system identifier, timeline and flush position.
    pub async fn identify_system(&mut self) -> Result<SystemInfo> {
        let row = self
            .conn
            .query_row("IDENTIFY_SYSTEM", "IDENTIFY_SYSTEM")
            .await?;
        let field = |i: usize| row.get(i).cloned().flatten();
        let malformed =
            || Error::permanent("Postgres answered IDENTIFY_SYSTEM with an unexpected row");
        let timeline = field(1)
            .and_then(|t| t.parse().ok())
            .ok_or_else(malformed)?;
        Ok(SystemInfo {
            server: ServerId {
                system_id: field(0).ok_or_else(malformed)?,
                timeline,
            },
            flushed: field(2)
                .and_then(|l| l.parse().ok())
                .ok_or_else(malformed)?,
        })
    }

    /// Creates the logical pgoutput slot and exports a snapshot of the
    /// database at its consistent point: every transaction committed
    /// before that point is visible in the snapshot, every later one comes
    /// through the slot. Returns the consistent point and the snapshot's
    /// name, which stays valid only until this connection runs its next
    /// command or closes. `version` is the server's (server_version_num);
    /// `failover` asks for a failover slot on PostgreSQL 17+.
    pub async fn create_slot_exporting(
        &mut self,
        slot: &str,
        version: i32,
        failover: bool,
    ) -> Result<(Lsn, String)> {
        let command = create_slot_exporting(slot, version, failover);
        let row = self
            .conn
            .query_row(&command, "CREATE_REPLICATION_SLOT")
            .await?;
        let field = |i: usize| row.get(i).cloned().flatten();
        let malformed =
            || Error::permanent("Postgres answered CREATE_REPLICATION_SLOT with an unexpected row");
        let consistent_point = field(1)
            .and_then(|l| l.parse().ok())
            .ok_or_else(malformed)?;
        Ok((consistent_point, field(2).ok_or_else(malformed)?))
    }

    /// Closes the connection without streaming.
    pub async fn close(self) {
        self.conn.writer.terminate().await;
    }

    /// Starts streaming the slot from `start` (`0/0` means the slot's own
    /// confirmed position; a later one makes the server skip every
    /// transaction that committed before it). `messages` asks pgoutput for
    /// `pg_logical_emit_message` output too (PostgreSQL 14+).
    pub async fn start(
        mut self,
        slot: &str,
        publication: &str,
        messages: bool,
        start: Lsn,
    ) -> Result<(ReplicationStream, StatusSender)> {
        let command = format!(
            "START_REPLICATION SLOT {} LOGICAL {start} (\"proto_version\" '1', \"publication_names\" {}{})",
            quote_ident(slot),
            quote_literal(&quote_ident(publication)),
            if messages { ", \"messages\" 'true'" } else { "" },
        );
        self.conn.start_copy_both(&command).await?;
        Ok((
            ReplicationStream {
                reader: self.conn.reader,
            },
            StatusSender {
                writer: self.conn.writer,
                buf: BytesMut::with_capacity(34),
            },
        ))
    }
}

/// The CREATE_REPLICATION_SLOT that exports a snapshot. PostgreSQL's
/// "Streaming Replication Protocol" page: `CREATE_REPLICATION_SLOT
/// slot_name [ TEMPORARY ] { PHYSICAL | LOGICAL output_plugin } [ ( option
/// [, ...] ) ]` with `SNAPSHOT { 'export' | 'use' | 'nothing' }` since 15
/// and `FAILOVER [ boolean ]` since 17; before 15, the keyword
/// `EXPORT_SNAPSHOT` after the plugin (which 17's option list no longer
/// takes, so each version gets its own form).
fn create_slot_exporting(slot: &str, version: i32, failover: bool) -> String {
    let options = match (version >= 150_000, failover && version >= 170_000) {
        (true, true) => "(SNAPSHOT 'export', FAILOVER true)",
        (true, false) => "(SNAPSHOT 'export')",
        (false, _) => "EXPORT_SNAPSHOT",
    };
    format!(
        "CREATE_REPLICATION_SLOT {} LOGICAL pgoutput {options}",
        quote_ident(slot)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exporting_slot_command_has_each_versions_syntax() {
        let command = |version, failover| create_slot_exporting("walrelay", version, failover);
        assert_eq!(
            command(140_010, true),
            "CREATE_REPLICATION_SLOT \"walrelay\" LOGICAL pgoutput EXPORT_SNAPSHOT"
        );
        assert_eq!(
            command(150_018, true),
            "CREATE_REPLICATION_SLOT \"walrelay\" LOGICAL pgoutput (SNAPSHOT 'export')"
        );
        assert_eq!(
            command(170_010, true),
            "CREATE_REPLICATION_SLOT \"walrelay\" LOGICAL pgoutput (SNAPSHOT 'export', FAILOVER true)"
        );
        assert_eq!(command(170_010, false), command(150_018, true));
    }

    #[test]
    fn keepalive_with_reply_request_is_parsed() {
        let mut raw = BytesMut::new();
        raw.put_u8(b'k');
        raw.put_u64(0x1_0000_0010);
        raw.put_i64(0);
        raw.put_u8(1);
        assert_eq!(
            parse_copy_data(raw.freeze()).unwrap(),
            ReplicationMessage::Keepalive {
                wal_end: Lsn(0x1_0000_0010),
                reply_requested: true
            }
        );
    }

    #[test]
    fn xlogdata_keeps_its_payload() {
        let mut raw = BytesMut::new();
        raw.put_u8(b'w');
        raw.put_u64(5);
        raw.put_u64(9);
        raw.put_i64(0);
        raw.put_slice(b"B...");
        let ReplicationMessage::XLogData {
            wal_start,
            wal_end,
            data,
        } = parse_copy_data(raw.freeze()).unwrap()
        else {
            panic!("expected XLogData");
        };
        assert_eq!(
            (wal_start, wal_end, &data[..]),
            (Lsn(5), Lsn(9), &b"B..."[..])
        );
    }

    #[test]
    fn truncated_framing_is_an_error_not_a_panic() {
        for raw in [&b""[..], b"w", b"w1234567", b"k123", b"z"] {
            assert!(parse_copy_data(Bytes::copy_from_slice(raw)).is_err());
        }
    }
}
