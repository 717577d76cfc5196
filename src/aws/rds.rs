//! The password of an RDS or Aurora IAM login: a SigV4-presigned
//! `rds-db:connect` request for one host, port and database user, without
//! its scheme (`HOST:PORT/?Action=connect&DBUser=USER&X-Amz-…`), valid for
//! 15 minutes. It is what botocore's `generate_db_auth_token` and the SDKs'
//! RDS signers make; tests/aws_tokens.rs compares the two byte for byte.
//! A token is signed for each new connection: the server checks it only at
//! login, so a connection outlives its token.

use std::time::SystemTime;

use super::{presign, Credentials};
use crate::error::Result;

/// The service name RDS IAM tokens are signed for.
const SERVICE: &str = "rds-db";

/// The token for `user` at `host:port` in `region`, signed at `time`.
pub fn token(
    host: &str,
    port: u16,
    user: &str,
    region: &str,
    credentials: &Credentials,
    time: SystemTime,
) -> Result<String> {
    let url = format!(
        "https://{host}:{port}/?Action=connect&DBUser={}",
        crate::percent::encode(user)
    );
    let signed = presign(&url, SERVICE, region, credentials, time)?;
    Ok(signed
        .strip_prefix("https://")
        .unwrap_or(&signed)
        .to_string())
}

/// A token signed now with the default chain's credentials.
pub async fn token_now(host: &str, port: u16, user: &str, region: &str) -> Result<String> {
    let credentials = super::credentials(region).await?;
    token(host, port, user, region, &credentials, SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_the_presigned_url_without_its_scheme() {
        let credentials = Credentials::new("AKIDEXAMPLE", "secret", None, None, "test");
        let time = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
        let token = token("db.example", 5432, "app", "eu-west-1", &credentials, time).unwrap();
        assert!(
            token.starts_with("db.example:5432/?Action=connect&DBUser=app&X-Amz-Algorithm="),
            "{token}"
        );
        assert!(
            token.contains("%2Feu-west-1%2Frds-db%2Faws4_request"),
            "{token}"
        );
        assert!(token.contains("&X-Amz-Expires=900&"), "{token}");
    }
}
