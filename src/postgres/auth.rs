//! How a Postgres connection logs in (`--pg-auth`): the password of
//! `--pg-url` (or `PGPASSWORD`), or an RDS/Aurora IAM token signed for the
//! host, port and user of each new connection, the replication connection
//! included. A token is valid 15 minutes and checked only at login, so a new
//! one is signed at every connect and never kept. It goes only over TLS:
//! `sslmode=disable` is refused, and `prefer` (the default) becomes
//! `require`, so a server without TLS is refused rather than sent the token
//! in clear.

use std::borrow::Cow;

use tokio_postgres::config::Host;

use super::tls::SslMode;
use super::PgTarget;
use crate::error::{Error, Result};

/// How each connection proves who it is.
#[derive(Clone, PartialEq, Eq)]
pub enum PgAuth {
    /// The password in the connection settings, if any.
    Password,
    /// An RDS IAM token for the AWS region.
    RdsIam { region: String },
}

impl std::fmt::Debug for PgAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgAuth::Password => f.write_str("password"),
            PgAuth::RdsIam { region } => write!(f, "rds-iam ({region})"),
        }
    }
}

/// The region `--pg-auth rds-iam` signs for, or why it cannot.
pub fn aws_region(flag: Option<&str>) -> Result<String> {
    #[cfg(feature = "aws")]
    {
        crate::aws::require_region(flag, "--pg-auth rds-iam")
    }
    #[cfg(not(feature = "aws"))]
    {
        let _ = flag;
        Err(Error::permanent(
            "--pg-auth rds-iam needs the AWS SDK, which this walrelay was built without: \
             build with the default features (cargo build --release), or use --pg-auth password",
        ))
    }
}

impl PgTarget {
    /// The same target logging in with RDS IAM tokens for `region`. The
    /// token names one host, so `--pg-url` must name exactly one, over TCP,
    /// with no password of its own.
    pub fn with_rds_iam(mut self, region: String) -> Result<Self> {
        let hosts = self.config.get_hosts();
        match hosts {
            [Host::Tcp(_)] => {}
            [Host::Unix(_)] => {
                return Err(Error::permanent(
                    "--pg-auth rds-iam needs a TCP host in --pg-url (the RDS or Aurora \
                     endpoint), not a Unix socket",
                ))
            }
            _ => {
                return Err(Error::permanent(format!(
                    "--pg-auth rds-iam signs its token for one host, and --pg-url names {}: \
                     give the one endpoint (Aurora's cluster endpoint follows failovers)",
                    hosts.len()
                )))
            }
        }
        if self.config.get_ports().len() > 1 {
            return Err(Error::permanent(
                "--pg-auth rds-iam signs its token for one port: give --pg-url one port",
            ));
        }
        if self.config.get_password().is_some() {
            return Err(Error::permanent(
                "--pg-url has a password, but --pg-auth rds-iam logs in with a token signed \
                 for each connection: take the password out of --pg-url",
            ));
        }
        if self.tls.mode() == SslMode::Disable {
            return Err(Error::permanent(
                "--pg-auth rds-iam sends its token as the password, which must not travel in \
                 clear, and --pg-url has sslmode=disable: use sslmode=verify-full with \
                 sslrootcert= the RDS CA bundle (or at least sslmode=require)",
            ));
        }
        self.tls = self.tls.at_least_required()?;
        self.config
            .ssl_mode(tokio_postgres::config::SslMode::Require);
        self.auth = PgAuth::RdsIam { region };
        Ok(self)
    }

    /// True when a token is the password: it must never go in clear.
    pub fn uses_token(&self) -> bool {
        self.auth != PgAuth::Password
    }
}

