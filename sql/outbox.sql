-- The default outbox table walrelay reads (--table public.outbox).
-- walrelay finds columns by name, so their order does not matter and extra
-- columns are ignored.
CREATE TABLE IF NOT EXISTS public.outbox (
    id             uuid        PRIMARY KEY,               -- the event id: Kafka header "id"
    aggregate_type text        NOT NULL,                  -- e.g. 'order'
    aggregate_id   text        NOT NULL,                  -- the Kafka key: keeps per-aggregate order
    event_type     text        NOT NULL,                  -- picks the topic: outbox.event.<event_type>
    payload        jsonb       NOT NULL,                  -- the Kafka value, as JSON text
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Example: the business row and its event in ONE transaction. If the
-- transaction rolls back, neither exists and walrelay publishes nothing.
--
-- BEGIN;
--   INSERT INTO orders (id, customer_id, total_cents)
--        VALUES ('7d0c…', 'c-42', 1999);
--   INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
--        VALUES (gen_random_uuid(), 'order', '7d0c…', 'OrderPlaced',
--                jsonb_build_object('version', 1, 'order_id', '7d0c…',
--                                   'customer_id', 'c-42', 'total_cents', 1999));
-- COMMIT;
--
-- The row may be deleted right away, even in the same transaction: the WAL
-- already holds the INSERT, and walrelay reads the WAL, not the table.
