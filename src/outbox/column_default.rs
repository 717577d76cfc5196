//! A column's DEFAULT as Debezium's PostgreSQL connector reads it: the
//! catalog's expression (`pg_get_expr(adbin, adrelid)`, what the JDBC
//! driver's COLUMN_DEF holds) turned into a value of the column's type, or
//! none. Debezium puts that value into the column's schema (`"default"`),
//! and Kafka Connect's `Struct.get` hands it out wherever the column is
//! NULL.
//!
//! Source: debezium/debezium v3.6.1.Final debezium-connector-postgres/.../
//! connection/PostgresDefaultValueConverter.java:
//! - a mapper per type name; other types (bytea, time, interval, arrays, …)
//!   have no default here, as walrelay writes no schema for them;
//! - the expression is trimmed for numbers, booleans, uuid, date and
//!   timestamps, and `NULL::…` is no default;
//! - `extractDefault`: a function call (`^[(]?[A-Za-z0-9_.]+\(…\)`, e.g.
//!   `now()`, `gen_random_uuid()`, `nextval('s'::regclass)`) or
//!   `CURRENT_TIMESTAMP`, `CURRENT_DATE`, … gives the type's placeholder
//!   (`0`, `false`, `''`, `{}`, the nil uuid, `1970-01-01`); text without a
//!   quote is taken as it is (`12.50`, `true`); otherwise the first quoted
//!   part, up to the next quote (so `'it''s'::text` is `it`);
//! - the mapper parses it (Integer.parseInt, new BigDecimal, …; a failure
//!   means no default), and the column's value converter converts it, a
//!   decimal keeping at least the column's scale (`setScale`);
//! - a value that is a Struct (an unconstrained numeric's
//!   VariableScaleDecimal) is no default (KAFKA-12694).
//!
//! The result is the value's Postgres text, as pgoutput would send it, so
//! the column's usual conversion (`ConnectValue::from_pg`) applies.

use super::column::{more_oid, DecimalMode};
use super::placement::oid;
use super::schema::text_oid;

/// CURRENT_DATE_TIMES, compared lower-cased.
const CURRENT: [&str; 5] = [
    "current_timestamp",
    "current_time",
    "current_date",
    "localtime",
    "localtimestamp",
];

/// The default's text for a column of this type, or None when Debezium
/// gives it none.
pub fn default_text(
    expression: &str,
    type_oid: u32,
    type_modifier: i32,
    decimals: DecimalMode,
) -> Option<String> {
    let (placeholder, trimmed) = match type_oid {
        oid::BOOL => ("false", true),
        oid::INT2 | oid::INT4 | oid::INT8 => ("0", true),
        oid::FLOAT4 | oid::FLOAT8 | more_oid::NUMERIC => ("0.0", true),
        text_oid::TEXT | text_oid::VARCHAR | text_oid::BPCHAR => ("", false),
        oid::JSON | oid::JSONB => ("{}", false),
        text_oid::UUID => ("00000000-0000-0000-0000-000000000000", true),
        more_oid::DATE | more_oid::TIMESTAMP | more_oid::TIMESTAMPTZ => ("1970-01-01", true),
        _ => return None,
    };
    let expression = if trimmed {
        expression.trim()
    } else {
        expression
    };
    // parseNullDefault, for the types whose mappers it wraps.
    let null_aware = matches!(
        type_oid,
        oid::BOOL
            | oid::INT2
            | oid::INT4
            | oid::INT8
            | oid::FLOAT4
            | oid::FLOAT8
            | more_oid::NUMERIC
    );
    if null_aware && expression.starts_with("NULL::") {
        return None;
    }
    let value = extract(expression, placeholder)?;
    match type_oid {
        // Boolean.parseBoolean.
        oid::BOOL => Some(
            if value.eq_ignore_ascii_case("true") {
                "t"
            } else {
                "f"
            }
            .into(),
        ),
        oid::INT2 => java_integer(value, i64::from(i16::MIN), i64::from(i16::MAX)),
        oid::INT4 => java_integer(value, i64::from(i32::MIN), i64::from(i32::MAX)),
        oid::INT8 => java_integer(value, i64::MIN, i64::MAX),
        oid::FLOAT4 | oid::FLOAT8 => java_float(value),
        more_oid::NUMERIC => decimal(value, type_modifier, decimals),
        text_oid::UUID => uuid(value),
        more_oid::DATE => date_part(value).map(str::to_string),
        more_oid::TIMESTAMP => timestamp(value, false),
        more_oid::TIMESTAMPTZ => timestamp(value, true),
        _ => Some(value.to_string()),
    }
}

