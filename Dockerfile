# The worker as operators run it: next to the brokers, scaled out through the Shared subscription.
#   docker build -t ledger-deletion-worker .                      (target `worker`, the default: last stage)
#   docker build --target nightly -t ledger-deletion-nightly .    (the nightly Spark jobs, with a Java 17 JRE)
#   docker build --target broker-extension -t ledger-deletion-broker-extension .
#                                          (the broker extension's jar, copied onto the brokers by an init container)
# tests/ops/test_dockerfile.py lints this file with hadolint and runs the worker's install steps in a fresh venv.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY worker ./worker
# Every wheel the worker needs, so the runtime stages install offline from /wheels.
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# The broker extension's jar (make broker-extension does the same outside Docker; its unit tests run here too).
FROM maven:3.9-eclipse-temurin-17 AS build-extension
WORKDIR /src
COPY broker-extension ./broker-extension
RUN mvn -B -q -f broker-extension/pom.xml package

# Only the jar and a `cp`: the Apache Pulsar chart's brokers run this as an init container that copies the jar
# into an emptyDir on their classpath (deploy/helm/pulsar-values/, docs/operations.md).
FROM busybox:1.37 AS broker-extension
COPY --from=build-extension /src/broker-extension/target/ledger-deletion-broker-extension.jar /opt/ledger-deletion/
USER 10001
HEALTHCHECK NONE

FROM build AS build-nightly
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[spark]"

FROM ${PYTHON_IMAGE} AS nightly
# PySpark 4 runs on a JVM: Debian bookworm's Java 17 runtime, nothing else.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f /usr/bin/java)")")" /opt/java \
    && useradd --system --uid 10001 --no-create-home ldw
# Architecture-independent (the JRE's directory is named after the architecture).
ENV JAVA_HOME=/opt/java \
    PYTHONUNBUFFERED=1
COPY --from=build-nightly /wheels /wheels
# Our own package, offline from the wheels built above: pinned by construction.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-index --find-links /wheels "ledger-deletion-worker[spark]" && rm -rf /wheels
COPY config/worker.example.yaml /etc/ledger-deletion-worker/worker.yaml
USER 10001
# A batch job: no HTTP server to probe. The CronJob's exit code is its health.
HEALTHCHECK NONE
ENTRYPOINT ["ledger-deletion-worker"]
CMD ["replay-dlq", "--config", "/etc/ledger-deletion-worker/worker.yaml"]

FROM ${PYTHON_IMAGE} AS worker
RUN useradd --system --uid 10001 --no-create-home ldw
COPY --from=build /wheels /wheels
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-index --find-links /wheels ledger-deletion-worker && rm -rf /wheels
# The example config targets the local stack on loopback: mount your own over it (deploy/k8s mounts a
# ConfigMap), or override keys with LDW_<SECTION>__<KEY> variables. Metrics must be reachable from outside.
COPY config/worker.example.yaml /etc/ledger-deletion-worker/worker.yaml
ENV LDW_HTTP__HOST=0.0.0.0 \
    PYTHONUNBUFFERED=1
USER 10001
EXPOSE 8090
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8090/healthz', timeout=2).status != 200)"]
# Exec form: the worker is PID 1 and receives SIGTERM itself, so it drains before it exits.
ENTRYPOINT ["ledger-deletion-worker"]
CMD ["run", "--config", "/etc/ledger-deletion-worker/worker.yaml"]
