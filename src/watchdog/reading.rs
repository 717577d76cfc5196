//! What the watchdog reads at each check, behind a seam: `Postgres` reads it
//! on the watchdog's own control connection; the timer tests
//! (`watchdog/tests/timing.rs`) script the readings on paused tokio time.
//! What the watchdog makes of a reading (metrics, levels, announcements,
//! stops) stays in `watchdog::watch`, the same for both.

use tokio_postgres::Client;

use super::source::{SourceWatch, Watched};
use super::Webhook;
use crate::error::Result;
use crate::metrics::Metrics;
use crate::postgres::setup;
use crate::postgres::slot::{self, SlotReport};

/// The watchdog calls readings through generics only, so the `async fn`s
/// here need no `Send` bound.
#[allow(async_fn_in_trait)]
pub trait Readings {
    /// Connects unless connected already on a connection still open.
    async fn connect(&mut self) -> Result<()>;

    /// Drops the connection: the next check connects again.
    fn disconnect(&mut self);

    /// The publication and the slot's recorded settings
    /// (`SourceWatch::check_source`): an error that is not transient stops
    /// walrelay.
    async fn check_source(&mut self, metrics: &Metrics, webhook: Option<&Webhook>) -> Result<()>;

    /// The slot's figures; None when it does not exist.
    async fn slot(&mut self) -> Result<Option<SlotReport>>;

    /// The slot does not exist: an alert if it existed before.
    async fn slot_absent(&mut self, metrics: &Metrics, webhook: Option<&Webhook>);

    /// The slot exists.
    fn slot_present(&mut self, metrics: &Metrics);
}

/// The readings from Postgres itself.
pub struct Postgres {
    watched: Watched,
    client: Option<Client>,
    source: SourceWatch,
}

impl Postgres {
    pub fn new(watched: Watched) -> Self {
        Postgres {
            watched,
            client: None,
            source: SourceWatch::default(),
        }
    }
}

/// The connection `connect` opened: the watchdog reads only after it.
fn connected(client: &Option<Client>) -> &Client {
    client
        .as_ref()
        .expect("the watchdog connects before it reads")
}

impl Readings for Postgres {
    async fn connect(&mut self) -> Result<()> {
        if self.client.as_ref().is_none_or(Client::is_closed) {
            self.client = Some(setup::connect(&self.watched.pg).await?);
        }
        Ok(())
    }

    fn disconnect(&mut self) {
        self.client = None;
    }

    async fn check_source(&mut self, metrics: &Metrics, webhook: Option<&Webhook>) -> Result<()> {
        let client = connected(&self.client);
        self.source
            .check_source(client, &self.watched, metrics, webhook)
            .await
    }

    async fn slot(&mut self) -> Result<Option<SlotReport>> {
        slot::read(connected(&self.client), &self.watched.slot).await
    }

    async fn slot_absent(&mut self, metrics: &Metrics, webhook: Option<&Webhook>) {
        let client = connected(&self.client);
        self.source
            .slot_absent(client, &self.watched, metrics, webhook)
            .await;
    }

    fn slot_present(&mut self, metrics: &Metrics) {
        self.source.slot_present(&self.watched, metrics);
    }
}
