//! A login Kafka refuses, and what to check. librdkafka retries a refused
//! login forever and tells only the client context, so walrelay stops with
//! the settings behind it: the SASL user and password, or with
//! OAUTHBEARER OIDC the identity provider's (no token from it) or the
//! token's (a token the broker does not take).

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::error::Error;

/// What to check when the broker refuses walrelay's user and password.
pub const LOGIN_FIX: &str = "check -X sasl.username and -X sasl.password (a user the broker \
     knows, with its current password), and that -X security.protocol (SASL_PLAINTEXT or \
     SASL_SSL) and -X sasl.mechanism (e.g. SCRAM-SHA-512) match the broker's listener";

/// What to check when walrelay gets no OAUTHBEARER token from the identity
/// provider (`-X sasl.oauthbearer.method=oidc`).
pub const TOKEN_FIX: &str = "check -X sasl.oauthbearer.token.endpoint.url (the identity \
     provider's token endpoint, reachable from walrelay; for https, -X https.ca.location if \
     its certificate is not signed by a public CA), -X sasl.oauthbearer.client.id and -X \
     sasl.oauthbearer.client.secret (a client the provider knows, with its current secret) and \
     -X sasl.oauthbearer.scope (a scope that client may ask for)";

/// What to check when the broker does not take walrelay's OAUTHBEARER token.
pub const TOKEN_REFUSED_FIX: &str = "check that -X sasl.oauthbearer.scope asks the identity \
     provider for a token for this broker (its audience: the broker's \
     sasl.oauthbearer.expected.audience), and that the broker trusts that provider (its \
     sasl.oauthbearer.jwks.endpoint.url and sasl.oauthbearer.expected.issuer); the broker's log \
     says which check failed";

/// Why a login failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginFailure {
    /// The broker refused the user and password, or the mechanism.
    Refused,
    /// No OAUTHBEARER token from the identity provider: it refused the
    /// client's credentials, or did not answer with a token.
    NoToken,
    /// The broker did not take the OAUTHBEARER token.
    TokenRefused,
}

impl LoginFailure {
    /// Which failure librdkafka's `reason` describes. Without a token
    /// librdkafka says "Failed to acquire SASL OAUTHBEARER token: <the
    /// token endpoint's answer>" (rd_kafka_oauthbearer_set_token_failure0,
    /// librdkafka 2.12.1, src/rdkafka_sasl_oauthbearer.c). A broker that
    /// does not take a token answers with RFC 7628's error (section
    /// 3.2.2), a JSON object with a `status`, `invalid_token` from Apache
    /// Kafka, which librdkafka quotes.
    pub fn of(reason: &str) -> Self {
        if reason.contains("Failed to acquire SASL OAUTHBEARER token") {
            LoginFailure::NoToken
        } else if reason.contains("{\"status\":") {
            LoginFailure::TokenRefused
        } else {
            LoginFailure::Refused
        }
    }

    /// What to check.
    pub fn fix(self) -> &'static str {
        match self {
            LoginFailure::Refused => LOGIN_FIX,
            LoginFailure::NoToken => TOKEN_FIX,
            LoginFailure::TokenRefused => TOKEN_REFUSED_FIX,
        }
    }

    /// What happened, with librdkafka's `reason`; `brokers` refused it.
    pub fn describe(self, brokers: &str, reason: &str) -> String {
        match self {
            LoginFailure::Refused => {
                format!("{brokers} refused walrelay's login (authentication failed: {reason})")
            }
            LoginFailure::NoToken => format!(
                "walrelay could not get an OAUTHBEARER token from the identity provider ({reason})"
            ),
            LoginFailure::TokenRefused => format!(
                "{brokers} refused walrelay's login: it did not take walrelay's OAUTHBEARER \
                 token ({reason})"
            ),
        }
    }
}

/// Whether a client error is a failed login (SASL): the broker refused it,
/// or with OAUTHBEARER OIDC there is no token to log in with.
pub fn is_login_refusal(error: &KafkaError) -> bool {
    error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication)
}

/// A failed login as the permanent error it is: retrying cannot fix
/// credentials. `reason` is librdkafka's, which names the mechanism, never
/// the password (and the log masks every secret of the command line).
pub fn login_refused(reason: &str) -> Error {
    let failure = LoginFailure::of(reason);
    Error::permanent(format!(
        "{}; walrelay stopped: {}",
        failure.describe("Kafka", reason),
        failure.fix()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_login_is_permanent_and_names_the_properties_to_check() {
        let refused = KafkaError::Global(RDKafkaErrorCode::Authentication);
        assert!(is_login_refusal(&refused));
        assert!(!is_login_refusal(&KafkaError::Global(
            RDKafkaErrorCode::AllBrokersDown
        )));
        let error = login_refused("SASL authentication error");
        assert!(!error.is_transient());
        assert!(error.report().starts_with("Kafka refused walrelay's login"));
        for property in [
            "-X sasl.username",
            "-X sasl.password",
            "-X security.protocol",
            "-X sasl.mechanism",
        ] {
            assert!(error.report().contains(property), "{}", error.report());
        }
    }

    #[test]
    fn no_token_from_the_identity_provider_names_the_token_endpoint_settings() {
        // As librdkafka 2.12.1 words it, with the provider's RFC 6749 answer.
        let error = login_refused(
            "Failed to acquire SASL OAUTHBEARER token: {\"error\":\"invalid_client\"}",
        );
        assert!(!error.is_transient());
        for property in [
            "-X sasl.oauthbearer.token.endpoint.url",
            "-X sasl.oauthbearer.client.id",
            "-X sasl.oauthbearer.client.secret",
            "invalid_client",
        ] {
            assert!(error.report().contains(property), "{}", error.report());
        }
        assert!(!error.report().contains("-X sasl.password"));
    }

    #[test]
    fn a_token_the_broker_does_not_take_names_the_scope_and_the_brokers_trust() {
        // As librdkafka 2.12.1 quotes Apache Kafka 4.4's answer.
        let error = login_refused(
            "sasl_ssl://b:9093/bootstrap: SASL authentication error: \
             {\"status\":\"invalid_token\"} (after 661ms in state AUTH_REQ)",
        );
        for words in [
            "OAUTHBEARER token",
            "invalid_token",
            "-X sasl.oauthbearer.scope",
            "sasl.oauthbearer.expected.audience",
            "sasl.oauthbearer.jwks.endpoint.url",
        ] {
            assert!(error.report().contains(words), "{}", error.report());
        }
        assert!(!error.report().contains("-X sasl.password"));
    }
}
