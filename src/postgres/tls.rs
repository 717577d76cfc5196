//! TLS to Postgres, with libpq's `sslmode` values. tokio-postgres knows only
//! disable, prefer and require, so walrelay takes `sslmode` and `sslrootcert`
//! out of the connection string itself and applies them to both its
//! connections: the SQL one (postgres-openssl) and the replication one.

use std::path::PathBuf;

use openssl::ssl::{ConnectConfiguration, SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::store::X509StoreBuilder;
use postgres_openssl::MakeTlsConnector;

use crate::error::{Error, Kind, Result};

/// Ordered from weakest to strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SslMode {
    Disable,
    /// TLS when the server offers it, unverified; plain otherwise.
    Prefer,
    /// TLS or nothing; the certificate is checked only against an sslrootcert if one is given.
    Require,
    /// TLS, and the server certificate must chain to the root certificate.
    VerifyCa,
    /// As verify-ca, and the certificate must name the host.
    VerifyFull,
}

/// The TLS part of a connection string.
#[derive(Clone)]
pub struct Tls {
    mode: SslMode,
    connector: Option<SslConnector>,
    root_cert: Option<PathBuf>,
}

impl Tls {
    pub fn required(&self) -> bool {
        self.mode >= SslMode::Require
    }

    pub fn mode(&self) -> SslMode {
        self.mode
    }

    /// At least `require`: for a login whose password must not travel in
    /// clear (an IAM token). `prefer`, the default, becomes `require`.
    pub fn at_least_required(&self) -> Result<Self> {
        if self.required() {
            return Ok(self.clone());
        }
        Tls::build(SslMode::Require, self.root_cert.clone())
    }

    fn verify_hostname(&self) -> bool {
        self.mode == SslMode::VerifyFull
    }

    /// The handshake settings for one connection to `host`.
    pub fn configure(&self) -> Result<Option<ConnectConfiguration>> {
        let Some(connector) = &self.connector else {
            return Ok(None);
        };
        let mut config = connector
            .configure()
            .map_err(|e| Error::permanent("cannot set up TLS").with_source(e))?;
        config.set_verify_hostname(self.verify_hostname());
        Ok(Some(config))
    }

    /// The TLS connector for tokio-postgres's SQL connection.
    pub fn make_connector(&self) -> Option<MakeTlsConnector> {
        let connector = self.connector.clone()?;
        let mut make = MakeTlsConnector::new(connector);
        let verify_hostname = self.verify_hostname();
        make.set_callback(move |config, _host| {
            config.set_verify_hostname(verify_hostname);
            Ok(())
        });
        Some(make)
    }

    fn build(mode: SslMode, root_cert: Option<PathBuf>) -> Result<Self> {
        let connector = if mode == SslMode::Disable {
            None
        } else {
            let fail = |e: openssl::error::ErrorStack| {
                Error::permanent("cannot set up TLS for Postgres").with_source(e)
            };
            // libpq's rules: prefer and require check nothing, unless a root
            // certificate was named for require (then it acts as verify-ca).
            let verify = match mode {
                SslMode::Prefer => false,
                SslMode::Require => root_cert.is_some(),
                _ => true,
            };
            let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(fail)?;
            // SslConnector::builder has loaded the system's trust store,
            // which only verify-ca and verify-full without sslrootcert use.
            // As in libpq, a named root certificate is the only one
            // trusted; and a connection that checks nothing should not keep
            // a parsed store resident for the process's life.
            if root_cert.is_some() || !verify {
                builder.set_cert_store(X509StoreBuilder::new().map_err(fail)?.build());
            }
            if let Some(path) = &root_cert {
                builder.set_ca_file(path).map_err(|e| {
                    Error::permanent(format!(
                        "cannot read sslrootcert {}: point it at the PEM file of the CA that signed the server's certificate",
                        path.display()
                    ))
                    .with_source(e)
                })?;
            }
            builder.set_verify(if verify {
                SslVerifyMode::PEER
            } else {
                SslVerifyMode::NONE
            });
            Some(builder.build())
        };
        Ok(Tls {
            mode,
            connector,
            root_cert,
        })
    }
}

/// A handshake that failed over the certificate is a configuration problem
/// (wrong CA, a name the certificate lacks); others may be a dropped connection.
pub fn handshake_error_kind(error_text: &str) -> Kind {
    if error_text.contains("certificate") {
        Kind::Permanent
    } else {
        Kind::Transient
    }
}

