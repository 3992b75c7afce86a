#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the demo: a real streaming query is savepointed, its
# checkpoint deleted, the savepoint restored elsewhere, and the query continues with its state.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export SPARK_LOCAL_IP=127.0.0.1
exec .venv/bin/python scripts/demo.py "$@"
