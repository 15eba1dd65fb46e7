"""Meridian on Spark: the ``meridian`` data source, Parquet export, secondary indexes.

- ``session``: a local (or ``MERIDIAN_SPARK_MASTER``) SparkSession with the data source
  registered; the one way jobs and tests get a session.
- ``columns``: the topic schema (Arrow and Spark DDL) and the columnar decode of records
  into Arrow record batches, shared by the data source, the export and the index build.
- ``jobs``: the job specifications the control plane writes and the jobs that run them.

Modules the control plane imports (``jobs.spec`` and the index query) never import
pyspark: the control plane's processes never start a JVM.
"""
