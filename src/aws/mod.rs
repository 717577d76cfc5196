//! AWS identity for walrelay's connections: the AWS SDK's default credential
//! chain (environment, shared profile, web identity as on EKS, ECS, EC2's
//! IMDSv2), and the SigV4-presigned tokens built from it, the password of an
//! RDS or Aurora IAM login (`rds.rs`) and the OAUTHBEARER token of an MSK
//! IAM login (`msk.rs`).
//!
//! The credentials are fetched on a small runtime of their own, so that
//! librdkafka's token hook, which runs on librdkafka's threads (or inside a
//! task that polls a consumer), can wait for them without blocking or
//! re-entering the relay's runtime. They are cached until five minutes before
//! they expire. Nothing here formats a secret: `Credentials`' Debug hides the
//! secret key and session token, and the errors name only the source.

pub mod msk;
pub mod rds;

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::provider_config::ProviderConfig;
use aws_config::Region;
use aws_credential_types::provider::ProvideCredentials;
pub use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SignatureLocation};
use aws_sigv4::http_request::{SessionTokenMode, SigningSettings};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

use crate::error::{Error, Result};

/// How long a presigned token is valid: 15 minutes, the most RDS accepts and
/// what MSK's signer libraries use.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(900);

/// Credentials this close to their expiry are fetched again.
const REFRESH_MARGIN: Duration = Duration::from_secs(300);

/// The region a token is signed for: `--aws-region`, else `AWS_REGION`, else
/// `AWS_DEFAULT_REGION`. None when none is set.
pub fn region(flag: Option<&str>) -> Option<String> {
    let set = |r: String| Some(r.trim().to_string()).filter(|r| !r.is_empty());
    flag.and_then(|r| set(r.to_string()))
        .or_else(|| std::env::var("AWS_REGION").ok().and_then(set))
        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok().and_then(set))
}

/// The region for `what` (a flag that needs it), or the error that says how to give one.
pub fn require_region(flag: Option<&str>, what: &str) -> Result<String> {
    region(flag).ok_or_else(|| {
        Error::permanent(format!(
            "{what} signs its token for an AWS region, and none is set: set AWS_REGION \
             (or --aws-region), e.g. AWS_REGION=eu-west-1"
        ))
    })
}

/// The credential chain, built on first use for the first region asked (a
/// process signs for one region: `--aws-region`).
struct Chain {
    provider: DefaultCredentialsChain,
    cached: Mutex<Option<Credentials>>,
}

static CHAIN: tokio::sync::OnceCell<Chain> = tokio::sync::OnceCell::const_new();

/// The runtime credentials are fetched on: one worker, for the process.
fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> =
        OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("walrelay-aws")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::transient(format!("cannot start the AWS credentials runtime: {e}")))
}

async fn fetch(region: String) -> Result<Credentials> {
    let chain = CHAIN
        .get_or_init(|| async {
            let http = aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https();
            let config = ProviderConfig::default()
                .with_http_client(http)
                .with_region(Some(Region::new(region.clone())));
            Chain {
                provider: DefaultCredentialsChain::builder()
                    .region(Region::new(region))
                    .configure(config)
                    .build()
                    .await,
                cached: Mutex::new(None),
            }
        })
        .await;
    let fresh = |c: &Credentials| {
        c.expiry()
            .is_none_or(|at| at > SystemTime::now() + REFRESH_MARGIN)
    };
    if let Some(c) = chain
        .cached
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .filter(|c| fresh(c))
    {
        return Ok(c.clone());
    }
    let credentials = chain.provider.provide_credentials().await.map_err(|e| {
        // The SDK's message names the providers tried and why each failed,
        // never a key.
        Error::transient(
            "no AWS credentials: walrelay looks in AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, \
             the shared profile (AWS_PROFILE), web identity (AWS_WEB_IDENTITY_TOKEN_FILE with \
             AWS_ROLE_ARN, as on EKS), the ECS container credentials and EC2's instance \
             metadata (IMDSv2)",
        )
        .with_source(e)
    })?;
    *chain.cached.lock().unwrap_or_else(|e| e.into_inner()) = Some(credentials.clone());
    Ok(credentials)
}

/// Credentials from the default chain, for `region`.
pub async fn credentials(region: &str) -> Result<Credentials> {
    runtime()?
        .spawn(fetch(region.to_string()))
        .await
        .map_err(|e| Error::transient(format!("the AWS credentials task failed: {e}")))?
}

/// The same from a thread that must not await: a thread of its own waits,
/// so it is safe on librdkafka's threads and inside a runtime alike.
pub fn credentials_blocking(region: &str) -> Result<Credentials> {
    let runtime = runtime()?;
    let region = region.to_string();
    std::thread::scope(|scope| {
        scope
            .spawn(|| runtime.block_on(fetch(region)))
            .join()
            .unwrap_or_else(|_| Err(Error::transient("the AWS credentials thread panicked")))
    })
}

/// A GET of `url` presigned with SigV4 in its query (`X-Amz-*` parameters),
/// for `service` in `region` at `time`, valid for `TOKEN_LIFETIME`. The
/// session token, if any, is signed too, as botocore and the SDKs do.
pub fn presign(
    url: &str,
    service: &str,
    region: &str,
    credentials: &Credentials,
    time: SystemTime,
) -> Result<String> {
    let failed = |e: &dyn std::fmt::Display| {
        Error::permanent(format!("cannot sign the {service} token: {e}"))
    };
    let mut settings = SigningSettings::default();
    settings.signature_location = SignatureLocation::QueryParams;
    settings.expires_in = Some(TOKEN_LIFETIME);
    settings.session_token_mode = SessionTokenMode::Include;
    let identity: Identity = credentials.clone().into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name(service)
        .time(time)
        .settings(settings)
        .build()
        .map_err(|e| failed(&e))?
        .into();
    let request = SignableRequest::new("GET", url, std::iter::empty(), SignableBody::Bytes(&[]))
        .map_err(|e| failed(&e))?;
    let (instructions, _) = sign(request, &params).map_err(|e| failed(&e))?.into_parts();
    let mut request = http::Request::builder()
        .method("GET")
        .uri(url)
        .body(())
        .map_err(|e| failed(&e))?;
    instructions.apply_to_request_http1x(&mut request);
    Ok(signature_last(&request.uri().to_string()))
}

/// The same URL with `X-Amz-Signature` moved to the end, where botocore (and
/// so `aws rds generate-db-auth-token` and MSK's signer) puts it; aws-sigv4
/// puts a session token after it. Order does not change the signature, but
/// a token that is AWS's byte for byte is one less thing to doubt.
fn signature_last(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_string();
    };
    let (signature, mut rest): (Vec<&str>, Vec<&str>) = query
        .split('&')
        .partition(|pair| pair.starts_with("X-Amz-Signature="));
    rest.extend(signature);
    format!("{base}?{}", rest.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_flag_wins_and_an_empty_one_is_not_set() {
        assert_eq!(region(Some(" eu-west-1 ")).as_deref(), Some("eu-west-1"));
        // An empty flag (WALRELAY_AWS_REGION="") leaves it to the environment.
        assert_eq!(region(Some(" ")), region(None));
    }

    #[test]
    fn credentials_debug_shows_no_secret() {
        let c = Credentials::new("AKIDEXAMPLE", "s3cr3t-key", Some("tok3n".into()), None, "t");
        let text = format!("{c:?}");
        assert!(
            !text.contains("s3cr3t-key") && !text.contains("tok3n"),
            "{text}"
        );
    }
}
