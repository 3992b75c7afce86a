"""Delta Lake for the tests and the docs' walk-throughs: the ``io.delta`` jars of the Delta release for each
supported Spark minor, fetched by Maven into its local repository (~/.m2), to hand spark-submit with --jars as a
user would. A job reads and writes tables with ``format("delta")``; sparkpoint itself reads their logs, and
writes them through the ``deltalake`` package (the ``delta`` extra), without Spark.

    .venv/bin/python scripts/local_delta.py fetch      # every minor's jars into ~/.m2 (once: then nothing)
    .venv/bin/python scripts/local_delta.py jars 4.2   # the --jars value for a job on Spark 4.2

Covered: 3.5 (Delta 3.3.2, the last line built for Spark 3.5), 4.0, 4.1 and 4.2 (Delta 4.4.0, published per
Spark minor: delta-spark_4.0_2.13, _4.1_2.13, _4.2_2.13). Spark 4.3 has no Delta release yet: 4.4.0's build for
4.2 fails on 4.3.0 at its first batch (NoSuchMethodError on LogicalRDD's constructor), so none is offered.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_kafka import classpath  # noqa: E402 - Maven's resolution, shared with Kafka's connector

RELEASES = {"3.5": "io.delta:delta-spark_2.12:3.3.2", "4.0": "io.delta:delta-spark_4.0_2.13:4.4.0",
            "4.1": "io.delta:delta-spark_4.1_2.13:4.4.0", "4.2": "io.delta:delta-spark_4.2_2.13:4.4.0"}
# Delta's own jars; the rest of what Maven resolves (Hadoop, Parquet, Jackson, ...) is Spark's already, in
# the versions Spark was built with.
DELTA_GROUP = "/io/delta/"
# Delta's session extension and catalog, which its writes require (Delta 3.3 to 4.4), as `--conf KEY=VALUE`.
SESSION_CONFS = ["spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
                 "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog"]


def covered(minor: str) -> bool:
    return minor in RELEASES


def delta_jars(minor: str) -> list[str]:
    """The jars a Spark ``minor`` job needs to read and write Delta tables (spark-submit --jars)."""
    if minor not in RELEASES:
        raise SystemExit(f"no Delta release for Spark {minor}: covered are {', '.join(RELEASES)}")
    return [jar for jar in classpath([RELEASES[minor]]) if DELTA_GROUP in jar.replace("\\", "/")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("fetch", help="every covered minor's jars into ~/.m2")
    jars = commands.add_parser("jars", help="the --jars value for a job on a Spark minor")
    jars.add_argument("minor", choices=sorted(RELEASES))
    args = parser.parse_args()
    if args.command == "fetch":
        for minor, release in RELEASES.items():
            print(f"Spark {minor}: {len(delta_jars(minor))} jars of {release}")
    else:
        print(",".join(delta_jars(args.minor)))


if __name__ == "__main__":
    main()
