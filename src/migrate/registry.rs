//! A connector's registry converters as walrelay flags: Confluent's
//! `io.confluent.connect.avro.AvroConverter` and
//! `io.confluent.connect.json.JsonSchemaConverter` and
//! `io.confluent.connect.protobuf.ProtobufConverter`, and Apicurio's
//! `io.apicurio.registry.utils.converter.AvroConverter`, each configured
//! under the `key.converter.` / `value.converter.` prefix. Secrets
//! (`basic.auth.user.info`, tokens, passwords) are never printed: the note
//! names the variable to export instead.
//!
//! Setting names: Confluent's AbstractKafkaSchemaSerDeConfig
//! (`schema.registry.url`, `basic.auth.credentials.source`,
//! `basic.auth.user.info`, `bearer.auth.credentials.source`,
//! `bearer.auth.token`, `bearer.auth.issuer.endpoint.url`,
//! `bearer.auth.client.id`, `bearer.auth.client.secret`,
//! `bearer.auth.scope`, `auto.register.schemas`, `use.latest.version`,
//! `key.subject.name.strategy`, `value.subject.name.strategy`,
//! `schema.registry.ssl.truststore.location`) and Apicurio's SerdeConfig
//! (`apicurio.registry.url`, `apicurio.registry.auto-register`,
//! `apicurio.registry.artifact-resolver-strategy`,
//! `apicurio.registry.as-confluent`, `apicurio.auth.username`,
//! `apicurio.auth.password`, `apicurio.auth.service.url`,
//! `apicurio.auth.service.token.endpoint`, `apicurio.auth.client.id`,
//! `apicurio.auth.client.secret`).

use std::collections::BTreeMap;

use crate::error::{Error, Result};

const CONFLUENT: &str = "io.confluent.connect.avro.AvroConverter";
const CONFLUENT_JSON_SCHEMA: &str = "io.confluent.connect.json.JsonSchemaConverter";
const CONFLUENT_PROTOBUF: &str = "io.confluent.connect.protobuf.ProtobufConverter";
const APICURIO: &str = "io.apicurio.registry.utils.converter.AvroConverter";

/// What the converters become: walrelay flags (a value or none), the
/// connector keys read, and notes.
pub struct Carried {
    pub args: Vec<(String, Option<String>)>,
    pub used: Vec<String>,
    pub notes: Vec<String>,
}

/// The `--key-format`/`--value-format` of a registry converter walrelay
/// carries; None for any other converter.
pub fn format_of(converter: &str) -> Option<&'static str> {
    match converter.trim() {
        CONFLUENT | APICURIO => Some("avro"),
        CONFLUENT_JSON_SCHEMA => Some("json-schema"),
        CONFLUENT_PROTOBUF => Some("protobuf"),
        _ => None,
    }
}

