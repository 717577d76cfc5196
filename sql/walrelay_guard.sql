-- walrelay's guard: an event trigger that writes a transactional logical
-- decoding message (prefix 'walrelay.guard') whenever a command changes a
-- publication, or drops, renames or alters a table. The message goes into
-- the WAL with the change itself, so walrelay meets it at the exact position
-- where the outbox stopped being published, even if walrelay was down then
-- and even if the change was undone before anyone looked: a publication's
-- publish option switched off and on again, or the outbox taken out of the
-- publication and put back, loses every insert in between and leaves
-- nothing in the catalog to compare.
--
-- Without it walrelay still checks the catalog at start-up and every
-- --watchdog-interval; with it, the range at risk is exact. It needs
-- PostgreSQL 14 or later. Event triggers can only be created by a
-- superuser (on PostgreSQL 17+, also by the database owner with
-- event_trigger privileges granted): a DBA runs this once per database.
-- `walrelay check` says whether it is installed. It is one per database,
-- for every walrelay reading it; it costs one small WAL record per command
-- of the kinds above, and nothing on INSERTs.
--
-- To remove it: DROP EVENT TRIGGER walrelay_guard_end;
--               DROP EVENT TRIGGER walrelay_guard_drop;
--               DROP FUNCTION walrelay_guard();

CREATE OR REPLACE FUNCTION walrelay_guard() RETURNS event_trigger
LANGUAGE plpgsql AS $$
DECLARE
    objects jsonb := '[]';
    r record;
    seen jsonb;
BEGIN
    IF tg_event = 'sql_drop' THEN
        FOR r IN SELECT objid, object_type FROM pg_event_trigger_dropped_objects()
                 WHERE object_type IN ('table', 'publication', 'publication relation',
                                       'publication namespace') LOOP
            objects := objects || jsonb_build_object('class', r.object_type, 'oid', r.objid::bigint,
                                                     'dropped', true);
        END LOOP;
    ELSE
        FOR r IN SELECT objid, object_type FROM pg_event_trigger_ddl_commands()
                 WHERE object_type IN ('table', 'publication', 'publication relation',
                                       'publication namespace') LOOP
            -- What the object is after the command, by oid: walrelay knows
            -- its outbox, publication and memberships by oid. A SELECT INTO
            -- that finds nothing leaves seen NULL: gone by the command's end.
            -- Separate statements, each planned only when it runs:
            -- pg_publication_namespace and prqual exist from PostgreSQL 15 on.
            IF r.object_type = 'table' THEN
                SELECT jsonb_build_object('schema', n.nspname, 'name', c.relname) INTO seen
                FROM pg_catalog.pg_class c
                JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                WHERE c.oid = r.objid;
            ELSIF r.object_type = 'publication' THEN
                SELECT jsonb_build_object('name', p.pubname, 'insert', p.pubinsert,
                                          'via_root', p.pubviaroot) INTO seen
                FROM pg_catalog.pg_publication p WHERE p.oid = r.objid;
            ELSIF r.object_type = 'publication relation' THEN
                SELECT jsonb_build_object('publication', pr.prpubid::bigint, 'relation', pr.prrelid::bigint,
                                          'row_filter',
                                          coalesce(to_jsonb(pr) ->> 'prqual', '') <> '')
                INTO seen
                FROM pg_catalog.pg_publication_rel pr WHERE pr.oid = r.objid;
            ELSE
                SELECT jsonb_build_object('publication', pn.pnpubid::bigint, 'namespace', pn.pnnspid::bigint)
                INTO seen
                FROM pg_catalog.pg_publication_namespace pn WHERE pn.oid = r.objid;
            END IF;
            objects := objects || (jsonb_build_object('class', r.object_type, 'oid', r.objid::bigint)
                                   || coalesce(seen, '{"dropped": true}'));
        END LOOP;
    END IF;
    IF jsonb_array_length(objects) > 0 THEN
        PERFORM pg_catalog.pg_logical_emit_message(
            true, 'walrelay.guard',
            jsonb_build_object('v', 1, 'tag', tg_tag, 'objects', objects)::text);
    END IF;
END
$$;

DROP EVENT TRIGGER IF EXISTS walrelay_guard_end;
CREATE EVENT TRIGGER walrelay_guard_end ON ddl_command_end
    WHEN TAG IN ('ALTER PUBLICATION', 'ALTER TABLE')
    EXECUTE FUNCTION walrelay_guard();

DROP EVENT TRIGGER IF EXISTS walrelay_guard_drop;
CREATE EVENT TRIGGER walrelay_guard_drop ON sql_drop
    WHEN TAG IN ('ALTER PUBLICATION', 'DROP PUBLICATION', 'DROP TABLE', 'ALTER TABLE')
    EXECUTE FUNCTION walrelay_guard();
