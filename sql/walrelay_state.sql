-- walrelay's memory of each slot (--state-table, default public.walrelay_state):
-- that the slot was created (so a lost slot is never taken for a first
-- start), the outbox tables as it accepted them, the settings that decide
-- what it publishes, the last position Kafka acknowledged, the first
-- start's snapshot (run --snapshot-where), and, with --delivery exactly-once,
-- the last position a Kafka transaction committed.
--
-- walrelay creates the table on its first start when its role may. For a
-- least-privilege role (docs/security.md), a DBA runs this once; replace
-- walrelay with the role's name.
CREATE TABLE IF NOT EXISTS "public"."walrelay_state" (
    slot text PRIMARY KEY,
    created_lsn pg_lsn,
    created_at timestamptz,
    delivered_lsn pg_lsn,
    delivered_system_id text,
    delivered_timeline integer,
    delivered_at timestamptz,
    verified_lsn pg_lsn,
    verified_at timestamptz,
    outbox jsonb,
    settings jsonb,
    snapshot jsonb,
    kafka_committed jsonb,
    outbox_accepted_at timestamptz
);
GRANT SELECT, INSERT, UPDATE ON "public"."walrelay_state" TO walrelay;
