-- A partitioned outbox (--table public.outbox), for high volumes: old events
-- are removed by dropping whole partitions, which is far cheaper than DELETE
-- and leaves no dead rows to vacuum.
--
-- walrelay publishes it through its root (publish_via_partition_root = true,
-- PostgreSQL 13+), so every partition's rows arrive as rows of
-- public.outbox: the DEFAULT partition and partitions attached later too.
-- A publication created by hand must say so:
--   CREATE PUBLICATION walrelay FOR TABLE public.outbox
--     WITH (publish = 'insert', publish_via_partition_root = true);
-- walrelay refuses to start on one that does not, and prints the fix.
CREATE TABLE IF NOT EXISTS public.outbox (
    id             uuid        NOT NULL,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- A primary key of a partitioned table must include the partition key.
    PRIMARY KEY (id, created_at)
) PARTITION BY RANGE (created_at);

-- One partition a day, made ahead of time (for example by pg_partman or a
-- nightly job). The DEFAULT partition catches rows no partition covers, so
-- an INSERT never fails for want of a partition.
CREATE TABLE IF NOT EXISTS public.outbox_default PARTITION OF public.outbox DEFAULT;
-- CREATE TABLE public.outbox_2026_12_01 PARTITION OF public.outbox
--     FOR VALUES FROM ('2026-12-01') TO ('2026-12-02');
-- A partition belongs to the role that creates it, whoever owns the
-- outbox (ALTER TABLE public.outbox OWNER TO … does not change it). For
-- --retention, walrelay's role must own every partition it may drop (all
-- but DEFAULT and those older than walrelay's slot): a DBA
-- who makes partitions hands each over (ALTER TABLE
-- public.outbox_2026_12_01 OWNER TO walrelay;), and grants SELECT, DELETE
-- on the DEFAULT one; `walrelay check` lists what is missing.

-- Dropping old partitions: an event's row is only needed until its INSERT
-- is in the WAL, so a partition may be dropped once walrelay has confirmed
-- past it, which `walrelay status` (confirmed_flush_lsn) or the
-- walrelay_slot_lag_bytes metric shows. Keep a day or more of margin for
-- replays and audits. A DROP (or DETACH) publishes nothing and does not
-- disturb streaming:
--   DROP TABLE public.outbox_2026_11_01;
-- `walrelay run --retention 7d --partitions-ahead 2` does both for you:
-- it drops a partition only once its events are confirmed and no open
-- transaction could still write to it, and makes the next partitions
-- ahead of time (docs/operations.md, "Outbox retention").
