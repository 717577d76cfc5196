//! The Confluent Schema Registry REST API, as Confluent's registry and
//! Apicurio's `/apis/ccompat/v7` serve it: register, look up, the latest
//! version, the compatibility check and level. Over `http`'s one client;
//! the answer's status decides what kind of failure it is. Logged in with
//! basic auth, a static bearer token, or client credentials (`login`).

use std::sync::Arc;
use std::time::Duration;

use openssl::ssl::{SslConnector, SslMethod};
use serde_json::{json, Value};

use super::login::ClientCredentials;
use super::trouble::Trouble;
use crate::http::{basic, Body, Endpoint, Failure, Response};

/// One request's limit: a registry slower than this holds the events as
/// one that does not answer.
const TIMEOUT: Duration = Duration::from_secs(10);

/// How walrelay logs in to the registry (no secret in `Debug`).
#[derive(Clone, Default)]
pub enum Auth {
    #[default]
    None,
    /// `basic.auth.user.info`: `user:password`.
    Basic(String),
    /// `bearer.auth.token`: a static token (Confluent Cloud API keys go as
    /// Basic; OIDC tokens as Bearer).
    Bearer(String),
    /// OAuth 2.0 client credentials (`bearer.auth.credentials.source=
    /// OAUTHBEARER`): tokens from `token_url`, renewed as they expire
    /// (`login`).
    ClientCredentials {
        token_url: String,
        client_id: String,
        client_secret: String,
        scope: Option<String>,
    },
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Auth::None => "None",
            Auth::Basic(_) => "Basic(<redacted>)",
            Auth::Bearer(_) => "Bearer(<redacted>)",
            Auth::ClientCredentials { .. } => "ClientCredentials(<redacted>)",
        })
    }
}

/// What fixes credentials the registry refuses.
pub const CREDENTIALS_FIX: &str = "check --schema-registry-basic-auth-user-info, \
                                   --schema-registry-bearer-token or the \
                                   --schema-registry-oauth-* flags, and the rights on the subject";

/// What fixes a URL that answers as no schema registry does.
pub const URL_FIX: &str = "check --schema-registry-url: it must name the Confluent-compatible \
                           API (Apicurio serves it at .../apis/ccompat/v7), and nothing between \
                           walrelay and the registry may answer in its place";

/// A schema registry at one URL.
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: Endpoint,
    /// The URL without credentials, for messages.
    shown: String,
    /// Where its bearer tokens come from, with client credentials; every
    /// clone shares the token.
    login: Option<Arc<ClientCredentials>>,
}

impl Client {
    /// `url` as `--schema-registry-url` takes it; `ca_file` a PEM bundle
    /// to trust for https (the system's roots otherwise).
    pub fn new(url: &str, auth: &Auth, ca_file: Option<&str>) -> Result<Self, String> {
        let mut tls = SslConnector::builder(SslMethod::tls_client()).map_err(|e| e.to_string())?;
        if let Some(ca) = ca_file {
            tls.set_ca_file(ca).map_err(|e| {
                format!("--schema-registry-ca-file {ca:?} is not a readable PEM file: {e}")
            })?;
        }
        let tls = tls.build();
        let mut endpoint = Endpoint::parse(url, "--schema-registry-url", Some(tls.clone()))?;
        let mut login = None;
        endpoint = match auth {
            Auth::None => endpoint,
            Auth::Basic(info) => {
                let (user, password) = info.split_once(':').unwrap_or((info, ""));
                endpoint.with_authorization(basic(user, password))
            }
            Auth::Bearer(token) => endpoint.with_authorization(format!("Bearer {token}")),
            Auth::ClientCredentials {
                token_url,
                client_id,
                client_secret,
                scope,
            } => {
                // The token endpoint trusts what the registry trusts.
                let flag = "--schema-registry-oauth-token-url";
                let token = Endpoint::parse(token_url, flag, Some(tls))?;
                let shown = shown_url(token_url, &token);
                login = Some(Arc::new(ClientCredentials::new(
                    token,
                    shown,
                    client_id,
                    client_secret,
                    scope.clone(),
                )));
                endpoint
            }
        };
        let shown = shown_url(url, &endpoint);
        Ok(Client {
            endpoint,
            shown,
            login,
        })
    }