/// The registry flags for the sides whose converter is a registry's, the keys
/// read, and notes; an error when the two sides cannot share one registry.
pub fn flags(config: &BTreeMap<String, String>) -> Result<Carried> {
    let mut found: Vec<Side> = Vec::new();
    for side in ["key", "value"] {
        let converter = config
            .get(&format!("{side}.converter"))
            .map(|c| c.trim().to_string());
        if let Some(converter) = converter.filter(|c| format_of(c).is_some()) {
            found.push(read_side(config, side, &converter));
        }
    }
    let (mut args, mut used, mut notes) = (Vec::new(), Vec::new(), Vec::new());
    let Some(first) = found.first() else {
        return Ok(Carried { args, used, notes });
    };
    if let Some(second) = found.get(1) {
        if second.url != first.url {
            return Err(Error::permanent(format!(
                "key.converter and value.converter name two registries ({:?} and {:?}); \
                 walrelay writes to one --schema-registry-url",
                first.url, second.url
            )));
        }
    }
    for side in &found {
        used.extend(side.used.iter().cloned());
        notes.extend(side.notes.iter().cloned());
    }
    let value = found.iter().find(|s| s.side == "value").unwrap_or(first);
    match &value.url {
        Some(url) => args.push(("--schema-registry-url".into(), Some(url.clone()))),
        None => notes.push(format!(
            "{}.converter has no registry URL: add --schema-registry-url",
            value.side
        )),
    }
    if let Some(strategy) = &value.strategy {
        args.push((
            "--schema-registry-subject-strategy".into(),
            Some(strategy.clone()),
        ));
    }
    if !value.auto_register {
        args.push((
            "--schema-registry-auto-register".into(),
            Some("false".into()),
        ));
    }
    if value.use_latest {
        args.push(("--schema-registry-use-latest-version".into(), None));
    }
    if let Some(oauth) = &value.oauth {
        args.push((
            "--schema-registry-oauth-token-url".into(),
            Some(oauth.token_url.clone()),
        ));
        args.push((
            "--schema-registry-oauth-client-id".into(),
            Some(oauth.client_id.clone()),
        ));
        if let Some(scope) = &oauth.scope {
            args.push(("--schema-registry-oauth-scope".into(), Some(scope.clone())));
        }
    }
    if let Some(mode) = config.get("schema.name.adjustment.mode") {
        let mode = mode.trim().to_ascii_lowercase();
        if mode == "avro" {
            args.push(("--schema-name-adjustment-mode".into(), Some("avro".into())));
        } else if mode != "none" {
            notes.push(format!(
                "schema.name.adjustment.mode={mode}: walrelay adjusts names as none or avro \
                 only; the command uses none, which stops on a name Avro cannot take"
            ));
        }
        used.push("schema.name.adjustment.mode".into());
    }
    Ok(Carried { args, used, notes })
}

struct Side {
    side: &'static str,
    url: Option<String>,
    /// Client credentials, carried but for the secret.
    oauth: Option<OAuth>,
    strategy: Option<String>,
    auto_register: bool,
    use_latest: bool,
    used: Vec<String>,
    notes: Vec<String>,
}

fn read_side(config: &BTreeMap<String, String>, side: &'static str, converter: &str) -> Side {
    let mut r = Reader {
        config,
        prefix: format!("{side}.converter."),
        used: vec![format!("{side}.converter")],
        notes: Vec::new(),
    };
    let mut out = Side {
        side,
        url: None,
        oauth: None,
        strategy: None,
        auto_register: true,
        use_latest: false,
        used: Vec::new(),
        notes: Vec::new(),
    };
    match converter {
        APICURIO => apicurio(&mut r, &mut out),
        CONFLUENT_JSON_SCHEMA => {
            confluent(&mut r, &mut out);
            unvaried(&mut r, "JSON Schema", "JsonSchemaData", JSON_SCHEMA_DATA);
        }
        CONFLUENT_PROTOBUF => {
            confluent(&mut r, &mut out);
            unvaried(&mut r, "Protobuf", "ProtobufData", PROTOBUF_DATA);
        }
        _ => {
            confluent(&mut r, &mut out);
            avro_data(&mut r);
        }
    }
    out.used = r.used;
    out.notes = r.notes;
    out
}

/// One side's converter settings, read under its prefix: each key read is
/// recorded as used, each thing not carried as a note.
struct Reader<'a> {
    config: &'a BTreeMap<String, String>,
    prefix: String,
    used: Vec<String>,
    notes: Vec<String>,
}

impl Reader<'_> {
    fn get(&mut self, key: &str) -> Option<String> {
        let full = format!("{}{key}", self.prefix);
        let value = self.config.get(&full).map(|v| v.trim().to_string());
        if value.is_some() {
            self.used.push(full);
        }
        value
    }
}

fn truthy(v: &Option<String>, default: bool) -> bool {
    v.as_deref()
        .map_or(default, |v| v.eq_ignore_ascii_case("true"))
}

