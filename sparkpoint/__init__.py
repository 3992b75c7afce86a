"""Flink-style savepoints for Apache Spark Structured Streaming."""
