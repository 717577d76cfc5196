//! Cyrus SASL, which librdkafka uses for Kerberos (GSSAPI) and for nothing
//! else: PLAIN, SCRAM and OAUTHBEARER are librdkafka's own
//! (`rd_kafka_sasl_select_provider`). Yet the first client a process makes
//! calls `sasl_client_init`, which loads every plugin in Cyrus's directory
//! (GSSAPI, GS2, DIGEST-MD5, NTLM, sasldb ...) and the libraries they link:
//! MIT Kerberos, Berkeley DB. In a walrelay that never logs in with Kerberos
//! that was about 1.4 MiB of resident memory, and code it never runs mapped in
//! its process (docs/benchmarks.md, issue 21). So a command that does not
//! log in with Kerberos points Cyrus at no directory before it makes any
//! client; one that does leaves Cyrus as it is (`SASL_PATH`, else its
//! built-in directory).
//!
//! The choice is the process's: Cyrus loads its plugins once, so it is made
//! in `main` from the command's `-X` properties, which every Kafka client of
//! a command shares (`--kafka-auth msk-iam` adds OAUTHBEARER, not Kerberos).

use rdkafka::config::ClientConfig;

/// Whether a command with these `-X` properties needs Cyrus's plugins: it
/// logs in with Kerberos (`login::is_kerberos`), or might: `-X` names reach
/// here as `KafkaArgs::properties` gives them, `sasl.mechanisms` as
/// `sasl.mechanism`, but a caller's own list may hold both, so either naming
/// GSSAPI is enough.
pub fn needs_plugins(properties: &[(String, String)]) -> bool {
    let mut config = ClientConfig::new();
    for (key, value) in properties {
        config.set(key, value);
    }
    let named_gssapi = ["sasl.mechanism", "sasl.mechanisms"].iter().any(|key| {
        config
            .get(key)
            .is_some_and(|m| m.eq_ignore_ascii_case("GSSAPI"))
    });
    super::login::is_kerberos(&config) || (super::login::is_sasl(&config) && named_gssapi)
}

/// Unless `properties` log in with Kerberos, keeps Cyrus from loading any
/// plugin. Call it before the first Kafka client is made.
#[cfg(feature = "gssapi")]
pub fn load_plugins_only_for_kerberos(properties: &[(String, String)]) {
    use std::os::raw::{c_char, c_int};

    #[link(name = "sasl2")]
    extern "C" {
        /// sasl/sasl.h: the plugin directory, used by the next
        /// `sasl_client_init`; Cyrus keeps a copy of `path`.
        fn sasl_set_path(path_type: c_int, path: *mut c_char) -> c_int;
    }
    const SASL_PATH_TYPE_PLUGIN: c_int = 0;
    const SASL_OK: c_int = 0;
    if needs_plugins(properties) {
        return;
    }
    // No directory, and none can be made there but by replacing the device:
    // Cyrus finds nothing to load, and its initialisation still succeeds.
    const NOWHERE: &std::ffi::CStr = c"/dev/null";
    // SAFETY: called before any Kafka client exists, so before Cyrus is
    // initialised; the path is a NUL-terminated string that Cyrus copies
    // and never writes to.
    let result = unsafe { sasl_set_path(SASL_PATH_TYPE_PLUGIN, NOWHERE.as_ptr().cast_mut()) };
    if result != SASL_OK {
        // Only memory is at stake: the plugins load as before.
        tracing::debug!(result, "Cyrus SASL kept its plugin directory");
    }
}

/// A build without Kerberos has no Cyrus SASL to configure.
#[cfg(not(feature = "gssapi"))]
pub fn load_plugins_only_for_kerberos(_: &[(String, String)]) {}

#[cfg(test)]
mod tests {
    use super::*;

    fn properties(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_a_kerberos_login_needs_cyrus_plugins() {
        assert!(!needs_plugins(&[]));
        assert!(!needs_plugins(&properties(&[("security.protocol", "SSL")])));
        for mechanism in ["PLAIN", "SCRAM-SHA-512", "OAUTHBEARER"] {
            assert!(
                !needs_plugins(&properties(&[
                    ("security.protocol", "SASL_SSL"),
                    ("sasl.mechanism", mechanism),
                ])),
                "{mechanism}"
            );
        }
        assert!(needs_plugins(&properties(&[
            ("security.protocol", "SASL_PLAINTEXT"),
            ("sasl.mechanisms", "GSSAPI"),
        ])));
        // librdkafka's default mechanism is GSSAPI.
        assert!(needs_plugins(&properties(&[(
            "security.protocol",
            "sasl_ssl"
        )])));
        // Both spellings given: either may be the one librdkafka keeps.
        assert!(needs_plugins(&properties(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "PLAIN"),
            ("sasl.mechanisms", "GSSAPI"),
        ])));
    }
}