    /// The URL, without credentials.
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// POST /subjects/{subject}/versions: the schema's id, registered if new.
    /// `schema_type` is the registry's schemaType (None: Avro).
    pub async fn register(
        &self,
        subject: &str,
        schema: &str,
        schema_type: Option<&str>,
    ) -> Result<i32, Trouble> {
        let path = format!("/subjects/{}/versions", segment(subject));
        self.post_schema(&path, schema, schema_type).await
    }

    /// POST /subjects/{subject}: the id of this schema if the subject has it.
    pub async fn lookup(
        &self,
        subject: &str,
        schema: &str,
        schema_type: Option<&str>,
    ) -> Result<i32, Trouble> {
        let path = format!("/subjects/{}", segment(subject));
        self.post_schema(&path, schema, schema_type).await
    }

    /// POSTs a schema and reads the id the registry answers with.
    async fn post_schema(
        &self,
        path: &str,
        schema: &str,
        schema_type: Option<&str>,
    ) -> Result<i32, Trouble> {
        let body = schema_body(schema, schema_type);
        let answer = self.call("POST", path, Some(&body)).await?;
        id_of(&answer)
    }

    /// GET /subjects/{subject}/versions/latest: its id and schema text.
    pub async fn latest(&self, subject: &str) -> Result<(i32, String), Trouble> {
        let path = format!("/subjects/{}/versions/latest", segment(subject));
        let answer = self.call("GET", &path, None).await?;
        let schema = answer["schema"].as_str().unwrap_or_default().to_string();
        Ok((id_of(&answer)?, schema))
    }

