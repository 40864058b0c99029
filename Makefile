# One entry point for users and CI alike: `make test` is what .ci/run calls.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STACK := deploy/local/stack.sh
CONFIG ?= config/worker.example.yaml
# standalone (the default stack) or cluster (ZooKeeper, two bookies, two brokers: deploy/local/stack.sh)
PROFILE ?= standalone
# The supported Pulsar lines, one row each (version, Java, BookKeeper, offloader, placement):
# deploy/local/pulsar-lines.txt, read here, by deploy/local/stack.sh and build.sh (deploy/local/lines.sh) and by
# testkit; tests/ops/test_pulsar_lines.py checks the poms and the docs' tables against it.
# $(call pulsar_line,COLUMN,MATCH_COLUMN,VALUE): the COLUMN of the first row whose MATCH_COLUMN is VALUE.
PULSAR_LINES := deploy/local/pulsar-lines.txt
pulsar_line = $(shell awk -v c=$(1) -v m=$(2) -v v='$(3)' '$$1 !~ /^\#/ && NF >= 9 && $$m == v { print $$c; exit }' $(PULSAR_LINES))
# The stacks' line (the `default` row) unless PULSAR_VERSION says another; Pulsar 5.0 runs beside it
# (docs/development.md#pulsar-50): assembled from its Maven Central jars, on Java 21+, on ports and data of its own.
PULSAR_VERSION ?= $(call pulsar_line,2,9,default)
PULSAR_VERSION := $(PULSAR_VERSION)
PULSAR5_VERSION ?= $(call pulsar_line,2,1,5.0)
PULSAR5_VERSION := $(PULSAR5_VERSION)
PULSAR5_TESTS ?= tests/integration
# What `make test` runs on 5.0 as well: the broker extension (trims, rollovers, unsubscribe, deletion and offloads
# queued before the metadata forgets, on an instance of its own), one worker end to end on real orphans (both
# routes, cursor and schema ledgers, ZooKeeper deletes, a partitioned topic), the scanner queuing what the worker
# deletes, scalable-topic segments. LDW_PULSAR5=0 skips it.
PULSAR5_SUBSET ?= tests/extension/test_extension.py tests/integration/test_worker_orphans.py \
	tests/extension/test_compaction_schema.py::test_a_schema_ledger_of_a_topic_whose_name_encodes_names_the_topic_as_pulsar_does \
	tests/integration/test_scanner.py::test_scan_queues_orphans_and_the_worker_deletes_them \
	tests/integration/test_scalable_segments.py

.PHONY: venv protos system-packages check helm helm-chart dashboards broker-extension broker-extension-jar pulsar-dist offloader stack-builds stack-builds-pulsar5 stack-down-pulsar5 leak-demo reclaim-demo stack-up stack-down stack-status test test-shared-stack test-own-stacks test-serial test-cluster test-pulsar5 chaos unit integration lint run demo bench bench-bookies bench-extension bench-extension-perf bench-scale bench-purge upgrade-test clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,ops,spark]'
	touch $@

venv: $(VENV)/.installed

# worker/formats/*_pb2.py(i) from the .proto files in worker/formats/proto (grpcio-tools' protoc and
# mypy-protobuf, the test extra); tests/unit/test_bookkeeper_data_formats_pb2.py fails when they differ.
protos: venv
	cd worker/formats/proto && PATH="$(abspath $(VENV))/bin:$$PATH" $(abspath $(PY)) -m grpc_tools.protoc \
	  -I. --python_out=.. --mypy_out=.. *.proto

