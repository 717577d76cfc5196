//! A Connect value (JsonConverter's payload) as the protobuf binary of the
//! message `ProtobufData.fromConnectData` builds for it, field numbers as
//! `super::schema` gives them (1, 2, … in each struct; 1 and 2 in a map
//! entry; 1 in a wrapper).
//!
//! What DynamicMessage writes, in proto3 (protocolbuffers encoding guide):
//! fields in number order; a scalar that holds its default (0, false, "",
//! empty bytes, +0.0) is left out, as setting it clears it; a message is
//! written whenever it is set, even empty; a repeated number or bool is
//! packed; an empty list is left out (fromConnectData returns null for it).
//! A null is left out when the schema is optional; a null the schema does not
//! allow, or a null inside a list (a repeated field cannot hold one, and
//! Confluent's converter fails on it), stops the event.

use base64::Engine;
use serde_json::Value;

use super::DECIMAL;
use crate::registry::connect_schema::{float, Connect, Kind, Misfit};

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// The binary of `value` under `schema` (a struct's message, or the
/// wrapper message of a primitive), appended to `out`.
pub fn encode(schema: &Connect, value: &Value, out: &mut Vec<u8>) -> Result<(), String> {
    let written = match &schema.kind {
        Kind::Struct(fields) => message(fields, value, out),
        _ => field(schema, 1, value, out),
    };
    written.map_err(Misfit::message)
}

fn message(fields: &[(String, Connect)], value: &Value, out: &mut Vec<u8>) -> Result<(), Misfit> {
    let object = value
        .as_object()
        .ok_or_else(|| Misfit::new(format!("is not an object: {value}")))?;
    for (i, (name, schema)) in fields.iter().enumerate() {
        let item = object.get(name).unwrap_or(&Value::Null);
        field(schema, i as u32 + 1, item, out).map_err(|m| m.within(format!(".{name}")))?;
    }
    Ok(())
}

/// One field: its key and value, or nothing for a default or a null.
fn field(schema: &Connect, tag: u32, value: &Value, out: &mut Vec<u8>) -> Result<(), Misfit> {
    if value.is_null() {
        if schema.optional {
            return Ok(());
        }
        return Err(Misfit::new("is null but its schema is not optional".into()));
    }
    match &schema.kind {
        Kind::Array(items) => {
            let list = value
                .as_array()
                .ok_or_else(|| Misfit::new(format!("is not an array: {value}")))?;
            if list.is_empty() {
                return Ok(());
            }
            if packed(items) {
                let mut body = Vec::new();
                for (i, member) in list.iter().enumerate() {
                    scalar(items, member_of(i, member)?, &mut body)
                        .map_err(|m| m.within(format!("[{i}]")))?;
                }
                put_key(out, tag, LEN);
                put_len(out, &body);
            } else {
                for (i, member) in list.iter().enumerate() {
                    single(items, tag, member_of(i, member)?, true, out)
                        .map_err(|m| m.within(format!("[{i}]")))?;
                }
            }
            Ok(())
        }
        Kind::Map(keys, values) => {
            for (i, (key, item)) in entries(keys, value)?.into_iter().enumerate() {
                let mut entry = Vec::new();
                field(keys, 1, &key, &mut entry).map_err(|m| m.within(format!("[{i}].key")))?;
                field(values, 2, item, &mut entry).map_err(|m| m.within(format!("[{i}].value")))?;
                put_key(out, tag, LEN);
                put_len(out, &entry);
            }
            Ok(())
        }
        _ => single(schema, tag, value, false, out),
    }
}

/// A list's member: a null stops the event, as a repeated field cannot
/// hold one (Confluent's converter fails on it).
fn member_of(i: usize, member: &Value) -> Result<&Value, Misfit> {
    if member.is_null() {
        return Err(
            Misfit::new("is null, which a repeated Protobuf field cannot hold".into())
                .within(format!("[{i}]")),
        );
    }
    Ok(member)
}

/// A map's entries from JsonConverter's JSON: an object when the keys are
/// plain strings, else `[key, value]` pairs.
fn entries<'v>(keys: &Connect, value: &'v Value) -> Result<Vec<(Value, &'v Value)>, Misfit> {
    if keys.kind == Kind::String && !keys.optional {
        let map = value
            .as_object()
            .ok_or_else(|| Misfit::new(format!("is not an object: {value}")))?;
        return Ok(map
            .iter()
            .map(|(k, v)| (Value::String(k.clone()), v))
            .collect());
    }
    let wrong = || Misfit::new(format!("is not an array of [key, value] pairs: {value}"));
    let pairs = value.as_array().ok_or_else(wrong)?;
    pairs
        .iter()
        .map(|pair| match pair.as_array().map(Vec::as_slice) {
            Some([key, item]) => Ok((key.clone(), item)),
            _ => Err(wrong()),
        })
        .collect()
}

/// Whether a repeated field of these items is packed (proto3's numbers and
/// bools).
fn packed(items: &Connect) -> bool {
    matches!(
        items.kind,
        Kind::Int8
            | Kind::Int16
            | Kind::Int32
            | Kind::Int64
            | Kind::Float32
            | Kind::Float64
            | Kind::Boolean
    )
}

