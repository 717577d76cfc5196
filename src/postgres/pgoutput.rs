//! Decoder for the `pgoutput` logical replication protocol, version 1.
//!
//! Each XLogData payload holds exactly one message. Every length and count read
//! from the wire is checked against the bytes that are actually there before
//! anything is allocated, so a corrupt message is a decode error, never a panic
//! or a huge allocation.

use bytes::{Buf, Bytes};

use super::lsn::Lsn;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogicalMessage {
    Begin(Begin),
    Commit(Commit),
    Origin {
        commit_lsn: Lsn,
        name: String,
    },
    Relation(Relation),
    Type {
        oid: u32,
        namespace: String,
        name: String,
    },
    Insert {
        relation: u32,
        new: Tuple,
    },
    Update {
        relation: u32,
        new: Tuple,
    },
    Delete {
        relation: u32,
    },
    Truncate {
        relations: Vec<u32>,
    },
    Message(EmittedMessage),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin {
    /// LSN of the commit record: the transaction's place in commit order.
    pub final_lsn: Lsn,
    /// Microseconds since 2000-01-01 (the Postgres epoch).
    pub commit_time: i64,
    pub xid: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub commit_lsn: Lsn,
    /// End of the commit record: the position to confirm once the transaction is delivered.
    pub end_lsn: Lsn,
    pub commit_time: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    pub oid: u32,
    pub namespace: String,
    pub name: String,
    pub replica_identity: u8,
    pub columns: Vec<Column>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub is_key: bool,
    pub name: String,
    pub type_oid: u32,
    pub type_modifier: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmittedMessage {
    pub transactional: bool,
    pub lsn: Lsn,
    pub prefix: String,
    pub content: Bytes,
}

/// One column value of a row, in the order of the relation's columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Datum {
    Null,
    /// A TOASTed value that did not change; only UPDATEs carry it.
    UnchangedToast,
    /// The value in Postgres text output format.
    Text(Bytes),
}

pub type Tuple = Vec<Datum>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed pgoutput message: {0}")]
pub struct DecodeError(String);

type Result<T> = std::result::Result<T, DecodeError>;

/// The first byte of a Begin and of a Commit message, also read where a
/// transaction's bounds matter before decoding (relay::upstream::ReadBatching).
pub const BEGIN_TAG: u8 = b'B';
pub const COMMIT_TAG: u8 = b'C';

/// Decodes one pgoutput message. The returned values share `data`'s memory.
pub fn decode(data: Bytes) -> Result<LogicalMessage> {
    let mut r = Reader(data);
    let tag = r.u8("message type")?;
    let message = match tag {
        BEGIN_TAG => LogicalMessage::Begin(Begin {
            final_lsn: r.lsn()?,
            commit_time: r.i64("commit timestamp")?,
            xid: r.u32("xid")?,
        }),
        COMMIT_TAG => {
            let _flags = r.u8("commit flags")?;
            LogicalMessage::Commit(Commit {
                commit_lsn: r.lsn()?,
                end_lsn: r.lsn()?,
                commit_time: r.i64("commit timestamp")?,
            })
        }
        b'O' => LogicalMessage::Origin {
            commit_lsn: r.lsn()?,
            name: r.string("origin name")?,
        },
        b'R' => LogicalMessage::Relation(r.relation()?),
        b'Y' => LogicalMessage::Type {
            oid: r.u32("type oid")?,
            namespace: r.string("type namespace")?,
            name: r.string("type name")?,
        },
        b'I' => {
            let relation = r.u32("relation oid")?;
            r.expect(b'N', "new tuple marker")?;
            LogicalMessage::Insert {
                relation,
                new: r.tuple()?,
            }
        }
        b'U' => {
            let relation = r.u32("relation oid")?;
            let mut marker = r.u8("tuple marker")?;
            if marker == b'K' || marker == b'O' {
                r.tuple()?;
                marker = r.u8("new tuple marker")?;
            }
            if marker != b'N' {
                return Err(DecodeError(format!(
                    "update: expected new tuple marker 'N', found 0x{marker:02x}"
                )));
            }
            LogicalMessage::Update {
                relation,
                new: r.tuple()?,
            }
        }
        b'D' => {
            let relation = r.u32("relation oid")?;
            let marker = r.u8("old tuple marker")?;
            if marker != b'K' && marker != b'O' {
                return Err(DecodeError(format!(
                    "delete: expected tuple marker 'K' or 'O', found 0x{marker:02x}"
                )));
            }
            r.tuple()?;
            LogicalMessage::Delete { relation }
        }
        b'T' => {
            let count = r.count32("truncated relation count", 4)?;
            let _options = r.u8("truncate options")?;
            let relations = (0..count)
                .map(|_| r.u32("truncated relation oid"))
                .collect::<Result<_>>()?;
            LogicalMessage::Truncate { relations }
        }
        b'M' => LogicalMessage::Message(r.emitted_message()?),
        other => {
            // Streaming and two-phase messages only appear with protocol 2 and
            // later, which walrelay never asks for. Skipping an unknown message
            // could skip an event, so it is an error.
            return Err(DecodeError(format!(
                "unknown message type 0x{other:02x} ({:?})",
                other as char
            )));
        }
    };
    if r.0.has_remaining() {
        return Err(DecodeError(format!(
            "{} trailing bytes after a {:?} message",
            r.0.remaining(),
            tag as char
        )));
    }
    Ok(message)
}

struct Reader(Bytes);

impl Reader {
    fn need(&self, n: usize, what: &str) -> Result<()> {
        if self.0.remaining() < n {
            return Err(DecodeError(format!(
                "truncated while reading {what}: need {n} bytes, {} left",
                self.0.remaining()
            )));
        }
        Ok(())
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        self.need(1, what)?;
        Ok(self.0.get_u8())
    }

    fn expect(&mut self, byte: u8, what: &str) -> Result<()> {
        let found = self.u8(what)?;
        if found != byte {
            return Err(DecodeError(format!(
                "expected {what} {:?}, found 0x{found:02x}",
                byte as char
            )));
        }
        Ok(())
    }

    fn u16(&mut self, what: &str) -> Result<u16> {
        self.need(2, what)?;
        Ok(self.0.get_u16())
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.need(4, what)?;
        Ok(self.0.get_u32())
    }

    fn i64(&mut self, what: &str) -> Result<i64> {
        self.need(8, what)?;
        Ok(self.0.get_i64())
    }

    fn lsn(&mut self) -> Result<Lsn> {
        self.need(8, "LSN")?;
        Ok(Lsn(self.0.get_u64()))
    }

    /// An Int16 count of items that each take at least `min_item_size` bytes.
    fn count(&mut self, what: &str, min_item_size: usize) -> Result<usize> {
        let n = self.u16(what)? as i16;
        self.check_count(n as i64, what, min_item_size)
    }

    fn count32(&mut self, what: &str, min_item_size: usize) -> Result<usize> {
        let n = self.u32(what)? as i32;
        self.check_count(n as i64, what, min_item_size)
    }

    fn check_count(&self, n: i64, what: &str, min_item_size: usize) -> Result<usize> {
        if n < 0 || n as usize * min_item_size > self.0.remaining() {
            return Err(DecodeError(format!(
                "{what} {n} does not fit in the {} bytes left",
                self.0.remaining()
            )));
        }
        Ok(n as usize)
    }

    fn len32(&mut self, what: &str) -> Result<usize> {
        let n = self.u32(what)? as i32;
        if n < 0 {
            return Err(DecodeError(format!("negative {what} {n}")));
        }
        Ok(n as usize)
    }

    fn take(&mut self, n: usize, what: &str) -> Result<Bytes> {
        self.need(n, what)?;
        Ok(self.0.split_to(n))
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let end = self
            .0
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| DecodeError(format!("{what} is not NUL-terminated")))?;
        let raw = self.0.split_to(end);
        self.0.advance(1);
        String::from_utf8(raw.to_vec()).map_err(|_| DecodeError(format!("{what} is not UTF-8")))
    }

    /// A Relation message after its tag: the table and its columns.
    fn relation(&mut self) -> Result<Relation> {
        let oid = self.u32("relation oid")?;
        let namespace = self.string("namespace")?;
        let name = self.string("relation name")?;
        let replica_identity = self.u8("replica identity")?;
        let count = self.count("column count", 10)?;
        let mut columns = Vec::with_capacity(count);
        for _ in 0..count {
            columns.push(Column {
                is_key: self.u8("column flags")? & 1 == 1,
                name: self.string("column name")?,
                type_oid: self.u32("column type")?,
                type_modifier: self.u32("column type modifier")? as i32,
            });
        }
        Ok(Relation {
            oid,
            namespace,
            name,
            replica_identity,
            columns,
        })
    }

    /// A Message message (`pg_logical_emit_message`) after its tag.
    fn emitted_message(&mut self) -> Result<EmittedMessage> {
        let transactional = self.u8("message flags")? & 1 == 1;
        let lsn = self.lsn()?;
        let prefix = self.string("message prefix")?;
        let len = self.len32("message content length")?;
        Ok(EmittedMessage {
            transactional,
            lsn,
            prefix,
            content: self.take(len, "message content")?,
        })
    }

    fn tuple(&mut self) -> Result<Tuple> {
        let count = self.count("tuple column count", 1)?;
        let mut tuple = Vec::with_capacity(count);
        for _ in 0..count {
            let datum = match self.u8("column kind")? {
                b'n' => Datum::Null,
                b'u' => Datum::UnchangedToast,
                b't' => {
                    let len = self.len32("column length")?;
                    Datum::Text(self.take(len, "column value")?)
                }
                other => {
                    return Err(DecodeError(format!(
                        "unknown column kind 0x{other:02x} in tuple data"
                    )))
                }
            };
            tuple.push(datum);
        }
        Ok(tuple)
    }
}

