"""A path as the driver's Hadoop file system qualifies it: a Delta table's, as Delta resolves it (the sink a
query names, the source it reads, the table a foreachBatch writes)."""

from __future__ import annotations


def qualified(session, path: str) -> str:
    """``path`` as the driver's Hadoop file system qualifies it for the (JVM) ``session`` (a relative path against
    its working directory); as given when that fails."""
    from pyspark import SparkContext

    try:
        hadoop_path = SparkContext._jvm.org.apache.hadoop.fs.Path(path)
        fs = hadoop_path.getFileSystem(session.sessionState().newHadoopConf())
        return str(fs.makeQualified(hadoop_path).toString())
    except Exception:  # noqa: BLE001 - py4j gone, a scheme without a file system here: the path as the sink has it
        return path
