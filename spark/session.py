"""The SparkSession every job and test uses.

``local_session()`` builds (or returns the running) session: local mode on this
machine's cores unless ``MERIDIAN_SPARK_MASTER`` names a cluster (``spark://…``,
``yarn``, ``k8s://…``), the same job code either way. It pins what a quiet, reproducible
local run needs: the driver on 127.0.0.1 (in local mode only: a cluster's executors
must reach the driver), no UI, UTC session time, few shuffle partitions, the workers on
this interpreter (so they import pyarrow and Meridian), and Python data-source filter
pushdown on (``spark.source`` prunes splits with it). The ``meridian`` data source is
registered on it. Spill and shuffle files go to one scratch folder per process,
removed when the interpreter exits.

Java: Spark 4 needs Java 17 or later. ``JAVA_HOME`` wins; else the first JDK of
``JAVA_CANDIDATES`` present; else whatever ``java`` is on PATH.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import sys
import tempfile
from typing import TYPE_CHECKING

from spark.source import MeridianDataSource

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

MASTER_ENV = "MERIDIAN_SPARK_MASTER"
JAVA_CANDIDATES = (
    "/usr/lib/jvm/java-21-openjdk-amd64",
    "/usr/lib/jvm/java-17-openjdk-amd64",
)


def java_home() -> str | None:
    """The JDK Spark will run on: ``JAVA_HOME`` or the first candidate present."""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    for candidate in JAVA_CANDIDATES:
        if os.access(os.path.join(candidate, "bin", "java"), os.X_OK):
            return candidate
    return None


def master() -> str:
    """The Spark master: ``MERIDIAN_SPARK_MASTER``, else local mode on every core."""
    return os.environ.get(MASTER_ENV) or f"local[{os.cpu_count() or 2}]"


def is_local(spark_master: str) -> bool:
    """Whether ``spark_master`` runs everything in this process (``local``, ``local[4]``)."""
    return spark_master.startswith("local")


@functools.cache
def scratch_dir() -> str:
    """This process's scratch folder (spill, shuffle, warehouse), removed at exit."""
    path = tempfile.mkdtemp(prefix="meridian-spark-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def session_config(spark_master: str, *, memory: str) -> dict[str, str]:
    """The settings ``local_session`` builds its session with on ``spark_master``."""
    cores = str(os.cpu_count() or 2)
    scratch = scratch_dir()
    config = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": cores,
        "spark.default.parallelism": cores,
        "spark.driver.memory": memory,
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.python.filterPushdown.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.local.dir": scratch,
        "spark.sql.warehouse.dir": os.path.join(scratch, "warehouse"),
    }
    if is_local(spark_master):
        config["spark.driver.host"] = config["spark.driver.bindAddress"] = "127.0.0.1"
    return config


def local_session(app: str = "meridian", *, memory: str = "1g") -> SparkSession:
    """The session (created on first call; later calls return the running one)."""
    spark_master = master()
    if is_local(spark_master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    home = java_home()
    if home:
        os.environ["JAVA_HOME"] = home
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(spark_master).appName(app)
    for name, value in session_config(spark_master, memory=memory).items():
        builder = builder.config(name, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    _register(spark)
    return spark


def _register(spark: SparkSession) -> None:
    spark.dataSource.register(MeridianDataSource)