# The system packages the tests use, from Debian (apt-get, as root; once per machine, .ci/run does it before
# `make test`): Prometheus, promtool and the Pushgateway (alert-rule and scrape tests), openssl (the auth profile's
# certificates), tmux (the terminal tests: the tables at 80 and 200 columns). As root with apt-get there, apt-get is
# always asked to install them, whatever this check finds: apt-get, not PATH, knows what a machine holds, and an
# install of what is there is a no-op (`--no-upgrade`: nothing installed is upgraded; under a second here). The
# package lists are updated only when something is found missing. Not root, or no apt-get: only the check decides.
SYSTEM_COMMANDS := promtool prometheus prometheus-pushgateway openssl tmux
# SYSTEM_PACKAGES_MISSING is the one condition: it prints the commands not on PATH (tests/ops/test_system_packages.py
# runs it with commands taken away). After the install the same check runs again and fails the target, naming what
# is still missing, so `.ci/run` stops here rather than at `make test`. A failed `apt-get update` (a mirror down, no
# lists yet) does not stop the install: the install is what decides, and says so when it fails.
SYSTEM_PACKAGES := prometheus prometheus-pushgateway openssl tmux
# Where Debian's package database is there (dpkg-query), a package it does not hold installed counts as missing too,
# whatever PATH finds: a command can be reached without its package (merged /usr, a copy elsewhere).
SYSTEM_PACKAGES_MISSING = for c in $(SYSTEM_COMMANDS); do command -v $$c >/dev/null || printf '%s ' $$c; done; \
	if command -v dpkg-query >/dev/null; then for p in $(SYSTEM_PACKAGES); do \
	  case "$$(dpkg-query -W -f='$${db:Status-Abbrev}' $$p 2>/dev/null)" in ii*) ;; *) printf 'package:%s ' $$p;; esac; \
	done; fi
system-packages:
	@missing=$$($(SYSTEM_PACKAGES_MISSING)); \
	if [ -n "$$missing" ]; then \
	  echo "system-packages: missing $$missing; installing $(SYSTEM_PACKAGES) (apt-get)"; \
	  apt-get update -qq || echo "system-packages: apt-get update failed; installing from the package lists there are" >&2; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    $(SYSTEM_PACKAGES) || { echo "system-packages: apt-get failed (install)" >&2; exit 1; }; \
	elif [ "$${EUID:-1}" = 0 ] && command -v apt-get >/dev/null; then \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --no-upgrade \
	    $(SYSTEM_PACKAGES) || echo "system-packages: apt-get failed (install of what was found there)" >&2; \
	fi; \
	missing=$$($(SYSTEM_PACKAGES_MISSING)); \
	if [ -n "$$missing" ]; then echo "system-packages: still missing after the install: $$missing" >&2; exit 1; fi

# `make test` installs nothing as root: it says what is missing and which target installs it.
system-packages-present:
	@missing=$$($(SYSTEM_PACKAGES_MISSING)); \
	if [ -n "$$missing" ]; then echo "missing: $$missing(run \`make system-packages\` as root once)" >&2; exit 1; fi

# Helm 3, built from its Go module into .tools/ (the Go toolchain and the module proxy; cached after the first
# build). The version and the default Kubernetes version (1.x of its k8s.io modules) are stamped as Helm's own
# release build does. tests/ops run `helm lint` and `helm template` with it (HELM names the binary).
HELM_VERSION := v3.22.0
HELM_K8S_MINOR := 37
HELM := $(abspath .tools/helm-$(HELM_VERSION))/helm
export HELM
HELM_LDFLAGS := -w -s -X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)
HELM_LDFLAGS += $(foreach p,pkg/chartutil pkg/lint/rules,-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=$(HELM_K8S_MINOR))
$(HELM):
	GOBIN=$(dir $(HELM)) GOFLAGS=-trimpath go install -ldflags '$(HELM_LDFLAGS)' helm.sh/helm/v3/cmd/helm@$(HELM_VERSION)

helm: $(HELM)

# The dashboard (deploy/helm/ledger-deletion-worker/files/ledger-deletion.json) from tools/dashboards.py (tests fail
# when the committed file is stale).
dashboards: venv
	$(PY) -m tools.dashboards

# The settings table in docs/operations.md and config/worker.example.yaml, from the settings' own descriptions
# (worker/settings.py; tests fail when a committed copy is stale).
config-reference: venv
	$(PY) -m tools.config_reference

# From worker/settings.py (tools/helm_chart.py): the chart's config block in values.yaml, its values.schema.json,
# and the Apache Pulsar chart's values overlays in deploy/helm/pulsar-values/ (tests fail when one is stale).
helm-chart: venv
	$(PY) -m tools.helm_chart

