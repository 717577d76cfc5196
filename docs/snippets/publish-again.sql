-- `walrelay replay --where …` publishes rows again without writing to the table
-- (docs/operations.md, "Publishing events again"); this is the SQL alternative.
-- Publish outbox rows again, with their own ids: delete them and insert
-- them back in one transaction, so the WAL holds new INSERTs of the same
-- rows (an INSERT of an id that is still there would violate the primary
-- key). Consumers dedupe by id what they already saw. The WHERE clause
-- picks the rows: here those created since the psql variable since
-- (psql -v since='2026-12-01 10:00:00+00' -f publish-again.sql), a time
-- shortly before the range walrelay named.
BEGIN;
CREATE TEMPORARY TABLE publish_again ON COMMIT DROP AS
  SELECT * FROM outbox
  WHERE created_at >= :'since';
DELETE FROM outbox WHERE id IN (SELECT id FROM publish_again);
INSERT INTO outbox SELECT * FROM publish_again;
COMMIT;
