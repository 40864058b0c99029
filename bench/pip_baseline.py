"""The baseline issue 9 names: PIP's pseudocode as written, sequentially. One message at a time: receive,
decode, one admin call for the topic's live state (a 404 means the topic is gone, so nothing uses the
ledger), the ledger's metadata read and its versioned delete in ZooKeeper (the same storage calls as the
worker's ``delete_via: zookeeper``), acknowledge. No concurrency, no cache, no identity checks."""

from __future__ import annotations

import http.client
import time
import urllib.parse
import uuid

import pulsar
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from bench.drain import backlog_form, publish
from bench.result import Row
from bench.stats import sample_quantiles
from testkit.harness import quiet_logger
from testkit.stack import Stack
from worker.formats.message import PendingDeleteLedgerInfo, decode, encode
from worker.formats.topic_name import TopicName


def run(stack: Stack, infos: list[PendingDeleteLedgerInfo], paths: dict[int, str], deadline_s: float) -> Row:
    row = Row(
        "pip-sequential-zk",
        "PIP pseudocode, sequential: receive, 1 admin call, ZK read + versioned delete, ack",
        "raw",
        "-",
        "zookeeper",
        1,
        len(infos),
    )
    topic = f"persistent://public/default/ldw-bench-pip-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    zk = KazooClient(hosts=stack.zookeeper_hosts)
    zk.start(timeout=30)
    admin = urllib.parse.urlsplit(stack.admin_url)
    conn = http.client.HTTPConnection(admin.hostname or "127.0.0.1", admin.port or 80, timeout=30)
    latencies: list[float] = []
    try:
        consumer = client.subscribe(topic, "pip", consumer_type=pulsar.ConsumerType.Shared)
        # The backlog in the same form as the worker's (``drain.backlog_form``): the same orphans, the same entries.
        batched = backlog_form(len(infos)) == "batched"
        failed = publish(client, topic, (encode(info) for info in infos), batched=batched)
        if failed:
            row.errors.append(f"{len(failed)} of {len(infos)} sends failed: {sorted(set(failed))}")
        start = time.monotonic()
        for _ in infos:
            if time.monotonic() - start > deadline_s:
                row.errors.append(f"deadline {deadline_s:.0f}s passed")
                break
            t = time.monotonic()
            try:
                msg = consumer.receive(timeout_millis=30_000)
            except pulsar.Timeout:
                # Reported in the row, not raised: the other rows of the run still print.
                row.errors.append(f"no message within 30 s after {len(latencies)} of {len(infos)}")
                break
            info = decode(msg.data())
            tn = TopicName.parse(info.topic_name)
            conn.request("GET", f"/admin/v2/{tn.domain}/{tn.tenant}/{tn.namespace}/{tn.local_name}/internalStats")
            r = conn.getresponse()
            body = r.read()
            in_use = r.status == 200 and str(info.ledger_id).encode() in body
            if not in_use:
                try:
                    _, stat = zk.get(paths[info.ledger_id])
                    zk.delete(paths[info.ledger_id], version=stat.version)
                    row.completed += 1
                except NoNodeError:
                    row.completed += 1  # already gone: a success too
            consumer.acknowledge(msg)
            latencies.append(time.monotonic() - t)
        row.finish(time.monotonic() - start)
        row.latency_s = sample_quantiles(latencies)
        row.latency_mean_s = sum(latencies) / len(latencies) if latencies else None
        row.latency_source = "per message, measured"
        consumer.unsubscribe()
    finally:
        conn.close()
        zk.stop()
        zk.close()
        client.close()
    return row