/// Confluent's AvroConverter: its URL, login, truststore, registration and
/// subject strategy, and the AvroData options walrelay does not vary.
fn confluent(r: &mut Reader<'_>, out: &mut Side) {
    let prefix = r.prefix.clone();
    let side = out.side;
    out.url = r.get("schema.registry.url").map(|urls| {
        let first = urls.split(',').next().unwrap_or("").trim().to_string();
        if urls.contains(',') {
            r.notes.push(format!(
                "{prefix}schema.registry.url lists several URLs; walrelay takes the first"
            ));
        }
        first
    });
    confluent_login(r, out);
    if let Some(path) = r.get("schema.registry.ssl.truststore.location") {
        r.notes.push(format!(
            "{prefix}schema.registry.ssl.truststore.location={path}: walrelay reads PEM, not \
             a Java truststore; export its CA as PEM and pass --schema-registry-ca-file"
        ));
        let _ = r.get("schema.registry.ssl.truststore.password");
    }
    out.auto_register = truthy(&r.get("auto.register.schemas"), true);
    out.use_latest = truthy(&r.get("use.latest.version"), false);
    let strategy_key = format!("{side}.subject.name.strategy");
    if let Some(class) = r.get(&strategy_key) {
        let names = [
            "TopicNameStrategy",
            "RecordNameStrategy",
            "TopicRecordNameStrategy",
        ];
        out.strategy = strategy(
            &class,
            names,
            &format!("{prefix}{strategy_key}"),
            &mut r.notes,
        );
    }
}

/// AvroData's options walrelay does not vary.
fn avro_data(r: &mut Reader<'_>) {
    let prefix = r.prefix.clone();
    for (key, default) in [
        ("enhanced.avro.schema.support", false),
        ("connect.meta.data", true),
    ] {
        let value = r.get(key);
        if truthy(&value, default) != default {
            r.notes.push(format!(
                "{prefix}{key}={}: walrelay converts schemas with AvroData's defaults \
                 ({key}={default}); the registered schemas differ",
                value.unwrap_or_default()
            ));
        }
    }
}

/// JsonSchemaData's options walrelay does not vary (JsonSchemaDataConfig).
const JSON_SCHEMA_DATA: &[(&str, &str)] = &[
    ("decimal.format", "BASE64"),
    ("object.additional.properties", "true"),
];

/// ProtobufData's options walrelay does not vary (ProtobufDataConfig's
/// defaults), and the serializer's that change what is registered
/// (KafkaProtobufSerializerConfig: skip.known.types true).
const PROTOBUF_DATA: &[(&str, &str)] = &[
    ("enhanced.protobuf.schema.support", "false"),
    ("scrub.invalid.names", "false"),
    ("int.for.enums", "false"),
    ("optional.for.nullables", "false"),
    ("wrapper.for.nullables", "false"),
    ("wrapper.for.raw.primitives", "true"),
    ("generate.struct.for.nulls", "false"),
    ("generate.index.for.unions", "true"),
    ("flatten.unions", "false"),
    ("skip.known.types", "true"),
];

/// A note for each of the converter's options set away from the default
/// walrelay writes with: the registered schemas would differ.
fn unvaried(r: &mut Reader<'_>, format: &str, data: &str, defaults: &[(&str, &str)]) {
    let prefix = r.prefix.clone();
    for (key, default) in defaults {
        if let Some(value) = r.get(key) {
            if !value.eq_ignore_ascii_case(default) {
                r.notes.push(format!(
                    "{prefix}{key}={value}: walrelay writes {format} with \
                     {data}'s default ({key}={default}); the registered schemas differ"
                ));
            }
        }
    }
}

