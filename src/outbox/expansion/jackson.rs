//! A payload's JSON read as Debezium reads it to expand it:
//! `new ObjectMapper().readTree(text)` with Jackson 2.21's defaults
//! (jackson-databind/jackson-core, the versions Debezium 3.6.1 ships).
//!
//! What that means, and why serde_json alone would not do:
//! - an integer is an IntNode when it fits an int, a LongNode when it fits a
//!   long, else a BigIntegerNode; a number with a fraction or an exponent is
//!   a DoubleNode (`Double.parseDouble`, so `1e400` is Infinity);
//! - a repeated object key keeps its first position and its last value
//!   (ObjectNode is a LinkedHashMap);
//! - only the first value is read: text after it is never looked at
//!   (FAIL_ON_TRAILING_TOKENS is off);
//! - strictly JSON otherwise: no leading zeros, no `+`, no NaN, no comments,
//!   no unescaped control characters, no escapes beyond JSON's, only space,
//!   tab, CR and LF between tokens;
//! - StreamReadConstraints: at most 1000 levels of nesting, numbers of at
//!   most 1000 characters, names of at most 50000, strings of at most
//!   20,000,000;
//! - a string may hold a lone UTF-16 surrogate (`"\ud83d"`), which Java
//!   strings can: string values are kept as the JSON text JsonConverter
//!   writes back (each surrogate escaped alone, as for a pair).

use crate::outbox::connect::push_json_char;

/// A parsed JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Null,
    Bool(bool),
    /// IntNode (fits an int) or LongNode.
    Int(i64),
    Double(f64),
    /// BigIntegerNode: an integer beyond a long.
    Big,
    /// A string, as the JSON literal JsonConverter writes for it (quoted).
    String(String),
    Array(Vec<Node>),
    Object(Vec<(String, Node)>),
}

const MAX_DEPTH: usize = 1000;
const MAX_NUMBER_LEN: usize = 1000;
const MAX_NAME_LEN: usize = 50_000;
const MAX_STRING_LEN: usize = 20_000_000;

/// The first JSON value in `text`, or None where Jackson would throw.
pub fn read_tree(text: &str) -> Option<Node> {
    let mut parser = Parser {
        bytes: text.as_bytes(),
        text,
        at: 0,
        depth: 0,
    };
    parser.value()
}

struct Parser<'a> {
    bytes: &'a [u8],
    text: &'a str,
    at: usize,
    depth: usize,
}

/// A string token: its literal as JsonConverter writes it, and its
/// characters when it has no lone surrogate (a name needs them).
struct Str {
    literal: String,
    chars: Option<String>,
}

impl Parser<'_> {
    fn skip_blanks(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_blanks();
        self.bytes.get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn value(&mut self) -> Option<Node> {
        match self.peek()? {
            b'{' => self.nested(Self::object),
            b'[' => self.nested(Self::array),
            b'"' => Some(Node::String(self.string()?.literal)),
            b't' => self.literal("true", Node::Bool(true)),
            b'f' => self.literal("false", Node::Bool(false)),
            b'n' => self.literal("null", Node::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn nested(&mut self, read: fn(&mut Self) -> Option<Node>) -> Option<Node> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return None;
        }
        self.at += 1;
        let node = read(self);
        self.depth -= 1;
        node
    }

    fn object(&mut self) -> Option<Node> {
        let mut fields: Vec<(String, Node)> = Vec::new();
        if self.eat(b'}').is_some() {
            return Some(Node::Object(fields));
        }
        loop {
            if self.peek()? != b'"' {
                return None;
            }
            let name = self.string()?;
            let name = name.chars.filter(|n| n.chars().count() <= MAX_NAME_LEN)?;
            self.eat(b':')?;
            let value = self.value()?;
            match fields.iter_mut().find(|(n, _)| *n == name) {
                Some((_, old)) => *old = value,
                None => fields.push((name, value)),
            }
            match self.peek()? {
                b',' => self.at += 1,
                b'}' => {
                    self.at += 1;
                    return Some(Node::Object(fields));
                }
                _ => return None,
            }
        }
    }

    fn array(&mut self) -> Option<Node> {
        let mut items = Vec::new();
        if self.eat(b']').is_some() {
            return Some(Node::Array(items));
        }
        loop {
            items.push(self.value()?);
            match self.peek()? {
                b',' => self.at += 1,
                b']' => {
                    self.at += 1;
                    return Some(Node::Array(items));
                }
                _ => return None,
            }
        }
    }

    fn literal(&mut self, word: &str, node: Node) -> Option<Node> {
        self.text[self.at..].starts_with(word).then(|| {
            self.at += word.len();
            node
        })
    }

    fn number(&mut self) -> Option<Node> {
        let start = self.at;
        let digits = |p: &mut Self| {
            let from = p.at;
            while let Some(b'0'..=b'9') = p.bytes.get(p.at) {
                p.at += 1;
            }
            p.at - from
        };
        if self.bytes[self.at] == b'-' {
            self.at += 1;
        }
        let int_start = self.at;
        let int_len = digits(self);
        // "Leading zeroes not allowed", and a digit must follow a minus.
        if int_len == 0 || (int_len > 1 && self.bytes[int_start] == b'0') {
            return None;
        }
        let mut fraction = false;
        if self.bytes.get(self.at) == Some(&b'.') {
            self.at += 1;
            if digits(self) == 0 {
                return None;
            }
            fraction = true;
        }
        if let Some(b'e' | b'E') = self.bytes.get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes.get(self.at) {
                self.at += 1;
            }
            if digits(self) == 0 {
                return None;
            }
            fraction = true;
        }
        let token = &self.text[start..self.at];
        if token.len() > MAX_NUMBER_LEN {
            return None;
        }
        if fraction {
            return token.parse::<f64>().ok().map(Node::Double);
        }
        Some(token.parse::<i64>().map_or(Node::Big, Node::Int))
    }

    /// A string token from its opening quote.
    fn string(&mut self) -> Option<Str> {
        self.at += 1;
        let mut literal = String::from("\"");
        let mut chars = Some(String::new());
        let mut count = 0usize;
        let push = |c: char, literal: &mut String, chars: &mut Option<String>| {
            push_json_char(literal, c);
            if let Some(chars) = chars {
                chars.push(c);
            }
        };
        loop {
            let c = self.text[self.at..].chars().next()?;
            self.at += c.len_utf8();
            count += 1;
            if count > MAX_STRING_LEN {
                return None;
            }
            match c {
                '"' => break,
                '\\' => {
                    let escape = *self.bytes.get(self.at)?;
                    self.at += 1;
                    let plain = match escape {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => {
                            let unit = self.hex4()?;
                            match unit {
                                0xD800..=0xDBFF => {
                                    // A pair only when a low surrogate escape follows.
                                    let rest = &self.text[self.at..];
                                    let low = rest
                                        .strip_prefix("\\u")
                                        .and_then(|h| h.get(..4))
                                        .and_then(|h| u16::from_str_radix(h, 16).ok())
                                        .filter(|l| (0xDC00..=0xDFFF).contains(l));
                                    match low {
                                        Some(low) => {
                                            self.at += 6;
                                            let code = 0x10000
                                                + ((u32::from(unit) - 0xD800) << 10)
                                                + (u32::from(low) - 0xDC00);
                                            char::from_u32(code)?
                                        }
                                        None => {
                                            lone_surrogate(unit, &mut literal, &mut chars);
                                            continue;
                                        }
                                    }
                                }
                                0xDC00..=0xDFFF => {
                                    lone_surrogate(unit, &mut literal, &mut chars);
                                    continue;
                                }
                                _ => char::from_u32(u32::from(unit))?,
                            }
                        }
                        _ => return None,
                    };
                    push(plain, &mut literal, &mut chars);
                }
                c if (c as u32) < 0x20 => return None,
                c => push(c, &mut literal, &mut chars),
            }
        }
        literal.push('"');
        Some(Str { literal, chars })
    }

    fn hex4(&mut self) -> Option<u16> {
        let hex = self.text.get(self.at..self.at + 4)?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        self.at += 4;
        u16::from_str_radix(hex, 16).ok()
    }
}

