//! `--kafka-auth msk-iam`: Amazon MSK's IAM access control through SASL
//! OAUTHBEARER. The token itself is `aws::msk`'s; this module gives it to
//! every Kafka client walrelay makes.
//!
//! The clients learn they use it from three librdkafka properties
//! (`properties`), so any client built from walrelay's properties (the
//! producer, the admin clients, redrive's and audit's consumers, check's
//! probes) authenticates alike; `sasl.oauthbearer.config` carries the
//! region to the token hook. librdkafka asks for a token when a client
//! starts and again at 80% of the token's life, through rdkafka's refresh
//! hook (`ClientContext::generate_oauth_token`), which every walrelay
//! context answers with `generate_token` (the `oauth_token_hook!` macro).
//!
//! An admin client never polls the queue that hook is served from
//! (rust-rdkafka issue 757), so `keep_admin_token` sets its token itself:
//! now, and again before each expires, until the client is dropped.

use std::error::Error as StdError;
use std::ffi::CString;
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rdkafka::admin::AdminClient;
use rdkafka::bindings as rdsys;
use rdkafka::client::{ClientContext, OAuthToken};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaRespErr;
use tracing::{debug, warn};

/// Marks walrelay's own `sasl.oauthbearer.config`: `walrelay.msk-iam region=R`.
const TAG: &str = "walrelay.msk-iam";

/// MSK cannot say who a token names: librdkafka only wants a principal.
const PRINCIPAL: &str = "msk-iam";

/// The properties of an MSK IAM login for `region`, before the `-X` ones
/// (which may override the protocol, e.g. for a test broker without TLS).
pub fn properties(region: &str) -> Vec<(String, String)> {
    vec![
        ("security.protocol".into(), "SASL_SSL".into()),
        ("sasl.mechanism".into(), "OAUTHBEARER".into()),
        (
            "sasl.oauthbearer.config".into(),
            format!("{TAG} region={region}"),
        ),
    ]
}

/// `-X` properties that contradict `--kafka-auth msk-iam`, with the fix.
pub fn conflict(properties: &[(String, String)]) -> Option<String> {
    let set = |key: &str| {
        properties
            .iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    };
    let mechanism = set("sasl.mechanism").or(set("sasl.mechanisms"));
    if mechanism.is_some_and(|m| !m.eq_ignore_ascii_case("OAUTHBEARER")) {
        return Some(
            "--kafka-auth msk-iam logs in with SASL OAUTHBEARER, and -X sasl.mechanism says \
             otherwise: drop -X sasl.mechanism, or use --kafka-auth properties for SCRAM"
                .into(),
        );
    }
    if set("sasl.oauthbearer.method").is_some_and(|m| m.eq_ignore_ascii_case("oidc")) {
        return Some(
            "--kafka-auth msk-iam signs its own token, and -X sasl.oauthbearer.method=oidc \
             asks an OIDC provider for one: choose one of the two"
                .into(),
        );
    }
    if set("sasl.oauthbearer.config").is_some() {
        return Some(
            "--kafka-auth msk-iam sets sasl.oauthbearer.config itself: drop -X \
             sasl.oauthbearer.config"
                .into(),
        );
    }
    None
}

/// Whether a client made from `config` logs in with MSK IAM.
pub fn is_msk_iam(config: &ClientConfig) -> bool {
    region(config.get("sasl.oauthbearer.config")).is_some()
}

/// The region walrelay's `sasl.oauthbearer.config` names, if it is walrelay's.
fn region(oauthbearer_config: Option<&str>) -> Option<&str> {
    let mut words = oauthbearer_config?.split_whitespace();
    (words.next() == Some(TAG)).then_some(())?;
    words.find_map(|w| w.strip_prefix("region="))
}

/// The answer to librdkafka's request for a token.
pub fn generate_token(oauthbearer_config: Option<&str>) -> Result<OAuthToken, Box<dyn StdError>> {
    let Some(region) = region(oauthbearer_config) else {
        return Err(
            "SASL OAUTHBEARER needs a token source: --kafka-auth msk-iam, or -X \
                    sasl.oauthbearer.method=oidc with its token endpoint"
                .into(),
        );
    };
    let token = sign(region)?;
    Ok(OAuthToken {
        token: token.0,
        principal_name: PRINCIPAL.into(),
        lifetime_ms: token.1,
    })
}

/// A token and its expiry (ms since the epoch), signed now.
#[cfg(feature = "aws")]
fn sign(region: &str) -> Result<(String, i64), Box<dyn StdError>> {
    let token = crate::aws::msk::token_now_blocking(region)?;
    Ok((token.token, token.expires_ms))
}

#[cfg(not(feature = "aws"))]
fn sign(_: &str) -> Result<(String, i64), Box<dyn StdError>> {
    Err("--kafka-auth msk-iam needs the aws feature, which this walrelay was built without".into())
}

