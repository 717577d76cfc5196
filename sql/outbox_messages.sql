-- The table-less outbox (walrelay run --source messages --message-prefix walrelay).
--
-- Instead of inserting into an outbox table, a transaction writes its event
-- straight into the WAL with a *transactional* logical message. It is
-- decoded only if the transaction commits, in commit order; nothing is
-- stored in a table, so there is nothing to clean up. PostgreSQL 14+.
--
-- The message content is a JSON document:
--   {"id": "<event id>", "aggregate_type": "...", "aggregate_id": "<Kafka key>",
--    "event_type": "<routes the topic by default>", "payload": <any JSON: the Kafka value>}
-- walrelay routes it like a table row: --route-by-field names the document's
-- field (default event_type), the key is aggregate_id, the header id is id.
-- Never use pg_logical_emit_message(false, ...): a non-transactional message
-- is sent even when the transaction rolls back, and walrelay refuses it.

CREATE OR REPLACE FUNCTION walrelay_emit(
    p_aggregate_type text,
    p_aggregate_id   text,
    p_event_type     text,
    p_payload        jsonb,
    p_id             uuid DEFAULT gen_random_uuid(),
    p_prefix         text DEFAULT 'walrelay'
) RETURNS uuid
LANGUAGE plpgsql
AS $$
BEGIN
    PERFORM pg_logical_emit_message(
        true,  -- transactional: published only if this transaction commits
        p_prefix,
        jsonb_build_object(
            'id', p_id,
            'aggregate_type', p_aggregate_type,
            'aggregate_id', p_aggregate_id,
            'event_type', p_event_type,
            'payload', p_payload
        )::text
    );
    RETURN p_id;
END;
$$;

-- Example:
-- BEGIN;
--   UPDATE accounts SET balance = balance - 1999 WHERE id = 'a-1';
--   SELECT walrelay_emit('account', 'a-1', 'AccountDebited',
--                        jsonb_build_object('version', 1, 'amount_cents', 1999));
-- COMMIT;
