//! Column values as pgoutput sends them (Postgres text output) turned into
//! what Debezium's PostgreSQL connector hands Kafka Connect's converters
//! with its defaults (`time.precision.mode=adaptive`,
//! `decimal.handling.mode=precise`, `binary.handling.mode=bytes`); see
//! debezium-connector-postgres/.../PostgresValueConverter.java (schemaBuilder)
//! and debezium-connector-common/.../jdbc/JdbcValueConverters.java.

use bytes::Bytes;

use super::placement::oid;
use super::timestamp::{days_from_civil, parse_pg_timestamp_us};

/// Postgres type OIDs beyond those in `placement::oid`.
pub mod more_oid {
    pub const DATE: u32 = 1082;
    pub const TIMESTAMP: u32 = 1114;
    pub const TIMESTAMPTZ: u32 = 1184;
    pub const NUMERIC: u32 = 1700;
}

/// Debezium's `decimal.handling.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DecimalMode {
    /// java.math.BigDecimal (Connect Decimal, or VariableScaleDecimal without a declared scale).
    #[default]
    Precise,
    /// The number as a string.
    String,
    /// A double.
    Double,
}

/// A column's value as a Kafka Connect value of Debezium's schema for it.
#[derive(Debug, Clone, PartialEq)]
pub enum ConnectValue {
    Null,
    Bool(bool),
    /// INT16, INT32, INT64; also io.debezium.time.Date (days) and
    /// io.debezium.time.Timestamp / MicroTimestamp (ms / µs since the epoch).
    Int(i64),
    Float32(f32),
    Float64(f64),
    /// A Connect Decimal of a numeric(p, s) column, as Postgres wrote it.
    Decimal(String),
    /// io.debezium.data.VariableScaleDecimal of an unconstrained numeric: `{scale, value}`.
    VariableScaleDecimal(String),
    /// STRING: text, uuid, json, jsonb (io.debezium.data.Json) and
    /// timestamptz (io.debezium.time.ZonedTimestamp) among others.
    String(String),
    Bytes(Bytes),
}

impl ConnectValue {
    /// The value Debezium would hand on for this column's text, or why not.
    pub fn from_pg(
        text: Option<&[u8]>,
        type_oid: u32,
        type_modifier: i32,
        decimals: DecimalMode,
    ) -> Result<Self, String> {
        let Some(bytes) = text else {
            return Ok(ConnectValue::Null);
        };
        if type_oid == oid::BYTEA {
            return bytea_from_hex(bytes).map(ConnectValue::Bytes);
        }
        let text =
            std::str::from_utf8(bytes).map_err(|_| "a column value is not UTF-8".to_string())?;
        let bad = |what: &str| format!("{text:?} is not a {what} value");
        Ok(match type_oid {
            oid::BOOL => ConnectValue::Bool(text == "t"),
            oid::INT2 | oid::INT4 | oid::INT8 => {
                ConnectValue::Int(text.parse().map_err(|_| bad("integer"))?)
            }
            oid::FLOAT4 => ConnectValue::Float32(parse_pg_float(text).ok_or_else(|| bad("real"))?),
            oid::FLOAT8 => {
                ConnectValue::Float64(parse_pg_float(text).ok_or_else(|| bad("double"))?)
            }
            more_oid::NUMERIC => numeric(text, type_modifier, decimals)?,
            more_oid::DATE => {
                let days = parse_date(text).ok_or_else(|| bad("date"))?;
                ConnectValue::Int(days)
            }
            more_oid::TIMESTAMP => {
                let us = parse_pg_timestamp_us(text)?;
                // adaptive: timestamp(0..3) is io.debezium.time.Timestamp (ms),
                // wider ones io.debezium.time.MicroTimestamp (µs).
                if (0..=3).contains(&type_modifier) {
                    ConnectValue::Int(us.div_euclid(1000))
                } else {
                    ConnectValue::Int(us)
                }
            }
            more_oid::TIMESTAMPTZ => ConnectValue::String(zoned_timestamp(text, type_modifier)?),
            _ => ConnectValue::String(text.to_string()),
        })
    }
}

/// Postgres writes NaN and the infinities by name.
fn parse_pg_float<F: std::str::FromStr>(text: &str) -> Option<F> {
    match text {
        "NaN" => "NaN".parse().ok(),
        "Infinity" => "inf".parse().ok(),
        "-Infinity" => "-inf".parse().ok(),
        _ => text.parse().ok(),
    }
}