/// The connection settings for one login: as given, or with a token signed
/// now for the target's host, port and user.
pub async fn login_config(target: &PgTarget) -> Result<Cow<'_, tokio_postgres::Config>> {
    let PgAuth::RdsIam { region } = &target.auth else {
        return Ok(Cow::Borrowed(&target.config));
    };
    let config = &target.config;
    let Some(Host::Tcp(host)) = config.get_hosts().first() else {
        return Err(Error::permanent(
            "--pg-auth rds-iam needs a TCP host in --pg-url",
        ));
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let user = config.get_user().ok_or_else(|| {
        Error::permanent(
            "--pg-url names no user, and --pg-auth rds-iam signs its token for one: \
             add user=NAME (or postgres://NAME@host/db)",
        )
    })?;
    let token = sign(host, port, user, region).await?;
    let mut config = config.clone();
    config.password(token);
    Ok(Cow::Owned(config))
}

#[cfg(feature = "aws")]
async fn sign(host: &str, port: u16, user: &str, region: &str) -> Result<String> {
    crate::aws::rds::token_now(host, port, user, region).await
}

#[cfg(not(feature = "aws"))]
async fn sign(_: &str, _: u16, _: &str, _: &str) -> Result<String> {
    Err(Error::permanent(
        "this walrelay was built without the aws feature",
    ))
}

/// What a refused IAM login needs, after the server's own words: RDS says
/// only "PAM authentication failed".
pub fn refused_login_fix(target: &PgTarget, sqlstate: &str) -> Option<String> {
    let PgAuth::RdsIam { region } = &target.auth else {
        return None;
    };
    if !sqlstate.starts_with("28") {
        return None;
    }
    let user = target.config.get_user().unwrap_or("USER");
    Some(format!(
        "with --pg-auth rds-iam, check that the database user has the rds_iam role (GRANT \
         rds_iam TO {user};), that the IAM identity walrelay runs as may rds-db:connect to \
         arn:aws:rds-db:{region}:ACCOUNT:dbuser:RESOURCE-ID/{user}, that the instance has IAM \
         database authentication on, and that {region} is its region (--aws-region)"
    ))
}

/// The error for a server that offers no TLS to a login with a token.
pub fn no_tls_for_token(target: &PgTarget) -> Error {
    Error::permanent(format!(
        "Postgres at {} does not accept TLS, and --pg-auth rds-iam sends its token only over \
         TLS: turn on ssl on the server (RDS and Aurora always offer it), or use --pg-auth \
         password",
        super::describe_target(&target.config)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iam(url: &str) -> Result<PgTarget> {
        PgTarget::parse(url)?.with_rds_iam("eu-west-1".into())
    }

    #[test]
    fn an_iam_login_never_goes_without_tls() {
        let err = iam("postgres://app@db.example/shop?sslmode=disable")
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("must not travel in clear"),
            "{err}"
        );
        // prefer, the default, falls back to plain text: not with a token.
        let target = iam("postgres://app@db.example/shop").unwrap();
        assert_eq!(target.tls.mode(), SslMode::Require);
        let target = iam("postgres://app@db.example/shop?sslmode=verify-full").unwrap();
        assert_eq!(target.tls.mode(), SslMode::VerifyFull);
        assert!(target.uses_token());
    }

    #[test]
    fn an_iam_login_names_one_tcp_host_and_no_password() {
        for (url, says) in [
            ("host=a,b user=app dbname=shop", "names 2"),
            ("host=/var/run/postgresql user=app", "Unix socket"),
            ("postgres://app:pw@db.example/shop", "take the password out"),
        ] {
            let err = iam(url).err().unwrap().to_string();
            assert!(err.contains(says), "{url}: {err}");
        }
    }

    #[test]
    fn the_iam_fix_names_the_role_and_the_resource() {
        let target = iam("postgres://app@db.example/shop").unwrap();
        let fix = refused_login_fix(&target, "28000").unwrap();
        assert!(
            fix.contains("GRANT rds_iam TO app") && fix.contains("dbuser"),
            "{fix}"
        );
        assert!(refused_login_fix(&target, "42501").is_none());
        let plain = PgTarget::parse("postgres://app@db.example/shop").unwrap();
        assert!(refused_login_fix(&plain, "28000").is_none());
    }
}