/// The token hook of a walrelay client context: librdkafka's requests for
/// a SASL OAUTHBEARER token are answered by `generate_token`.
macro_rules! oauth_token_hook {
    () => {
        const ENABLE_REFRESH_OAUTH_TOKEN: bool = true;

        fn generate_oauth_token(
            &self,
            oauthbearer_config: Option<&str>,
        ) -> std::result::Result<rdkafka::client::OAuthToken, Box<dyn std::error::Error>> {
            $crate::kafka::msk_iam::generate_token(oauthbearer_config)
        }
    };
}
pub(crate) use oauth_token_hook;

/// The context of a consumer that needs nothing but librdkafka's defaults
/// and the token hook (redrive's reader, audit's).
#[derive(Clone, Copy, Default)]
pub struct TokenContext;

impl ClientContext for TokenContext {
    oauth_token_hook!();

    /// rdkafka's default, but for a partition's end: with
    /// `enable.partition.eof` (audit's reader) librdkafka reports each as
    /// an error event, and it is the normal end of a read.
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            debug!(reason, "librdkafka: end of a partition");
            return;
        }
        tracing::error!("librdkafka: {error}: {reason}");
    }
}

impl ConsumerContext for TokenContext {}

impl ProducerContext for TokenContext {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &DeliveryResult<'_>, _: ()) {}
}

/// With MSK IAM in `config`, sets `admin`'s token now and before each one
/// expires, on a thread that ends once the client is dropped.
pub fn keep_admin_token<C: ClientContext + 'static>(
    config: &ClientConfig,
    admin: &Arc<AdminClient<C>>,
) {
    let Some(oauthbearer_config) = config
        .get("sasl.oauthbearer.config")
        .filter(|c| region(Some(c)).is_some())
        .map(str::to_string)
    else {
        return;
    };
    // The first token before any request needs it.
    let next = set_token(admin, &oauthbearer_config);
    let weak = Arc::downgrade(admin);
    let spawned = std::thread::Builder::new()
        .name("walrelay-msk-token".into())
        .spawn(move || keep(weak, oauthbearer_config, next));
    if let Err(e) = spawned {
        warn!(error = %e, "cannot start the MSK IAM token refresher; the admin client's token expires in 15 minutes");
    }
}

fn keep<C: ClientContext>(admin: Weak<AdminClient<C>>, config: String, mut next: SystemTime) {
    const TICK: Duration = Duration::from_secs(1);
    loop {
        if SystemTime::now() < next {
            std::thread::sleep(TICK);
            if admin.strong_count() == 0 {
                return;
            }
            continue;
        }
        let Some(client) = admin.upgrade() else {
            return;
        };
        next = set_token(&client, &config);
    }
}

/// Sets a new token on `admin`; returns when to set the next: at 80% of the
/// token's life, as librdkafka refreshes, or in 10 s after a failure.
fn set_token<C: ClientContext>(admin: &AdminClient<C>, config: &str) -> SystemTime {
    let now = SystemTime::now();
    let retry = now + Duration::from_secs(10);
    let native = admin.inner().native_ptr();
    let token = generate_token(Some(config));
    let failure = match &token {
        Ok(token) => {
            let (Ok(value), Ok(principal)) = (
                CString::new(token.token.as_str()),
                CString::new(token.principal_name.as_str()),
            ) else {
                return retry;
            };
            let mut errstr = [0 as std::ffi::c_char; 512];
            // SAFETY: the client outlives the call; librdkafka copies the
            // strings; errstr is writable for its whole length.
            let err = unsafe {
                rdsys::rd_kafka_oauthbearer_set_token(
                    native,
                    value.as_ptr(),
                    token.lifetime_ms,
                    principal.as_ptr(),
                    std::ptr::null_mut(),
                    0,
                    errstr.as_mut_ptr(),
                    errstr.len(),
                )
            };
            if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
                let expires = UNIX_EPOCH + Duration::from_millis(token.lifetime_ms.max(0) as u64);
                let life = expires.duration_since(now).unwrap_or_default();
                return now + life.mul_f64(0.8);
            }
            // SAFETY: librdkafka wrote a NUL-terminated message.
            unsafe { std::ffi::CStr::from_ptr(errstr.as_ptr()) }
                .to_string_lossy()
                .into_owned()
        }
        Err(e) => e.to_string(),
    };
    if let Ok(message) = CString::new(failure) {
        // SAFETY: as above; librdkafka copies the message.
        unsafe { rdsys::rd_kafka_oauthbearer_set_token_failure(native, message.as_ptr()) };
    }
    retry
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_walrelays_own_config_names_a_region() {
        let own = &properties("eu-west-1")[2].1;
        assert_eq!(region(Some(own)), Some("eu-west-1"));
        assert_eq!(region(Some("principal=admin")), None);
        assert_eq!(region(None), None);
        let err = generate_token(Some("principal=admin")).err().unwrap();
        assert!(err.to_string().contains("--kafka-auth msk-iam"), "{err}");
    }

    #[test]
    fn properties_that_contradict_msk_iam_are_named() {
        assert!(conflict(&pairs(&[("security.protocol", "SASL_PLAINTEXT")])).is_none());
        for (key, value) in [
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.config", "x"),
        ] {
            let why = conflict(&pairs(&[(key, value)])).unwrap();
            assert!(why.contains(key), "{why}");
        }
    }
}