fn numeric(text: &str, type_modifier: i32, decimals: DecimalMode) -> Result<ConnectValue, String> {
    let special = matches!(text, "NaN" | "Infinity" | "-Infinity");
    Ok(match decimals {
        DecimalMode::Double => ConnectValue::Float64(
            parse_pg_float(text).ok_or_else(|| format!("{text:?} is not a numeric value"))?,
        ),
        // SpecialValueDecimal.toString: the name of the special value.
        DecimalMode::String if special => ConnectValue::String(
            match text {
                "NaN" => "NAN",
                "Infinity" => "POSITIVE_INFINITY",
                _ => "NEGATIVE_INFINITY",
            }
            .into(),
        ),
        DecimalMode::String => ConnectValue::String(text.to_string()),
        DecimalMode::Precise if special => {
            return Err(format!(
                "numeric {text} cannot be a precise decimal (Debezium fails the same way); \
                 use --decimal-handling-mode string or double"
            ))
        }
        // An unconstrained numeric has typmod -1: no declared scale.
        // PostgresValueConverter.convertDecimal strips its trailing zeros
        // (12.50 is 12.5, scale 1; 100 stays 100, scale 0, as a negative
        // scale is set back to 0).
        DecimalMode::Precise if type_modifier < 4 => {
            ConnectValue::VariableScaleDecimal(strip_trailing_zeros(text))
        }
        DecimalMode::Precise => ConnectValue::Decimal(text.to_string()),
    })
}

/// A numeric's text without the zeros that end its fraction (and without
/// the point when nothing is left of it).
fn strip_trailing_zeros(text: &str) -> String {
    match text.split_once('.') {
        Some((int, frac)) => match frac.trim_end_matches('0') {
            "" => int.to_string(),
            frac => format!("{int}.{frac}"),
        },
        None => text.to_string(),
    }
}

/// `YYYY-MM-DD` as days since 1970-01-01 (io.debezium.time.Date).
fn parse_date(text: &str) -> Option<i64> {
    let mut parts = text.splitn(3, '-');
    // Postgres's last date is in 5874897; a bound keeps the arithmetic from overflowing.
    let y: i64 = parts
        .next()?
        .parse()
        .ok()
        .filter(|y| (0..=5_874_897).contains(y))?;
    let m: i64 = parts.next()?.parse().ok()?;
    let d: i64 = parts.next()?.parse().ok()?;
    ((1..=12).contains(&m) && (1..=31).contains(&d)).then(|| days_from_civil(y, m, d))
}

/// io.debezium.time.ZonedTimestamp: the instant in UTC, as Debezium 3
/// writes it (PostgresValueConverter.convertTimestampWithZone moves the value
/// to UTC and passes the column's scale to ZonedTimestamp.toIsoString): a
/// timestamptz(p), 1 <= p <= 6, has exactly p fraction digits, even zeros
/// (`10:00:00.250000Z` for an unconstrained column, whose scale is 6);
/// timestamptz(0) the ISO_OFFSET_DATE_TIME form, seconds and `Z`.
fn zoned_timestamp(text: &str, type_modifier: i32) -> Result<String, String> {
    if text == "infinity" || text == "-infinity" {
        return Ok(text.to_string());
    }
    let us = parse_pg_timestamp_us(text)?;
    let secs = us.div_euclid(1_000_000);
    let micros = us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let mut out = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    );
    let fraction = format!("{micros:06}");
    let width = if type_modifier < 0 { 6 } else { type_modifier };
    if (1..=6).contains(&width) {
        // Postgres rounded the value to the column's precision: nothing is cut.
        out.push('.');
        out.push_str(&fraction[..width as usize]);
    } else if micros != 0 {
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
    out.push('Z');
    Ok(out)
}

/// The civil date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

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
    fn unconstrained_numerics_lose_their_trailing_zeros_as_in_debezium() {
        let var = |text: &str| {
            ConnectValue::from_pg(
                Some(text.as_bytes()),
                more_oid::NUMERIC,
                -1,
                DecimalMode::Precise,
            )
            .unwrap()
        };
        let expect = |text: &str| ConnectValue::VariableScaleDecimal(text.into());
        assert_eq!(var("12.50"), expect("12.5"));
        assert_eq!(var("100"), expect("100"));
        assert_eq!(var("0.000"), expect("0"));
        assert_eq!(var("-3.10"), expect("-3.1"));
    }

    #[test]
    fn dates_beyond_postgres_are_an_error_not_a_panic() {
        let date = |text: &str| {
            ConnectValue::from_pg(
                Some(text.as_bytes()),
                more_oid::DATE,
                -1,
                DecimalMode::Precise,
            )
        };
        assert!(date("99999999999999999-01-01").is_err());
        assert_eq!(date("1970-01-02").unwrap(), ConnectValue::Int(1));
    }

    #[test]
    fn malformed_bytea_text_is_an_error_not_a_panic() {
        assert!(bytea_from_hex(b"\\x0").is_err());
        assert!(bytea_from_hex(b"\\xzz").is_err());
        assert!(bytea_from_hex(b"\\000").is_err());
        assert!(bytea_from_hex("\\xé1".as_bytes()).is_err());
    }
}
