#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the test suite: unit tests, then real-Spark tests.
# Arguments go to pytest, e.g. `scripts/test.sh -m "not spark"` for the quick subset.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export SPARK_LOCAL_IP=127.0.0.1
exec .venv/bin/python -m pytest "$@"
