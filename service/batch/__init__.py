"""Bulk jobs on PySpark (docs/pipeline.md): a thin layer around the core, like the transport.

    replay    archived binlog files -> Parquet, one row per row change (service.batch.replay)
    snapshot  the selected tables -> the Redis mirror, read in key ranges in parallel, ending with
              the checkpoint the service resumes from (service.batch.snapshot)

`local[*]` by default; any Spark master (`--master spark://...`, `yarn`, `k8s://...`) when one
machine is not enough. pyspark is an optional dependency (`pip install 'binlog-mirror[spark]'`).
"""
