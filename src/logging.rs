//! Logs on stderr, as text for people or as JSON lines for log pipelines,
//! with every secret from the command line masked in both.

use std::fmt;
use std::io::{self, IsTerminal, Write};
use std::sync::Arc;
use std::time::SystemTime;

use clap::ValueEnum;
use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line: time, level, target, message and the event's fields.
    Json,
}

/// Names the JSON layer sets itself; an event field with one of them is
/// renamed `field_<name>` so it cannot overwrite them.
const RESERVED: [&str; 5] = ["time", "level", "target", "message", "span"];

/// Installs the global subscriber. `WALRELAY_LOG` filters (default `info`);
/// `kafka_debug` (a `-X debug=…`) lets librdkafka's debug lines through, since
/// asking librdkafka for them is the point of setting it.
pub fn init(format: LogFormat, secrets: Vec<String>, kafka_debug: bool) {
    let mut filter =
        EnvFilter::try_from_env("WALRELAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    if kafka_debug {
        filter = filter.add_directive(
            "librdkafka=debug"
                .parse()
                .expect("a valid filter directive"),
        );
    }
    let redactor = Arc::new(Redactor::new(secrets));
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(RedactingStderr(redactor))
                    .with_ansi(io::stderr().is_terminal()),
            )
            .init(),
        LogFormat::Json => registry
            .with(JsonLayer {
                redactor,
                sink: Arc::new(|line: &str| {
                    let _ = io::stderr().write_all(line.as_bytes());
                }),
            })
            .init(),
    }
}

/// Shown in place of a secret.
pub const MASK: &str = "<redacted>";

/// Replaces each secret, in its raw and its JSON-escaped spelling: in log
/// lines, and in what `walrelay check` prints.
pub struct Redactor {
    needles: Vec<String>,
}

impl Redactor {
    // Shorter values are not secrets worth masking, and masking them would
    // garble ordinary words in every line.
    const MIN_LEN: usize = 3;

    pub fn new(secrets: Vec<String>) -> Self {
        let mut needles = Vec::new();
        for s in secrets.into_iter().filter(|s| s.len() >= Self::MIN_LEN) {
            let escaped = Value::String(s.clone()).to_string();
            let escaped = escaped[1..escaped.len() - 1].to_string();
            if escaped != s {
                needles.push(escaped);
            }
            needles.push(s);
        }
        // Longest first, so a secret containing another is masked whole.
        needles.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        needles.dedup();
        Redactor { needles }
    }

    pub fn redact(&self, line: String) -> String {
        let line = self.needles.iter().fold(line, |line, needle| {
            if line.contains(needle.as_str()) {
                line.replace(needle.as_str(), MASK)
            } else {
                line
            }
        });
        redact_aws_tokens(line)
    }
}

/// AWS tokens are signed for each connection, long after the command line
/// was read, so they are masked by their shape: an RDS IAM password's
/// signature, session token and key id, and an MSK IAM token (base64url of
/// `https://kafka.…`), wherever some library's message might quote one.
fn redact_aws_tokens(line: String) -> String {
    static TOKENS: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    if !line.contains("X-Amz-") && !line.contains(MSK_TOKEN_START) {
        return line;
    }
    let tokens = TOKENS.get_or_init(|| {
        regex::Regex::new(&format!(
            r"(X-Amz-(?:Signature|Security-Token|Credential)=)[^&\s\x22']+|{MSK_TOKEN_START}[A-Za-z0-9_-]*"
        ))
        .expect("a valid regex")
    });
    tokens
        .replace_all(&line, |c: &regex::Captures<'_>| {
            format!("{}{MASK}", c.get(1).map_or("", |m| m.as_str()))
        })
        .into_owned()
}

/// "https://kafka." in base64url, as far as it does not depend on what
/// follows: how every MSK IAM token starts.
const MSK_TOKEN_START: &str = "aHR0cHM6Ly9rYWZrYS";

/// Stderr behind the redactor: the text formatter writes each event into
/// one writer, which masks and writes the whole line when dropped.
struct RedactingStderr(Arc<Redactor>);

struct LineWriter {
    redactor: Arc<Redactor>,
    buf: Vec<u8>,
}

impl<'a> MakeWriter<'a> for RedactingStderr {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            redactor: self.0.clone(),
            buf: Vec::with_capacity(256),
        }
    }
}

impl Write for LineWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let line = String::from_utf8_lossy(&self.buf).into_owned();
        let _ = io::stderr().write_all(self.redactor.redact(line).as_bytes());
    }
}