    /// POST /compatibility/subjects/{subject}/versions/latest: whether the
    /// schema may be registered; a subject with no version takes any.
    pub async fn compatible(
        &self,
        subject: &str,
        schema: &str,
        schema_type: Option<&str>,
    ) -> Result<bool, Trouble> {
        let body = schema_body(schema, schema_type);
        let path = format!(
            "/compatibility/subjects/{}/versions/latest",
            segment(subject)
        );
        match self.call("POST", &path, Some(&body)).await {
            Ok(answer) => Ok(answer["is_compatible"].as_bool().unwrap_or(false)),
            Err(Trouble::NotFound(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// GET /config/{subject}, else the registry's GET /config: the
    /// compatibility level that applies to the subject.
    pub async fn compatibility_level(&self, subject: &str) -> Result<String, Trouble> {
        let path = format!("/config/{}", segment(subject));
        let answer = match self.call("GET", &path, None).await {
            Ok(answer) => answer,
            Err(Trouble::NotFound(_)) => self.call("GET", "/config", None).await?,
            Err(e) => return Err(e),
        };
        answer["compatibilityLevel"]
            .as_str()
            .or(answer["compatibility"].as_str())
            .map(str::to_string)
            .ok_or_else(|| {
                Trouble::Rejected(format!("{} answered no compatibility level", self.shown))
            })
    }

    /// GET /subjects: a request every registry answers, for reachability.
    pub async fn subjects(&self) -> Result<Vec<String>, Trouble> {
        let answer = self.call("GET", "/subjects", None).await?;
        Ok(answer
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// One request, logged in; with client credentials a token the
    /// registry refuses is renewed once before the refusal counts.
    async fn call(&self, method: &str, path: &str, body: Option<&str>) -> Result<Value, Trouble> {
        let Some(login) = &self.login else {
            let authorization = self.endpoint.authorization();
            return self.call_as(method, path, body, authorization).await;
        };
        let token = login.token().await?;
        let bearer = format!("Bearer {token}");
        match self.call_as(method, path, body, Some(&bearer)).await {
            Err(Trouble::Refused(_)) => {
                login.forget(&token).await;
                let bearer = format!("Bearer {}", login.token().await?);
                self.call_as(method, path, body, Some(&bearer)).await
            }
            answer => answer,
        }
    }

    async fn call_as(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        authorization: Option<&str>,
    ) -> Result<Value, Trouble> {
        let body = body.map(|text| Body {
            content_type: "application/json",
            text,
        });
        let response = self
            .endpoint
            .exchange(method, path, body, authorization, TIMEOUT)
            .await
            .map_err(|e| {
                Trouble::Unreachable(match e {
                    Failure::Timeout(t) => {
                        format!(
                            "the schema registry at {} did not answer within {t:?}",
                            self.shown
                        )
                    }
                    e => format!("cannot reach the schema registry at {}: {e}", self.shown),
                })
            })?;
        classify(&self.shown, method, path, response)
    }
}

/// The answer's JSON, or the kind of failure its status and the
/// registry's `error_code` say. The codes are Confluent's API reference's
/// (docs.confluent.io, "Lookup schema under subject": "Error code 40401
/// indicates subject not found. Error code 40403 indicates schema not
/// found"; "Register schema under a subject": "Error code 42201 indicates
/// an invalid schema"); Apicurio's ccompat API answers with the same.
fn classify(url: &str, method: &str, path: &str, response: Response) -> Result<Value, Trouble> {
    let text = response.text();
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    let code = body["error_code"].as_i64();
    let said = || {
        body["message"]
            .as_str()
            .map_or_else(|| text.chars().take(300).collect(), str::to_string)
    };
    let what = |status: u16| {
        format!(
            "{url} answered {method} {path} with HTTP {status}: {}",
            said()
        )
    };
    match response.status {
        200..=299 => serde_json::from_str(&text).map_err(|_| {
            Trouble::NotARegistry(format!(
                "{url} answered {method} {path} with no JSON, as no schema registry does: {}",
                said()
            ))
        }),
        401 | 403 => Err(Trouble::Refused(what(response.status))),
        404 if matches!(code, Some(40401..=40403)) => Err(Trouble::NotFound(what(404))),
        409 => Err(Trouble::Incompatible(what(409))),
        422 if code.is_some_and(|c| c / 100 == 422) => Err(Trouble::Rejected(what(422))),
        429 | 500..=599 => Err(Trouble::Unreachable(what(response.status))),
        status => Err(Trouble::NotARegistry(format!(
            "{}, without a schema registry's error code",
            what(status)
        ))),
    }
}

/// A URL as messages show it: scheme, host, port and path, without the
/// user info a URL may carry.
fn shown_url(url: &str, endpoint: &Endpoint) -> String {
    let scheme = url.split_once("://").map_or("http", |(s, _)| s);
    format!(
        "{scheme}://{}:{}{}",
        endpoint.host(),
        endpoint.port(),
        endpoint.path().trim_end_matches('/')
    )
}

fn id_of(answer: &Value) -> Result<i32, Trouble> {
    answer["id"]
        .as_i64()
        .and_then(|id| i32::try_from(id).ok())
        .ok_or_else(|| {
            Trouble::NotARegistry(format!("the registry answered without an id: {answer}"))
        })
}

/// A subject as one URL path segment (RFC 3986 unreserved kept).
/// A request's body naming a schema: Avro's has no schemaType (the
/// registry's default), any other format says its own.
fn schema_body(schema: &str, schema_type: Option<&str>) -> String {
    match schema_type {
        None => json!({ "schema": schema }).to_string(),
        Some(t) => json!({ "schema": schema, "schemaType": t }).to_string(),
    }
}

fn segment(subject: &str) -> String {
    let mut out = String::with_capacity(subject.len());
    for b in subject.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_credential_shows_in_the_client_or_its_url() {
        let auth = Auth::Basic("svc:s3cret".into());
        let client = Client::new("http://reg.local:8081/apis/ccompat/v7", &auth, None).unwrap();
        assert_eq!(client.url(), "http://reg.local:8081/apis/ccompat/v7");
        assert!(!format!("{client:?}{auth:?}").contains("s3cret"));
        let inline = Client::new("http://svc:s3cret@reg.local/", &Auth::None, None).unwrap();
        assert!(!inline.url().contains("s3cret"), "{}", inline.url());
    }

    #[test]
    fn a_bearer_token_and_basic_auth_become_the_authorization_header() {
        let bearer =
            Client::new("https://reg.local/", &Auth::Bearer("tok-1".into()), None).unwrap();
        assert_eq!(bearer.endpoint.authorization(), Some("Bearer tok-1"));
        assert_eq!(bearer.endpoint.port(), 443);
        // RFC 7617: base64 of "svc:pw".
        let basic = Client::new("http://reg.local/", &Auth::Basic("svc:pw".into()), None).unwrap();
        assert_eq!(basic.endpoint.authorization(), Some("Basic c3ZjOnB3"));
        let missing = Client::new(
            "https://reg.local/",
            &Auth::None,
            Some("/nonexistent/ca.pem"),
        );
        assert!(missing.unwrap_err().contains("--schema-registry-ca-file"));
    }

    /// What `classify` makes of an answer with this status and body.
    fn kind(status: u16, body: &str) -> Trouble {
        classify("u", "POST", "/p", answer(status, body)).unwrap_err()
    }

    fn answer(status: u16, body: &str) -> Response {
        Response {
            status,
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn statuses_sort_failures_into_what_walrelay_does_about_them() {
        let conflict = r#"{"error_code":409,"message":"incompatible"}"#;
        assert!(
            matches!(kind(409, conflict), Trouble::Incompatible(m) if m.contains("incompatible"))
        );
        assert!(matches!(kind(503, conflict), Trouble::Unreachable(_)));
        assert!(matches!(kind(429, ""), Trouble::Unreachable(_)));
        assert!(matches!(kind(401, conflict), Trouble::Refused(_)));
        // Apicurio 3.3.3's answers, as it gave them to curl: a subject it
        // lacks, a schema it lacks, an invalid schema.
        let subject = r#"{"message":"Subject 'nope' not found.","error_code":40401}"#;
        let schema = r#"{"message":"The given schema does not match any schema under the subject s1","error_code":40403}"#;
        let invalid =
            r#"{"message":"Failed to discover artifact type from content.","error_code":42201}"#;
        assert!(matches!(kind(404, subject), Trouble::NotFound(_)));
        assert!(matches!(kind(404, schema), Trouble::NotFound(_)));
        assert!(matches!(kind(422, invalid), Trouble::Rejected(_)));
        assert_eq!(segment("orders-value"), "orders-value");
        assert_eq!(segment("a/b"), "a%2Fb");
    }

    #[test]
    fn a_url_that_answers_as_no_registry_does_is_told_apart_from_a_missing_schema() {
        // Apicurio 3.3.3 asked without /apis/ccompat/v7 (curl, as above).
        let resteasy = r#"{"detail":"NotFoundException: RESTEASY003210: Could not find resource for full path: http://127.0.0.1:18181/subjects/s1/versions","title":"RESTEASY003210: Could not find resource for full path","status":404,"name":"NotFoundException"}"#;
        assert!(matches!(kind(404, resteasy), Trouble::NotARegistry(_)));
        assert!(matches!(
            kind(404, "<html>Not Found</html>"),
            Trouble::NotARegistry(_)
        ));
        assert!(matches!(kind(405, ""), Trouble::NotARegistry(_)));
        assert!(matches!(kind(422, "<html/>"), Trouble::NotARegistry(_)));
        let html = classify("u", "POST", "/p", answer(200, "<html>a login page</html>"));
        assert!(matches!(html, Err(Trouble::NotARegistry(_))));
        assert!(matches!(
            id_of(&json!({"ok": true})),
            Err(Trouble::NotARegistry(_))
        ));
    }
}
