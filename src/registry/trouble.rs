//! What can go wrong with a request to the registry or its token endpoint,
//! sorted by what walrelay does about it (`Serializer::refusal`).

/// What went wrong with a registry request. Only the answers that speak of
/// one schema or subject (`Incompatible`, `NotFound`, `Rejected`,
/// `NotLatest`) may be an
/// event's own fault (the poison policy); every other one would be the
/// same for every event, so the events wait or walrelay stops: a wrong URL
/// must not dead-letter the whole stream.
#[derive(Debug)]
pub enum Trouble {
    /// No answer, a 5xx or 429 (rate limited): hold the events and try again.
    Unreachable(String),
    /// 401/403: the credentials are refused.
    Refused(String),
    /// 409: the schema is incompatible with the subject's versions.
    Incompatible(String),
    /// 404 with a registry's error code for no such subject, version or
    /// schema (40401, 40402, 40403).
    NotFound(String),
    /// 422 with a registry's error code (42201: an invalid schema).
    Rejected(String),
    /// use.latest.version: the subject's latest version is not the schema
    /// walrelay writes by.
    NotLatest(String),
    /// An answer no schema registry gives: a 404 or 4xx without a
    /// registry's error code, a success that is not the JSON asked for.
    /// A URL that misses the API's path, or a proxy answering in its place.
    NotARegistry(String),
}

impl std::fmt::Display for Trouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trouble::Unreachable(m)
            | Trouble::Refused(m)
            | Trouble::Incompatible(m)
            | Trouble::NotFound(m)
            | Trouble::Rejected(m)
            | Trouble::NotLatest(m)
            | Trouble::NotARegistry(m) => f.write_str(m),
        }
    }
}
