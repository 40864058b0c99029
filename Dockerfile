# The worker as operators run it: next to the brokers, scaled out through the Shared subscription.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY worker ./worker
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
RUN useradd --system --uid 10001 ldw
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
# The example config targets the local stack on loopback: mount your own over it, or override keys with
# LDW_<SECTION>__<KEY> variables. Metrics must be reachable from outside the container.
COPY config/worker.example.yaml /etc/ledger-deletion-worker/worker.yaml
ENV LDW_HTTP__HOST=0.0.0.0 \
    PYTHONUNBUFFERED=1
USER ldw
EXPOSE 8090
HEALTHCHECK --interval=15s --timeout=3s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8090/healthz', timeout=2).status == 200 else 1)"
ENTRYPOINT ["ledger-deletion-worker"]
CMD ["run", "--config", "/etc/ledger-deletion-worker/worker.yaml"]
