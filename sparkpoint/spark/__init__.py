"""Spark's side of a savepoint: its on-disk formats (logs, state layouts, the cut and its plan, relocation)
and, lazily, its state data source. The only code that parses Spark's files."""