/// Takes `sslmode` and `sslrootcert` out of a URL or key=value string.
/// Returns the rest, for tokio-postgres, and the TLS settings.
pub fn split_tls_options(conn: &str) -> Result<(String, Tls)> {
    let mut mode = None;
    let mut root_cert = None;
    let mut take = |key: &str, value: String| -> bool {
        match key {
            "sslmode" => {
                mode = Some(value);
                true
            }
            "sslrootcert" => {
                root_cert = Some(value);
                true
            }
            _ => false,
        }
    };
    let rest = if conn.starts_with("postgres://") || conn.starts_with("postgresql://") {
        match conn.split_once('?') {
            None => conn.to_string(),
            Some((base, query)) => {
                let kept: Vec<&str> = query
                    .split('&')
                    .filter(|pair| {
                        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                        !take(k, crate::percent::decode(v))
                    })
                    .collect();
                if kept.is_empty() {
                    base.to_string()
                } else {
                    format!("{base}?{}", kept.join("&"))
                }
            }
        }
    } else {
        conn.split_whitespace()
            .filter(|token| match token.split_once('=') {
                Some((k, v)) => !take(k.trim(), v.trim_matches('\'').to_string()),
                None => true,
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    // libpq 16's sslrootcert=system: the system's trust store, and nothing
    // weaker than verify-full, as anyone can get a certificate the system
    // trusts for a host they control. The exact word: `./system` is a file.
    let system_roots = root_cert.as_deref() == Some("system");
    let root_cert = root_cert.filter(|_| !system_roots).map(PathBuf::from);
    if system_roots {
        match mode.as_deref() {
            None | Some("verify-full") => mode = Some("verify-full".into()),
            Some(weaker) => {
                return Err(Error::permanent(format!(
                    "--pg-url has sslrootcert=system with sslmode={weaker}: a certificate the \
                     system trusts proves nothing without the host's name in it; use \
                     sslmode=verify-full (libpq refuses the same), or name a CA file in \
                     sslrootcert (./system for a file called system)"
                )))
            }
        }
    }
    let mode = match mode.as_deref() {
        None | Some("prefer") => SslMode::Prefer,
        Some("disable") => SslMode::Disable,
        Some("allow") => SslMode::Prefer,
        Some("require") => SslMode::Require,
        Some("verify-ca") => SslMode::VerifyCa,
        Some("verify-full") => SslMode::VerifyFull,
        Some(other) => {
            return Err(Error::permanent(format!(
            "--pg-url has sslmode={other}; use disable, prefer, require, verify-ca or verify-full"
        )))
        }
    };
    // For the same reason, verify-ca checks nothing against the system's
    // store. libpq would look for ~/.postgresql/root.crt and fail without it.
    if mode == SslMode::VerifyCa && root_cert.is_none() {
        return Err(Error::permanent(
            "--pg-url has sslmode=verify-ca without sslrootcert: against the system's trust \
             store that accepts a certificate issued for any host; name the CA that signed the \
             server's certificate in sslrootcert, or use sslmode=verify-full",
        ));
    }
    Ok((rest, Tls::build(mode, root_cert)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sslmode_is_taken_out_of_a_url() {
        let (rest, tls) =
            split_tls_options("postgres://u:p@db:5432/app?application_name=x&sslmode=disable")
                .unwrap();
        assert_eq!(rest, "postgres://u:p@db:5432/app?application_name=x");
        assert_eq!(tls.mode(), SslMode::Disable);
    }

    #[test]
    fn an_unreadable_root_certificate_is_named() {
        let err = split_tls_options(
            "postgres://u@db/app?sslmode=verify-full&sslrootcert=%2Fno%2Fsuch%2Fca.pem",
        )
        .err()
        .unwrap();
        assert!(
            err.to_string()
                .contains("cannot read sslrootcert /no/such/ca.pem"),
            "{err}"
        );
    }

    #[test]
    fn key_value_strings_keep_their_other_settings() {
        let (rest, tls) = split_tls_options("host=db user=u sslmode='require' dbname=app").unwrap();
        assert_eq!(rest, "host=db user=u dbname=app");
        assert_eq!(tls.mode(), SslMode::Require);
        assert!(tls.required());
    }

    fn trusted_certificates(tls: &Tls) -> usize {
        let connector = tls.connector.as_ref().expect("a TLS mode");
        connector.context().cert_store().all_certificates().len()
    }

    #[test]
    fn a_connection_that_checks_nothing_loads_no_trust_store() {
        for url in [
            "postgres://u@db/app",
            "postgres://u@db/app?sslmode=prefer",
            "postgres://u@db/app?sslmode=require",
        ] {
            let (_, tls) = split_tls_options(url).unwrap();
            assert_eq!(trusted_certificates(&tls), 0, "{url}");
        }
        // The check can fail: where OpenSSL has a default bundle,
        // verify-full loads it.
        let openssl_dir = openssl::version::dir(); // OPENSSLDIR: "/usr/lib/ssl"
        let default_file = std::env::var_os("SSL_CERT_FILE")
            .map(PathBuf::from)
            .or_else(|| Some(PathBuf::from(openssl_dir.split('"').nth(1)?).join("cert.pem")));
        if default_file.is_some_and(|file| file.exists()) {
            let (_, tls) = split_tls_options("postgres://u@db/app?sslmode=verify-full").unwrap();
            assert!(trusted_certificates(&tls) > 0);
        }
    }

    #[test]
    fn verify_ca_needs_a_named_root_certificate() {
        let err = split_tls_options("postgres://u@db/app?sslmode=verify-ca")
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("verify-ca without sslrootcert")
                && err.to_string().contains("or use sslmode=verify-full"),
            "{err}"
        );
    }

    #[test]
    fn sslrootcert_system_means_verify_full_against_the_system_store() {
        let (rest, tls) = split_tls_options("postgres://u@db/app?sslrootcert=system").unwrap();
        assert_eq!(rest, "postgres://u@db/app");
        assert_eq!(tls.mode(), SslMode::VerifyFull);
        assert_eq!(tls.root_cert, None);
        let err = split_tls_options("postgres://u@db/app?sslrootcert=system&sslmode=verify-ca")
            .err()
            .unwrap();
        assert!(
            err.to_string()
                .contains("sslrootcert=system with sslmode=verify-ca")
                && err.to_string().contains("use sslmode=verify-full"),
            "{err}"
        );
        // Only the exact word: anything else is a file's name.
        let err = split_tls_options("postgres://u@db/app?sslrootcert=system%2F")
            .err()
            .unwrap();
        assert!(
            err.to_string().contains("cannot read sslrootcert system/"),
            "{err}"
        );
    }

    #[test]
    fn the_default_is_prefer_and_unknown_modes_are_refused() {
        assert_eq!(
            split_tls_options("postgres://u@db/app").unwrap().1.mode(),
            SslMode::Prefer
        );
        let err = split_tls_options("postgres://u@db/app?sslmode=always")
            .err()
            .unwrap();
        assert!(err.to_string().contains("verify-full"));
    }
}
