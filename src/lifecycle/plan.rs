//! What a replay or a snapshot is about to send, counted before anything
//! is: rows per table and per topic, and rows no topic would take. Printed
//! for people, or as JSON.

use std::collections::BTreeMap;

use serde_json::json;
use tokio_postgres::Client;

use super::rows::{count_by_route, OutboxTable};
use crate::config::Settings;
use crate::error::Result;

/// The rows a predicate selects, by table and by topic.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// Each table with its matching rows.
    pub tables: Vec<(String, u64)>,
    /// Each topic the rows route to, with their number.
    pub topics: BTreeMap<String, u64>,
    /// Rows whose route-by value routes nowhere (NULL, or the topic regex
    /// refuses it): poison, as in `run`.
    pub unroutable: u64,
}

impl Plan {
    /// Counts the rows of `tables` that `predicate` selects.
    pub async fn count(
        client: &Client,
        settings: &Settings,
        tables: &[OutboxTable],
        predicate: &str,
    ) -> Result<Plan> {
        let mut plan = Plan::default();
        for table in tables {
            let counts =
                count_by_route(client, table, predicate, &settings.mapping.route_by).await?;
            let mut rows = 0;
            for (route, count) in counts {
                rows += count;
                match route.map(|r| settings.router.topic(&r)) {
                    Some(Ok(topic)) => *plan.topics.entry(topic).or_default() += count,
                    _ => plan.unroutable += count,
                }
            }
            plan.tables.push((table.table.to_string(), rows));
        }
        Ok(plan)
    }

    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|(_, rows)| rows).sum()
    }

    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "rows": self.rows(),
            "tables": self.tables.iter().map(|(t, n)| json!({"table": t, "rows": n})).collect::<Vec<_>>(),
            "topics": self.topics.iter().map(|(t, n)| json!({"topic": t, "rows": n})).collect::<Vec<_>>(),
            "unroutable": self.unroutable,
        })
    }

    /// The plan for people: `what` heads it (e.g. "walrelay replay will send").
    pub fn text(&self, what: &str) -> String {
        let mut out = format!("{what} {} rows", self.rows());
        for (table, rows) in &self.tables {
            out.push_str(&format!("\n  from {table}: {rows} rows"));
        }
        let width = self.topics.keys().map(String::len).max().unwrap_or(0);
        for (topic, rows) in &self.topics {
            out.push_str(&format!("\n  to {topic:<width$}  {rows} rows"));
        }
        if self.unroutable > 0 {
            out.push_str(&format!(
                "\n  {} rows route to no topic (NULL route-by value, or refused by \
                 --topic-regex): poison, as --on-poison says",
                self.unroutable
            ));
        }
        out
    }
}