# The broker-extension overlays rendered with the Apache Pulsar chart's own templates, on a copy of the chart you
# have (PULSAR_CHART=<directory of charts/pulsar>): not in `make test`, no registry here serves that chart.
helm-overlay-check: venv helm
	@test -n "$(PULSAR_CHART)" || { echo "PULSAR_CHART=<directory of the Apache Pulsar chart, charts/pulsar> is required"; exit 2; }
	PULSAR_CHART=$(PULSAR_CHART) $(VENV)/bin/pytest -q -rfEs -m apache_chart tests/ops/test_pulsar_chart_render.py

# The broker extension's jar (broker-extension/, docs/broker-extension.md): Java 17, Maven, Pulsar's jars from
# Maven Central as provided; checkstyle, then its JUnit tests on the default line's classes (4.0.8). Then the same
# jar's tests on the 4.2 line's classes (-Ppulsar-4.2: LightProto metadata) and, with a Java 21+ (JAVA21_HOME: the
# 5.0 line's java_home in pulsar-lines.txt when present, else the first one under /usr/lib/jvm), on the 5.0 line's
# (-Ppulsar-5.0). The pom's profiles carry those versions (Maven cannot read pulsar-lines.txt; a test compares).
# The stack's brokers load the jar (BROKER_EXTENSION=1, the default).
PULSAR5_JAVA := $(call pulsar_line,3,1,5.0)
PULSAR5_JAVA_HOME := $(call pulsar_line,4,1,5.0)
JAVA21_HOME ?= $(shell if [ -x "$(PULSAR5_JAVA_HOME)/bin/java" ]; then echo "$(PULSAR5_JAVA_HOME)"; exit; fi; \
  for j in /usr/lib/jvm/*/; do \
  v=$$(sed -n 's/^JAVA_VERSION="\([0-9]*\).*/\1/p' "$$j/release" 2>/dev/null); \
  if [ -n "$$v" ] && [ "$$v" -ge $(PULSAR5_JAVA) ]; then echo "$${j%/}"; break; fi; done)
JAVA21_HOME := $(JAVA21_HOME)
EXTENSION_MVN := mvn -B -q -f broker-extension/pom.xml
broker-extension:
	mvn -B -q -f broker-extension/pom.xml package
	$(EXTENSION_MVN) -Ppulsar-4.2 surefire:test
	@if [ -x "$(JAVA21_HOME)/bin/java" ]; then \
	  echo "$(EXTENSION_MVN) -Ppulsar-5.0 -Dtest.jvm=$(JAVA21_HOME)/bin/java surefire:test"; \
	  $(EXTENSION_MVN) -Ppulsar-5.0 -Dtest.jvm=$(JAVA21_HOME)/bin/java surefire:test; \
	else \
	  echo "broker-extension: no Java $(PULSAR5_JAVA)+ (set JAVA21_HOME): its tests on Pulsar 5.0's classes did not run" >&2; \
	fi

# What a stack runs, built apart from stack.sh (which only starts processes and refuses, naming these targets,
# when one is missing): for PULSAR_VERSION (its line: deploy/local/pulsar-lines.txt) under STACK_CACHE
# (deploy/local/.cache), each made once and again only when its inputs change (deploy/local/build.sh).
#   pulsar-dist           apache-pulsar-<version>/: the server distribution unpacked (4.0: downloaded once into
#                         ~/.m2), or Pulsar assembled from pulsar-broker's Maven Central jars (5.0:
#                         deploy/local/assembly/)
#   offloader             offloaders/tiered-storage-jcloud-<offloader>.nar (deploy/local/offloaders/), and on 5.0 the
#                         copy adapted to its broker (deploy/local/OFFLOAD.md)
#   broker-extension-jar  the extension's jar alone (no tests), when a source is newer than it
#   stack-builds          all three; stack-builds-pulsar5 the same for PULSAR5_VERSION
# Every target that starts a stack has them as prerequisites.
BUILD := deploy/local/build.sh
EXTENSION_JAR := broker-extension/target/ledger-deletion-broker-extension.jar
pulsar-dist:
	@PULSAR_VERSION=$(PULSAR_VERSION) bash $(BUILD) pulsar-dist

offloader:
	@PULSAR_VERSION=$(PULSAR_VERSION) bash $(BUILD) offloader

$(EXTENSION_JAR): broker-extension/pom.xml $(shell find broker-extension/src/main -type f)
	mvn -B -q -f broker-extension/pom.xml package -DskipTests
	touch $@

broker-extension-jar: $(EXTENSION_JAR)

stack-builds: pulsar-dist offloader broker-extension-jar

stack-builds-pulsar5:
	@$(MAKE) --no-print-directory stack-builds PULSAR_VERSION=$(PULSAR5_VERSION)

# The Pulsar 5.0 builds unless the 5.0 subset is off (LDW_PULSAR5=0).
PULSAR5_BUILDS := $(if $(filter 0,$(LDW_PULSAR5)),,stack-builds-pulsar5)

# The crash matrix (tools/leak_demo.py): every drop path the extension covers (trim, rollover clean-up, cursor
# switch, unsubscribe, topic and namespace deletion, offload, compaction, schema deletion, delayed-delivery buckets),
# the broker killed with SIGKILL at several points after the drops are fired, restarted; orphans before the worker,
# of them on the queue, after the drain: one table, stock brokers vs the extension vs defer mode, on a stack instance
# of its own (LDW_DEMO_<VAR> moves its ports). Not in `make test`: about an hour. LEAK_DEMO_ARGS, e.g.
# "--modes stock,extension --delays-ms 60 --topics 2" for a short run.
leak-demo: venv broker-extension stack-builds
	$(PY) -m tools.leak_demo $(LEAK_DEMO_ARGS)

# The disk coming back (tools/reclaim_demo.py): bookie bytes before, once written, after the worker's deletes
# and after the garbage collection it asks for (bookkeeper.gc_trigger_bytes). PROFILE=standalone runs on a
# standalone instance of its own (started and stopped), PROFILE=cluster on the cluster profile's two bookies.
reclaim-demo: venv stack-builds
	$(PY) -m tools.reclaim_demo --profile $(PROFILE) $(RECLAIM_DEMO_ARGS)

stack-up: venv stack-builds
	PULSAR_VERSION=$(PULSAR_VERSION) PROFILE=$(PROFILE) bash $(STACK) up

stack-down:
	PULSAR_VERSION=$(PULSAR_VERSION) PROFILE=$(PROFILE) bash $(STACK) down

# The Pulsar 5.0 stack of PROFILE (`make test` leaves it up; .ci/run stops it).
stack-down-pulsar5:
	PULSAR_VERSION=$(PULSAR5_VERSION) PROFILE=$(PROFILE) bash $(STACK) down

stack-status:
	PULSAR_VERSION=$(PULSAR_VERSION) PROFILE=$(PROFILE) bash $(STACK) status

lint: venv
	$(VENV)/bin/ruff check worker tests bench tools testkit
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

unit: venv
	$(VENV)/bin/pytest -q tests/unit

# The inner loop, no service started: the linters, the types, the unit tests.
check: lint unit

# The whole suite against the real local stacks, in two lanes side by side (make -j2; each lane's output is printed
# whole when it ends): the tests on the shared standalone stack, and the suites that start stacks of their own
# (extension, auth, cluster; every profile has ports of its own) followed by the Pulsar 5.0 subset. Then the tests
# marked `serial`: they restart the shared stack, which the second lane reads too. The chaos run is its own target.
# --durations: every run prints its slowest tests, where the time goes.
PYTEST := $(VENV)/bin/pytest -q -rfEs --durations=25 --durations-min=5
TEST_MARKS := not chaos and not apache_chart
test: lint system-packages-present helm broker-extension stack-up $(PULSAR5_BUILDS)
	@rc=0; start=$$SECONDS; \
	$(MAKE) --no-print-directory -k -j2 --output-sync=target test-shared-stack test-own-stacks || rc=$$?; \
	$(MAKE) --no-print-directory test-serial || rc=$$?; \
	echo "make test: the lanes and the serial tests took $$(( (SECONDS - start) / 60 )) min $$(( (SECONDS - start) % 60 )) s"; \
	exit $$rc

# Lane 1: unit, ops and integration tests on the shared standalone stack.
test-shared-stack: venv stack-builds
	@echo "== lane shared-stack: unit, ops, integration on the standalone stack"
	@start=$$SECONDS; rc=0; \
	$(PYTEST) -m "$(TEST_MARKS) and not serial" tests/unit tests/ops tests/integration tests/sparkcluster || rc=$$?; \
	echo "== lane shared-stack: exit $$rc after $$((SECONDS - start)) s"; exit $$rc

# Lane 2: the suites on stacks of their own, then the Pulsar 5.0 subset (its extension tests take the extension
# suite's ports, so they come after it).
test-own-stacks: venv stack-builds $(PULSAR5_BUILDS)
	@echo "== lane own-stacks: extension, auth, cluster, upgrade on stacks of their own, then Pulsar 5.0's subset"
	@start=$$SECONDS; rc=0; \
	$(PYTEST) -m "$(TEST_MARKS) and not serial" tests/extension tests/auth tests/cluster tests/upgrade || rc=$$?; \
	if [[ "$${LDW_PULSAR5:-1}" == 0 ]]; then echo "make test: the Pulsar 5.0 subset skipped (LDW_PULSAR5=0)"; \
	else $(MAKE) --no-print-directory test-pulsar5 PULSAR5_TESTS="$(PULSAR5_SUBSET)" || rc=$$?; fi; \
	echo "== lane own-stacks: exit $$rc after $$((SECONDS - start)) s"; exit $$rc

# The rolling upgrade (tools/upgrade_run.py): the upgrade-cluster profile (one ZooKeeper, two bookies, two brokers with
# the extension; ports and data of its own) started afresh on the default line with a worker draining the queue,
# pulsar-perf produce/consume and a churn of every drop path running throughout; broker1, then broker2 (broker1
# killed with SIGKILL mid-way), then each bookie moved to the 5.0 line, then broker1 rolled back; the queue drained;
# the checks and one row per phase printed and kept under bench/results/. Every broker names its `internal` listener
# (the profile's BROKER_CONF; "--unprepared" runs without). UPGRADE_ARGS, e.g. "--phase-s 60"; about 17 minutes. make test runs the short form (tests/upgrade: a standalone moved to 5.0 and back).
upgrade-test: venv stack-builds stack-builds-pulsar5
	$(PY) -m tools.upgrade_run $(UPGRADE_ARGS)

# The tests that restart the shared stack, alone.
test-serial: venv stack-up
	$(PYTEST) -m "$(TEST_MARKS) and serial" tests

# The integration suite (PULSAR5_TESTS) on Pulsar $(PULSAR5_VERSION): its stack is started if needed and left up
# (`make stack-down-pulsar5` stops it).
test-pulsar5: venv stack-builds-pulsar5
	PULSAR_VERSION=$(PULSAR5_VERSION) PROFILE=standalone bash $(STACK) up
	PULSAR_VERSION=$(PULSAR5_VERSION) $(PYTEST) -m "$(TEST_MARKS)" $(PULSAR5_TESTS)

# Only the tests on the cluster profile (started if it is not up, left up: LDW_CLUSTER_KEEP=1).
test-cluster: venv stack-builds
	LDW_CLUSTER_KEEP=1 $(VENV)/bin/pytest -q -rfEs -m "cluster and not chaos" tests/cluster

# The chaos run on the cluster profile: >= 1,000 ledgers, worker kill -9s, a broker restart, storage faults.
chaos: venv stack-builds
	$(VENV)/bin/pytest -q -rfEs -s -m chaos tests/cluster

# The worker on the stack `stack-up` started (its addresses from `stack.sh env`, so PULSAR_VERSION and the port
# variables are followed over the config's), checking the brokers' marks with the key the stack made for them.
run: stack-up
	eval "$$(PROFILE=$(PROFILE) bash $(STACK) env)" && \
	LDW_PULSAR__SERVICE_URL=$$PULSAR_SERVICE_URL LDW_PULSAR__ADMIN_URL=$$PULSAR_ADMIN_URL \
	LDW_BOOKKEEPER__HTTP_URL=$$BOOKIE_HTTP_URL LDW_ZOOKEEPER__METADATA_STORE_URL=zk:$$ZOOKEEPER_HOSTS \
	LDW_OFFLOAD__S3_TARGETS="[{\"driver\":\"aws-s3\",\"bucket\":\"$$S3_BUCKET\",\"region\":\"$$S3_REGION\",\"endpoint\":\"$$S3_ENDPOINT\",\"access_key_id\":\"testing\",\"secret_access_key\":\"testing\"}]" \
	LDW_WORKER__BROKER_MARK_KEY_FILE=$$BROKER_MARK_KEY_FILE \
	  $(VENV)/bin/ledger-deletion-worker run --config $(CONFIG)

# A newcomer's tour on the local stack: real orphans, scan, the worker deletes them (deploy/local/demo.sh).
demo: venv stack-up
	bash deploy/local/demo.sh

# BENCH_NIGHTLY_ARGS=--quick: 5k dead letters / 20k ledgers instead of 100k / 200k (bench/nightly.py).
bench: venv stack-up
	$(PY) -m bench
	$(PY) -m bench.goals
	$(PY) -m bench.hot_path
	$(PY) -m bench.nightly $(BENCH_NIGHTLY_ARGS)

# scan --dry-run and the audit (Spark local[2]) over a synthetic cluster written straight into ZooKeeper, on a
# standalone instance of its own (web 18080, ZooKeeper 12181; started and stopped by it): 100,000 then
# 1,000,000 ledgers, each run must find exactly the orphans written (bench/scale.py, docs/benchmarks.md).
# BENCH_SCALE_ARGS=--sizes 20000 for a short run. Not part of `make bench`: about an hour on this machine.
bench-scale: venv stack-builds
	$(PY) -m bench.scale $(BENCH_SCALE_ARGS)

# The bookie HTTP route over one bookie endpoint vs both, on the cluster profile (two bookies).
bench-bookies: venv stack-builds
	PROFILE=cluster bash $(STACK) up
	$(PY) -m bench.bookies

# The broker extension's cost (bench/extension.py): produce/consume throughput and latency of a plain topic
# and trims/s, stock brokers vs brokers with the extension, alternated in rounds on two standalone instances
# of its own (started and stopped by it, beside the shared stack). BENCH_EXT_* sizes it.
bench-extension: venv broker-extension stack-builds
	$(PY) -m bench.extension

# The broker extension's cost under Pulsar's own load generator (bench/perf_cost.py): pulsar-perf produce at a fixed
# rate and at its maximum with a pulsar-perf consume, and trims/s, stock brokers vs the extension's with Pulsar's
# rollover defaults: two standalone instances of its own, then one cluster-profile instance of its own whose brokers
# are restarted between the sides; checks the fixed-rate goals. BENCH_PERF_* sizes it (about 40 minutes).
bench-extension-perf: venv broker-extension stack-builds
	$(PY) -m bench.perf_cost

# The purge benchmark (bench/purge.py): retention cut to 0 on 100 topics x 200 closed ledgers (BENCH_PURGE_* sizes
# it), a ZooKeeper probe and a paced producer running, stock brokers vs the extension vs defer mode with the worker
# draining; results under bench/results/. A stack instance of its own (LDW_BENCH_PURGE_<VAR>); not in `make test`.
bench-purge: venv broker-extension stack-builds
	$(PY) -m bench.purge

# The nightly jobs on a Spark cluster whose nodes do not have the project installed (docs/nightly.md):
# dist/ledger_deletion_worker.zip for spark-submit --py-files, dist/node-requirements.txt for the nodes' Python;
# the entry point is deploy/spark/ldw_submit.py.
.PHONY: spark-package spark-cluster-test
spark-package: venv
	$(PY) -m tools.spark_package

# A Spark standalone master and two workers on loopback, the replay and the audit submitted with spark-submit
# and the shipped zip, their reports compared with local[2] on the same data (tests/sparkcluster, 3.5-5 min:
# `make test` skips it). Prints the timings.
spark-cluster-test: venv stack-up
	LDW_SPARK_CLUSTER=1 $(VENV)/bin/pytest -q -rfEs -s tests/sparkcluster

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
