-- Plain SQL: the order and its event in one transaction.
BEGIN;
INSERT INTO orders (id, customer_id, total_cents)
VALUES ('5b0e7a9c-3f0e-4c1e-9c54-8f3a3d2a9b11', 'c-42', 1999);

INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload)
VALUES (gen_random_uuid(), 'order', '5b0e7a9c-3f0e-4c1e-9c54-8f3a3d2a9b11', 'OrderPlaced',
        jsonb_build_object(
          'version', 1,
          'order_id', '5b0e7a9c-3f0e-4c1e-9c54-8f3a3d2a9b11',
          'customer_id', 'c-42',
          'total_cents', 1999,
          'currency', 'EUR'));
COMMIT;

-- Table-less (walrelay run --source messages), with sql/outbox_messages.sql loaded:
BEGIN;
UPDATE orders SET status = 'paid' WHERE id = '5b0e7a9c-3f0e-4c1e-9c54-8f3a3d2a9b11';
SELECT walrelay_emit('order', '5b0e7a9c-3f0e-4c1e-9c54-8f3a3d2a9b11', 'OrderPaid',
                     jsonb_build_object('version', 1, 'order_id', '5b0e7a9c-3f0e-4c1e-9c54-8f3a3d2a9b11'));
COMMIT;