/// Confluent's basic auth and bearer settings.
fn confluent_login(r: &mut Reader<'_>, out: &mut Side) {
    let prefix = r.prefix.clone();
    let source = r.get("basic.auth.credentials.source").unwrap_or_default();
    if r.get("basic.auth.user.info").is_some() || source.eq_ignore_ascii_case("USER_INFO") {
        r.notes.push(format!(
            "{prefix}basic.auth.user.info is not printed: export \
             WALRELAY_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO=USER:PASSWORD from your secret store"
        ));
    } else if source.eq_ignore_ascii_case("SASL_INHERIT") {
        r.notes.push(format!(
            "{prefix}basic.auth.credentials.source=SASL_INHERIT: walrelay does not reuse \
             the Kafka login for the registry; export \
             WALRELAY_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO=USER:PASSWORD"
        ));
    }
    let bearer = r.get("bearer.auth.credentials.source").unwrap_or_default();
    if bearer.eq_ignore_ascii_case("OAUTHBEARER") {
        out.oauth = oauth(
            r.get("bearer.auth.issuer.endpoint.url"),
            r.get("bearer.auth.client.id"),
            r.get("bearer.auth.client.secret").is_some(),
            r.get("bearer.auth.scope"),
            &format!("{prefix}bearer.auth"),
            &mut r.notes,
        );
        for cloud in [
            "bearer.auth.logical.cluster",
            "bearer.auth.identity.pool.id",
        ] {
            if r.get(cloud).is_some() {
                r.notes.push(format!(
                    "{prefix}{cloud}: walrelay sends no Confluent Cloud routing headers; \
                     its registry URL must name the cluster"
                ));
            }
        }
    } else if r.get("bearer.auth.token").is_some() || !bearer.is_empty() {
        r.notes.push(format!(
            "{prefix}bearer.auth.*: export WALRELAY_SCHEMA_REGISTRY_BEARER_TOKEN with a \
             token; walrelay takes a static token, or fetches its own with client \
             credentials (bearer.auth.credentials.source=OAUTHBEARER)"
        ));
    }
}

/// Apicurio's converter: the Confluent-compatible URL of its registry, its
/// framing, registration, strategy and login.
fn apicurio(r: &mut Reader<'_>, out: &mut Side) {
    let prefix = r.prefix.clone();
    // Apicurio's converter talks to its native API; walrelay to the
    // Confluent-compatible one of the same registry.
    out.url = r.get("apicurio.registry.url").map(|url| {
        let base = url
            .trim_end_matches('/')
            .split("/apis/")
            .next()
            .unwrap_or(&url)
            .to_string();
        let ccompat = format!("{base}/apis/ccompat/v7");
        r.notes.push(format!(
            "{prefix}apicurio.registry.url={url}: walrelay speaks Apicurio's \
             Confluent-compatible API, {ccompat}"
        ));
        ccompat
    });
    apicurio_framing(r);
    let _ = r.get("apicurio.registry.use-id");
    out.auto_register = truthy(&r.get("apicurio.registry.auto-register"), false);
    let strategy_key = "apicurio.registry.artifact-resolver-strategy";
    if let Some(class) = r.get(strategy_key) {
        let names = [
            "TopicIdStrategy",
            "RecordIdStrategy",
            "TopicRecordIdStrategy",
        ];
        out.strategy = strategy(
            &class,
            names,
            &format!("{prefix}{strategy_key}"),
            &mut r.notes,
        );
    }
    apicurio_login(r, out);
}

/// Whether Apicurio's converter framed its records as Confluent's.
fn apicurio_framing(r: &mut Reader<'_>) {
    let prefix = r.prefix.clone();
    let as_confluent = truthy(&r.get("apicurio.registry.as-confluent"), false);
    let four_bytes = r
        .get("apicurio.registry.id-handler")
        .is_some_and(|h| h.ends_with(".Legacy4ByteIdHandler"));
    let id_in_headers = truthy(&r.get("apicurio.registry.headers.enabled"), true);
    if id_in_headers {
        r.notes.push(format!(
            "{prefix}apicurio.registry.headers.enabled is not false: Apicurio's converter \
             put the schema id in a record header and the bare Avro datum in the value; \
             walrelay writes Confluent's framing (the id inside the value), so its \
             consumers must read that framing before the switch"
        ));
    } else if !as_confluent && !four_bytes {
        r.notes.push(format!(
            "{prefix}: neither apicurio.registry.as-confluent=true nor \
             apicurio.registry.id-handler=…Legacy4ByteIdHandler, so Apicurio's converter \
             wrote its own framing (a magic byte and an 8-byte id); walrelay writes \
             Confluent's (a magic byte and a 4-byte id), so configure consumers with the \
             4-byte id handler, or Confluent's deserializer, before the switch"
        ));
    }
}

