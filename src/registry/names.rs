//! Avro names, and what `schema.name.adjustment.mode` does to one that is
//! not: Debezium's `SchemaNameAdjuster` (debezium-core/.../schema/
//! SchemaNameAdjuster.java, `validFullname` with the underscore
//! `ReplacementFunction`). A name Avro cannot take is refused under `none`
//! (Avro's SchemaParseException fails the Connect task the same way) and
//! rewritten under `avro`.

/// `--schema-name-adjustment-mode` (Debezium's `schema.name.adjustment.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum NameAdjustment {
    /// Names as they are; one Avro cannot take stops the event.
    #[default]
    None,
    /// Each character Avro does not allow becomes `_` (a leading digit
    /// keeps its place after the `_`).
    Avro,
}

/// ReplacementFunction.isValidFirstCharacter: an ASCII letter or `_`.
fn valid_first(c: char) -> bool {
    c == '_' || c.is_ascii_alphabetic()
}

/// isValidNonFirstCharacter: also a digit or the namespace's `.`.
fn valid_next(c: char) -> bool {
    c == '.' || valid_first(c) || c.is_ascii_digit()
}

/// SchemaNameAdjuster.isValidFullname.
pub fn is_valid(name: &str) -> bool {
    let mut chars = name.chars();
    match chars.next() {
        None => true,
        Some(first) => valid_first(first) && chars.all(valid_next),
    }
}

/// The name Avro will take, or why not (under `none`).
pub fn adjust(name: &str, mode: NameAdjustment) -> Result<String, String> {
    if is_valid(name) {
        return Ok(name.to_string());
    }
    match mode {
        NameAdjustment::None => Err(format!(
            "the name {name:?} is not a valid Avro name (letters, digits and _, not starting \
             with a digit); set --schema-name-adjustment-mode avro, as Debezium's \
             schema.name.adjustment.mode=avro does, or rename it"
        )),
        NameAdjustment::Avro => Ok(valid_full_name(name)),
    }
}

/// SchemaNameAdjuster.validFullname with `_` as the replacement.
fn valid_full_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 1);
    for (i, c) in name.chars().enumerate() {
        let valid = if i == 0 {
            valid_first(c)
        } else {
            valid_next(c)
        };
        if valid {
            out.push(c);
        } else {
            out.push('_');
            if i == 0 && c.is_ascii_digit() {
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_judged_as_debeziums_schema_name_adjuster_judges_them() {
        // SchemaNameAdjusterTest.shouldConsiderValidFullnames / InvalidFullnames
        // (debezium-core/src/test/java/io/debezium/util/SchemaNameAdjusterTest.java).
        assert!(is_valid("test_server.connector_test.products.Key"));
        assert!(is_valid("t1234.connector_test.products.Key"));
        assert!(!is_valid("test-server.connector_test.products.Key"));
        // shouldDetermineValidFirstCharacters: no digit first.
        assert!(!is_valid("1abc"));
    }

    #[test]
    fn under_avro_mode_each_invalid_character_becomes_an_underscore() {
        // validFullname: `-` becomes `_`; a leading digit is kept after its `_`
        // (SchemaNameAdjuster.validFullname, UNDERSCORE_REPLACEMENT branch).
        assert_eq!(
            adjust(
                "test-server.connector_test.products.Key",
                NameAdjustment::Avro
            )
            .unwrap(),
            "test_server.connector_test.products.Key"
        );
        assert_eq!(adjust("1abc", NameAdjustment::Avro).unwrap(), "_1abc");
        assert_eq!(adjust("ok_name", NameAdjustment::None).unwrap(), "ok_name");
        let refused = adjust("order-created", NameAdjustment::None).unwrap_err();
        assert!(
            refused.contains("--schema-name-adjustment-mode avro"),
            "{refused}"
        );
    }
}
