"""A deliberately simple outbox relay, the yardstick for walrelay's latency.

Single-threaded: pgoutput from a logical replication slot (psycopg2), an
idempotent confluent-kafka producer with acks=all, and a standby status
update that confirms a commit only after Kafka acknowledged its events.
It maps the default outbox table (id, aggregate_id, event_type, payload) to
topic outbox.event.<event_type>, key aggregate_id, header id. It does none
of walrelay's checks; it exists so that a benchmark can run both relays
side by side on the same machine.

    python relay.py DSN SLOT PUBLICATION BROKERS [LINGER_MS]
"""

import select
import struct
import sys
import time

import psycopg2
import psycopg2.extras
from confluent_kafka import Producer


def cstring(data, at):
    end = data.index(b"\0", at)
    return data[at:end].decode(), end + 1


def main():
    dsn, slot, publication, brokers = sys.argv[1:5]
    linger = sys.argv[5] if len(sys.argv) > 5 else "1"
    producer = Producer({
        "bootstrap.servers": brokers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": linger,
    })
    conn = psycopg2.connect(dsn, connection_factory=psycopg2.extras.LogicalReplicationConnection)
    cur = conn.cursor()
    cur.start_replication(slot_name=slot, decode=False, options={
        "proto_version": "1", "publication_names": publication})

    relations = {}
    # Transactions in commit order: [end_lsn, events not yet acknowledged].
    pending = []
    current = None
    confirmed = 0

    def acked(err, _msg, txn):
        if err is not None:
            sys.exit(f"delivery failed: {err}")
        txn[1] -= 1

    while True:
        msg = cur.read_message()
        if msg is None:
            producer.poll(0)
            while pending and pending[0][0] is not None and pending[0][1] == 0:
                confirmed = pending.pop(0)[0]
                cur.send_feedback(flush_lsn=confirmed, write_lsn=confirmed)
            select.select([cur], [], [], 0.001)
            continue
        data = msg.payload
        kind = data[0:1]
        if kind == b"B":
            current = [None, 0]
            pending.append(current)
        elif kind == b"C":
            _flags, _commit, end, _ts = struct.unpack_from(">BQQq", data, 1)
            current[0] = end
            current = None
        elif kind == b"R":
            (relid,) = struct.unpack_from(">I", data, 1)
            _ns, at = cstring(data, 5)
            _name, at = cstring(data, at)
            at += 1
            (ncols,) = struct.unpack_from(">H", data, at)
            at += 2
            names = []
            for _ in range(ncols):
                at += 1
                name, at = cstring(data, at)
                at += 8
                names.append(name)
            relations[relid] = names
        elif kind == b"I":
            (relid,) = struct.unpack_from(">I", data, 1)
            (ncols,) = struct.unpack_from(">H", data, 6)
            at = 8
            row = {}
            for name in relations[relid][:ncols]:
                col = data[at:at + 1]
                at += 1
                if col == b"t":
                    (length,) = struct.unpack_from(">I", data, at)
                    at += 4
                    row[name] = data[at:at + length]
                    at += length
                else:
                    row[name] = None
            txn = current
            txn[1] += 1
            producer.produce(
                "outbox.event." + row["event_type"].decode(),
                key=row["aggregate_id"],
                value=row["payload"],
                headers=[("id", row["id"])],
                on_delivery=lambda err, m, txn=txn: acked(err, m, txn),
            )
        producer.poll(0)


if __name__ == "__main__":
    main()