/// The messages captured in tests/fixtures/pgoutput_pg15.txt, for the
/// decoder's tests and the apply loop's.
#[cfg(test)]
pub(crate) mod fixture {
    use bytes::Bytes;

    use super::Lsn;

    /// Each message with the WAL position it was read at.
    pub fn captured_pg15() -> Vec<(Lsn, Bytes)> {
        include_str!("../../tests/fixtures/pgoutput_pg15.txt")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
            .map(|l| {
                let (lsn, hex) = l.split_once('|').unwrap();
                let bytes = (0..hex.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                    .collect::<Vec<_>>();
                (lsn.parse().unwrap(), Bytes::from(bytes))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    //! The fixture holds real messages from PostgreSQL 15, produced by:
    //! an INSERT (with non-ASCII JSON), a rolled-back INSERT, an UPDATE, a
    //! DELETE, a TRUNCATE, `ALTER TABLE outbox ADD COLUMN trace text`, an
    //! INSERT with the new column NULL, and `pg_logical_emit_message(true, …)`.

    use super::*;

    fn captured() -> Vec<(Lsn, Bytes)> {
        fixture::captured_pg15()
    }

    fn decoded() -> Vec<LogicalMessage> {
        captured()
            .into_iter()
            .map(|(_, b)| decode(b).unwrap())
            .collect()
    }

    fn text(d: &Datum) -> &str {
        match d {
            Datum::Text(b) => std::str::from_utf8(b).unwrap(),
            other => panic!("expected text, got {other:?}"),
        }
    }

    #[test]
    fn every_captured_message_decodes() {
        let kinds: String = decoded()
            .iter()
            .map(|m| match m {
                LogicalMessage::Begin(_) => 'B',
                LogicalMessage::Commit(_) => 'C',
                LogicalMessage::Relation(_) => 'R',
                LogicalMessage::Insert { .. } => 'I',
                LogicalMessage::Update { .. } => 'U',
                LogicalMessage::Delete { .. } => 'D',
                LogicalMessage::Truncate { .. } => 'T',
                LogicalMessage::Message(_) => 'M',
                LogicalMessage::Type { .. } => 'Y',
                LogicalMessage::Origin { .. } => 'O',
            })
            .collect();
        // The rolled-back transaction is absent: pgoutput never sends it.
        assert_eq!(kinds, "BRICBUCBDCBRTCBRICBMC");
    }

    #[test]
    fn begin_and_commit_carry_the_commit_lsns() {
        let messages = decoded();
        let LogicalMessage::Begin(begin) = &messages[0] else {
            panic!()
        };
        let LogicalMessage::Commit(commit) = &messages[3] else {
            panic!()
        };
        assert_eq!(begin.final_lsn, commit.commit_lsn);
        assert!(commit.end_lsn > commit.commit_lsn);
        assert_eq!(commit.end_lsn, captured()[3].0);
        assert_eq!(begin.commit_time, commit.commit_time);
    }

    #[test]
    fn relation_lists_columns_by_name() {
        let LogicalMessage::Relation(rel) = &decoded()[1] else {
            panic!()
        };
        assert_eq!(
            (rel.namespace.as_str(), rel.name.as_str()),
            ("public", "outbox")
        );
        let names: Vec<_> = rel.columns.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "id",
                "aggregate_type",
                "aggregate_id",
                "event_type",
                "payload",
                "created_at"
            ]
        );
        assert!(rel.columns[0].is_key);
        assert_eq!(rel.columns[0].type_oid, 2950); // uuid
    }

    #[test]
    fn insert_keeps_text_values_byte_for_byte() {
        let LogicalMessage::Insert { new, .. } = &decoded()[2] else {
            panic!()
        };
        assert_eq!(text(&new[0]), "11111111-1111-1111-1111-111111111111");
        assert_eq!(text(&new[3]), "OrderPlaced");
        assert!(text(&new[4]).contains("ünïcødé"));
    }

    #[test]
    fn relation_after_alter_table_has_the_new_column_and_insert_has_null() {
        let messages = decoded();
        let LogicalMessage::Relation(rel) = &messages[15] else {
            panic!()
        };
        assert_eq!(rel.columns.last().unwrap().name, "trace");
        let LogicalMessage::Insert { new, .. } = &messages[16] else {
            panic!()
        };
        assert_eq!(new.len(), 7);
        assert_eq!(new[6], Datum::Null);
    }

    #[test]
    fn transactional_emitted_message_is_decoded() {
        let LogicalMessage::Message(m) = &decoded()[19] else {
            panic!()
        };
        assert!(m.transactional);
        assert_eq!(m.prefix, "walrelay");
        assert_eq!(&m.content[..], br#"{"id":"m1"}"#);
    }

    #[test]
    fn every_truncation_of_a_real_message_is_an_error_not_a_panic() {
        for (_, bytes) in captured() {
            for len in 0..bytes.len() {
                assert!(
                    decode(bytes.slice(..len)).is_err(),
                    "prefix of {len} bytes decoded"
                );
            }
        }
    }

    #[test]
    fn corrupted_lengths_do_not_allocate_or_panic() {
        for (_, bytes) in captured() {
            for i in 0..bytes.len() {
                for flip in [0xFFu8, 0x80, 0x01] {
                    let mut raw = bytes.to_vec();
                    raw[i] ^= flip;
                    let _ = decode(Bytes::from(raw));
                }
            }
        }
    }

    #[test]
    fn unknown_message_type_is_an_error() {
        let err = decode(Bytes::from_static(b"S\0\0\0\x01")).unwrap_err();
        assert!(err.to_string().contains("unknown message type"), "{err}");
    }

    /// A short mutation fuzz run on every test run; set
    /// WALRELAY_FUZZ_ITERATIONS for a long one (docs/security.md). Real
    /// messages are truncated, bit-flipped, spliced and extended; the
    /// decoder and the replication framing must return errors, never panic,
    /// and never allocate beyond the input.
    #[test]
    fn mutated_messages_never_panic_the_decoder_or_the_framing() {
        let iterations: u64 = std::env::var("WALRELAY_FUZZ_ITERATIONS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000);
        let corpus: Vec<Vec<u8>> = captured().into_iter().map(|(_, b)| b.to_vec()).collect();
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..iterations {
            let mut data = corpus[next() as usize % corpus.len()].clone();
            for _ in 0..1 + next() % 4 {
                let at = if data.is_empty() {
                    0
                } else {
                    next() as usize % data.len()
                };
                match next() % 5 {
                    0 if !data.is_empty() => data[at] ^= 1 << (next() % 8),
                    1 if !data.is_empty() => data[at] = next() as u8,
                    2 => data.truncate(at),
                    3 => data
                        .splice(at..at, (0..next() % 8).map(|_| next() as u8))
                        .for_each(drop),
                    _ => {
                        let other = &corpus[next() as usize % corpus.len()];
                        data.extend_from_slice(&other[..other.len().min(16)]);
                    }
                }
            }
            let _ = decode(Bytes::from(data.clone()));
            let mut framed = vec![if next() % 2 == 0 { b'w' } else { b'k' }];
            framed.extend_from_slice(&data);
            let _ = crate::postgres::replication::parse_copy_data(Bytes::from(framed));
        }
    }
}
