"""The SparkSession every job and test uses.

``local_session()`` builds (or returns the running) session: local mode on this
machine's cores unless ``MERIDIAN_SPARK_MASTER`` names a cluster (``spark://…``,
``yarn``, ``k8s://…``), the same job code either way. It pins what a quiet, reproducible
local run needs: the driver on 127.0.0.1, no UI, UTC session time, few shuffle
partitions, the workers on this interpreter (so they import pyarrow and Meridian), and
Python data-source filter pushdown on (``spark.source`` prunes splits with it). The
``meridian`` data source is registered on it.

Java: Spark 4 needs Java 17 or later. ``JAVA_HOME`` wins; else the first JDK of
``JAVA_CANDIDATES`` present; else whatever ``java`` is on PATH.
"""

from __future__ import annotations

import os
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


def local_session(app: str = "meridian", *, memory: str = "1g") -> SparkSession:
    """The session (created on first call; later calls return the running one)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    home = java_home()
    if home:
        os.environ["JAVA_HOME"] = home
    from pyspark.sql import SparkSession

    scratch = tempfile.mkdtemp(prefix="meridian-spark-")
    cores = str(os.cpu_count() or 2)
    spark = (
        SparkSession.builder.master(master())
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", cores)
        .config("spark.default.parallelism", cores)
        .config("spark.driver.memory", memory)
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.local.dir", scratch)
        .config("spark.sql.warehouse.dir", os.path.join(scratch, "warehouse"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    _register(spark)
    return spark


def _register(spark: SparkSession) -> None:
    spark.dataSource.register(MeridianDataSource)
