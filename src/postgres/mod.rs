//! Everything that talks to Postgres: start-up checks and slot management over
//! an ordinary SQL connection, and the replication stream with its pgoutput codec.

pub mod auth;
pub mod failover;
pub mod guard;
pub mod lsn;
pub mod names;
pub mod pgoutput;
pub mod placement;
pub mod publication;
pub mod replication;
pub mod setup;
pub mod slot;
pub mod snapshot_lock;
pub mod socket;
pub mod standby;
pub mod state;
pub mod tls;
pub mod wire;

use tokio_postgres::config::{Host, SslMode as PgSslMode};

use crate::error::{Error, Kind, Result};
pub use auth::PgAuth;
use tls::{split_tls_options, SslMode, Tls};

/// TCP settings that notice a dead peer; the replication stream also has an
/// application-level read timeout, since a stopped server process keeps
/// its socket acknowledged by the kernel.
pub mod dead_peer {
    use std::time::Duration;

    pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
    pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
    pub const KEEPALIVE_RETRIES: u32 = 3;
    /// Unacknowledged data this old drops the connection.
    pub const TCP_USER_TIMEOUT: Duration = Duration::from_secs(60);
}

/// Where and how to reach Postgres: the parsed connection string and its TLS settings.
#[derive(Clone)]
pub struct PgTarget {
    pub config: tokio_postgres::Config,
    pub tls: Tls,
    /// How each connection logs in (`--pg-auth`).
    pub auth: PgAuth,
}

impl std::fmt::Debug for PgTarget {
    // Never the password: only what logs show.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgTarget")
            .field("target", &describe_target(&self.config))
            .field("sslmode", &self.tls.mode())
            .field("auth", &self.auth)
            .finish()
    }
}

impl PgTarget {
    /// Parses `--pg-url`. tokio-postgres's messages do not echo the string,
    /// so no password leaks into the error.
    pub fn parse(conn: &str) -> Result<Self> {
        // tokio-postgres reads any other scheme as a key=value string and
        // says only "unexpected EOF".
        if let Some((scheme, _)) = conn.trim_start().split_once("://") {
            if scheme != "postgres" && scheme != "postgresql" {
                let shown: String = scheme.chars().take(20).collect();
                return Err(Error::permanent(format!(
                    "--pg-url starts with {shown:?}://; the scheme is postgres:// or \
                     postgresql:// (example: postgres://walrelay:secret@localhost:5432/app)"
                )));
            }
        }
        let (rest, tls) = split_tls_options(conn)?;
        let mut config: tokio_postgres::Config = rest.parse().map_err(|e| {
            Error::permanent(
                "--pg-url is not a valid Postgres URL or key=value string \
                 (example: postgres://walrelay:secret@localhost:5432/app)",
            )
            .with_source(e)
        })?;
        // A host that vanishes without a reset is otherwise left to the
        // kernel's retransmission limit, about 15 minutes. The URL's own
        // settings win.
        if !rest.contains("keepalives_idle") {
            config.keepalives_idle(dead_peer::KEEPALIVE_IDLE);
        }
        if !rest.contains("keepalives_interval") {
            config.keepalives_interval(dead_peer::KEEPALIVE_INTERVAL);
        }
        if !rest.contains("keepalives_retries") {
            config.keepalives_retries(dead_peer::KEEPALIVE_RETRIES);
        }
        if !rest.contains("tcp_user_timeout") {
            config.tcp_user_timeout(dead_peer::TCP_USER_TIMEOUT);
        }
        config.ssl_mode(match tls.mode() {
            SslMode::Disable => PgSslMode::Disable,
            SslMode::Prefer => PgSslMode::Prefer,
            _ => PgSslMode::Require,
        });
        Ok(PgTarget {
            config,
            tls,
            auth: PgAuth::Password,
        })
    }
}

/// Which server errors are worth a retry. Connection problems (class 08),
/// resource shortages (53), shutdowns (57) and system errors (58) pass; a
/// slot that another process holds (55006) makes this walrelay a standby;
/// the rest need a person.
pub fn classify_sqlstate(code: &str) -> Kind {
    match code.get(..2) {
        Some("08" | "53" | "57" | "58") => Kind::Transient,
        _ if code == "55006" => Kind::Standby,
        _ => Kind::Permanent,
    }
}

/// Maps a tokio-postgres error: server errors by their SQLSTATE, a
/// certificate that does not verify as permanent, the rest (I/O, a closed
/// connection) as transient.
pub fn sql_error(context: impl Into<String>, e: tokio_postgres::Error) -> Error {
    let kind = match e.as_db_error() {
        Some(db) => classify_sqlstate(db.code().code()),
        None => {
            // The certificate's complaint is in the source chain, not the message.
            let mut text = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(c) = cause {
                text.push_str(&format!(": {c}"));
                cause = c.source();
            }
            if text.starts_with("error performing TLS handshake") {
                tls::handshake_error_kind(&text)
            } else {
                Kind::Transient
            }
        }
    };
    Error::new(kind, context).with_source(e)
}

/// How to give `role` the REPLICATION attribute: the fix `run` names when
/// the server refuses its replication connection, and `check` prints.
pub fn replication_grant(role: &str) -> String {
    let role = names::quote_ident(role);
    format!("as a superuser: ALTER ROLE {role} REPLICATION; (Amazon RDS: GRANT rds_replication TO {role};)")
}

/// The server's version as a number, e.g. 170002 for 17.2.
pub async fn server_version(client: &tokio_postgres::Client) -> Result<i32> {
    let row = client
        .query_one("SELECT current_setting('server_version_num')::int", &[])
        .await
        .map_err(|e| sql_error("cannot read server_version_num", e))?;
    Ok(row.get(0))
}

/// `host:port/db as user`, for messages and logs. Never includes the password.
pub fn describe_target(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        Some(Host::Unix(dir)) => dir.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!(
        "{host}:{port}/{} as {}",
        config.get_dbname().unwrap_or("(default db)"),
        config.get_user().unwrap_or("(no user)")
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_slot_in_use_is_retried_but_a_bad_password_is_not() {
        assert_eq!(classify_sqlstate("55006"), Kind::Standby);
        assert_eq!(classify_sqlstate("57P01"), Kind::Transient);
        assert_eq!(classify_sqlstate("28P01"), Kind::Permanent);
        assert_eq!(classify_sqlstate("42P01"), Kind::Permanent);
    }

    #[test]
    fn both_connections_watch_for_a_dead_peer_unless_the_url_says_otherwise() {
        let target = PgTarget::parse("postgres://app@db/shop").unwrap();
        assert!(target.config.get_keepalives());
        assert_eq!(
            target.config.get_keepalives_idle(),
            dead_peer::KEEPALIVE_IDLE
        );
        assert_eq!(
            target.config.get_tcp_user_timeout(),
            Some(&dead_peer::TCP_USER_TIMEOUT)
        );
        // tokio-postgres reads tcp_user_timeout in seconds (libpq: milliseconds).
        let own =
            PgTarget::parse("host=db user=app keepalives_idle=5 tcp_user_timeout=20").unwrap();
        assert_eq!(own.config.get_keepalives_idle(), Duration::from_secs(5));
        assert_eq!(
            own.config.get_tcp_user_timeout(),
            Some(&Duration::from_secs(20))
        );
    }

    #[test]
    fn target_description_never_shows_the_password() {
        let config: tokio_postgres::Config = "postgres://app:s3cret@db.example:6543/shop"
            .parse()
            .unwrap();
        let text = describe_target(&config);
        assert_eq!(text, "db.example:6543/shop as app");
        assert!(!text.contains("s3cret"));
    }
}
