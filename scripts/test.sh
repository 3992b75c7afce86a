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
# The documentation site, strictly: a broken link or a page out of the navigation fails the run. (Not --quiet:
# it hides the warnings from --strict too.)
site=$(mktemp -d)
if ! NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$site/html" >"$site/build.log" 2>&1; then
  cat "$site/build.log" >&2
  exit 1
fi
rm -rf "$site"
# What CI shows of a run is its beginning: how long the set-up took (on a fresh machine, mostly the Sparks' builds).
echo "Set up in ${SECONDS} s; the tests follow." >&2
# Two tests at a time, on two pytest-xdist workers (tests/conftest.py says which tests share one): a Spark test
# waits on triggers, YARN's heartbeats and brokers for much of its time, and the other test uses that CPU. A
# later -n (-n 0: one at a time) wins.
exec .venv/bin/python -m pytest -n 2 "$@"
