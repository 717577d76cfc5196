"""A bare librdkafka producer (confluent-kafka) at a steady rate: the floor
under any relay's CPU per event. Sends RATE small records a second to TOPIC
for SECONDS, waits for every acknowledgement, and prints its own CPU time.

    python producer.py BROKERS TOPIC RATE SECONDS
"""

import resource
import sys
import time

from confluent_kafka import Producer


def main():
    brokers, topic, rate, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    producer = Producer({
        "bootstrap.servers": brokers,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": "1",
    })
    payload = b'{"sent_us": 0, "padding": "' + b"x" * 60 + b'"}'
    total = rate * seconds
    start = time.monotonic()
    for i in range(total):
        due = start + i / rate
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        producer.produce(topic, value=payload, key=b"order-%d" % (i % 100), headers={"id": b"%d" % i})
        producer.poll(0)
    producer.flush(30)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(f"{usage.ru_utime + usage.ru_stime:.6f}")


if __name__ == "__main__":
    main()
