#!/usr/bin/env bash
# `make demo`: the whole story on the local stack, in about a minute.
#
#   1. make real orphans the way the integration tests do (testkit/orphans.py): drop two ledgers
#      from a live topic's managed-ledger metadata in ZooKeeper, and delete another topic's metadata while
#      its data and cursor ledgers stay in BookKeeper;
#   2. `scan --dry-run` shows them; 3. the worker daemon starts in the background; 4. `scan` queues them;
#   5. the worker deletes them; 6. before/after ledger counts in BookKeeper and the worker's counters.
#
# Everything lives in a namespace and deletion topics of its own (public/ldw-demo-<id>,
# persistent://pulsar/system/__ledger_deletion-demo-<id>), and the scan is limited to that namespace, so
# the demo never touches anything else on the stack. The daemon it starts is stopped on exit.
# Environment: DEMO_METRICS_PORT [8090], DEMO_MIN_AGE [5] (seconds), PYTHON [.venv/bin/python].
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
PY=${PYTHON:-$repo/.venv/bin/python}
CLI=("$PY" -m worker.cli)
PORT=${DEMO_METRICS_PORT:-8090}
MIN_AGE=${DEMO_MIN_AGE:-5}
id=$(date +%s)-$$
ns=public/ldw-demo-$id
base=persistent://pulsar/system/__ledger_deletion-demo-$id
work=$(mktemp -d "${TMPDIR:-/tmp}/ldw-demo.XXXXXX")
worker_pid=

if [[ -t 1 ]]; then bold=$'\033[1m' plain=$'\033[0m'; else bold='' plain=''; fi
step() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }

