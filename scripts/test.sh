#!/usr/bin/env bash
# Sets up (scripts/setup.sh), lints, and runs the test suite: unit tests, then real-Spark tests.
# Arguments go to pytest, e.g. `scripts/test.sh -m "not spark"` for the quick subset.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export SPARK_LOCAL_IP=127.0.0.1
.venv/bin/ruff check --quiet sparkpoint tests scripts
exec .venv/bin/python -m pytest "$@"