/// Apicurio's basic auth and client credentials.
fn apicurio_login(r: &mut Reader<'_>, out: &mut Side) {
    let prefix = r.prefix.clone();
    if r.get("apicurio.auth.username").is_some() || r.get("apicurio.auth.password").is_some() {
        r.notes.push(format!(
            "{prefix}apicurio.auth.username/password are not printed: export \
             WALRELAY_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO=USER:PASSWORD"
        ));
    }
    let token_endpoint = r.get("apicurio.auth.service.token.endpoint");
    let service = r.get("apicurio.auth.service.url");
    let realm = r.get("apicurio.auth.realm");
    let client_id = r.get("apicurio.auth.client.id");
    let secret = r.get("apicurio.auth.client.secret").is_some();
    // SerdeConfig: the token endpoint, else the auth service's URL.
    // A relative endpoint is the service's; with a realm and no
    // endpoint, Keycloak's token endpoint is
    // {service}/realms/{realm}/protocol/openid-connect/token.
    let token_url = match (token_endpoint, &service, &realm) {
        (Some(endpoint), Some(service), _) if endpoint.starts_with('/') => {
            Some(format!("{}{endpoint}", service.trim_end_matches('/')))
        }
        (Some(endpoint), _, _) => Some(endpoint),
        (None, Some(service), Some(realm)) => Some(format!(
            "{}/realms/{realm}/protocol/openid-connect/token",
            service.trim_end_matches('/')
        )),
        (None, Some(service), None) => {
            r.notes.push(format!(
                "{prefix}apicurio.auth.service.url={service} names no token endpoint \
                 (no apicurio.auth.service.token.endpoint or apicurio.auth.realm): pass \
                 the identity provider's token URL as --schema-registry-oauth-token-url"
            ));
            None
        }
        (None, None, _) => None,
    };
    if token_url.is_some() || client_id.is_some() {
        out.oauth = oauth(
            token_url,
            client_id,
            secret,
            None,
            &format!("{prefix}apicurio.auth"),
            &mut r.notes,
        );
    }
}

/// A converter's client credentials, but for the secret.
struct OAuth {
    token_url: String,
    client_id: String,
    scope: Option<String>,
}

/// Client credentials when the token URL and client id are both given;
/// notes for the secret, which is never printed, and for what is missing.
fn oauth(
    token_url: Option<String>,
    client_id: Option<String>,
    has_secret: bool,
    scope: Option<String>,
    settings: &str,
    notes: &mut Vec<String>,
) -> Option<OAuth> {
    let (Some(token_url), Some(client_id)) = (token_url, client_id) else {
        notes.push(format!(
            "{settings}.*: client credentials need a token endpoint and a client id; pass \
             --schema-registry-oauth-token-url and --schema-registry-oauth-client-id"
        ));
        return None;
    };
    notes.push(format!(
        "{settings}: the client secret is not printed{}: export \
         WALRELAY_SCHEMA_REGISTRY_OAUTH_CLIENT_SECRET from your secret store",
        if has_secret { "" } else { " (none is set)" }
    ));
    Some(OAuth {
        token_url,
        client_id,
        scope,
    })
}

