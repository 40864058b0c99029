"""One way to get a SparkSession for the nightly jobs, with the ``pulsar`` data source registered (also as
``pulsar-ldw``); the settings the executors get; the Parquet report, written and read back."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from worker.settings import ConfigError, Settings


def session(master: str | None = None, app_name: str = "ledger-deletion-worker", **conf: str) -> Any:
    """``master`` None: whatever ``spark-submit`` / ``spark.master`` says, else ``local[*]``."""
    # Executors must run this interpreter (the one with the worker package installed), not whatever
    # ``python3`` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if not os.environ.get("PYSPARK_GATEWAY_PORT") and (master is None or master.startswith("local")):
        # Launched from plain Python for a local run (spark-submit has started the JVM already otherwise):
        # bind the driver to loopback, not to whatever address the host name resolves to.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app_name)
    if master:
        b = b.master(master)
    # Otherwise no master is set here: spark-submit's (or spark.master's) wins, and a plain Python run gets
    # PySpark's own default, local[*].
    b = b.config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    register_sources(spark)
    return spark


def register_sources(spark: Any) -> None:
    """``format("pulsar")`` and ``format("pulsar-ldw")``: the same source. Spark prefers a JVM source of
    the same name (StreamNative's pulsar-spark connector registers ``pulsar``) when one is on the classpath;
    ``pulsar-ldw`` is this one whatever the classpath holds."""
    # Lazy: worker.nightly.source imports pyspark, which this module must not load on import.
    from worker.nightly.source import PulsarDataSource, UnambiguousPulsarDataSource

    spark.dataSource.register(PulsarDataSource)
    spark.dataSource.register(UnambiguousPulsarDataSource)


T = TypeVar("T")


def on_driver(coro: Coroutine[Any, Any, T]) -> T:
    """Run a check on the driver on a loop of its own: the job may be called from a running loop (a
    notebook, a test, the CLI's own), where ``asyncio.run`` refuses to start another."""
    with ThreadPoolExecutor(1, thread_name_prefix="driver-check") as pool:
        return pool.submit(asyncio.run, coro).result()


def spark_running() -> bool:
    """A session already exists in this process (a notebook, a test): a command must not stop it."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def write_report(df: Any, path: str, after_write: Callable[[str], None] | None = None) -> Any:
    """Append ``df`` to the Parquet report at ``path`` (partitioned by ``run_date``) and return the report
    as a DataFrame of the same schema, read back from ``path``; ``after_write(path)`` runs in between.
    A run with no rows writes no file; without the schema given, reading a root that holds none (the
    first run of an empty DLQ) fails to infer one."""
    df.write.mode("append").partitionBy("run_date").parquet(path)
    if after_write is not None:
        after_write(path)
    return df.sparkSession.read.schema(df.schema).parquet(path)


class InlineSecret(ConfigError):
    """A secret given inline: the nightly jobs would have to ship it to their executors."""


def inline_secrets(settings: Settings) -> list[str]:
    """The settings keys holding a secret value no executor could read for itself."""
    out = []
    p = settings.pulsar
    if p.auth_token and p.auth_token_file is None:
        out.append("pulsar.auth_token (use pulsar.auth_token_file / LDW_PULSAR__AUTH_TOKEN_FILE)")
    for i, t in enumerate(settings.offload.s3_targets):
        for key in ("access_key_id", "secret_access_key"):
            if getattr(t, key) and getattr(t, f"{key}_file") is None:
                out.append(
                    f"offload.s3_targets[{i}].{key} (use offload.s3_targets[{i}].{key}_file, or leave both keys "
                    "unset for the AWS credential chain of every executor)"
                )
    return out


def executor_settings(settings: Settings) -> str:
    """The settings as every executor gets them (in a closure, pickled into each task): file paths, never
    a secret. Each executor reads the Pulsar token and the S3 keys from those files itself (they must be
    readable there: a mounted secret), or finds S3 credentials in its AWS credential chain. Closures and
    options travel over the network and into logs and query plans; a secret given inline is refused."""
    bad = inline_secrets(settings)
    if bad:
        raise InlineSecret(
            "the nightly jobs never ship a secret to their executors; set these as files instead: " + "; ".join(bad)
        )
    payload = settings.model_dump_json()
    secrets = [settings.pulsar.auth_token] + [
        v for t in settings.offload.s3_targets for v in (t.access_key_id, t.secret_access_key)
    ]
    # The serializers leave out what came from a file; a key added later without one must not slip by.
    if any(v and v in payload for v in secrets):
        raise InlineSecret("a secret value would travel in the executors' settings")
    return payload


def settings_on_executor(payload: str) -> Settings:
    """The settings from :func:`executor_settings`, secrets read here from their files."""
    return Settings.model_validate_json(payload)


def one_frame(batches: Iterator[Any]) -> Any:
    """A partition's pandas batches as one frame (None when it has no rows): runs on an executor."""
    import pandas as pd

    frames = [f for f in batches if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else None


def judged_partitions(
    settings: Settings, schema: str, judge: Callable[[Settings, Any], list[dict[str, Any]]]
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The function ``mapInPandas`` runs on each partition: its batches as one frame, judged on the executor
    with the settings the executor reads itself (``judge(settings, frame)`` -> row dicts), out as the columns
    of ``schema``."""
    # The closure carries file paths, never a secret: each executor reads them itself.
    payload = executor_settings(settings)
    cols = [c.split()[0] for c in schema.split(", ")]

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pandas as pd

        pdf = one_frame(batches)
        if pdf is None:
            return
        rows = judge(settings_on_executor(payload), pdf)
        yield pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)

    return run