/// A surrogate without its other half: Java keeps it, JsonConverter writes
/// it escaped alone; it has no `char`, so it can be no field name.
fn lone_surrogate(unit: u16, literal: &mut String, chars: &mut Option<String>) {
    literal.push_str(&format!("\\u{unit:04X}"));
    *chars = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(literal: &str) -> Node {
        Node::String(literal.to_string())
    }

    #[test]
    fn integers_are_int_long_or_big_and_fractions_double() {
        let node = read_tree("[1, -2147483649, 9223372036854775808, 1.0, 1e400, -0]").unwrap();
        assert_eq!(
            node,
            Node::Array(vec![
                Node::Int(1),
                Node::Int(-2_147_483_649),
                Node::Big,
                Node::Double(1.0),
                Node::Double(f64::INFINITY),
                Node::Int(0),
            ])
        );
    }

    #[test]
    fn a_repeated_key_keeps_its_place_and_its_last_value() {
        assert_eq!(
            read_tree(r#"{"a": 1, "b": 2, "a": "x"}"#).unwrap(),
            Node::Object(vec![
                ("a".into(), string("\"x\"")),
                ("b".into(), Node::Int(2))
            ])
        );
    }

    #[test]
    fn text_after_the_first_value_is_not_read() {
        assert_eq!(read_tree("{} trailing ]").unwrap(), Node::Object(vec![]));
    }

    #[test]
    fn what_jackson_refuses_by_default_is_refused() {
        for text in [
            "[01]",
            "[+1]",
            "[.5]",
            "[1.]",
            "[1e]",
            "[-]",
            "[NaN]",
            "{'a': 1}",
            "[1,]",
            "{\"a\" 1}",
            "[\"\\x\"]",
            "[\"a\u{1}\"]",
            "[\u{c}1]",
            "[tru]",
            "/* c */ {}",
            "{",
        ] {
            assert_eq!(read_tree(text), None, "{text}");
        }
        let deep = format!("{}{}", "[".repeat(1001), "]".repeat(1001));
        assert_eq!(read_tree(&deep), None);
        let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        assert!(read_tree(&deep).is_some());
    }

    #[test]
    fn strings_are_kept_as_jsonconverter_writes_them() {
        assert_eq!(
            read_tree(r#"["\u00e9\/\ud83d\ude00\u001f", "\ud83d", "\u0041"]"#).unwrap(),
            Node::Array(vec![
                string("\"\u{e9}/\\uD83D\\uDE00\\u001F\""),
                string("\"\\uD83D\""),
                string("\"A\""),
            ])
        );
        // A lone surrogate cannot name a field.
        assert_eq!(read_tree(r#"{"\udc00": 1}"#), None);
    }
}