/// extractDefault(value, placeholder).
fn extract<'a>(expression: &'a str, placeholder: &'a str) -> Option<&'a str> {
    if is_function_call(expression) || CURRENT.contains(&expression.to_lowercase().as_str()) {
        return Some(placeholder);
    }
    if !expression.contains('\'') {
        return (!expression.starts_with("NULL::")).then_some(expression);
    }
    // LITERAL_DEFAULT_PATTERN '(.*?)', the first match; none throws.
    let start = expression.find('\'')? + 1;
    let end = expression[start..].find('\'')? + start;
    Some(&expression[start..end])
}

/// FUNCTION_DEFAULT_PATTERN `^[(]?[A-Za-z0-9_.]+\((?:.+(?:, ?.+)*)?\)`
/// found at the start: an optional `(`, a name, `(`, and a `)` later (the
/// inner part, when present, is any text, so only a closing parenthesis
/// after the opening one matters).
fn is_function_call(expression: &str) -> bool {
    let rest = expression.strip_prefix('(').unwrap_or(expression);
    let name_len = rest
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'.')
        .count();
    if name_len == 0 {
        return false;
    }
    let Some(args) = rest[name_len..].strip_prefix('(') else {
        return false;
    };
    // `\(\)` or `\(.+…\)`: `.` matches no line terminator.
    let line = args.split(['\n', '\r']).next().unwrap_or("");
    line.contains(')')
}

/// Short/Integer/Long.parseInt: an optional sign and decimal digits in range.
fn java_integer(text: &str, min: i64, max: i64) -> Option<String> {
    let digits = text.strip_prefix(['+', '-']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let value: i64 = text.parse().ok()?;
    (min..=max).contains(&value).then(|| value.to_string())
}

/// Float/Double.parseFloat of the forms Postgres writes: decimal and
/// exponent notation, NaN and the infinities.
fn java_float(text: &str) -> Option<String> {
    let trimmed = text.trim();
    match trimmed {
        "NaN" | "Infinity" | "-Infinity" => return Some(trimmed.into()),
        _ => {}
    }
    let value: f64 = trimmed.parse().ok()?;
    Some(value.to_string())
}

/// new BigDecimal(text), then the column's value converter: precise keeps
/// at least the column's scale (setScale), string keeps the text, double
/// parses it. Returns the number's text with that scale.
fn decimal(text: &str, type_modifier: i32, decimals: DecimalMode) -> Option<String> {
    let (sign, unsigned) = match text.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", text.strip_prefix('+').unwrap_or(text)),
    };
    let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return None;
    }
    let int = if int.is_empty() { "0" } else { int };
    match decimals {
        // A VariableScaleDecimal is a Struct: no default.
        DecimalMode::Precise if type_modifier < 4 => None,
        DecimalMode::Precise => {
            // make_numeric_typmod's 11-bit scale (see schema.rs).
            let scale = ((((type_modifier - 4) & 0x7ff) ^ 0x400) - 0x400).max(0) as usize;
            let frac = format!("{frac:0<scale$}");
            Some(if frac.is_empty() {
                format!("{sign}{int}")
            } else {
                format!("{sign}{int}.{frac}")
            })
        }
        // BigDecimal.toString of the parsed text.
        DecimalMode::String | DecimalMode::Double => Some(if frac.is_empty() {
            format!("{sign}{int}")
        } else {
            format!("{sign}{int}.{frac}")
        }),
    }
}

/// UUID.fromString, in its canonical form (lower-case on the way out).
fn uuid(text: &str) -> Option<String> {
    let groups: Vec<&str> = text.split('-').collect();
    let lengths: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    (lengths == [8, 4, 4, 4, 12]
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit())))
    .then(|| text.to_ascii_lowercase())
}

/// The date of a date or timestamp text (TimestampUtils reads a date alone).
fn date_part(text: &str) -> Option<&str> {
    let date = text.split([' ', 'T']).next()?;
    (date.len() >= 10).then_some(date)
}

