//! How Kafka Connect writes Debezium's values, so walrelay's bytes are the
//! bytes a Connect worker would have produced:
//! - headers through `SimpleHeaderConverter` (the worker's default
//!   `header.converter`), which is `Values.convertToString` (apache/kafka
//!   connect/api/.../data/Values.java, `append`): numbers and booleans as
//!   Java prints them, strings as they are, bytes in Base64, structs as
//!   `{"name":value,…}`;
//! - values through `JsonConverter` (connect/json/.../JsonConverter.java)
//!   with its default `decimal.format=BASE64`: a Decimal is the Base64 of its
//!   unscaled two's-complement bytes, bytes are Base64 strings, floats are
//!   written by Jackson as `Double.toString`/`Float.toString` write them.

use base64::Engine;

use super::column::ConnectValue;

const BASE64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

impl ConnectValue {
    /// The header bytes `SimpleHeaderConverter` writes; None for null.
    pub fn header_text(&self) -> Option<String> {
        Some(match self {
            ConnectValue::Null => return None,
            ConnectValue::Bool(b) => b.to_string(),
            ConnectValue::Int(i) => i.to_string(),
            ConnectValue::Float32(f) => java_float(f64::from(*f), &format!("{f:e}")),
            ConnectValue::Float64(f) => java_float(*f, &format!("{f:e}")),
            ConnectValue::Decimal(text) => java_big_decimal(text),
            ConnectValue::VariableScaleDecimal(text) => variable_scale_struct(text),
            ConnectValue::String(s) => s.clone(),
            ConnectValue::Bytes(b) => BASE64.encode(b),
        })
    }

    /// The JSON `JsonConverter` (schemas.enable=false) writes for the value.
    pub fn json_text(&self) -> String {
        match self {
            ConnectValue::Null => "null".into(),
            ConnectValue::Bool(b) => b.to_string(),
            ConnectValue::Int(i) => i.to_string(),
            ConnectValue::Float32(f) if f.is_finite() => {
                java_float(f64::from(*f), &format!("{f:e}"))
            }
            ConnectValue::Float64(f) if f.is_finite() => java_float(*f, &format!("{f:e}")),
            // Jackson writes non-finite numbers as strings ("NaN", "Infinity").
            ConnectValue::Float32(f) => json_string(&java_float(f64::from(*f), "")),
            ConnectValue::Float64(f) => json_string(&java_float(*f, "")),
            ConnectValue::Decimal(text) => json_string(&BASE64.encode(unscaled_bytes(text).0)),
            ConnectValue::VariableScaleDecimal(text) => variable_scale_struct(text),
            ConnectValue::String(s) => json_string(s),
            ConnectValue::Bytes(b) => json_string(&BASE64.encode(b)),
        }
    }
}

/// A JSON string literal as JsonConverter's Jackson writes it (found by
/// tests/debezium_oracle.rs): `\"`, `\\`, `\b \t \n \f \r`, other control
/// characters as `\u00XX` in upper-case hex, and a character beyond the
/// BMP as its escaped UTF-16 surrogates (`\uD83D\uDE00`: Jackson's
/// COMBINE_UNICODE_SURROGATES_IN_UTF8 is off by default); the rest as is.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        push_json_char(&mut out, c);
    }
    out.push('"');
    out
}

/// One character of a JSON string literal, escaped as `json_string` says.
pub fn push_json_char(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\u{8}' => out.push_str("\\b"),
        '\t' => out.push_str("\\t"),
        '\n' => out.push_str("\\n"),
        '\u{c}' => out.push_str("\\f"),
        '\r' => out.push_str("\\r"),
        c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04X}", c as u32)),
        c if (c as u32) > 0xFFFF => {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{unit:04X}"));
            }
        }
        c => out.push(c),
    }
}

