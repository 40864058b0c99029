#!/usr/bin/env bash
# The real local stack: Apache Pulsar (ZooKeeper metadata, bookie HTTP admin on) and moto's S3 server, on
# loopback.  `stack.sh up|down|status|env [--json]|render|restart-pulsar`.
#
# This script starts, stops and describes processes, and builds nothing: the Pulsar it runs, the offloader
# NAR and the broker extension's jar are made by `make pulsar-dist`, `make offloader` and `make
# broker-extension-jar` (all three: `make stack-builds [PULSAR_VERSION=...]`; deploy/local/build.sh), which
# the make targets that start stacks run first. `up` refuses, naming the target, when one is missing, and
# starts nothing. What it starts is data. A profile is a file under profiles/ (its ports, data directory,
# heap, KIND standalone|cluster, AUTH 0|1): standalone (the shared stack), extension (the broker-extension
# suite's instance), auth (token authentication, TLS), cluster (one ZooKeeper, two bookies, two brokers;
# extra verbs kill9|stop|start <component> for fault tests); PROFILE picks one. The Pulsar lines are rows
# of pulsar-lines.txt (version, Java, dist, offloader, placement: lines.sh reads it). The keys it sets in
# Pulsar's configuration files are under overrides/ (KEY=VALUE, ${VAR} expanded), applied in one loop
# (conf_apply). `env` prints what a client needs (`--json` for testkit); `render` writes the configuration
# files under $STACK_DIR/run without starting anything.
#
# Every variable of a profile file, and these, can be set in the environment, which wins (the standalone
# profile's defaults in brackets):
#   STACK_DIR [deploy/local/.data]  data, logs and pid files
#   STACK_CACHE [deploy/local/.cache]  the builds it runs: apache-pulsar-<version>/, offloaders/
#   PULSAR_VERSION [pulsar-lines.txt's default row]  BROKER_PORT [6650]  WEB_PORT [8080]  BOOKIE_PORT [3181]
#   PULSAR_DIST [the line's dist]  tarball: pulsar-server-distribution unpacked; jars: Pulsar assembled from
#     pulsar-broker's Maven Central jars (deploy/local/assembly/), for the lines whose distribution the
#     registry does not serve (5.0.x).  A line with a placement (5.0: profiles/pulsar5/) gets ports and a data
#     directory of its own, so it runs beside the default line's stack.
#   PULSAR_JAVA_HOME [the line's java_home, when present]  the JDK an assembled Pulsar runs on
#   TIERED_STORAGE [1]  1: the broker offloads to the moto S3 server through Pulsar's jcloud offloader; 0: no
#     offload driver (`env` says which)
#   OFFLOADER_VERSION [the line's offloader]  the tiered-storage-jcloud release the broker loads
#   BOOKIE_HTTP_PORT [8000]  ZK_PORT [2181]  S3_PORT [5000]  S3_BUCKET [pulsar-offload]  S3_REGION [us-east-1]
#   PULSAR_MEM [-Xms512m -Xmx1g -XX:MaxDirectMemorySize=1g]  STACK_START_TIMEOUT [240] (seconds)
#   AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY [testing/testing]  what the broker's offloader signs S3 calls with
#   BROKER_EXTENSION [1]  1: brokers run the broker extension (broker-extension/, docs/broker-extension.md):
#     its jar on the classpath (PULSAR_EXTRA_CLASSPATH) and managedLedgerStorageClassName naming it, so every
#     ledger a broker drops is queued on the pending-deletions topic first; 0: stock brokers
#     With it, the brokers' compaction service and schema storage are the extension's too
#     (compactionServiceFactoryClassName, schemaRegistryStorageClassName): compacted and schema ledgers are queued
#   BROKER_EXTENSION_DEFER [0]  1: defer mode (ledgerDeletionDeferBrokerDeletes=true): the BookKeeper copies the
#     extension queued are deleted by the worker, not by the broker
#   BROKER_EXTENSION_SEND_DELAY_S [60]  the extension's ledgerDeletionSendDelaySeconds (deliver-after)
#     Every profile's brokers sign what the extension publishes with the key in $STACK_DIR/broker-mark.key
#     (random, made once, mode 600; ledgerDeletionMarkKeyFile): `env` prints it as BROKER_MARK_KEY_FILE for the
#     worker's worker.broker_mark_key_file.
#   BROKER_EXTENSION_CONF []  more broker.conf lines for it, space-separated key=value, after the profile's own
#     (PROFILE_EXTENSION_CONF; tests/extension)
#   BROKER_CONF []  broker.conf lines for every broker, stock or not, space-separated key=value, set last
#     (bench/extension.py: Pulsar's own rollover defaults instead of this stack's 5-entry ledgers); ${NAME} in
#     a value is expanded (a cluster broker's own port: ${node_broker_port}, profiles/upgrade-cluster.env)
#   BOOKIE_ENTRY_LOG_SIZE [8388608]  the bookies' logSizeLimit: small, so garbage collection can give disk back
#     (every bookie also exports its own metrics on its HTTP API's /metrics: overrides/bookie-reclaim.conf)
#
# Tiered storage: the broker loads Pulsar's jcloud offloader (driver aws-s3) from $STACK_DIR/run/offloaders,
# which links the NAR `make offloader` made, and offloads to the moto S3 server (bucket S3_BUCKET).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

