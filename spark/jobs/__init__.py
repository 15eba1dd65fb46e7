"""Spark jobs the control plane launches: ``python -m spark.jobs.export --spec FILE`` and
``python -m spark.jobs.index --spec FILE``. The spec (``spec``) is the whole contract:
the job reads it, does its work, prints one ``JobResult`` JSON line last on stdout and
exits 0 (done) or 1 (failed, the result saying why)."""
