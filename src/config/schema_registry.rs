//! The flags of the schema registry (`--key-format`/`--value-format` avro,
//! json-schema or protobuf), a group of their own in `--help`, and the settings built from
//! them. The names follow Confluent's serializer settings, which Debezium
//! users set as `value.converter.*`.

use clap::Args;

use super::Source;
use crate::error::{Error, Result};
use crate::outbox::format::Format;
use crate::registry::client::Auth;
use crate::registry::names::NameAdjustment;
use crate::registry::{Encoding, RegistrySettings, SubjectStrategy};

/// Schema registry: where Avro, JSON Schema and Protobuf schemas are registered, and how.
#[derive(Args, Clone)]
#[command(next_help_heading = "Schema registry")]
pub struct SchemaRegistryArgs {
    /// The Confluent-compatible schema registry (schema.registry.url): Confluent's, or Apicurio's at .../apis/ccompat/v7; http:// or https://.
    #[arg(long, env = "WALRELAY_SCHEMA_REGISTRY_URL", hide_env_values = true)]
    pub schema_registry_url: Option<String>,

    /// Basic authentication as USER:PASSWORD (basic.auth.user.info; a Confluent Cloud API key and secret).
    #[arg(
        long,
        env = "WALRELAY_SCHEMA_REGISTRY_BASIC_AUTH_USER_INFO",
        hide_env_values = true,
        value_name = "USER:PASSWORD"
    )]
    pub schema_registry_basic_auth_user_info: Option<String>,

    /// A bearer token (bearer.auth.token), e.g. an OIDC access token for Apicurio behind Keycloak.
    #[arg(
        long,
        env = "WALRELAY_SCHEMA_REGISTRY_BEARER_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub schema_registry_bearer_token: Option<String>,

    /// Log in with OAuth 2.0 client credentials: the identity provider's token endpoint (bearer.auth.issuer.endpoint.url with bearer.auth.credentials.source=OAUTHBEARER; Apicurio's apicurio.auth.service.token.endpoint). walrelay asks it for tokens and renews them before they expire.
    #[arg(
        long,
        env = "WALRELAY_SCHEMA_REGISTRY_OAUTH_TOKEN_URL",
        value_name = "URL"
    )]
    pub schema_registry_oauth_token_url: Option<String>,

    /// The client id for --schema-registry-oauth-token-url (bearer.auth.client.id).
    #[arg(
        long,
        env = "WALRELAY_SCHEMA_REGISTRY_OAUTH_CLIENT_ID",
        value_name = "ID"
    )]
    pub schema_registry_oauth_client_id: Option<String>,

    /// The client secret for --schema-registry-oauth-token-url (bearer.auth.client.secret).
    #[arg(
        long,
        env = "WALRELAY_SCHEMA_REGISTRY_OAUTH_CLIENT_SECRET",
        hide_env_values = true,
        value_name = "SECRET"
    )]
    pub schema_registry_oauth_client_secret: Option<String>,

    /// The scope to ask the token endpoint for (bearer.auth.scope), if the identity provider needs one.
    #[arg(
        long,
        env = "WALRELAY_SCHEMA_REGISTRY_OAUTH_SCOPE",
        value_name = "SCOPE"
    )]
    pub schema_registry_oauth_scope: Option<String>,

    /// A PEM file of the certificate authorities to trust for an https:// registry (schema.registry.ssl.truststore); the system's otherwise.
    #[arg(long, env = "WALRELAY_SCHEMA_REGISTRY_CA_FILE", value_name = "PATH")]
    pub schema_registry_ca_file: Option<String>,

    /// How subjects are named (key/value.subject.name.strategy): topic (TopicNameStrategy, <topic>-key and <topic>-value), record (RecordNameStrategy) or topic-record (TopicRecordNameStrategy).
    #[arg(long, env = "WALRELAY_SCHEMA_REGISTRY_SUBJECT_STRATEGY", value_enum, default_value_t = SubjectStrategy::Topic)]
    pub schema_registry_subject_strategy: SubjectStrategy,

    /// Register new schemas (auto.register.schemas); false only looks them up, for registries where registration is locked down.
    #[arg(long, env = "WALRELAY_SCHEMA_REGISTRY_AUTO_REGISTER", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub schema_registry_auto_register: bool,

    /// With --schema-registry-auto-register false: write with the subject's latest schema id (use.latest.version) instead of looking the schema up. The latest version must be the schema walrelay writes by, up to what leaves the bytes alone (Avro's canonical form with its logical types; Protobuf's text but for white space); another makes the event poison.
    #[arg(long, env = "WALRELAY_SCHEMA_REGISTRY_USE_LATEST_VERSION")]
    pub schema_registry_use_latest_version: bool,

    /// What happens to a schema or field name Avro cannot take (Debezium's schema.name.adjustment.mode): none stops the event, avro replaces each invalid character with _.
    #[arg(long, env = "WALRELAY_SCHEMA_NAME_ADJUSTMENT_MODE", value_enum, default_value_t = NameAdjustment::None)]
    pub schema_name_adjustment_mode: NameAdjustment,
}

