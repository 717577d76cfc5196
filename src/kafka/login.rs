//! A login Kafka refuses, and what to check. librdkafka retries a refused
//! login forever and tells only the client context, so walrelay stops with
//! the settings behind it, by SASL mechanism: the user and password of
//! SCRAM or PLAIN; for Kerberos (GSSAPI) the principal, the keytab and the
//! realm, with the `kinit` that librdkafka ran and that failed, if one did;
//! with OAUTHBEARER OIDC the identity provider's (no token from it) or the
//! token's (a token the broker does not take).

use std::sync::Mutex;

use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::error::Error;

/// What to check when the broker refuses a login with a user and password.
pub const LOGIN_FIX: &str = "check -X sasl.username and -X sasl.password (a user the broker \
     knows, with its current password), and that -X security.protocol (SASL_PLAINTEXT or \
     SASL_SSL) and -X sasl.mechanism (e.g. SCRAM-SHA-512) match the broker's listener";

/// What to check when a Kerberos login fails. librdkafka gets the ticket
/// with `kinit -t KEYTAB -k PRINCIPAL` (its sasl.kerberos.kinit.cmd), and
/// asks the realm for SERVICE/HOST, HOST being the broker's name as its
/// listener advertises it.
pub const KERBEROS_LOGIN_FIX: &str = "check -X sasl.kerberos.principal and -X \
     sasl.kerberos.keytab (the keytab must hold that principal's current key: `klist -kt \
     KEYTAB` lists what it holds, and kinit's own message above says what it missed), that the \
     krb5.conf walrelay reads (KRB5_CONFIG, else /etc/krb5.conf) names the realm's KDC and that \
     walrelay reaches it, that -X sasl.kerberos.service.name (kafka by default) and the broker's \
     advertised host name the broker's principal (SERVICE/HOST@REALM), and that -X \
     security.protocol (SASL_PLAINTEXT or SASL_SSL) matches the broker's listener";

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

/// What to check when an MSK IAM login fails (`--kafka-auth msk-iam`).
pub const MSK_IAM_FIX: &str = "check that walrelay finds AWS credentials (the environment, a \
     profile, web identity, ECS or IMDS; a failed one is named above), that the IAM identity \
     they name may kafka-cluster:Connect to this cluster (its IAM policy), that --aws-region is \
     the cluster's, and that --kafka-brokers are the cluster's IAM listener (port 9098, public \
     9198)";

/// Why a login failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginFailure {
    /// The broker refused the user and password, or the mechanism.
    Refused,
    /// A Kerberos login failed: no ticket, or one the broker does not take.
    Kerberos,
    /// An MSK IAM login failed: no token signed, or one the broker refused.
    MskIam,
    /// No OAUTHBEARER token from the identity provider: it refused the
    /// client's credentials, or did not answer with a token.
    NoToken,
    /// The broker did not take the OAUTHBEARER token.
    TokenRefused,
}

