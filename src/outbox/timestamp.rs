//! Reads a Postgres timestamp column's text (ISO DateStyle, which walrelay
//! sets on its replication session) as milliseconds since the Unix epoch,
//! for the Kafka timestamp, or as microseconds for Debezium's MicroTimestamp.

/// `2026-11-29 22:10:00.123456+00`, `…+05:30`, or without offset (UTC).
/// Any other text is an error, never a panic: the column may hold anything.
pub fn parse_pg_timestamp_ms(text: &str) -> Result<i64, String> {
    let us = micros_since_epoch(text)?;
    i64::try_from(us.div_euclid(1000)).map_err(|_| out_of_range(text))
}

/// The same, in microseconds since the Unix epoch; Postgres's last years
/// are beyond an i64 of microseconds since 1970, and an error.
pub fn parse_pg_timestamp_us(text: &str) -> Result<i64, String> {
    i64::try_from(micros_since_epoch(text)?).map_err(|_| out_of_range(text))
}

fn out_of_range(text: &str) -> String {
    format!("{text:?} is out of range for a timestamp since 1970")
}

fn micros_since_epoch(text: &str) -> Result<i128, String> {
    let bad =
        || format!("{text:?} is not an ISO timestamp (YYYY-MM-DD HH:MM:SS[.ffffff][+HH[:MM]])");
    // Every field below is ASCII digits; checking that first makes the byte
    // offsets safe and keeps each number small enough not to overflow.
    let field = |v: &str, max: i64| -> Result<i64, String> {
        if v.is_empty() || v.len() > 6 || !v.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        v.parse::<i64>().ok().filter(|n| *n <= max).ok_or_else(bad)
    };
    let (date, rest) = text.split_once([' ', 'T']).ok_or_else(bad)?;
    let mut d = date.splitn(3, '-');
    let mut next = |max| field(d.next().unwrap_or(""), max);
    // Postgres's largest year is 294276.
    let (y, m, day) = (next(294_276)?, next(12)?, next(31)?);
    // Split the offset off the time: the last '+' or '-' after the seconds.
    let (time, offset_secs) = match rest.rfind(['+', '-']) {
        Some(i) => {
            let sign = if rest.as_bytes()[i] == b'-' { -1 } else { 1 };
            let mut parts = rest[i + 1..].split(':');
            let h = field(parts.next().unwrap_or(""), 24)?;
            let mi = parts.next().map(|v| field(v, 59)).transpose()?.unwrap_or(0);
            let s = parts.next().map(|v| field(v, 59)).transpose()?.unwrap_or(0);
            if parts.next().is_some() {
                return Err(bad());
            }
            (&rest[..i], sign * (h * 3600 + mi * 60 + s))
        }
        None => (rest, 0),
    };
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':');
    let (hh, mm, ss) = (
        field(t.next().unwrap_or(""), 24)?,
        field(t.next().unwrap_or(""), 59)?,
        field(t.next().unwrap_or(""), 60)?,
    );
    if t.next().is_some() || m < 1 || day < 1 {
        return Err(bad());
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    // ASCII digits only, so the first six bytes are the microseconds.
    let micros: i64 = format!("{:0<6}", &frac[..frac.len().min(6)])
        .parse()
        .map_err(|_| bad())?;
    let days = days_from_civil(y, m, day);
    let secs = (days * 86_400 + hh * 3600 + mm * 60 + ss) - offset_secs;
    // i128: the largest years overflow an i64 of microseconds.
    Ok(i128::from(secs) * 1_000_000 + i128::from(micros))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_with_offsets_become_epoch_milliseconds() {
        assert_eq!(parse_pg_timestamp_ms("1970-01-01 00:00:00+00").unwrap(), 0);
        assert_eq!(
            parse_pg_timestamp_ms("2026-11-29 22:10:00.123456+00").unwrap(),
            1_795_990_200_123
        );
        assert_eq!(
            parse_pg_timestamp_ms("2026-11-30 03:40:00.123+05:30").unwrap(),
            1_795_990_200_123
        );
        assert_eq!(
            parse_pg_timestamp_ms("2000-01-01 00:00:00").unwrap(),
            946_684_800_000
        );
        assert_eq!(parse_pg_timestamp_ms("1969-12-31 23:00:00-01").unwrap(), 0);
    }

    #[test]
    fn other_text_is_refused() {
        for text in [
            "yesterday",
            "2026-13-01 00:00:00+00",
            "2026-01-01 00:00:00.12é",
            "2026-01-01 00:00:00.é",
            "2026-01-01 00:00:00+é",
            "2026-01-01 ０0:00:00",
            "99999999999999999999-01-01 00:00:00",
            "2026-01-01 00:00:00+99999999999999",
            "2026-01-01 00:00:00+01:00:00:00",
            "2026-01-01 00:00:00:00",
            "2026-00-01 00:00:00",
        ] {
            assert!(parse_pg_timestamp_ms(text).is_err(), "{text}");
        }
        // What Postgres prints for its extremes still parses.
        assert!(parse_pg_timestamp_ms("294276-12-31 23:59:59.999999+00").is_ok());
    }
}