PROFILE=${PROFILE:-standalone}
profiles=$here/profiles
overrides=$here/overrides

# shellcheck source=deploy/local/lines.sh
source "$here/lines.sh"

# A profile is its data file, profiles/$PROFILE.env (ports, data directory, heap, KIND standalone|cluster,
# AUTH); on a line with a placement (pulsar-lines.txt), profiles/<placement>/$PROFILE.env first (ports and
# data of its own, beside the default line's); then profiles/defaults.env. The environment wins over all of them.
if [[ ! -f $profiles/$PROFILE.env ]]; then
  echo "stack: unknown PROFILE=$PROFILE ($(cd "$profiles" && ls -- *.env | sed 's/\.env$//' | grep -vx defaults | paste -sd'|'))" >&2
  exit 2
fi
pulsar_line
if [[ -n $LINE_PLACEMENT && -f $profiles/$LINE_PLACEMENT/$PROFILE.env ]]; then
  defaults "$profiles/$LINE_PLACEMENT/$PROFILE.env"
fi
defaults "$profiles/$PROFILE.env"
defaults "$profiles/defaults.env"
# The JDK the line prefers, when present: an assembled Pulsar's launcher takes it first.
if [[ -z ${PULSAR_JAVA_HOME:-} && -n $LINE_JAVA_HOME && -x $LINE_JAVA_HOME/bin/java ]]; then
  export PULSAR_JAVA_HOME=$LINE_JAVA_HOME
fi
PYTHON=${PYTHON:-$repo/.venv/bin/python}
export PULSAR_MEM
if [[ -v PULSAR_GC ]]; then export PULSAR_GC; fi
extension_jar=$repo/broker-extension/target/ledger-deletion-broker-extension.jar
mark_key=$STACK_DIR/broker-mark.key

build_paths
broker_offloaders=$STACK_DIR/run/offloaders
run=$STACK_DIR/run
logs=$STACK_DIR/logs
auth=$STACK_DIR/auth
mkdir -p "$run" "$logs"
stack_version=$PULSAR_VERSION

log() { echo "stack: $*" >&2; }

# A process on another line (rolling upgrades and rollbacks): every process of a stack runs the stack's
# PULSAR_VERSION unless it was started on another (`start C VERSION` and `restart C VERSION` on the cluster
# profile, `restart-pulsar VERSION` on a standalone one). Its version is kept in $run/<name>.version, so the
# next start (and `up`) keeps it until it is moved again; the profile, its ports and its data stay the stack's.
node_version() { if [[ -s $run/$1.version ]]; then cat "$run/$1.version"; else echo "$stack_version"; fi; }

use_line() {
  # use_line VERSION: this script's line variables (Pulsar, offloader, JDK, the brokers' offloaders directory)
  # for VERSION, in place of the stack's. Called in a subshell, so the caller keeps its own.
  [[ $1 == "$PULSAR_VERSION" ]] && return 0
  PULSAR_VERSION=$1
  unset PULSAR_DIST OFFLOADER_VERSION
  pulsar_line
  build_paths
  broker_offloaders=$run/offloaders-$PULSAR_VERSION
  if [[ -n $LINE_JAVA_HOME && -x $LINE_JAVA_HOME/bin/java ]]; then export PULSAR_JAVA_HOME=$LINE_JAVA_HOME; else unset PULSAR_JAVA_HOME; fi
}

broker_version_is() {  # broker_version_is WEB_PORT VERSION: the broker answering there says it runs VERSION
  local v
  v=$(curl -fsS -m 3 "http://127.0.0.1:$1/admin/v2/brokers/version" 2>/dev/null || true)
  [[ $v == "$2" ]] || { log "FAILED: the broker on port $1 runs ${v:-nothing}, not $2"; return 1; }
}

http_ok() { curl -fsS -m 3 -o /dev/null "$1" 2>/dev/null; }

