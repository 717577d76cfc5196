//! Where walrelay's state table is read and written: the one place that
//! decides. On a primary, that is the server `--pg-url` names. A standby is
//! read-only, so there it is the primary `--pg-primary-url` names; the rows
//! come back to the standby through replication, and survive its promotion.
//!
//! Reads go where the writes go, so that a start reads what it has just
//! written rather than a replica a little behind it. Every write of
//! [`StateTable`](super::StateTable) takes a [`StateClient`], which only
//! [`StateRoute::client`] makes, so no write can reach a standby by mistake.
//! Without `--pg-primary-url` on a standby walrelay stops: without its
//! memory a lost slot would look like a first start.
//!
//! The route is decided at each use, so a standby that is promoted while
//! walrelay runs gets the writes from then on.

use std::ops::Deref;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio_postgres::Client;
use tracing::info;

use crate::error::{Error, Result};
use crate::postgres::names::TableName;
use crate::postgres::standby::in_recovery;
use crate::postgres::{describe_target, setup, sql_error, PgTarget};

/// A connection on which the state table may be read and written.
pub struct StateClient<'a>(Side<'a>);

enum Side<'a> {
    /// The server `--pg-url` names, a primary.
    Here(&'a Client),
    /// The primary of the standby `--pg-url` names.
    Primary(Arc<Client>),
}

impl StateClient<'_> {
    /// The primary's connection, when `--pg-url` names a standby.
    pub fn primary(&self) -> Option<&Client> {
        match &self.0 {
            Side::Here(_) => None,
            Side::Primary(client) => Some(client),
        }
    }
}

impl Deref for StateClient<'_> {
    type Target = Client;

    fn deref(&self) -> &Client {
        match &self.0 {
            Side::Here(client) => client,
            Side::Primary(client) => client,
        }
    }
}

/// Picks the server for the state table, keeping a connection to the
/// primary between uses.
pub struct StateRoute {
    /// `--state-table`, for messages.
    table: TableName,
    /// `--pg-primary-url`.
    primary: Option<PgTarget>,
    connected: Mutex<Option<Arc<Client>>>,
}

impl StateRoute {
    pub fn new(table: TableName, primary: Option<PgTarget>) -> Self {
        StateRoute {
            table,
            primary,
            connected: Mutex::new(None),
        }
    }

    /// The connection for the state table, given `here`, one to the server
    /// `--pg-url` names: `here` while that server is a primary; the
    /// primary's while it is a standby.
    pub async fn client<'a>(&self, here: &'a Client) -> Result<StateClient<'a>> {
        if !in_recovery(here).await? {
            if self.lock().take().is_some() {
                said_promoted();
            }
            return Ok(StateClient(Side::Here(here)));
        }
        let Some(target) = &self.primary else {
            return Err(self.needs_primary());
        };
        let kept = self.lock().clone().filter(|c| !c.is_closed());
        let client = match kept {
            Some(client) => client,
            None => {
                let client = Arc::new(connect_primary(target, here).await?);
                *self.lock() = Some(client.clone());
                client
            }
        };
        Ok(StateClient(Side::Primary(client)))
    }

    /// The refusal on a standby without `--pg-primary-url`.
    fn needs_primary(&self) -> Error {
        Error::permanent(format!(
            "--pg-url names a standby, which is read-only, and walrelay must write its state \
             table {} (its memory of the slot, without which a lost slot would look like a \
             first start): pass --pg-primary-url (WALRELAY_PG_PRIMARY_URL) with a connection \
             to the primary, same database, for those writes (docs/operations.md, \"Decoding \
             on a standby\"), or point --pg-url at the primary",
            self.table
        ))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Arc<Client>>> {
        self.connected.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Once per process: the state table moves to a promoted standby.
fn said_promoted() {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        info!(
            "the server --pg-url names is no longer a standby (promoted): walrelay's state table \
             is read and written there from now on, --pg-primary-url is no longer used"
        );
    }
}

/// Connects to `--pg-primary-url` and makes sure it is the primary of the
/// standby `here` is connected to: a primary (not in recovery), the same
/// cluster (system identifier) and the same database. Rows written to
/// another cluster would never reach the standby.
pub async fn connect_primary(target: &PgTarget, here: &Client) -> Result<Client> {
    let described = describe_target(&target.config);
    let primary = setup::connect(target).await.map_err(|e| {
        Error::new(
            e.kind(),
            "cannot reach --pg-primary-url (the standby's primary)",
        )
        .with_source(e)
    })?;
    const WHO: &str = "SELECT pg_catalog.pg_is_in_recovery(), \
         (SELECT system_identifier::text FROM pg_catalog.pg_control_system()), \
         current_database()::text";
    let failed = |e| sql_error("cannot read which server --pg-primary-url names", e);
    let theirs = primary.query_one(WHO, &[]).await.map_err(failed)?;
    let ours = here.query_one(WHO, &[]).await.map_err(failed)?;
    let (recovering, system, database): (bool, String, String) =
        (theirs.get(0), theirs.get(1), theirs.get(2));
    let (our_system, our_database): (String, String) = (ours.get(1), ours.get(2));
    if recovering {
        return Err(Error::permanent(format!(
            "--pg-primary-url names {described}, which is a standby too: point it at the \
             primary, whose writes the standby --pg-url names replays"
        )));
    }
    if system != our_system {
        return Err(Error::permanent(format!(
            "--pg-primary-url names {described}, another cluster (system identifier {system}; \
             the standby's is {our_system}): point it at the primary the standby replicates from"
        )));
    }
    if database != our_database {
        return Err(Error::permanent(format!(
            "--pg-primary-url names database {database:?} and --pg-url {our_database:?}: rows \
             written to the state table in one database never reach the other; name the same \
             database in both"
        )));
    }
    Ok(primary)
}
