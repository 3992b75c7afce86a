#!/usr/bin/env bash
# Installs the Spark versions sparkpoint supports besides the project's own (4.3, in .venv/), each into a
# directory of its own, .venv-spark/<minor>/pyspark: pyspark's package directory is a Spark installation
# (bin/spark-submit, jars/), which a test hands to sparkpoint as SPARK_HOME, as a user hands their own.
# Only pyspark itself: the driver runs .venv's Python, which has the rest (py4j comes inside each pyspark).
# Re-running is cheap: a version already installed is kept.
#
#   scripts/spark-versions.sh [MINOR ...]     # default: every supported minor but the project's own
set -euo pipefail
cd "$(dirname "$0")/.."

# The newest patch release of each supported minor, as the package index has them.
declare -A RELEASES=([3.5]=3.5.9 [4.0]=4.0.5 [4.1]=4.1.4 [4.2]=4.2.1)
minors=("$@")
[ ${#minors[@]} -gt 0 ] || minors=(3.5 4.0 4.1 4.2)

[ -x .venv/bin/python ] || bash scripts/setup.sh
for minor in "${minors[@]}"; do
  release=${RELEASES[$minor]:-}
  if [ -z "$release" ]; then
    echo "sparkpoint: error: no Spark $minor here; known: ${!RELEASES[*]}" >&2
    exit 2
  fi
  target=".venv-spark/$minor"
  if [ -f "$target/.installed-$release" ]; then
    continue
  fi
  echo "Installing pyspark $release into $target (about 400 MB) ..." >&2
  rm -rf "$target"
  mkdir -p "$target"
  .venv/bin/python -m pip install --quiet --no-deps --target "$target" "pyspark==$release"
  touch "$target/.installed-$release"
done
