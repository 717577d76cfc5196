//! `walrelay check` on the server's role: whether `--pg-url` names a
//! standby, and if it does, what decoding there needs (PostgreSQL 16+,
//! `hot_standby_feedback`, a physical slot, `--pg-primary-url` reaching the
//! standby's own primary). The facts are `postgres::standby`'s, the ones
//! `run` reads at start-up.

use tokio_postgres::Client;

use super::Check;
use crate::config::Settings;
use crate::postgres::describe_target;
use crate::postgres::standby::{in_recovery, Standby};
use crate::postgres::state::route::connect_primary;

const DOCS: &str = "docs/operations.md, \"Decoding on a standby\"";

/// `postgres.standby`, and on a standby what decoding there needs.
pub async fn checks(client: &Client, settings: &Settings) -> Vec<Check> {
    const NAME: &str = "postgres.standby";
    let standby = match in_recovery(client).await {
        Ok(false) => {
            let mut detail = "the server is a primary (not in recovery)".to_string();
            if settings.pg_primary.is_some() {
                detail.push_str("; --pg-primary-url is used only while --pg-url names a standby");
            }
            return vec![Check::pass(NAME, detail)];
        }
        Ok(true) => Standby::read(client).await,
        Err(e) => return vec![Check::from_error(NAME, &e)],
    };
    let standby = match standby {
        Ok(Some(standby)) => standby,
        Ok(None) => return vec![Check::pass(NAME, "the server was just promoted")],
        Err(e) => return vec![Check::from_error(NAME, &e)],
    };
    let mut out = vec![Check::pass(
        NAME,
        format!(
            "the server is a standby (PostgreSQL {}): walrelay run decodes there, creates its \
             slot there without failover, and writes its state table on the primary",
            standby.version / 10000
        ),
    )];
    out.push(match standby.feedback_problem() {
        None => Check::pass("postgres.hot_standby_feedback", "hot_standby_feedback = on"),
        Some(problem) => Check::warn("postgres.hot_standby_feedback", problem, DOCS),
    });
    out.push(
        match (&standby.primary_slot, standby.physical_slot_problem()) {
            (Some(slot), _) => Check::pass(
                "postgres.primary_slot_name",
                format!("the standby streams through the physical slot {slot:?}"),
            ),
            (None, problem) => Check::warn(
                "postgres.primary_slot_name",
                problem.unwrap_or_default(),
                DOCS,
            ),
        },
    );
    out.push(primary(client, settings).await);
    out
}

/// `--pg-primary-url`: given, reachable, the standby's own primary, and
/// allowed to write the running-transactions record slot creation waits for.
async fn primary(client: &Client, settings: &Settings) -> Check {
    const NAME: &str = "postgres.primary_url";
    let Some(target) = &settings.pg_primary else {
        return Check::fail(
            NAME,
            "--pg-url names a standby and --pg-primary-url is not given: walrelay run refuses \
             to start, since it cannot write its state table on a standby",
            format!(
                "pass --pg-primary-url (WALRELAY_PG_PRIMARY_URL) with a connection to the \
                 primary, same database ({DOCS})"
            ),
        );
    };
    let primary = match connect_primary(target, client).await {
        Ok(primary) => primary,
        Err(e) => return Check::from_error(NAME, &e),
    };
    let detail = format!(
        "--pg-primary-url reaches {}, the standby's primary (same system identifier and \
         database)",
        describe_target(&target.config)
    );
    let snapshot = primary
        .query_one(
            "SELECT has_function_privilege('pg_catalog.pg_log_standby_snapshot()', 'EXECUTE')",
            &[],
        )
        .await;
    match snapshot.map(|row| row.get::<_, bool>(0)) {
        Ok(true) => Check::pass(NAME, detail),
        Ok(false) => Check::warn(
            NAME,
            format!(
                "{detail}, but its role may not run pg_log_standby_snapshot(): creating the slot \
                 waits for a running-transactions record the primary writes on its own (every \
                 15 s while it is busy), which may exceed --setup-timeout"
            ),
            "on the primary: GRANT EXECUTE ON FUNCTION pg_log_standby_snapshot() TO <the \
             --pg-primary-url role>;",
        ),
        Err(e) => Check::fail(
            NAME,
            format!("{detail}, but the privilege query failed: {e}"),
            "let the --pg-primary-url role read the catalog",
        ),
    }
}
