#!/usr/bin/env bash
# Sets up (scripts/setup.sh, scripts/spark-versions.sh), lints, and runs the test suite: unit tests, real-Spark
# tests on the project's Spark 4.3, and the compatibility suite on each supported Spark (tests/compat).
# Arguments go to pytest, e.g. `scripts/test.sh -m "not spark"` for the quick subset.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/spark-versions.sh  # the other supported Sparks, for tests/compat
export SPARK_LOCAL_IP=127.0.0.1
.venv/bin/ruff check --quiet sparkpoint tests scripts
exec .venv/bin/python -m pytest "$@"
