//! Column values as pgoutput sends them (Postgres text output) turned into
//! what Debezium's PostgreSQL connector hands its converters.

use bytes::Bytes;

/// A `bytea` value's raw bytes from its hex text form (`\x00ff…`), which
/// walrelay's replication session asks for with `bytea_output=hex`.
pub fn bytea_from_hex(text: &[u8]) -> Result<Bytes, String> {
    let hex = text.strip_prefix(b"\\x").ok_or_else(|| {
        "a bytea value is not in hex form (\\x…); walrelay sets bytea_output=hex on its \
         session, so this is unexpected: report it"
            .to_string()
    })?;
    if hex.len() % 2 != 0 {
        return Err("a bytea value has an odd number of hex digits".into());
    }
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        b'A'..=b'F' => Ok(c - b'A' + 10),
        _ => Err(format!(
            "a bytea value holds {:?}, not a hex digit",
            c as char
        )),
    };
    let mut out = Vec::with_capacity(hex.len() / 2);
    for pair in hex.chunks_exact(2) {
        out.push(nibble(pair[0])? << 4 | nibble(pair[1])?);
    }
    Ok(Bytes::from(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_bytea_becomes_its_raw_bytes() {
        // The hex format of the PostgreSQL manual (datatype-binary.html):
        // "\x" followed by two hex digits per byte.
        assert_eq!(
            &bytea_from_hex(b"\\x00ff7F80").unwrap()[..],
            &[0x00, 0xff, 0x7f, 0x80]
        );
        assert_eq!(&bytea_from_hex(b"\\x").unwrap()[..], b"");
    }

    #[test]
    fn malformed_bytea_text_is_an_error_not_a_panic() {
        assert!(bytea_from_hex(b"\\x0").is_err());
        assert!(bytea_from_hex(b"\\xzz").is_err());
        assert!(bytea_from_hex(b"\\000").is_err());
        assert!(bytea_from_hex("\\xé1".as_bytes()).is_err());
    }
}