impl SchemaRegistryArgs {
    /// The registry settings when a format needs them; an error names
    /// what is missing or contradictory.
    pub fn settings(
        &self,
        key: Format,
        value: Format,
        header: Format,
        source: Source,
    ) -> Result<Option<RegistrySettings>> {
        if let Some(encoding) = Encoding::of(header) {
            return Err(Error::permanent(format!(
                "--header-format {}: walrelay writes headers as SimpleHeaderConverter \
                 (string) or JsonConverter (json, json-with-schema) do; use one of those",
                encoding.name()
            )));
        }
        let Some(encoding) = Encoding::of(value).or(Encoding::of(key)) else {
            return Ok(None);
        };
        let format = encoding.name();
        if source == Source::Messages {
            return Err(Error::permanent(format!(
                "--key-format/--value-format {format} needs the outbox table's column \
                 types, which --source messages does not have; use json or string",
            )));
        }
        let Some(url) = self.schema_registry_url.clone() else {
            return Err(Error::permanent(format!(
                "--key-format/--value-format {format} registers its schemas in a schema \
                 registry: set --schema-registry-url (WALRELAY_SCHEMA_REGISTRY_URL)",
            )));
        };
        let auth = self.auth()?;
        if self.schema_registry_use_latest_version && self.schema_registry_auto_register {
            return Err(Error::permanent(
                "--schema-registry-use-latest-version applies when walrelay registers \
                 nothing: add --schema-registry-auto-register false",
            ));
        }
        Ok(Some(RegistrySettings {
            url,
            auth,
            ca_file: self.schema_registry_ca_file.clone(),
            strategy: self.schema_registry_subject_strategy,
            auto_register: self.schema_registry_auto_register,
            use_latest_version: self.schema_registry_use_latest_version,
            names: self.schema_name_adjustment_mode,
        }))
    }

    /// How walrelay logs in: at most one of basic auth, a static token
    /// and client credentials.
    fn auth(&self) -> Result<Auth> {
        let oauth = self.client_credentials()?;
        let given = [
            self.schema_registry_basic_auth_user_info
                .as_ref()
                .map(|_| "--schema-registry-basic-auth-user-info"),
            self.schema_registry_bearer_token
                .as_ref()
                .map(|_| "--schema-registry-bearer-token"),
            oauth.as_ref().map(|_| "--schema-registry-oauth-token-url"),
        ];
        let given: Vec<&str> = given.into_iter().flatten().collect();
        if given.len() > 1 {
            return Err(Error::permanent(format!(
                "{} are {} ways to log in to the schema registry: give one",
                given.join(" and "),
                given.len()
            )));
        }
        Ok(
            match (
                &self.schema_registry_basic_auth_user_info,
                &self.schema_registry_bearer_token,
                oauth,
            ) {
                (Some(info), _, _) => Auth::Basic(info.clone()),
                (_, Some(token), _) => Auth::Bearer(token.clone()),
                (_, _, Some(oauth)) => oauth,
                (None, None, None) => Auth::None,
            },
        )
    }

    /// Client credentials, when the token URL is given with its client.
    fn client_credentials(&self) -> Result<Option<Auth>> {
        let Some(token_url) = self.schema_registry_oauth_token_url.clone() else {
            let stray = [
                (
                    &self.schema_registry_oauth_client_id,
                    "--schema-registry-oauth-client-id",
                ),
                (
                    &self.schema_registry_oauth_client_secret,
                    "--schema-registry-oauth-client-secret",
                ),
                (
                    &self.schema_registry_oauth_scope,
                    "--schema-registry-oauth-scope",
                ),
            ];
            return match stray.iter().find(|(value, _)| value.is_some()) {
                Some((_, flag)) => Err(Error::permanent(format!(
                    "{flag} is used with --schema-registry-oauth-token-url, the identity \
                     provider's token endpoint: set it too"
                ))),
                None => Ok(None),
            };
        };
        let (Some(client_id), Some(client_secret)) = (
            self.schema_registry_oauth_client_id.clone(),
            self.schema_registry_oauth_client_secret.clone(),
        ) else {
            return Err(Error::permanent(
                "--schema-registry-oauth-token-url needs the client to log in as: set \
                 --schema-registry-oauth-client-id and --schema-registry-oauth-client-secret \
                 (WALRELAY_SCHEMA_REGISTRY_OAUTH_CLIENT_SECRET keeps the secret out of the \
                 command line)",
            ));
        };
        Ok(Some(Auth::ClientCredentials {
            token_url,
            client_id,
            client_secret,
            scope: self.schema_registry_oauth_scope.clone(),
        }))
    }

    /// The secrets among these flags, for the logs to mask.
    pub fn secrets(&self) -> Vec<String> {
        let mut found = Vec::new();
        if let Some(info) = &self.schema_registry_basic_auth_user_info {
            let password = info.split_once(':').map_or(info.as_str(), |(_, p)| p);
            found.push(password.to_string());
        }
        found.extend(self.schema_registry_bearer_token.clone());
        found.extend(self.schema_registry_oauth_client_secret.clone());
        for url in [
            &self.schema_registry_url,
            &self.schema_registry_oauth_token_url,
        ]
        .into_iter()
        .flatten()
        {
            found.extend(crate::percent::url_password(url));
        }
        found
    }
}