/// io.debezium.data.VariableScaleDecimal, a struct `{scale, value}`;
/// Values.append and JsonConverter write it alike.
fn variable_scale_struct(text: &str) -> String {
    let (bytes, scale) = unscaled_bytes(text);
    format!(
        "{{\"scale\":{scale},\"value\":\"{}\"}}",
        BASE64.encode(bytes)
    )
}

/// A numeric's unscaled value as `BigInteger.toByteArray()` (big-endian
/// two's complement, fewest bytes that keep the sign), and its scale.
fn unscaled_bytes(text: &str) -> (Vec<u8>, u32) {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    // Base-10 digits into a big-endian base-256 magnitude.
    let mut magnitude: Vec<u8> = vec![0];
    for d in int.bytes().chain(frac.bytes()).filter(u8::is_ascii_digit) {
        let mut carry = u32::from(d - b'0');
        for byte in magnitude.iter_mut().rev() {
            let v = u32::from(*byte) * 10 + carry;
            *byte = (v & 0xff) as u8;
            carry = v >> 8;
        }
        while carry > 0 {
            magnitude.insert(0, (carry & 0xff) as u8);
            carry >>= 8;
        }
    }
    while magnitude.len() > 1 && magnitude[0] == 0 {
        magnitude.remove(0);
    }
    let zero = magnitude == [0];
    let mut bytes = magnitude;
    if negative && !zero {
        for b in bytes.iter_mut() {
            *b = !*b;
        }
        for b in bytes.iter_mut().rev() {
            let (v, overflow) = b.overflowing_add(1);
            *b = v;
            if !overflow {
                break;
            }
        }
        if bytes[0] & 0x80 == 0 {
            bytes.insert(0, 0xff);
        }
    } else if bytes[0] & 0x80 != 0 {
        bytes.insert(0, 0);
    }
    (bytes, frac.len() as u32)
}

/// `BigDecimal.toString()` of a numeric's text: plain unless the adjusted
/// exponent is below -6, then `d.dddE-n` (java.math.BigDecimal javadoc).
fn java_big_decimal(text: &str) -> String {
    let (sign, digits) = match text.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", text),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let unscaled: String = format!("{int}{frac}");
    let significant = unscaled.trim_start_matches('0');
    let significant = if significant.is_empty() {
        "0"
    } else {
        significant
    };
    let scale = frac.len() as i64;
    let adjusted = -scale + (significant.len() as i64 - 1);
    if adjusted >= -6 {
        return text.to_string();
    }
    let mantissa = if significant.len() > 1 {
        format!("{}.{}", &significant[..1], &significant[1..])
    } else {
        significant.to_string()
    };
    format!("{sign}{mantissa}E{adjusted}")
}

/// `Double.toString` / `Float.toString`: plain between 10^-3 and 10^7,
/// otherwise `d.dddE±n`, always with a digit after the point. `shortest` is
/// Rust's shortest round-trip digits in `{:e}` form, as Java (19+) chooses them.
fn java_float(value: f64, shortest: &str) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    if value == 0.0 {
        return if value.is_sign_negative() {
            "-0.0"
        } else {
            "0.0"
        }
        .into();
    }
    let (mantissa, exponent) = shortest.split_once('e').unwrap_or((shortest, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let abs = value.abs();
    if (1e-3..1e7).contains(&abs) {
        let point = exponent + 1;
        let (int, frac) = if point <= 0 {
            (
                "0".to_string(),
                format!("{}{digits}", "0".repeat((-point) as usize)),
            )
        } else if point as usize >= digits.len() {
            (
                format!("{digits}{}", "0".repeat(point as usize - digits.len())),
                String::new(),
            )
        } else {
            (
                digits[..point as usize].to_string(),
                digits[point as usize..].to_string(),
            )
        };
        let frac = if frac.is_empty() { "0".into() } else { frac };
        format!("{sign}{int}.{frac}")
    } else {
        let rest = if digits.len() > 1 { &digits[1..] } else { "0" };
        format!("{sign}{}.{rest}E{exponent}", &digits[..1])
    }
}

/// `Double.toString` of a double.
pub fn java_double(value: f64) -> String {
    java_float(value, &format!("{value:e}"))
}

/// A JSON document whose field texts are already what JsonConverter writes.
pub fn json_object(fields: &[(&str, String)]) -> String {
    let mut out = String::from("{");
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&json_string(name));
        out.push(':');
        out.push_str(value);
    }
    out.push('}');
    out
}

