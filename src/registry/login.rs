//! OAuth 2.0 client credentials for a registry behind an identity provider
//! (Apicurio behind Keycloak, Confluent Cloud with an identity pool):
//! walrelay asks the token endpoint for an access token and sends it as a
//! bearer token, as Confluent's serializer does with
//! `bearer.auth.credentials.source=OAUTHBEARER` and Apicurio's with
//! `apicurio.auth.service.token.endpoint`.
//!
//! The request is RFC 6749 §4.4: `grant_type=client_credentials` (and the
//! scope, if any) as a form, the client's id and secret as HTTP Basic
//! credentials (§2.3.1, each form-encoded first), as librdkafka and
//! Kafka's `HttpAccessTokenRetriever` send them. A token is kept until
//! shortly before its `expires_in` runs out, so a registry request costs
//! no token request; one the registry refuses all the same (revoked, or a
//! clock that disagrees) is renewed once before the refusal counts.

use std::time::Duration;

use serde_json::Value;
use tokio::sync::Mutex;
use tokio::time::Instant;

use super::trouble::Trouble;
use crate::http::{basic, Body, Endpoint, Failure};
use crate::percent;

/// A token request's limit, as a registry request's.
const TIMEOUT: Duration = Duration::from_secs(10);

/// How long before its expiry a token is renewed: Confluent's client's
/// `bearer.auth.cache.expiry.buffer.seconds` defaults to 300 s. A token
/// that lives less than twice that is renewed at half its life.
const EXPIRY_BUFFER: Duration = Duration::from_secs(300);

/// What fixes a token the identity provider will not give.
pub const LOGIN_FIX: &str = "check --schema-registry-oauth-client-id and \
                             --schema-registry-oauth-client-secret, and that the client may use \
                             the client-credentials grant (and --schema-registry-oauth-scope, if \
                             the provider needs one)";

/// A client of one token endpoint, and the token it holds.
pub struct ClientCredentials {
    endpoint: Endpoint,
    /// The endpoint's URL, for messages.
    shown: String,
    /// `Basic base64(id:secret)`.
    credentials: String,
    scope: Option<String>,
    held: Mutex<Option<Held>>,
}

struct Held {
    token: String,
    renew_at: Instant,
}

impl std::fmt::Debug for ClientCredentials {
    // Never the secret nor the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials")
            .field("token_url", &self.shown)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl ClientCredentials {
    pub fn new(
        endpoint: Endpoint,
        shown: String,
        client_id: &str,
        client_secret: &str,
        scope: Option<String>,
    ) -> Self {
        ClientCredentials {
            endpoint,
            shown,
            credentials: basic(&percent::encode(client_id), &percent::encode(client_secret)),
            scope,
            held: Mutex::new(None),
        }
    }

    /// The token to send: the one held while it is fresh, else a new one.
    pub async fn token(&self) -> Result<String, Trouble> {
        let mut held = self.held.lock().await;
        if let Some(h) = held.as_ref().filter(|h| Instant::now() < h.renew_at) {
            return Ok(h.token.clone());
        }
        let fresh = self.fetch().await?;
        let token = fresh.token.clone();
        *held = Some(fresh);
        Ok(token)
    }

    /// Forgets `refused`, so that the next `token` asks for a new one; a
    /// token another request renewed meanwhile is kept.
    pub async fn forget(&self, refused: &str) {
        let mut held = self.held.lock().await;
        if held.as_ref().is_some_and(|h| h.token == refused) {
            *held = None;
        }
    }

    async fn fetch(&self) -> Result<Held, Trouble> {
        let mut form = "grant_type=client_credentials".to_string();
        if let Some(scope) = &self.scope {
            form.push_str(&format!("&scope={}", percent::encode(scope)));
        }
        let body = Body {
            content_type: "application/x-www-form-urlencoded",
            text: &form,
        };
        let response = self
            .endpoint
            .exchange("POST", "", Some(body), Some(&self.credentials), TIMEOUT)
            .await
            .map_err(|e| {
                Trouble::Unreachable(match e {
                    Failure::Timeout(t) => format!(
                        "the token endpoint {} did not answer within {t:?}",
                        self.shown
                    ),
                    e => format!("cannot reach the token endpoint {}: {e}", self.shown),
                })
            })?;
        let answer: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
        // RFC 6749 §5.2: an error answer names the error, and may describe it.
        let said = || {
            let error = answer["error"].as_str().unwrap_or("");
            let description = answer["error_description"].as_str().unwrap_or("");
            match (error, description) {
                ("", _) => response.text().chars().take(300).collect(),
                (e, "") => e.to_string(),
                (e, d) => format!("{e}: {d}"),
            }
        };
        match response.status {
            200..=299 => {}
            429 | 500..=599 => {
                return Err(Trouble::Unreachable(format!(
                    "the token endpoint {} answered HTTP {}: {}",
                    self.shown,
                    response.status,
                    said()
                )))
            }
            status => {
                return Err(Trouble::Refused(format!(
                    "the token endpoint {} refused walrelay's client credentials with HTTP \
                     {status}: {}; {LOGIN_FIX}",
                    self.shown,
                    said()
                )))
            }
        }
        let Some(token) = answer["access_token"].as_str().filter(|t| !t.is_empty()) else {
            return Err(Trouble::Refused(format!(
                "the token endpoint {} answered without an access_token; check \
                 --schema-registry-oauth-token-url",
                self.shown
            )));
        };
        // RFC 6749 §5.1: expires_in is recommended, not required.
        let life = answer["expires_in"]
            .as_u64()
            .map_or(Duration::from_secs(3600), Duration::from_secs);
        Ok(Held {
            token: token.to_string(),
            renew_at: Instant::now() + renew_after(life),
        })
    }
}

/// How long a token of this life is used before it is renewed.
fn renew_after(life: Duration) -> Duration {
    if life >= 2 * EXPIRY_BUFFER {
        life - EXPIRY_BUFFER
    } else {
        life / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_renewed_before_it_expires() {
        assert_eq!(
            renew_after(Duration::from_secs(3600)),
            Duration::from_secs(3300)
        );
        assert_eq!(
            renew_after(Duration::from_secs(300)),
            Duration::from_secs(150)
        );
        assert_eq!(renew_after(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn neither_the_secret_nor_a_token_shows_in_debug() {
        let endpoint = Endpoint::parse("http://idp.local/token", "--x", None).unwrap();
        let login = ClientCredentials::new(
            endpoint,
            "http://idp.local:80/token".into(),
            "walrelay",
            "s3cret",
            None,
        );
        let shown = format!("{login:?}");
        assert!(!shown.contains("s3cret") && !shown.contains(&login.credentials));
        // RFC 6749 §2.3.1, then RFC 7617: base64 of "walrelay:s3cret".
        assert_eq!(login.credentials, "Basic d2FscmVsYXk6czNjcmV0");
    }
}