/// `--schema-registry-subject-strategy`'s value for a strategy class whose
/// simple name is one of `names` (topic, record, topic-record); None for
/// the default, with a note for one walrelay does not know.
fn strategy(class: &str, names: [&str; 3], key: &str, notes: &mut Vec<String>) -> Option<String> {
    let simple = class.rsplit('.').next().unwrap_or("");
    match names.iter().position(|n| *n == simple) {
        Some(0) => None,
        Some(1) => Some("record".into()),
        Some(_) => Some("topic-record".into()),
        None => {
            notes.push(format!(
                "{key}={simple}: walrelay names subjects by topic, record or topic-record \
                 only; the command uses topic"
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> BTreeMap<String, String> {
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn confluents_avro_converter_becomes_the_registry_flags_without_its_secret() {
        let Carried { args, used, notes } = flags(&config(
            "value.converter=io.confluent.connect.avro.AvroConverter\n\
             value.converter.schema.registry.url=https://sr.example:8081\n\
             value.converter.basic.auth.credentials.source=USER_INFO\n\
             value.converter.basic.auth.user.info=svc:s3cret\n\
             value.converter.value.subject.name.strategy=io.confluent.kafka.serializers.subject.RecordNameStrategy\n\
             value.converter.auto.register.schemas=false\n\
             value.converter.use.latest.version=true\n\
             schema.name.adjustment.mode=avro\n",
        ))
        .unwrap();
        let text = format!("{args:?}{notes:?}");
        assert!(!text.contains("s3cret"), "{text}");
        assert_eq!(
            args,
            [
                (
                    "--schema-registry-url".to_string(),
                    Some("https://sr.example:8081".to_string())
                ),
                (
                    "--schema-registry-subject-strategy".into(),
                    Some("record".into())
                ),
                (
                    "--schema-registry-auto-register".into(),
                    Some("false".into())
                ),
                ("--schema-registry-use-latest-version".into(), None),
                ("--schema-name-adjustment-mode".into(), Some("avro".into())),
            ]
        );
        assert!(notes
            .iter()
            .any(|n| n.contains("WALRELAY_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO")));
        assert!(used.contains(&"value.converter.basic.auth.user.info".to_string()));
    }

    #[test]
    fn confluents_json_schema_converter_carries_the_same_registry_settings() {
        // JsonSchemaConverter reads AbstractKafkaSchemaSerDeConfig's keys as
        // AvroConverter does, and JsonSchemaDataConfig's decimal.format
        // (default BASE64), which walrelay does not vary.
        let Carried { args, notes, .. } = flags(&config(
            "value.converter=io.confluent.connect.json.JsonSchemaConverter\n\
             value.converter.schema.registry.url=http://sr:8081\n\
             value.converter.decimal.format=NUMERIC\n",
        ))
        .unwrap();
        assert_eq!(
            args,
            [(
                "--schema-registry-url".to_string(),
                Some("http://sr:8081".to_string())
            )]
        );
        assert!(
            notes.iter().any(|n| n.contains("decimal.format=NUMERIC")),
            "{notes:?}"
        );
    }

    #[test]
    fn confluents_protobuf_converter_carries_the_same_registry_settings() {
        // ProtobufConverter reads AbstractKafkaSchemaSerDeConfig's keys as
        // AvroConverter does; ProtobufDataConfig's options (here
        // wrapper.for.nullables, default false) walrelay does not vary.
        let Carried { args, notes, .. } = flags(&config(
            "value.converter=io.confluent.connect.protobuf.ProtobufConverter\n\
             value.converter.schema.registry.url=http://sr:8081\n\
             value.converter.value.subject.name.strategy=\
             io.confluent.kafka.serializers.subject.RecordNameStrategy\n\
             value.converter.wrapper.for.nullables=true\n",
        ))
        .unwrap();
        assert_eq!(
            args,
            [
                (
                    "--schema-registry-url".to_string(),
                    Some("http://sr:8081".to_string())
                ),
                (
                    "--schema-registry-subject-strategy".to_string(),
                    Some("record".to_string())
                )
            ]
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("wrapper.for.nullables=true") && n.contains("Protobuf")),
            "{notes:?}"
        );
        assert_eq!(format_of(CONFLUENT_PROTOBUF), Some("protobuf"));
    }

    #[test]
    fn oauthbearer_client_credentials_are_carried_but_for_the_secret() {
        // Setting names: Confluent's SchemaRegistryClientConfig
        // (bearer.auth.credentials.source=OAUTHBEARER,
        // bearer.auth.issuer.endpoint.url, bearer.auth.client.id,
        // bearer.auth.client.secret, bearer.auth.scope).
        let Carried { args, notes, .. } = flags(&config(
            "value.converter=io.confluent.connect.avro.AvroConverter\n\
             value.converter.schema.registry.url=https://sr.example\n\
             value.converter.bearer.auth.credentials.source=OAUTHBEARER\n\
             value.converter.bearer.auth.issuer.endpoint.url=https://idp.example/oauth2/token\n\
             value.converter.bearer.auth.client.id=connect\n\
             value.converter.bearer.auth.client.secret=cl1ent-s3cret\n\
             value.converter.bearer.auth.scope=schema_registry\n\
             value.converter.bearer.auth.logical.cluster=lsrc-1\n",
        ))
        .unwrap();
        let text = format!("{args:?}{notes:?}");
        assert!(!text.contains("cl1ent-s3cret"), "{text}");
        let flag = |name: &str| {
            args.iter()
                .find(|(f, _)| f == name)
                .and_then(|(_, v)| v.clone())
        };
        assert_eq!(
            flag("--schema-registry-oauth-token-url").as_deref(),
            Some("https://idp.example/oauth2/token")
        );
        assert_eq!(
            flag("--schema-registry-oauth-client-id").as_deref(),
            Some("connect")
        );
        assert_eq!(
            flag("--schema-registry-oauth-scope").as_deref(),
            Some("schema_registry")
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("WALRELAY_SCHEMA_REGISTRY_OAUTH_CLIENT_SECRET")),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.contains("logical.cluster")),
            "{notes:?}"
        );

        // Apicurio's SerdeConfig: apicurio.auth.service.token.endpoint, or
        // the auth service's URL and a Keycloak realm.
        let Carried { args, notes, .. } = flags(&config(
            "value.converter=io.apicurio.registry.utils.converter.AvroConverter\n\
             value.converter.apicurio.registry.url=http://apicurio:8080/apis/registry/v2\n\
             value.converter.apicurio.auth.service.url=http://keycloak:8080\n\
             value.converter.apicurio.auth.realm=registry\n\
             value.converter.apicurio.auth.client.id=connect\n\
             value.converter.apicurio.auth.client.secret=cl1ent-s3cret\n",
        ))
        .unwrap();
        let text = format!("{args:?}{notes:?}");
        assert!(!text.contains("cl1ent-s3cret"), "{text}");
        assert!(args.contains(&(
            "--schema-registry-oauth-token-url".to_string(),
            Some("http://keycloak:8080/realms/registry/protocol/openid-connect/token".to_string())
        )));
        assert!(args.contains(&(
            "--schema-registry-oauth-client-id".to_string(),
            Some("connect".to_string())
        )));
    }

    #[test]
    fn apicurios_converter_points_walrelay_at_its_confluent_api() {
        let Carried { args, notes, .. } = flags(&config(
            "value.converter=io.apicurio.registry.utils.converter.AvroConverter\n\
             value.converter.apicurio.registry.url=http://apicurio:8080/apis/registry/v2\n\
             value.converter.apicurio.registry.auto-register=true\n\
             value.converter.apicurio.registry.as-confluent=true\n\
             value.converter.apicurio.registry.headers.enabled=false\n",
        ))
        .unwrap();
        assert_eq!(
            args,
            [(
                "--schema-registry-url".to_string(),
                Some("http://apicurio:8080/apis/ccompat/v7".to_string())
            )]
        );
        assert!(
            !notes
                .iter()
                .any(|n| n.contains("8-byte id") || n.contains("header")),
            "{notes:?}"
        );
    }
}
