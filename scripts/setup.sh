#!/usr/bin/env bash
# Installs sparkpoint, Spark (pyspark) and the test tools into .venv/ at the project root.
# Needs Java 17 and Python 3.11 on the machine; everything else comes from the package index.
# Re-running is cheap: it reinstalls only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${JAVA_HOME:-}" ] && ! command -v java >/dev/null 2>&1; then
  echo "sparkpoint: error: Java 17 is required (Spark runs on the JVM) and none was found." >&2
  echo "  Install it, e.g. 'apt-get install -y openjdk-17-jre-headless', or set JAVA_HOME." >&2
  exit 10
fi
java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
java_major=$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1) || java_major=""
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  echo "sparkpoint: error: Spark 4 needs Java 17 or newer; found '${java_major:-unknown}' at $java_bin." >&2
  exit 10
fi

python_bin="${PYTHON:-}"
if [ -z "$python_bin" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      python_bin=$candidate
      break
    fi
  done
fi
if [ -z "$python_bin" ]; then
  echo "sparkpoint: error: Python 3.11 is required (set PYTHON=/path/to/python3.11)." >&2
  exit 10
fi

if [ ! -x .venv/bin/python ]; then
  echo "Creating .venv with $python_bin ..." >&2
  "$python_bin" -m venv .venv
fi
stamp=".venv/.sparkpoint-installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "Installing sparkpoint and its dependencies (pyspark is ~450 MB; about a minute the first time) ..." >&2
  .venv/bin/python -m pip install --quiet --upgrade pip
  # The project's own Spark (4.3) comes with the [spark] extra.
  .venv/bin/python -m pip install --quiet -e ".[spark,s3,kafka,delta,test,docs,ui]"
  rm -f .venv/.sparkpoint-installed-*
  touch "$stamp"
fi
# The bytecode a wheel's install writes, which an editable install leaves to the first import; where
# PYTHONDONTWRITEBYTECODE is set (this machine kind), no import writes it, and every CLI process compiled the package
# again (about 0.1 s of each command). A module edited since is compiled in memory, as before.
.venv/bin/python -m compileall -q sparkpoint >/dev/null

# The page's browser tests (tests/unit/test_web_browser.py) drive Debian's Chromium through Playwright (Playwright's
# own browser download does not reach this machine's registries).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "Installing Chromium for the page's browser tests ..." >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium fonts-dejavu-core >/dev/null \
      || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
             chromium fonts-dejavu-core >/dev/null; }
  else
    echo "sparkpoint: note: no Chromium; the page's browser tests need it: apt-get install chromium" >&2
  fi
fi