impl LoginFailure {
    /// Which failure librdkafka's `reason` describes, for a login that is
    /// neither Kerberos nor MSK IAM (`LoginAdvice::failure` knows). Without a token
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
            LoginFailure::Kerberos => KERBEROS_LOGIN_FIX,
            LoginFailure::MskIam => MSK_IAM_FIX,
            LoginFailure::NoToken => TOKEN_FIX,
            LoginFailure::TokenRefused => TOKEN_REFUSED_FIX,
        }
    }

    /// What happened, with librdkafka's `reason`; `brokers` refused it.
    pub fn describe(self, brokers: &str, reason: &str) -> String {
        match self {
            LoginFailure::Refused | LoginFailure::Kerberos | LoginFailure::MskIam => {
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

/// Whether a client error is a failed login (SASL): a wrong user or
/// password, a mechanism the listener does not enable, a Kerberos ticket
/// that could not be had, or with OAUTHBEARER OIDC no token to log in with. librdkafka retries it forever,
/// and says so only to the client context.
pub fn is_login_refusal(error: &KafkaError) -> bool {
    error.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication)
}

/// Whether `config` logs in with Kerberos: a SASL security protocol whose
/// mechanism is GSSAPI, librdkafka's default when none is named.
pub fn is_kerberos(config: &ClientConfig) -> bool {
    let sasl = is_sasl(config);
    let mechanism = config
        .get("sasl.mechanism")
        .or_else(|| config.get("sasl.mechanisms"))
        .unwrap_or("GSSAPI");
    sasl && mechanism.eq_ignore_ascii_case("GSSAPI")
}

/// Whether `config` logs in with SASL (SASL_PLAINTEXT or SASL_SSL).
pub fn is_sasl(config: &ClientConfig) -> bool {
    config
        .get("security.protocol")
        .is_some_and(|p| p.to_ascii_uppercase().starts_with("SASL_"))
}

/// Refuses a Kerberos login in a walrelay built without the `gssapi`
/// feature (`--no-default-features`), whose librdkafka has no GSSAPI and
/// would say "recompile librdkafka".
pub fn require_kerberos_support(config: &ClientConfig) -> Result<(), Error> {
    kerberos_support(config, cfg!(feature = "gssapi"))
}

fn kerberos_support(config: &ClientConfig, built_in: bool) -> Result<(), Error> {
    if built_in || !is_kerberos(config) {
        return Ok(());
    }
    Err(Error::permanent(
        "-X security.protocol is SASL with the mechanism GSSAPI (Kerberos; librdkafka's default \
         sasl.mechanism), but this walrelay was built without Kerberos: build it with the \
         `gssapi` cargo feature (on by default; it needs libsasl2-dev), or name another \
         -X sasl.mechanism",
    ))
}

/// What a client knows of its login while librdkafka tries it: which
/// properties to name when it fails, and the last `kinit` that failed
/// (librdkafka logs it, then tries the broker all the same, since a ticket
/// may still be in the cache).
pub struct LoginAdvice {
    /// Kerberos or MSK IAM, which the reason alone does not tell.
    mechanism: Option<LoginFailure>,
    kinit_failure: Mutex<Option<String>>,
}

impl LoginAdvice {
    pub fn new(config: &ClientConfig) -> Self {
        LoginAdvice {
            mechanism: if is_kerberos(config) {
                Some(LoginFailure::Kerberos)
            } else if super::msk_iam::is_msk_iam(config) {
                Some(LoginFailure::MskIam)
            } else {
                None
            },
            kinit_failure: Mutex::new(None),
        }
    }

    /// Which failure librdkafka's `reason` describes.
    pub fn failure(&self, reason: &str) -> LoginFailure {
        self.mechanism.unwrap_or_else(|| LoginFailure::of(reason))
    }

    /// Notes a log line of librdkafka's: a failed ticket refresh (facility
    /// SASLREFRESH, at error level) names the kinit command and its exit
    /// code. A later success does not clear it: the failure then explains
    /// nothing, and no login fails.
    pub fn observe_log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        use RDKafkaLogLevel::{Alert, Critical, Emerg, Error};
        if fac == "SASLREFRESH" && matches!(level, Emerg | Alert | Critical | Error) {
            // Without librdkafka's thread tag: "[thrd:main]: ".
            let message = match message.split_once("]: ") {
                Some((tag, rest)) if tag.starts_with("[thrd:") => rest,
                _ => message,
            };
            *self.lock() = Some(message.to_string());
        }
    }

    /// librdkafka's reason for a refused login, with the failed kinit that
    /// led to it, if one did.
    pub fn reason(&self, reason: &str) -> String {
        match self.lock().as_deref() {
            Some(kinit) => format!("{reason}; before it, {kinit}"),
            None => reason.to_string(),
        }
    }

    /// A failed login as the permanent error it is: retrying cannot fix
    /// credentials. `reason` is librdkafka's, which names the mechanism,
    /// never the password (and the log masks every secret of the command
    /// line).
    pub fn refused(&self, reason: &str) -> Error {
        let reason = self.reason(reason);
        let failure = self.failure(&reason);
        Error::permanent(format!(
            "{}; walrelay stopped: {}",
            failure.describe("Kafka", &reason),
            failure.fix()
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.kinit_failure.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> ClientConfig {
        let mut config = ClientConfig::new();
        for (k, v) in pairs {
            config.set(*k, *v);
        }
        config
    }

    #[test]
    fn a_refused_login_is_permanent_and_names_the_properties_to_check() {
        let refused = KafkaError::Global(RDKafkaErrorCode::Authentication);
        assert!(is_login_refusal(&refused));
        assert!(!is_login_refusal(&KafkaError::Global(
            RDKafkaErrorCode::AllBrokersDown
        )));
        let scram = config(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
        ]);
        let error = LoginAdvice::new(&scram).refused("SASL authentication error");
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
    fn gssapi_is_kerberos_and_so_is_a_sasl_protocol_without_a_mechanism() {
        assert!(is_kerberos(&config(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "GSSAPI"),
        ])));
        assert!(is_kerberos(&config(&[
            ("security.protocol", "sasl_ssl"),
            ("sasl.mechanisms", "gssapi"),
        ])));
        // librdkafka's default sasl.mechanisms is GSSAPI.
        assert!(is_kerberos(&config(&[("security.protocol", "SASL_SSL")])));
        assert!(!is_kerberos(&config(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "PLAIN"),
        ])));
        assert!(!is_kerberos(&config(&[("sasl.mechanism", "GSSAPI")])));
        assert!(!is_kerberos(&config(&[])));
    }

    #[test]
    fn a_build_without_the_gssapi_feature_refuses_kerberos_naming_the_feature() {
        let kerberos = config(&[("security.protocol", "SASL_SSL")]);
        let error = kerberos_support(&kerberos, false).unwrap_err();
        assert!(!error.is_transient());
        assert!(
            error.report().contains("`gssapi` cargo feature"),
            "{}",
            error.report()
        );
        assert!(kerberos_support(&kerberos, true).is_ok());
        let scram = config(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-256"),
        ]);
        assert!(kerberos_support(&scram, false).is_ok());
    }

    #[test]
    fn a_refused_kerberos_login_names_the_principal_the_keytab_and_the_failed_kinit() {
        let advice = LoginAdvice::new(&config(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanism", "GSSAPI"),
        ]));
        // A debug line of the same facility is no failure.
        advice.observe_log(
            RDKafkaLogLevel::Debug,
            "SASLREFRESH",
            "Refreshing Kerberos ticket with command: kinit …",
        );
        assert_eq!(advice.reason("no credentials"), "no credentials");
        advice.observe_log(
            RDKafkaLogLevel::Error,
            "SASLREFRESH",
            "[thrd:main]: Kerberos ticket refresh failed: kinit -t \"/k\" -k relay@R: exited \
             with code 1",
        );
        let report = advice.refused("GSSAPI Error: No credentials").report();
        for words in [
            "GSSAPI Error: No credentials; before it, Kerberos ticket refresh failed: kinit",
            "-X sasl.kerberos.principal",
            "-X sasl.kerberos.keytab",
            "klist -kt",
            "KRB5_CONFIG",
            "-X sasl.kerberos.service.name",
        ] {
            assert!(report.contains(words), "{words:?} in {report}");
        }
        assert!(!report.contains("sasl.password"), "{report}");
    }

    fn oauthbearer() -> LoginAdvice {
        LoginAdvice::new(&config(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.method", "oidc"),
        ]))
    }

    #[test]
    fn no_token_from_the_identity_provider_names_the_token_endpoint_settings() {
        // As librdkafka 2.12.1 words it, with the provider's RFC 6749 answer.
        let error = oauthbearer()
            .refused("Failed to acquire SASL OAUTHBEARER token: {\"error\":\"invalid_client\"}");
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
        let error = oauthbearer().refused(
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

    #[test]
    fn a_refused_msk_iam_login_names_the_iam_policy_the_region_and_the_listener() {
        let pairs = crate::kafka::msk_iam::properties("eu-west-1");
        let pairs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        // Whatever the broker's words, even an OAUTHBEARER answer of RFC 7628.
        let report = LoginAdvice::new(&config(&pairs))
            .refused("SASL authentication error: {\"status\":\"invalid_token\"}")
            .report();
        for words in [
            "kafka-cluster:Connect",
            "--aws-region",
            "9098",
            "AWS credentials",
        ] {
            assert!(report.contains(words), "{words:?} in {report}");
        }
        assert!(!report.contains("-X sasl.oauthbearer.scope"), "{report}");
    }
}