/// A field that is no list or map: `always` for a list's member, which is
/// written even when it holds the default.
fn single(
    schema: &Connect,
    tag: u32,
    value: &Value,
    always: bool,
    out: &mut Vec<u8>,
) -> Result<(), Misfit> {
    let wire = match &schema.kind {
        _ if schema.name.as_deref() == Some(DECIMAL) => {
            let body = decimal(schema, value)?;
            put_key(out, tag, LEN);
            put_len(out, &body);
            return Ok(());
        }
        Kind::Struct(fields) => {
            let mut body = Vec::new();
            message(fields, value, &mut body)?;
            put_key(out, tag, LEN);
            put_len(out, &body);
            return Ok(());
        }
        Kind::Float32 => FIXED32,
        Kind::Float64 => FIXED64,
        Kind::String | Kind::Bytes => LEN,
        _ => VARINT,
    };
    let start = out.len();
    put_key(out, tag, wire);
    let is_default = scalar(schema, value, out)?;
    if is_default && !always {
        out.truncate(start);
    }
    Ok(())
}

/// A scalar's encoding without its key (a string or bytes with its
/// length); true when it holds proto3's default.
fn scalar(schema: &Connect, value: &Value, out: &mut Vec<u8>) -> Result<bool, Misfit> {
    let wrong = |what: &str| Misfit::new(format!("is not {what}: {value}"));
    Ok(match &schema.kind {
        Kind::Int8 | Kind::Int16 | Kind::Int32 => {
            let n = value.as_i64().ok_or_else(|| wrong("an integer"))?;
            let n = i32::try_from(n).map_err(|_| wrong("a 32-bit integer"))?;
            // int32 writes a negative number sign-extended to 64 bits.
            put_varint(out, i64::from(n) as u64);
            n == 0
        }
        Kind::Int64 => {
            let n = value.as_i64().ok_or_else(|| wrong("a 64-bit integer"))?;
            put_varint(out, n as u64);
            n == 0
        }
        Kind::Float32 => {
            let f = float(value).ok_or_else(|| wrong("a number"))? as f32;
            out.extend_from_slice(&f.to_le_bytes());
            // Float.equals: -0.0 is no default, NaN is no zero.
            f.to_bits() == 0
        }
        Kind::Float64 => {
            let f = float(value).ok_or_else(|| wrong("a number"))?;
            out.extend_from_slice(&f.to_le_bytes());
            f.to_bits() == 0
        }
        Kind::Boolean => {
            let b = value.as_bool().ok_or_else(|| wrong("a boolean"))?;
            put_varint(out, u64::from(b));
            !b
        }
        Kind::String => {
            let s = value.as_str().ok_or_else(|| wrong("a string"))?;
            put_len(out, s.as_bytes());
            s.is_empty()
        }
        Kind::Bytes => {
            let bytes = base64_bytes(value).ok_or_else(|| wrong("Base64 bytes"))?;
            put_len(out, &bytes);
            bytes.is_empty()
        }
        Kind::Array(_) | Kind::Map(..) | Kind::Struct(_) => {
            unreachable!("only scalars are packed or wrapped")
        }
    })
}

/// confluent.type.Decimal as DecimalUtils.fromBigDecimal fills it: the
/// unscaled value's two's-complement bytes (as JsonConverter's Base64
/// holds them), BigDecimal.precision() (its digits, at least 1) and the
/// schema's scale.
fn decimal(schema: &Connect, value: &Value) -> Result<Vec<u8>, Misfit> {
    let bytes = base64_bytes(value)
        .filter(|b| !b.is_empty())
        .ok_or_else(|| Misfit::new(format!("is not a Decimal's Base64 bytes: {value}")))?;
    let scale: i32 = schema
        .parameter("scale")
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut body = Vec::new();
    put_key(&mut body, 1, LEN);
    put_len(&mut body, &bytes);
    put_key(&mut body, 2, VARINT);
    put_varint(&mut body, u64::from(digits(&bytes)));
    if scale != 0 {
        put_key(&mut body, 3, VARINT);
        put_varint(&mut body, i64::from(scale) as u64);
    }
    Ok(body)
}

/// The decimal digits of a two's-complement big-endian integer (1 for 0).
pub(super) fn digits(twos: &[u8]) -> u32 {
    let mut magnitude = twos.to_vec();
    if twos.first().is_some_and(|b| b & 0x80 != 0) {
        for b in magnitude.iter_mut() {
            *b = !*b;
        }
        for b in magnitude.iter_mut().rev() {
            let (sum, carry) = b.overflowing_add(1);
            *b = sum;
            if !carry {
                break;
            }
        }
    }
    let mut count = 0;
    while magnitude.iter().any(|&b| b != 0) {
        let mut rest = 0u32;
        for b in magnitude.iter_mut() {
            let current = (rest << 8) | u32::from(*b);
            *b = (current / 10) as u8;
            rest = current % 10;
        }
        count += 1;
    }
    count.max(1)
}

fn base64_bytes(value: &Value) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(value.as_str()?)
        .ok()
}

fn put_key(out: &mut Vec<u8>, tag: u32, wire: u8) {
    put_varint(out, (u64::from(tag) << 3) | u64::from(wire));
}

fn put_len(out: &mut Vec<u8>, bytes: &[u8]) {
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// A zig-zag varint, as the message indexes are written.
pub(super) fn put_zigzag(out: &mut Vec<u8>, n: i64) {
    put_varint(out, ((n << 1) ^ (n >> 63)) as u64);
}