pid_alive() {
  local f=$run/$1.pid
  [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

pulsar_ready() {
  if [[ $AUTH == 1 ]]; then
    # Authenticated as the superuser, over TLS with the stack's own CA: both must work to be ready.
    [[ -f $auth/admin.token ]] || return 1
    curl -fsS -m 3 -o /dev/null --cacert "$auth/ca.pem" -H "Authorization: Bearer $(cat "$auth/admin.token")" \
      "https://127.0.0.1:$WEB_PORT_TLS/admin/v2/brokers/health" 2>/dev/null &&
      tcp_open "$BROKER_PORT_TLS" &&
      http_ok "http://127.0.0.1:$BOOKIE_HTTP_PORT/heartbeat"
    return
  fi
  http_ok "http://127.0.0.1:$WEB_PORT/admin/v2/brokers/health" &&
    http_ok "http://127.0.0.1:$BOOKIE_HTTP_PORT/heartbeat"
}

# Not /moto-api/data.json: moto 5.2.5 answers it with 500 (MissingBucket) for a while after a multipart
# upload, i.e. after every Pulsar offload, which made a healthy S3 look down.
s3_ready() { http_ok "http://127.0.0.1:$S3_PORT/moto-api/"; }

require_builds() {
  # What a start runs, made beforehand by make (this script builds nothing): PULSAR_VERSION's Pulsar, the
  # offloader NAR with tiered storage, the extension's jar (not older than its sources) with the extension.
  # Missing or stale, `up` stops here, before starting anything, naming the make target that makes it.
  local missing=() targets=() v="PULSAR_VERSION=$PULSAR_VERSION"
  [[ $STACK_CACHE == "$here/.cache" ]] || v+=" STACK_CACHE=$STACK_CACHE"
  pulsar_built || { missing+=("Pulsar $PULSAR_VERSION ($pulsar_home)"); targets+=("make pulsar-dist $v"); }
  if [[ $TIERED_STORAGE == 1 && ! -s $offloader_nar ]]; then
    missing+=("the offloader NAR ($offloader_nar)"); targets+=("make offloader $v")
  fi
  if [[ $BROKER_EXTENSION == 1 ]]; then
    if [[ ! -f $extension_jar ]]; then
      missing+=("the broker extension's jar ($extension_jar)"); targets+=("make broker-extension-jar")
    elif [[ -n $(find "$repo/broker-extension/pom.xml" "$repo/broker-extension/src/main" -newer "$extension_jar" -type f 2>/dev/null | head -1) ]]; then
      missing+=("the broker extension's jar as its sources are now ($extension_jar is older)"); targets+=("make broker-extension-jar")
    fi
  fi
  ((${#missing[@]} == 0)) && return 0
  log "FAILED: not built: $(printf '%s; ' "${missing[@]}" | sed 's/; $//')"
  log "build it with: $(printf '%s; ' "${targets[@]}" | sed 's/; $//') (or all of it: make stack-builds $v); nothing was started"
  exit 1
}

link_offloader() {
  # The broker loads every NAR of its offloadersDirectory: this stack's holds its one offloader only (the
  # cache beside it may hold other versions' for other stacks).
  mkdir -p "$broker_offloaders"
  find "$broker_offloaders" -mindepth 1 -maxdepth 1 -name '*.nar' -delete
  [[ $TIERED_STORAGE == 0 ]] || ln -s "$offloader_nar" "$broker_offloaders/$(basename "$offloader_nar")"
}

offload_said() {  # what the broker offloads with, for the start-up line
  if [[ $TIERED_STORAGE == 1 ]]; then echo "offloader jcloud $OFFLOADER_VERSION"; else echo "no tiered storage"; fi
}

offload_conf() {  # offload_conf FILE: no offload driver with TIERED_STORAGE=0
  [[ $TIERED_STORAGE == 1 ]] || conf_set "$1" managedLedgerOffloadDriver ""
}

mark_key_file() {
  # The secret the brokers sign their pending deletions with and the worker checks them by (HMAC-SHA256,
  # docs/broker-extension.md): 32 random bytes as hex, made once per stack; deleting $STACK_DIR starts afresh.
  [[ -s $mark_key ]] && return 0
  (umask 077 && head -c 32 /dev/urandom | od -An -tx1 -v | tr -d ' \n' >"$mark_key.tmp") && mv -f "$mark_key.tmp" "$mark_key"
}

extension_conf() {  # extension_conf FILE: the broker.conf lines of docs/broker-extension.md
  [[ $BROKER_EXTENSION == 1 ]] || return 0
  mark_key_file
  local defer_broker_deletes=false
  [[ $BROKER_EXTENSION_DEFER == 1 ]] && defer_broker_deletes=true
  conf_apply "$1" "$overrides/broker-extension.conf"
  conf_lines "$1" "${PROFILE_EXTENSION_CONF:-} ${BROKER_EXTENSION_CONF:-}"
}

extension_classpath() {  # what PULSAR_EXTRA_CLASSPATH gets: the jar, or nothing for stock brokers
  [[ $BROKER_EXTENSION == 1 ]] || return 0
  # A copy of this stack's own: `make broker-extension` rewrites target/'s jar in place, and a JVM that
  # loads classes lazily from a jar rewritten under it fails (NoClassDefFoundError on the first topic
  # load). Copied and renamed, so a JVM still running on an earlier copy keeps its file.
  cp -f "$extension_jar" "$run/broker-extension.jar.tmp" && mv -f "$run/broker-extension.jar.tmp" "$run/broker-extension.jar"
  echo "$run/broker-extension.jar"
}

render_conf() {
  # The project's config/standalone.conf with this stack's keys (overrides/standalone.conf, the bookie's
  # reclaim keys, the extension's, no offload driver without tiered storage, AUTH's), then BROKER_CONF.
  local f=$run/standalone.conf
  cp "$repo/config/standalone.conf" "$f"
  conf_apply "$f" "$overrides/standalone.conf"
  extension_conf "$f"
  offload_conf "$f"
  conf_apply "$f" "$overrides/bookie-reclaim.conf"
  if [[ $AUTH == 1 ]]; then auth_material; conf_apply "$f" "$overrides/auth.conf"; fi
  conf_lines "$f" "${BROKER_CONF:-}"
}

auth_material() {
  # PROFILE=auth: an HMAC secret key, one token per role (admin: superuser; worker, phase1, scanner,
  # nobody: granted by the tests), a token signed with another key, and a self-signed certificate for
  # 127.0.0.1 that is its own CA. Made once; `down` keeps them, deleting $STACK_DIR starts afresh.
  [[ -f $auth/ca.pem && -f $auth/admin.token ]] && return 0
  mkdir -p "$auth"
  local role
  "$pulsar_home/bin/pulsar" tokens create-secret-key --output "$auth/secret.key" >&2
  "$pulsar_home/bin/pulsar" tokens create-secret-key --output "$auth/other-secret.key" >&2
  for role in worker phase1 scanner nobody admin; do
    "$pulsar_home/bin/pulsar" tokens create --secret-key "file://$auth/secret.key" --subject "$role" >"$auth/$role.token.tmp"
    mv "$auth/$role.token.tmp" "$auth/$role.token"
  done
  "$pulsar_home/bin/pulsar" tokens create --secret-key "file://$auth/other-secret.key" --subject admin >"$auth/forged-admin.token"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=127.0.0.1" \
    -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
    -keyout "$auth/broker.key.pem" -out "$auth/ca.pem.tmp" 2>/dev/null
  mv "$auth/ca.pem.tmp" "$auth/ca.pem"
  chmod 600 "$auth"/*.token "$auth"/*.key "$auth/broker.key.pem"
  log "auth material in $auth (tokens: admin worker phase1 scanner nobody forged-admin)"
}

running_version_ok() {  # the broker answering on WEB_PORT is PULSAR_VERSION (another stack may hold the port)
  [[ $AUTH == 1 ]] && return 0
  local v
  v=$(curl -fsS -m 3 "http://127.0.0.1:$WEB_PORT/admin/v2/brokers/version" 2>/dev/null || true)
  [[ -z $v || $v == "$PULSAR_VERSION" ]] && return 0
  fail pulsar /dev/null "Pulsar $v answers on port $WEB_PORT, not $PULSAR_VERSION: another stack holds these ports (set WEB_PORT and the other ports, or STACK_DIR)"
}

start_pulsar() {
  if pulsar_ready; then running_version_ok; log "pulsar already up"; return 0; fi
  if pid_alive pulsar; then
    log "pulsar is starting (pid $(cat "$run/pulsar.pid"))"
  else
    require_builds
    link_offloader
    render_conf
    local t0=$SECONDS
    log "starting pulsar $PULSAR_VERSION standalone (web $WEB_PORT, broker $BROKER_PORT, bookie http $BOOKIE_HTTP_PORT, $(offload_said))"
    (
      cd "$STACK_DIR"
      export PULSAR_STANDALONE_USE_ZOOKEEPER=1
      export PULSAR_STANDALONE_CONF=$run/standalone.conf
      export PULSAR_LOG_DIR=$logs
      export PULSAR_LOG_FILE=pulsar-standalone.log
      export PULSAR_PID_DIR=$run
      PULSAR_EXTRA_CLASSPATH=$(extension_classpath)
      export PULSAR_EXTRA_CLASSPATH
      # The aws-s3 offloader's credential chain reads these (moto accepts any).
      export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-testing}
      export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-testing}
      export AWS_JAVA_V1_DISABLE_DEPRECATION_ANNOUNCEMENT=true
      # jclouds' aws-s3 provider knows many regions and then asks GET https://s3.amazonaws.com/<bucket>?location
      # (ignoring the endpoint override) before every upload: ~50 s of futile retries per call offline.  With
      # a single region it skips that lookup; the offloader passes -Djclouds.* system properties to jclouds.
      # (The first part is pulsar_env.sh's default for PULSAR_EXTRA_OPTS, which setting it replaces.)
      export PULSAR_EXTRA_OPTS="${PULSAR_EXTRA_OPTS:- -Dpulsar.allocator.exit_on_oom=true -Dio.netty.recycler.maxCapacityPerThread=4096} -Djclouds.regions=$S3_REGION"
      # 5.0's standalone has no --bookkeeper-port: its bookie listens on a port of the kernel's choosing.
      local bookie_port=(--bookkeeper-port "$BOOKIE_PORT")
      if ((${PULSAR_VERSION%%.*} >= 5)); then bookie_port=(); fi
      setsid nohup "$pulsar_home/bin/pulsar" standalone \
        --no-functions-worker --no-stream-storage \
        --zookeeper-port "$ZK_PORT" "${bookie_port[@]}" \
        --zookeeper-dir "$STACK_DIR/zookeeper" --bookkeeper-dir "$STACK_DIR/bookkeeper" \
        >>"$(start_log "$logs/pulsar.out")" 2>&1 </dev/null &
      echo $! >"$run/pulsar.pid"
    )
    echo $t0 >"$run/pulsar.t0"
  fi
  local deadline=$((SECONDS + STACK_START_TIMEOUT))
  until pulsar_ready; do
    pid_alive pulsar || fail pulsar "$logs/pulsar.out" "process exited during start-up"
    ((SECONDS < deadline)) || fail pulsar "$logs/pulsar.out" "not ready after ${STACK_START_TIMEOUT}s"
    sleep 1
  done
  log "pulsar ready"
}

start_s3() {
  if s3_ready; then log "s3 already up"; else
    [[ -x $PYTHON ]] || fail s3 /dev/null "no python at $PYTHON (run 'make venv')"
    log "starting moto S3 server on 127.0.0.1:$S3_PORT"
    setsid nohup "$PYTHON" -m moto.server -H 127.0.0.1 -p "$S3_PORT" >"$logs/s3.out" 2>&1 </dev/null &
    echo $! >"$run/s3.pid"
    local deadline=$((SECONDS + 60))
    until s3_ready; do
      pid_alive s3 || fail s3 "$logs/s3.out" "process exited during start-up"
      ((SECONDS < deadline)) || fail s3 "$logs/s3.out" "not ready after 60s"
      sleep 0.5
    done
  fi
  # moto keeps buckets in memory: (re)create the offload bucket every time, idempotently.
  curl -fsS -m 5 -o /dev/null -X PUT "http://127.0.0.1:$S3_PORT/$S3_BUCKET" ||
    fail s3 "$logs/s3.out" "could not create bucket $S3_BUCKET"
  log "s3 ready (bucket $S3_BUCKET)"
}

stop_one() {
  local name=$1 f=$run/$1.pid
  [[ -f $f ]] || return 0
  local pid
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    log "stopping $name (pid $pid)"
    # setsid made the pid a process-group leader: signal the group so wrapper children go too.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

ports_free() {
  local p busy=()
  for p in "$@"; do
    if ss -ltnH "sport = :$p" 2>/dev/null | grep -q .; then busy+=("$p"); fi
  done
  [[ ${#busy[@]} -eq 0 ]] || { log "ports still bound: ${busy[*]}"; return 1; }
}

status() {
  local rc=0
  if pulsar_ready; then echo "pulsar: up (web http://127.0.0.1:$WEB_PORT, service pulsar://127.0.0.1:$BROKER_PORT, bookie http://127.0.0.1:$BOOKIE_HTTP_PORT)"
  else echo "pulsar: down"; rc=1; fi
  if s3_ready; then echo "s3: up (http://127.0.0.1:$S3_PORT, bucket $S3_BUCKET)"
  else echo "s3: down"; rc=1; fi
  return $rc
}

# ---------------------------------------------------------------------------------------------------
# PROFILE=cluster: one ZooKeeper, two bookies (each with its HTTP admin API), two brokers of one cluster,
# moto S3 with the jcloud offloader on both brokers.  Every process is a plain foreground `bin/pulsar X`
# under setsid with its own pid file, config, data dir and log; configs are the distribution's own files
# with this profile's keys set (conf_set), so a 3.0 and a 4.0 distribution both work.

conf_set() {  # conf_set FILE KEY VALUE: replace KEY=... or append it
  local f=$1 k=$2 v=$3
  if grep -q "^$k=" "$f"; then
    sed -i "s|^$k=.*|$k=${v//|/\\|}|" "$f"
  else
    echo "$k=$v" >>"$f"
  fi
}

expand() {  # expand TEXT: every ${NAME} replaced by the value of the variable NAME (unset: an error)
  local s=$1 out="" ref name
  while [[ $s =~ \$\{([A-Za-z_][A-Za-z0-9_]*)\} ]]; do
    ref=${BASH_REMATCH[0]} name=${BASH_REMATCH[1]}
    [[ -v $name ]] || { log "FAILED: \${$name} is not set"; exit 1; }
    out+=${s%%"$ref"*}${!name}
    s=${s#*"$ref"}
  done
  printf '%s' "$out$s"
}

conf_apply() {  # conf_apply FILE OVERRIDES: every KEY=VALUE line of the overrides file set in FILE, expanded
  local line
  while IFS= read -r line || [[ -n $line ]]; do
    [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
    conf_set "$1" "${line%%=*}" "$(expand "${line#*=}")"
  done <"$2"
}

conf_lines() {  # conf_lines FILE "KEY=VALUE ...": space-separated lines from the environment, set in FILE, expanded
  local kv
  for kv in $2; do conf_set "$1" "${kv%%=*}" "$(expand "${kv#*=}")"; done
}

tcp_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

component_ready() {  # component_ready NAME
  case $1 in
    zookeeper) tcp_open "$ZK_PORT" ;;
    bookie1) http_ok "http://127.0.0.1:$BOOKIE_HTTP_PORT/heartbeat" ;;
    bookie2) http_ok "http://127.0.0.1:$BOOKIE_HTTP_PORT_2/heartbeat" ;;
    broker1) http_ok "http://127.0.0.1:$WEB_PORT/admin/v2/brokers/health" ;;
    broker2) http_ok "http://127.0.0.1:$WEB_PORT_2/admin/v2/brokers/health" ;;
    *) return 1 ;;
  esac
}

conf_dir() {  # the line's own configuration files (an assembled Pulsar has none: deploy/local/assembly/conf)
  if [[ $PULSAR_DIST == jars ]]; then echo "$here/assembly/conf"; else echo "$pulsar_home/conf"; fi
}

render_node() {
  # render_node NAME: NAME's configuration file, its line's own file with this profile's keys
  # (overrides/cluster-*.conf). Called after use_line for a process on another line.
  local name=$1 c f n=${1: -1}
  c=$(conf_dir)
  f=$run/$name.conf
  local node_port node_http_port node_metrics_port node_dir node_web_port node_broker_port
  case $name in
    zookeeper)
      cp "$c/zookeeper.conf" "$f"
      conf_apply "$f" "$overrides/cluster-zookeeper.conf"
      sed -i 's/^metricsProvider\./#metricsProvider./' "$f"
      ;;
    bookie1 | bookie2)
      node_port=$BOOKIE_PORT node_http_port=$BOOKIE_HTTP_PORT node_dir=$STACK_DIR/bookie$n
      [[ $n == 2 ]] && node_port=$BOOKIE_PORT_2 node_http_port=$BOOKIE_HTTP_PORT_2
      node_metrics_port=$((node_http_port + 100))
      cp "$c/bookkeeper.conf" "$f"
      conf_apply "$f" "$overrides/cluster-bookie.conf"
      conf_apply "$f" "$overrides/bookie-reclaim.conf"
      ;;
    broker1 | broker2)
      node_web_port=$WEB_PORT node_broker_port=$BROKER_PORT
      [[ $n == 2 ]] && node_web_port=$WEB_PORT_2 node_broker_port=$BROKER_PORT_2
      cp "$c/broker.conf" "$f"
      conf_apply "$f" "$overrides/cluster-broker.conf"
      offload_conf "$f"
      extension_conf "$f"
      conf_lines "$f" "${BROKER_CONF:-}"
      ;;
  esac
}

cluster_nodes=(zookeeper bookie1 bookie2 broker1 broker2)

render_cluster_conf() {  # every process's file, each on its own line
  local name
  for name in "${cluster_nodes[@]}"; do (use_line "$(node_version "$name")" && render_node "$name"); done
}

init_cluster_metadata() {
  [[ -f $STACK_DIR/cluster-initialized ]] && return 0
  log "initialising cluster metadata ($CLUSTER_NAME in zk 127.0.0.1:$ZK_PORT)"
  local mlog=$logs/initialize-cluster-metadata.log
  PULSAR_MEM="-Xmx256m" PULSAR_LOG_DIR=$logs "$pulsar_home/bin/pulsar" initialize-cluster-metadata \
    --cluster "$CLUSTER_NAME" \
    --metadata-store "zk:127.0.0.1:$ZK_PORT" \
    --configuration-metadata-store "zk:127.0.0.1:$ZK_PORT" \
    --web-service-url "http://127.0.0.1:$WEB_PORT" \
    --broker-service-url "pulsar://127.0.0.1:$BROKER_PORT" >"$mlog" 2>&1 ||
    fail initialize-cluster-metadata "$mlog" "could not initialise the cluster metadata"
  touch "$STACK_DIR/cluster-initialized"
}

start_log() {  # start_log FILE: FILE, with a line naming this start appended; earlier starts' output stays
  # (restarts and rolling upgrades are read from it afterwards), one rotation once it passes 256 MiB.
  local f=$1
  if [[ -f $f ]] && (($(stat -c %s "$f") > 268435456)); then mv -f "$f" "$f.1"; fi
  echo "=== stack.sh: start at $(date -u +%FT%TZ) on pulsar $PULSAR_VERSION" >>"$f"
  echo "$f"
}

launch() {  # launch NAME COMMAND CONF_VAR CONF_FILE MEM: `bin/pulsar COMMAND` in its own session
  local name=$1 cmd=$2 confvar=$3 conf=$4 mem=$5
  log "starting $name (pulsar $PULSAR_VERSION)"
  (
    cd "$STACK_DIR"
    export "$confvar=$conf"
    export PULSAR_LOG_DIR=$logs PULSAR_LOG_FILE=$name.log
    export PULSAR_MEM=$mem BOOKIE_MEM=$mem
    export PULSAR_GC_LOG="-Xlog:gc:$logs/$name-gc.log:time,uptime:filecount=2,filesize=5M"
    export BOOKIE_GC_LOG=$PULSAR_GC_LOG
    if [[ $cmd == broker ]]; then PULSAR_EXTRA_CLASSPATH=$(extension_classpath); export PULSAR_EXTRA_CLASSPATH; fi
    export AWS_ACCESS_KEY_ID=${AWS_ACCESS_KEY_ID:-testing}
    export AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY:-testing}
    export AWS_JAVA_V1_DISABLE_DEPRECATION_ANNOUNCEMENT=true
    # See start_pulsar for why jclouds gets a single region.
    export PULSAR_EXTRA_OPTS="${PULSAR_EXTRA_OPTS:- -Dpulsar.allocator.exit_on_oom=true -Dio.netty.recycler.maxCapacityPerThread=4096} -Djclouds.regions=$S3_REGION"
    setsid nohup "$pulsar_home/bin/pulsar" "$cmd" >>"$(start_log "$logs/$name.out")" 2>&1 </dev/null &
    echo $! >"$run/$name.pid"
  )
}

wait_ready() {  # wait_ready NAME...
  local deadline=$((SECONDS + STACK_START_TIMEOUT)) name pending
  while :; do
    pending=()
    for name in "$@"; do
      component_ready "$name" && continue
      pid_alive "$name" || fail "$name" "$logs/$name.log" "process exited during start-up (stdout: $logs/$name.out)"
      pending+=("$name")
    done
    [[ ${#pending[@]} -eq 0 ]] && break
    ((SECONDS < deadline)) || fail "${pending[0]}" "$logs/${pending[0]}.log" "not ready after ${STACK_START_TIMEOUT}s"
    sleep 1
  done
  log "ready: $*"
}

start_component() {
  # start_component NAME [VERSION]: idempotent; a component that died (kill -9) starts again on its data, on
  # VERSION (default: the one it last ran) from that line's build, with that line's configuration file.
  local name=$1 version=${2:-$(node_version "$1")}
  [[ " ${cluster_nodes[*]} " == *" $name "* ]] || { echo "stack: unknown component $name" >&2; exit 2; }
  component_ready "$name" && return 0
  if pid_alive "$name"; then log "$name is starting (pid $(cat "$run/$name.pid"))"; return 0; fi
  (
    use_line "$version"
    require_builds
    render_node "$name"
    case $name in
      zookeeper) launch zookeeper zookeeper PULSAR_ZK_CONF "$run/zookeeper.conf" "$ZK_MEM" ;;
      bookie1 | bookie2) launch "$name" bookie PULSAR_BOOKKEEPER_CONF "$run/$name.conf" "$PULSAR_MEM" ;;
      broker1 | broker2) link_offloader; launch "$name" broker PULSAR_BROKER_CONF "$run/$name.conf" "$PULSAR_MEM" ;;
    esac
  )
  echo "$version" >"$run/$name.version"
}

node_web_port() { case $1 in broker1) echo "$WEB_PORT" ;; broker2) echo "$WEB_PORT_2" ;; esac; }

cluster_up() {
  local t0=$SECONDS n
  # Every build the processes to start need, before anything starts (each on the line it runs).
  for n in "${cluster_nodes[@]}"; do component_ready "$n" || (use_line "$(node_version "$n")" && require_builds); done
  start_s3
  start_component zookeeper
  wait_ready zookeeper
  init_cluster_metadata
  start_component bookie1
  start_component bookie2
  wait_ready bookie1 bookie2
  start_component broker1
  start_component broker2
  wait_ready broker1 broker2
  log "cluster $CLUSTER_NAME (pulsar $(node_versions), $(offload_said)) ready; up took $((SECONDS - t0)) s"
}

cluster_ports() {
  echo "$WEB_PORT $WEB_PORT_2 $BROKER_PORT $BROKER_PORT_2 $BOOKIE_PORT $BOOKIE_PORT_2" \
    "$BOOKIE_HTTP_PORT $BOOKIE_HTTP_PORT_2 $ZK_PORT $S3_PORT"
}

cluster_down() {
  local n
  for n in broker1 broker2 bookie1 bookie2 zookeeper s3; do stop_one "$n"; done
  # shellcheck disable=SC2046
  ports_free $(cluster_ports) || { sleep 3; ports_free $(cluster_ports); }
}

node_versions() {  # NAME:VERSION of every process, comma-separated
  local name out=()
  for name in "${cluster_nodes[@]}"; do out+=("$name:$(node_version "$name")"); done
  (IFS=,; echo "${out[*]}")
}

cluster_status() {
  local rc=0 n
  for n in "${cluster_nodes[@]}"; do
    if component_ready "$n"; then echo "$n: up (pulsar $(node_version "$n"))"; else echo "$n: down"; rc=1; fi
  done
  if s3_ready; then echo "s3: up (http://127.0.0.1:$S3_PORT, bucket $S3_BUCKET)"; else echo "s3: down"; rc=1; fi
  return $rc
}

cluster_env() {
  cat <<EOF
CLUSTER_NAME=$CLUSTER_NAME
PULSAR_ADMIN_URL=http://127.0.0.1:$WEB_PORT
PULSAR_ADMIN_URL_2=http://127.0.0.1:$WEB_PORT_2
PULSAR_SERVICE_URL=pulsar://127.0.0.1:$BROKER_PORT,127.0.0.1:$BROKER_PORT_2
PULSAR_SERVICE_URL_1=pulsar://127.0.0.1:$BROKER_PORT
PULSAR_SERVICE_URL_2=pulsar://127.0.0.1:$BROKER_PORT_2
BOOKIE_HTTP_URL=http://127.0.0.1:$BOOKIE_HTTP_PORT
BOOKIE_HTTP_URL_2=http://127.0.0.1:$BOOKIE_HTTP_PORT_2
BOOKIE_ID=127.0.0.1:$BOOKIE_PORT
BOOKIE_ID_2=127.0.0.1:$BOOKIE_PORT_2
NODE_VERSIONS=$(node_versions)
EOF
}

standalone_env() {
  if [[ $AUTH == 1 ]]; then
    cat <<EOF
PULSAR_ADMIN_URL=https://127.0.0.1:$WEB_PORT_TLS
PULSAR_ADMIN_URL_PLAIN=http://127.0.0.1:$WEB_PORT
PULSAR_SERVICE_URL_TLS=pulsar+ssl://127.0.0.1:$BROKER_PORT_TLS
PULSAR_TLS_CA=$auth/ca.pem
PULSAR_TOKEN_DIR=$auth
EOF
  else
    echo "PULSAR_ADMIN_URL=http://127.0.0.1:$WEB_PORT"
  fi
  cat <<EOF
PULSAR_SERVICE_URL=pulsar://127.0.0.1:$BROKER_PORT
BOOKIE_HTTP_URL=http://127.0.0.1:$BOOKIE_HTTP_PORT
NODE_VERSIONS=pulsar:$(node_version pulsar)
EOF
}

stack_env() {  # the addresses a client needs, KEY=VALUE per line
  mark_key_file
  cat <<EOF
PROFILE=$PROFILE
KIND=$KIND
AUTH=$AUTH
PULSAR_VERSION=$PULSAR_VERSION
EOF
  if [[ $KIND == cluster ]]; then cluster_env; else standalone_env; fi
  cat <<EOF
ZOOKEEPER_HOSTS=127.0.0.1:$ZK_PORT
S3_ENDPOINT=http://127.0.0.1:$S3_PORT
S3_BUCKET=$S3_BUCKET
S3_REGION=$S3_REGION
STACK_DIR=$STACK_DIR
PULSAR_HOME=$pulsar_home
BROKER_MARK_KEY_FILE=$mark_key
TIERED_STORAGE=$TIERED_STORAGE
EOF
}

as_json() {  # KEY=VALUE lines on stdin as one JSON object of strings
  local line k v sep="" out="{"
  while IFS= read -r line; do
    k=${line%%=*} v=${line#*=}
    v=${v//\\/\\\\} v=${v//\"/\\\"}
    out+="$sep\"$k\": \"$v\"" sep=", "
  done
  echo "$out}"
}

show_env() {  # `env`: KEY=VALUE lines; `env --json`: one JSON object (testkit reads it)
  case ${1:-} in
    "") stack_env ;;
    --json) stack_env | as_json ;;
    *) echo "usage: $0 env [--json]" >&2; exit 2 ;;
  esac
}

if [[ $KIND == cluster ]]; then
  case ${1:-} in
    up) cluster_up ;;
    down) cluster_down ;;
    status) cluster_status ;;
    env) show_env "${2:-}" ;;
    # Fault tests: `kill9 broker2` (no shutdown at all), `stop broker2` (graceful), `start broker2`.
    kill9)
      if [[ -f $run/${2:?component}.pid ]]; then kill -KILL -- "-$(cat "$run/$2.pid")" 2>/dev/null || true; fi
      rm -f "$run/$2.pid"
      ;;
    stop) stop_one "${2:?component}" ;;
    render)
      pulsar_built || { log "FAILED: the cluster's configuration starts from Pulsar $PULSAR_VERSION's, not built: make pulsar-dist PULSAR_VERSION=$PULSAR_VERSION"; exit 1; }
      render_cluster_conf
      log "configuration in $run"
      ;;
    # `start C [VERSION]`: C on VERSION (default: the version it last ran); `restart C [VERSION]`: stopped
    # gracefully first. A rolling upgrade is `restart` of one process after another; a rollback the same.
    start | restart)
      [[ $1 == restart ]] && stop_one "${2:?component}"
      start_component "${2:?component}" "${3:-}"
      wait_ready "$2"
      if [[ $2 == broker* ]]; then broker_version_is "$(node_web_port "$2")" "$(node_version "$2")" || exit 1; fi
      ;;
    *)
      echo "usage: PROFILE=$PROFILE $0 up|down|status|env [--json]|kill9 C|stop C|start C [VERSION]|restart C [VERSION]" \
        "(C: zookeeper bookie1 bookie2 broker1 broker2)" >&2
      exit 2
      ;;
  esac
  exit 0
fi

case ${1:-} in
  up)
    version=$(node_version pulsar)
    (use_line "$version" && { pulsar_ready || pid_alive pulsar || require_builds; })
    start_s3
    (use_line "$version" && start_pulsar)
    if [[ -f $run/pulsar.t0 ]]; then log "pulsar start took $((SECONDS - $(cat "$run/pulsar.t0"))) s"; rm -f "$run/pulsar.t0"; fi
    ;;
  down)
    stop_one pulsar
    stop_one s3
    ports_free "$WEB_PORT" "$BROKER_PORT" "$BOOKIE_PORT" "$BOOKIE_HTTP_PORT" "$ZK_PORT" "$S3_PORT" || sleep 3
    ports_free "$WEB_PORT" "$BROKER_PORT" "$BOOKIE_PORT" "$BOOKIE_HTTP_PORT" "$ZK_PORT" "$S3_PORT"
    ;;
  restart-pulsar)
    # For fault tests: the broker (and its bookie and ZooKeeper) goes away and comes back on the same
    # data; S3 is left alone. `restart-pulsar VERSION`: it comes back on VERSION (an upgrade, or a rollback).
    version=${2:-$(node_version pulsar)}
    (use_line "$version" && require_builds)
    stop_one pulsar
    ports_free "$WEB_PORT" "$BROKER_PORT" "$BOOKIE_PORT" "$BOOKIE_HTTP_PORT" "$ZK_PORT" || sleep 3
    (use_line "$version" && start_pulsar)
    echo "$version" >"$run/pulsar.version"
    ;;
  status) status ;;
  env) show_env "${2:-}" ;;
  render) render_conf; log "configuration in $run" ;;
  *) echo "usage: PROFILE=$PROFILE $0 up|down|status|env [--json]|restart-pulsar [VERSION]" >&2; exit 2 ;;
esac
