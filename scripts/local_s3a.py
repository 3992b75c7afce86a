"""Hadoop's S3 connector (s3a://) for the tests and the docs' walk-throughs: ``hadoop-aws`` of the Hadoop a
Spark installation was built with, and the AWS SDK modules it calls, fetched by Maven into its local repository
(~/.m2), to hand spark-submit with --jars as a user would (a user more often gives
``--packages org.apache.hadoop:hadoop-aws:<Hadoop>``, which brings the SDK's whole bundle: 281 MB for Hadoop
3.3's SDK v1, 686 MB for 3.5's SDK v2).

    .venv/bin/python scripts/local_s3a.py jars SPARK_HOME   # the --jars value for a job on that Spark

Only the SDK's S3, STS and transfer-manager modules are fetched (11 MB for Hadoop 3.3.4, 19 MB for 3.5.0), in
the version hadoop-aws's own pom names for its bundle; of what Maven resolves, a jar whose artifact Spark ships
already (Netty, Jackson, Apache's HTTP client) is left out, so that Spark's own version is the one loaded.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from local_kafka import classpath, dependency_tree  # noqa: E402 - Maven's resolution, shared with Kafka's connector

# The SDK's bundle per generation (hadoop-aws 3.3 depends on v1's, 3.4 and later on v2's), and the modules of
# it that s3a loads: the S3 client, STS (assumed roles; its classes are named in s3a's credential providers) and,
# in v1, DynamoDB (S3Guard's classes, still linked in 3.3), in v2 the transfer manager.
BUNDLES = {"com.amazonaws:aws-java-sdk-bundle": ("aws-java-sdk-s3", "aws-java-sdk-sts", "aws-java-sdk-dynamodb"),
           "software.amazon.awssdk:bundle": ("s3", "sts", "s3-transfer-manager")}


def hadoop_version(spark_home: Path) -> str:
    """The Hadoop a Spark installation runs: the version of its hadoop-client-api jar."""
    for jar in (spark_home / "jars").glob("hadoop-client-api-*.jar"):
        return jar.name[len("hadoop-client-api-"):-len(".jar")]
    raise SystemExit(f"{spark_home}/jars has no hadoop-client-api jar: not a Spark built with Hadoop 3")


def _sdk(hadoop: str) -> tuple[str, str]:
    """(the bundle's group:artifact, its version) that hadoop-aws ``hadoop`` depends on."""
    tree = dependency_tree(f"org.apache.hadoop:hadoop-aws:{hadoop}")
    for bundle in BUNDLES:
        found = re.search(rf"{re.escape(bundle)}:jar:([\w.-]+):", tree)
        if found:
            return bundle, found.group(1)
    raise RuntimeError(f"hadoop-aws {hadoop} depends on no AWS SDK bundle this script knows: {', '.join(BUNDLES)}")


def s3a_jars(spark_home: Path) -> list[str]:
    """The jars a job on the Spark at ``spark_home`` needs for s3:// and s3a:// paths (spark-submit --jars)."""
    hadoop = hadoop_version(spark_home)
    bundle, version = _sdk(hadoop)
    connector = f"org.apache.hadoop:hadoop-aws:{hadoop}"
    modules = [f"{bundle.split(':')[0]}:{module}:{version}" for module in BUNDLES[bundle]]
    # Hadoop's own artifacts are Spark's already (shaded into hadoop-client-api/-runtime); the bundle is
    # replaced by its modules.
    resolved = classpath([connector, *modules], {connector: ["org.apache.hadoop:*", bundle]})
    shipped = {_artifact(jar.name) for jar in (spark_home / "jars").glob("*.jar")}
    return [jar for jar in resolved if _artifact(Path(jar).name) not in shipped]


def _artifact(jar_name: str) -> str:
    """A jar's artifact name without its version: netty-codec-http-4.1.126.Final.jar -> netty-codec-http."""
    return re.sub(r"-\d[\w.+-]*\.jar$", "", jar_name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    jars = commands.add_parser("jars", help="the --jars value for a job on the Spark at SPARK_HOME")
    jars.add_argument("spark_home", type=Path)
    args = parser.parse_args()
    print(",".join(s3a_jars(args.spark_home)))


if __name__ == "__main__":
    main()
