//! The schema registry's part of `walrelay check`, with `--key-format` or
//! `--value-format` avro, json-schema or protobuf: the registry answers, the
//! credentials work, the subject's compatibility level is readable, and the
//! schema walrelay would register for the payload column passes the
//! registry's compatibility check (a dry run: nothing is registered).

use super::Check;
use crate::config::Settings;
use crate::outbox::schema::ConnectSchema;
use crate::postgres::setup;
use crate::registry::client::Client;
use crate::registry::trouble::Trouble;
use crate::registry::{same_bytes, Encoding, Side, Unwritten};

const NAMES: [&str; 4] = [
    "registry.reachable",
    "registry.credentials",
    "registry.compatibility_level",
    "registry.compatibility",
];

pub async fn checks(settings: &Settings) -> Vec<Check> {
    let Some(registry) = settings.registry.as_deref() else {
        return Vec::new();
    };
    let client = registry.client();
    let mut out = Vec::new();
    match client.subjects().await {
        Ok(subjects) => {
            out.push(Check::pass(
                NAMES[0],
                format!("{} answers ({} subjects)", client.url(), subjects.len()),
            ));
            out.push(Check::pass(NAMES[1], "the registry takes walrelay's login"));
        }
        Err(Trouble::Refused(m)) => {
            out.push(Check::pass(NAMES[0], format!("{} answers", client.url())));
            out.push(Check::fail(
                NAMES[1],
                m,
                crate::registry::client::CREDENTIALS_FIX,
            ));
            out.extend(NAMES[2..].iter().map(|n| Check::skip(n, "needs a login")));
            return out;
        }
        Err(e) => {
            out.push(Check::fail(
                NAMES[0],
                e.to_string(),
                match e {
                    Trouble::NotARegistry(_) => crate::registry::client::URL_FIX,
                    _ => {
                        "check --schema-registry-url (Apicurio serves the Confluent API at \
                         .../apis/ccompat/v7), the network and --schema-registry-ca-file"
                    }
                },
            ));
            out.extend(
                NAMES[1..]
                    .iter()
                    .map(|n| Check::skip(n, "needs the registry")),
            );
            return out;
        }
    }
    let topic = settings
        .router
        .topic("WalrelayCheck")
        .unwrap_or_else(|_| "walrelay.check".into());
    let (encoding, document) = match payload_document(settings).await {
        Ok(found) => found,
        Err(why) => {
            out.push(Check::skip(NAMES[2], why.clone()));
            out.push(Check::skip(NAMES[3], why));
            return out;
        }
    };
    let planned = match registry.plan(&topic, Side::Value, encoding, &document) {
        Ok(planned) => planned,
        Err(Unwritten::Poison(why)) => {
            out.push(Check::skip(NAMES[2], "needs a schema"));
            out.push(Check::fail(
                NAMES[3],
                why,
                "see --schema-name-adjustment-mode",
            ));
            return out;
        }
        Err(Unwritten::Stop(e)) => {
            out.push(Check::from_error(NAMES[3], &e));
            return out;
        }
    };
    let (subject, schema) = (&planned.subject, &planned.schema);
    out.push(match client.compatibility_level(subject).await {
        Ok(level) => Check::pass(NAMES[2], format!("subject {subject:?}: {level}")),
        Err(e) => Check::fail(
            NAMES[2],
            e.to_string(),
            "give walrelay's login the right to read the subject's configuration",
        ),
    });
    if registry.uses_latest_version() {
        out.push(latest_check(client, subject, encoding, schema).await);
        return out;
    }
    out.push(
        match client
            .compatible(subject, schema, planned.schema_type)
            .await
        {
            Ok(true) => Check::pass(
                NAMES[3],
                format!("the payload column's schema may be registered under {subject:?}"),
            ),
            Ok(false) => Check::fail(
                NAMES[3],
                format!("subject {subject:?} refuses the schema walrelay would register: {schema}"),
                "change the subject's compatibility level, or the payload column back, \
             or use another subject strategy",
            ),
            Err(e) => Check::fail(NAMES[3], e.to_string(), "see the registry's answer"),
        },
    );
    out
}

/// The value as `--value-format avro|json-schema|protobuf` would start from for a payload
/// column whose schema is its type's (no expansion, no envelope), with an
/// empty payload: only its schema matters here; and the value's format.
async fn payload_document(settings: &Settings) -> Result<(Encoding, Vec<u8>), String> {
    let Some(encoding) = settings.registry_value else {
        return Err("only --key-format is a registry's".into());
    };
    let m = &settings.mapping;
    let envelope = m
        .placements
        .iter()
        .any(|p| matches!(p.target, crate::outbox::placement::Target::Envelope(_)));
    if m.expand_json_payload || envelope {
        return Err(
            "the schema depends on each row (--expand-json-payload or an envelope \
             placement); it is registered, and judged, at the first event"
                .into(),
        );
    }
    let table = settings.tables.first().ok_or("no outbox table")?;
    let client = setup::connect(&settings.pg)
        .await
        .map_err(|e| format!("needs Postgres: {}", e.report()))?;
    let row = client
        .query_opt(
            "SELECT a.atttypid, a.atttypmod, a.attnotnull FROM pg_attribute a \
             WHERE a.attrelid = $1::text::regclass AND a.attname = $2 AND NOT a.attisdropped",
            &[&table.to_string(), &m.payload],
        )
        .await
        .map_err(|e| format!("cannot read the payload column's type: {e}"))?
        .ok_or_else(|| format!("{table} has no column {:?}", m.payload))?;
    let (type_oid, modifier, not_null): (u32, i32, bool) = (row.get(0), row.get(1), row.get(2));
    let schema = ConnectSchema::of_column(type_oid, modifier, m.decimals, !not_null)?;
    let document = format!("{{\"schema\":{},\"payload\":null}}", schema.json(None));
    Ok((encoding, document.into_bytes()))
}

/// With --schema-registry-use-latest-version, the dry run asks whether the
/// subject's latest version is the schema walrelay writes by (see
/// `registry::same_bytes`): another one makes every event poison.
async fn latest_check(client: &Client, subject: &str, encoding: Encoding, schema: &str) -> Check {
    match client.latest(subject).await {
        Ok((id, latest)) if same_bytes(encoding, schema, &latest) => Check::pass(
            NAMES[3],
            format!(
                "subject {subject:?}'s latest version (id {id}) is the payload column's schema"
            ),
        ),
        Ok((id, latest)) => Check::fail(
            NAMES[3],
            format!(
                "subject {subject:?}'s latest version (id {id}) is not the schema walrelay writes \
                 by, so every event would be poison: {latest}"
            ),
            "register walrelay's schema as the subject's latest version, or drop \
             --schema-registry-use-latest-version",
        ),
        Err(e) => Check::fail(
            NAMES[3],
            e.to_string(),
            "register the subject's schema first",
        ),
    }
}
