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
  if [ -z "${RELEASES[$minor]:-}" ]; then
    echo "sparkpoint: error: no Spark $minor here; known: ${!RELEASES[*]}" >&2
    exit 2
  fi
done

install() {
  local minor=$1 release=${RELEASES[$1]} target=".venv-spark/$1" partial
  echo "Installing pyspark $release into $target (about 400 MB) ..." >&2
  # Into a directory of its own, renamed into place once complete: bash leaves its background installs running
  # when Ctrl-C ends the script, and one that outlived an interrupted run must not mix its files with the next's.
  mkdir -p .venv-spark
  partial=$(mktemp -d ".venv-spark/.$minor.XXXXXX")
  chmod 755 "$partial"  # as mkdir made it: mktemp's is the owner's alone
  trap 'rm -rf "$partial"' EXIT
  .venv/bin/python -m pip install --quiet --no-deps --target "$partial" "pyspark==$release"
  touch "$partial/.installed-$release"
  rm -rf "$target"
  mv -T "$partial" "$target"
}

# Two at a time: pip builds each from its source package on one core (about 50 s of CPU), so a fresh machine's
# four took 3.5 minutes one after the other.
installing=()
for minor in "${minors[@]}"; do
  [ -f ".venv-spark/$minor/.installed-${RELEASES[$minor]}" ] && continue
  install "$minor" &
  installing+=("$!")
  if [ ${#installing[@]} -ge 2 ]; then
    wait "${installing[0]}"  # set -e: a failed install ends the script with its status
    installing=("${installing[@]:1}")
  fi
done
for pid in "${installing[@]}"; do
  wait "$pid"
done