/// Checks a hand-written JSON text.
#[cfg(test)]
fn is_json(text: &str) -> bool {
    serde_json::from_str::<&serde_json::value::RawValue>(text).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::column::{more_oid, DecimalMode};
    use crate::outbox::placement::oid;

    fn value(text: &str, type_oid: u32, typmod: i32) -> ConnectValue {
        ConnectValue::from_pg(
            Some(text.as_bytes()),
            type_oid,
            typmod,
            DecimalMode::Precise,
        )
        .unwrap()
    }

    #[test]
    fn doubles_print_as_java_prints_them() {
        // java.lang.Double.toString javadoc: between 10^-3 and 10^7 "the
        // integer part ... followed by '.' followed by one or more decimal
        // digits"; otherwise "computerized scientific notation" such as 1.0E10.
        let d = |f: f64| java_float(f, &format!("{f:e}"));
        assert_eq!(d(1.0), "1.0");
        assert_eq!(d(39.98), "39.98");
        assert_eq!(d(-0.5), "-0.5");
        assert_eq!(d(0.001), "0.001");
        assert_eq!(d(1e7), "1.0E7");
        assert_eq!(d(1.5e10), "1.5E10");
        assert_eq!(d(0.0001), "1.0E-4");
        assert_eq!(d(1234567.0), "1234567.0");
        assert_eq!(d(0.0), "0.0");
        assert_eq!(d(f64::NAN), "NaN");
        let f = |x: f32| java_float(f64::from(x), &format!("{x:e}"));
        // Float.toString(0.1f) is "0.1", not the double's 0.10000000149011612.
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(3.4e38), "3.4E38");
    }

    #[test]
    fn decimals_print_as_big_decimal_to_string() {
        // java.math.BigDecimal.toString javadoc examples, [unscaled, scale]:
        // [123,1] "12.3", [123,5] "0.00123", [123,10] "1.23E-8",
        // [-123,12] "-1.23E-10" (Postgres writes them plainly).
        assert_eq!(java_big_decimal("12.3"), "12.3");
        assert_eq!(java_big_decimal("0.00123"), "0.00123");
        assert_eq!(java_big_decimal("0.0000000123"), "1.23E-8");
        assert_eq!(java_big_decimal("-0.000000000123"), "-1.23E-10");
        assert_eq!(java_big_decimal("12.50"), "12.50");
        assert_eq!(java_big_decimal("1000"), "1000");
    }

    #[test]
    fn json_strings_are_escaped_as_jackson_escapes_them() {
        assert_eq!(
            json_string("a\u{1}\u{1f}\u{7f}\u{2028}é😀\t\n\"\\/"),
            "\"a\\u0001\\u001F\u{7f}\u{2028}é\\uD83D\\uDE00\\t\\n\\\"\\\\/\""
        );
    }

    #[test]
    fn decimals_in_json_are_base64_of_the_unscaled_twos_complement() {
        // BigInteger.toByteArray: 1250 = 0x04E2; -1 = 0xFF; 128 = 0x0080;
        // -129 = 0xFF7F; 0 = 0x00.
        assert_eq!(unscaled_bytes("12.50"), (vec![0x04, 0xe2], 2));
        assert_eq!(unscaled_bytes("-1"), (vec![0xff], 0));
        assert_eq!(unscaled_bytes("1.28"), (vec![0x00, 0x80], 2));
        assert_eq!(unscaled_bytes("-129"), (vec![0xff, 0x7f], 0));
        assert_eq!(unscaled_bytes("0.000"), (vec![0x00], 3));
        assert_eq!(
            value("12.50", more_oid::NUMERIC, (10 << 16 | 2) + 4).json_text(),
            "\"BOI=\""
        );
        // Unconstrained: Debezium strips the trailing zero first, 125 = 0x7D.
        assert_eq!(
            value("12.50", more_oid::NUMERIC, -1).json_text(),
            "{\"scale\":1,\"value\":\"fQ==\"}"
        );
    }

    #[test]
    fn typed_columns_render_as_debezium_with_connects_converters() {
        assert_eq!(value("t", oid::BOOL, -1).header_text().unwrap(), "true");
        assert_eq!(value("f", oid::BOOL, -1).json_text(), "false");
        assert_eq!(value("-7", oid::INT2, -1).header_text().unwrap(), "-7");
        assert_eq!(value("1.5", oid::FLOAT4, -1).json_text(), "1.5");
        // io.debezium.time.Date: days since the epoch (1795910400 s / 86400).
        assert_eq!(value("2026-11-29", more_oid::DATE, -1).json_text(), "20786");
        // MicroTimestamp for timestamp, Timestamp (ms) for timestamp(3).
        let ts = "2026-11-29 10:00:00.25";
        assert_eq!(
            value(ts, more_oid::TIMESTAMP, -1).json_text(),
            "1795946400250000"
        );
        assert_eq!(
            value(ts, more_oid::TIMESTAMP, 3).json_text(),
            "1795946400250"
        );
        // ZonedTimestamp in UTC, with as many fraction digits as the
        // column's precision (6 unconstrained), none for timestamptz(0).
        assert_eq!(
            value("2026-11-29 12:00:00.25+02", more_oid::TIMESTAMPTZ, -1).json_text(),
            "\"2026-11-29T10:00:00.250000Z\""
        );
        assert_eq!(
            value("2026-11-29 10:00:00+00", more_oid::TIMESTAMPTZ, -1)
                .header_text()
                .unwrap(),
            "2026-11-29T10:00:00.000000Z"
        );
        assert_eq!(
            value("2026-11-29 10:00:00.25+00", more_oid::TIMESTAMPTZ, 3)
                .header_text()
                .unwrap(),
            "2026-11-29T10:00:00.250Z"
        );
        assert_eq!(
            value("2026-11-29 10:00:00+00", more_oid::TIMESTAMPTZ, 0)
                .header_text()
                .unwrap(),
            "2026-11-29T10:00:00Z"
        );
        assert_eq!(
            value("{\"a\": 1}", oid::JSONB, -1).json_text(),
            "\"{\\\"a\\\": 1}\""
        );
        assert_eq!(
            value("\\x00ff", oid::BYTEA, -1).header_text().unwrap(),
            "AP8="
        );
        assert_eq!(ConnectValue::Null.header_text(), None);
    }

    #[test]
    fn decimal_modes_follow_debezium() {
        let mode = |text: &str, mode| {
            ConnectValue::from_pg(Some(text.as_bytes()), more_oid::NUMERIC, -1, mode)
        };
        assert_eq!(
            mode("12.50", DecimalMode::String).unwrap().json_text(),
            "\"12.50\""
        );
        assert_eq!(
            mode("12.50", DecimalMode::Double).unwrap().json_text(),
            "12.5"
        );
        assert_eq!(
            mode("NaN", DecimalMode::String).unwrap().json_text(),
            "\"NAN\""
        );
        assert!(mode("NaN", DecimalMode::Precise).is_err());
    }

    #[test]
    fn hand_written_objects_are_json() {
        let text = json_object(&[("payload", "\"x\"".into()), ("n", "1.0E7".into())]);
        assert_eq!(text, "{\"payload\":\"x\",\"n\":1.0E7}");
        assert!(is_json(&text));
    }
}