/// TimestampUtils.toOffsetDateTime: a missing time is midnight, a missing
/// offset UTC.
fn timestamp(text: &str, zoned: bool) -> Option<String> {
    let mut out = text.to_string();
    if !text.contains([' ', 'T']) {
        out.push_str(" 00:00:00");
    }
    let time = out.split_once([' ', 'T']).map_or("", |(_, t)| t);
    if zoned && !time.contains(['+', '-', 'Z']) {
        out.push_str("+00");
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn precise(expression: &str, type_oid: u32, type_modifier: i32) -> Option<String> {
        default_text(expression, type_oid, type_modifier, DecimalMode::Precise)
    }

    #[test]
    fn quoted_literals_give_their_first_quoted_part() {
        // The catalog's forms, as `pg_get_expr` writes them.
        assert_eq!(precise("'eu'::text", 25, -1).as_deref(), Some("eu"));
        assert_eq!(precise("'it''s'::text", 25, -1).as_deref(), Some("it"));
        assert_eq!(precise("''::text", 25, -1).as_deref(), Some(""));
        assert_eq!(precise("'-1'::integer", 23, -1).as_deref(), Some("-1"));
        assert_eq!(
            precise("'9223372036854775807'::bigint", 20, -1).as_deref(),
            Some("9223372036854775807")
        );
        assert_eq!(
            precise("'{\"a\": 1}'::jsonb", 3802, -1).as_deref(),
            Some("{\"a\": 1}")
        );
        assert_eq!(
            precise(
                "'2020-01-01 08:00:00+00'::timestamp with time zone",
                1184,
                -1
            )
            .as_deref(),
            Some("2020-01-01 08:00:00+00")
        );
    }

    #[test]
    fn raw_values_are_taken_as_they_are_and_parsed_as_java_does() {
        assert_eq!(precise("true", 16, -1).as_deref(), Some("t"));
        assert_eq!(precise("false", 16, -1).as_deref(), Some("f"));
        assert_eq!(precise("7", 23, -1).as_deref(), Some("7"));
        // Integer.parseInt refuses an expression: no default.
        assert_eq!(precise("(1 + 1)", 23, -1), None);
        assert_eq!(precise("40000", 21, -1), None);
        // numeric(10,2) DEFAULT 1: setScale(2).
        let typmod = (10 << 16 | 2) + 4;
        assert_eq!(precise("1", 1700, typmod).as_deref(), Some("1.00"));
        assert_eq!(
            precise("'-0.5'::numeric", 1700, typmod).as_deref(),
            Some("-0.50")
        );
        let string = default_text("1", 1700, typmod, DecimalMode::String);
        assert_eq!(string.as_deref(), Some("1"));
        // An unconstrained numeric is a VariableScaleDecimal, a Struct: none.
        assert_eq!(precise("12.50", 1700, -1), None);
        assert_eq!(
            default_text("12.50", 1700, -1, DecimalMode::String).as_deref(),
            Some("12.50")
        );
        assert_eq!(
            precise("'10000000000'::numeric", 701, -1).as_deref(),
            Some("10000000000")
        );
        assert_eq!(precise("NULL::integer", 23, -1), None);
    }

    #[test]
    fn functions_and_current_times_give_the_types_placeholder() {
        assert_eq!(
            precise("now()", 1184, -1).as_deref(),
            Some("1970-01-01 00:00:00+00")
        );
        assert_eq!(
            precise("CURRENT_TIMESTAMP", 1114, -1).as_deref(),
            Some("1970-01-01 00:00:00")
        );
        assert_eq!(
            precise("CURRENT_DATE", 1082, -1).as_deref(),
            Some("1970-01-01")
        );
        assert_eq!(
            precise("gen_random_uuid()", 2950, -1).as_deref(),
            Some("00000000-0000-0000-0000-000000000000")
        );
        assert_eq!(
            precise("nextval('t_id_seq'::regclass)", 23, -1).as_deref(),
            Some("0")
        );
        assert_eq!(precise("upper('x'::text)", 25, -1).as_deref(), Some(""));
        assert_eq!(precise("now()", 16, -1).as_deref(), Some("f"));
    }

    #[test]
    fn types_without_a_mapper_have_no_default() {
        // bytea (17), interval (1186).
        assert_eq!(precise("'\\x00'::bytea", 17, -1), None);
        assert_eq!(precise("'1 day'::interval", 1186, -1), None);
    }
}