cleanup() {
  if [[ -n $worker_pid ]] && kill -0 "$worker_pid" 2>/dev/null; then
    kill -TERM "$worker_pid" 2>/dev/null || true
    wait "$worker_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT

bash deploy/local/stack.sh status >/dev/null || { echo "demo: the local stack is down (make stack-up)" >&2; exit 1; }
if "$PY" -c "import socket,sys; s=socket.socket(); sys.exit(s.connect_ex(('127.0.0.1', $PORT)) != 0)"; then
  echo "demo: port $PORT is taken (a worker from 'make run'?); set DEMO_METRICS_PORT" >&2
  exit 1
fi

eval "$(bash deploy/local/stack.sh env)"
cat >"$work/demo.yaml" <<EOF
pulsar: {service_url: $PULSAR_SERVICE_URL, admin_url: $PULSAR_ADMIN_URL}
topics: {pending: $base, retry: $base-RETRY, dlq: $base-DLQ, parallelism: 2}
bookkeeper: {http_url: $BOOKIE_HTTP_URL}
zookeeper: {metadata_store_url: "zk:$ZOOKEEPER_HOSTS"}
offload:
  s3_targets: [{bucket: $S3_BUCKET, endpoint: $S3_ENDPOINT, region: us-east-1, access_key_id: testing, secret_access_key: testing}]
worker: {send_delay_s: 1, min_ledger_age_s: $MIN_AGE, snapshot_ttl_s: 2, in_use_retry_s: 2, backoff_initial_s: 1, backoff_max_s: 5, stats_poll_interval_s: 1}
http: {host: 127.0.0.1, port: $PORT}
logging: {level: INFO, format: json}
EOF

count_ledgers() {
  "$PY" - "$BOOKIE_HTTP_URL" "$ns" <<'EOF'
import asyncio, sys
from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.errors import BackendError

async def main(url: str, ns: str) -> None:
    async with new_session(30) as s:
        bk = BookieClient(url, s)
        ids = await bk.list_ledger_ids()
        sem = asyncio.Semaphore(32)

        async def ours(lid: int) -> bool | None:
            async with sem:
                try:
                    md = await bk.get_metadata(lid)
                except BackendError:
                    # Some ledger's metadata read can fail at a given moment (seen in a CI run and on the next
                    # demo): this count is for the demo's eyes, not a decision, so the failure is said, not fatal.
                    return None
            return md is not None and md.custom_metadata.get("pulsar/managed-ledger", "").startswith(ns + "/")

        found = await asyncio.gather(*(ours(i) for i in ids))
        mine = sum(1 for f in found if f)
        unreadable = sum(1 for f in found if f is None)
        note = f" ({unreadable} others unreadable right now)" if unreadable else ""
        print(f"{len(ids)} ledgers in BookKeeper, {mine} of them belong to {ns}{note}")

asyncio.run(main(*sys.argv[1:]))
EOF
}

step "1. making real orphans in $ns"
"$PY" - "$PULSAR_ADMIN_URL" "$PULSAR_SERVICE_URL" "$ZOOKEEPER_HOSTS" "$ns" <<'EOF'
import asyncio, sys
from testkit.orphans import delete_topic_metadata_keep_ledgers, drop_ledgers_from_metadata, quiesce
from testkit.topics import client_for, ml_ledger_ids, produce
from worker.backends.http import new_session
from testkit.admin import StagingAdmin
from worker.formats.topic_name import TopicName

async def main(admin_url: str, service_url: str, zk: str, ns: str) -> None:
    async with new_session(30) as s:
        admin = StagingAdmin(admin_url, s)
        await admin.ensure_namespace(ns)
        await admin.set_retention(ns, -1, -1)
        live = TopicName.parse(f"persistent://{ns}/orders")
        produce(service_url, str(live), 20)  # 4 ledgers of 5 entries (config/standalone.conf)
        ids = ml_ledger_ids(await admin.internal_stats(live))
        dropped = await drop_ledgers_from_metadata(admin, zk, live, ids[:2])
        print(f"  {live}: ledgers {dropped} dropped from its metadata; BookKeeper keeps them")

        gone = TopicName.parse(f"persistent://{ns}/clicks")
        client = client_for(service_url)
        consumer = client.subscribe(str(gone), "analytics")
        produce(service_url, str(gone), 12)
        for _ in range(12):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
        consumer.close()
        client.close()
        await quiesce(admin, gone)
        orphaned = await delete_topic_metadata_keep_ledgers(admin, zk, gone)
        print(f"  {gone}: topic deleted from the metadata; its ledgers {orphaned} stay in BookKeeper")

asyncio.run(main(*sys.argv[1:]))
EOF
echo "  before: $(count_ledgers)"
sleep "$MIN_AGE"  # orphans younger than the minimum age are never reported

step "2. ledger-deletion-worker scan --dry-run --namespace $ns --min-age ${MIN_AGE}s"
"${CLI[@]}" scan --dry-run --namespace "$ns" --min-age "${MIN_AGE}s" --report "$work/scan.json" \
  --config "$work/demo.yaml" 2>/dev/null

step "3. starting the worker daemon (ledger-deletion-worker run; metrics on http://127.0.0.1:$PORT/metrics)"
"${CLI[@]}" run --config "$work/demo.yaml" >"$work/worker.log" 2>&1 &
worker_pid=$!
for _ in $(seq 1 120); do
  curl -fsS -m 2 -o /dev/null "http://127.0.0.1:$PORT/readyz" 2>/dev/null && break
  kill -0 "$worker_pid" 2>/dev/null || { echo "demo: the worker exited:" >&2; tail -20 "$work/worker.log" >&2; exit 1; }
  sleep 0.5
done
echo "  worker ready (pid $worker_pid, log $work/worker.log)"

step "4. ledger-deletion-worker scan --namespace $ns  (queues every orphan)"
"${CLI[@]}" scan --namespace "$ns" --min-age "${MIN_AGE}s" --report "$work/sent.json" \
  --config "$work/demo.yaml" 2>/dev/null

step "5. waiting for the worker to drain (ledger-deletion-worker inflight)"
for _ in $(seq 1 120); do
  total=$("${CLI[@]}" inflight --json --config "$work/demo.yaml" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["total"])')
  [[ $total == 0 ]] && break
  sleep 1
done
"${CLI[@]}" inflight --config "$work/demo.yaml"

step "6. results"
echo "  after:  $(count_ledgers)"
echo "  worker counters (http://127.0.0.1:$PORT/metrics):"
curl -fsS "http://127.0.0.1:$PORT/metrics" |
  grep -E '^ledger_deletion_(received|deleted|in_use|rejected|retried|dlq|acked)_total' | sed 's/^/    /'
"${CLI[@]}" scan --dry-run --namespace "$ns" --min-age 0s --json --config "$work/demo.yaml" 2>/dev/null |
  "$PY" -c 'import json,sys; r=json.loads(sys.stdin.read().splitlines()[-1]); print("  orphans left in the demo namespace:", len(r["orphans"]))'
echo
echo "demo done: stopping the worker (its files are in $work)"
