//! The OAUTHBEARER token of an Amazon MSK IAM login, built as AWS's signer
//! libraries build it (`aws-msk-iam-sasl-signer-python` 1.0.2,
//! `MSKAuthTokenProvider.py`; tests/aws_tokens.rs compares the two): a GET
//! of `https://kafka.REGION.amazonaws.com/?Action=kafka-cluster%3AConnect`
//! presigned with SigV4 for the service `kafka-cluster` and 900 seconds,
//! then a `User-Agent` query parameter appended *after* signing, and the
//! whole URL, scheme included, base64url-encoded without `=` padding. The
//! broker takes the token until X-Amz-Date plus 900 seconds, and librdkafka
//! asks for a new one before then.

use std::time::{Duration, SystemTime};

use base64::Engine as _;

use super::{presign, Credentials, TOKEN_LIFETIME};
use crate::error::{Error, Result};

const SERVICE: &str = "kafka-cluster";

/// What walrelay's tokens say they come from (the User-Agent parameter).
pub const USER_AGENT: &str = concat!("walrelay/", env!("CARGO_PKG_VERSION"));

/// A token and when it stops being valid.
pub struct MskToken {
    /// base64url of the signed URL, unpadded.
    pub token: String,
    /// X-Amz-Date plus 900 seconds, in milliseconds since the Unix epoch.
    pub expires_ms: i64,
}

impl std::fmt::Debug for MskToken {
    // The token is a credential for 15 minutes: never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MskToken")
            .field("expires_ms", &self.expires_ms)
            .finish_non_exhaustive()
    }
}

/// The token for a cluster in `region`, signed at `time`, its User-Agent
/// parameter `user_agent`.
pub fn token(
    region: &str,
    credentials: &Credentials,
    time: SystemTime,
    user_agent: &str,
) -> Result<MskToken> {
    let url = format!("https://kafka.{region}.amazonaws.com/?Action=kafka-cluster%3AConnect");
    let signed = presign(&url, SERVICE, region, credentials, time)?;
    let url = format!("{signed}&User-Agent={}", crate::percent::encode(user_agent));
    // X-Amz-Date has whole seconds: so has the expiry.
    let signed_at = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_err(|_| Error::permanent("the system clock is before 1970"))?;
    let expires = Duration::from_secs(signed_at.as_secs()) + TOKEN_LIFETIME;
    Ok(MskToken {
        token: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(url),
        expires_ms: expires.as_millis() as i64,
    })
}

/// A token signed now with the default chain's credentials, from a thread
/// that cannot await (librdkafka's token hook).
pub fn token_now_blocking(region: &str) -> Result<MskToken> {
    let credentials = super::credentials_blocking(region)?;
    token(region, &credentials, SystemTime::now(), USER_AGENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_decodes_to_the_signed_url_with_the_user_agent_last() {
        let credentials = Credentials::new("AKIDEXAMPLE", "secret", None, None, "test");
        let time = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_750);
        let t = token("eu-west-1", &credentials, time, "walrelay/test").unwrap();
        assert_eq!(t.expires_ms, 1_700_000_900_000);
        assert!(!t.token.contains('='), "padding kept");
        let url = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&t.token)
            .unwrap();
        let url = String::from_utf8(url).unwrap();
        assert!(url.starts_with(
            "https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect&X-Amz-Algorithm="
        ), "{url}");
        assert!(url.ends_with("&User-Agent=walrelay%2Ftest"), "{url}");
        assert!(!format!("{t:?}").contains(&t.token));
    }
}