/// Writes one JSON object per event: `time` (RFC 3339, UTC), `level`
/// (lower case), `target`, `message`, the fields of the enclosing spans
/// (outermost first) and then the event's own fields, all at the top level.
struct JsonLayer {
    redactor: Arc<Redactor>,
    /// Where finished lines go: stderr, or a buffer in tests.
    sink: Arc<dyn Fn(&str) + Send + Sync>,
}

struct SpanFields(Map<String, Value>);

impl<S> Layer<S> for JsonLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Map::new();
        attrs.record(&mut JsonVisitor(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields));
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<SpanFields>() {
                values.record(&mut JsonVisitor(&mut fields.0));
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let meta = event.metadata();
        // Written in a fixed order (time, level, target, message, span, the
        // rest sorted) so lines read the same way every time.
        let mut head: Vec<(String, Value)> = vec![
            (
                "time".into(),
                humantime::format_rfc3339_micros(SystemTime::now())
                    .to_string()
                    .into(),
            ),
            (
                "level".into(),
                meta.level().as_str().to_ascii_lowercase().into(),
            ),
            ("target".into(), meta.target().into()),
        ];
        let mut fields = Map::new();
        let mut span_names = Vec::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                span_names.push(span.name());
                if let Some(span_fields) = span.extensions().get::<SpanFields>() {
                    fields.extend(span_fields.0.clone());
                }
            }
        }
        event.record(&mut JsonVisitor(&mut fields));
        // `log` records forwarded by tracing-log carry their origin as fields.
        fields.retain(|k, _| !k.starts_with("log."));
        head.push((
            "message".into(),
            fields.remove("message").unwrap_or(Value::Null),
        ));
        if !span_names.is_empty() {
            head.push(("span".into(), span_names.join(":").into()));
        }
        let mut text = String::from("{");
        let rest = fields.into_iter().map(|(key, value)| {
            if RESERVED.contains(&key.as_str()) {
                (format!("field_{key}"), value)
            } else {
                (key, value)
            }
        });
        for (i, (key, value)) in head.into_iter().chain(rest).enumerate() {
            if i > 0 {
                text.push(',');
            }
            text.push_str(&Value::String(key).to_string());
            text.push(':');
            text.push_str(&value.to_string());
        }
        text.push_str("}\n");
        (self.sink)(&self.redactor.redact(text));
    }
}

struct JsonVisitor<'a>(&'a mut Map<String, Value>);

impl Visit for JsonVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().into(), value.to_string().into());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_span_fields_and_rename_reserved_event_fields() {
        let lines = Arc::new(std::sync::Mutex::new(String::new()));
        let sink_lines = lines.clone();
        let layer = JsonLayer {
            redactor: Arc::new(Redactor::new(vec!["hunter2".into()])),
            sink: Arc::new(move |line: &str| sink_lines.lock().unwrap().push_str(line)),
        };
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("session", slot = "walrelay", attempt = 2);
            let _entered = span.enter();
            tracing::warn!(lsn = %"0/16B3748", level = "critical", "password hunter2 seen");
        });
        let text = lines.lock().unwrap().clone();
        let line: Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(line["level"], "warn");
        assert_eq!(line["message"], "password <redacted> seen");
        assert_eq!(line["span"], "session");
        assert_eq!(line["slot"], "walrelay");
        assert_eq!(line["attempt"], 2);
        assert_eq!(line["lsn"], "0/16B3748");
        assert_eq!(line["field_level"], "critical");
        assert!(text.starts_with(r#"{"time":""#), "{text}");
    }

    #[test]
    fn aws_tokens_are_masked_by_their_shape() {
        let r = Redactor::new(vec![]);
        let rds = "db:5432/?Action=connect&DBUser=app&X-Amz-Credential=AKID%2F20231114&\
                   X-Amz-Security-Token=IQo%2Fx&X-Amz-Signature=5a87 failed";
        let masked = r.redact(rds.into());
        assert!(!masked.contains("AKID") && !masked.contains("IQo") && !masked.contains("5a87"));
        assert!(
            masked.ends_with("X-Amz-Signature=<redacted> failed"),
            "{masked}"
        );
        let msk = "token aHR0cHM6Ly9rYWZrYS5ldS13ZXN0LTEuYW1hem9u-_x refused";
        assert_eq!(r.redact(msk.into()), "token <redacted> refused");
    }

    #[test]
    fn redaction_masks_raw_and_json_escaped_secrets() {
        let r = Redactor::new(vec!["a\"b\\c".into(), "xy".into()]);
        assert_eq!(r.redact("pw a\"b\\c end".into()), "pw <redacted> end");
        assert_eq!(
            r.redact(r#"{"m":"a\"b\\c"}"#.into()),
            r#"{"m":"<redacted>"}"#
        );
        // Too short to be masked without garbling ordinary words.
        assert_eq!(r.redact("xy".into()), "xy");
    }
}
