"""Benchmark: a million keys of state on HDFS, on YARN (Hadoop 3.5.0's mini clusters, scripts/local_hadoop.py),
with sparkpoint against Hadoop's own ways (the 1M-key job of bench_stop.py: scripts/demo_apps/keyed_state.py,
HDFS-backed state, a 1 s trigger, input every batch, in client mode with its checkpoint on HDFS):

1. `sparkpoint savepoint` of the running job (onto the local disk) against `hadoop fs -get` of the same files
   (one command per directory, in one JVM: scripts/hadoop/FsShellBatch.java), and against `hadoop fs -cp` of the
   whole checkpoint (what an operator would type; it holds the older batches Spark retains too). Hadoop's FsShell,
   run from the Spark's own Hadoop jars: the same commands, no Hadoop installation needed;
2. `stop` + `run -s` to the restored job's first commit, then `run --replace` of the restored job, against a
   plain restart on YARN from the job's own checkpoint (spark-submit ended with SIGTERM, as YARN's client stops;
   spark-submit again): each from its first command to the first new commit, and the commit gap (the last commit
   before to the first after); the phases of the stops and starts as `stop` and `run` report them.

Each round prints its figures; then the medians and their ratios. A figure, never a pass/fail test.

    .venv/bin/python scripts/bench_hdfs_yarn.py [--rounds 3] [--savepoint-only | --pit-stops-only]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import bench_jobs  # noqa: E402
from bench_jobs import phases_said, start_said, started  # noqa: E402
from local_hadoop import HadoopCluster  # noqa: E402

from sparkpoint.adapters.storage import storage_for  # noqa: E402

PYSPARK = Path(__import__("pyspark").__file__).parent
APP = str(ROOT / "scripts" / "demo_apps" / "keyed_state.py")
# The job's seed and staging stay on the local disk (the NodeManager runs here); its checkpoint is on HDFS.
SUBMIT = ["--master", "yarn", "--conf", f"spark.yarn.jars=local:{PYSPARK}/jars/*",
          "--conf", "spark.hadoop.fs.defaultFS=file:///", "--conf", "spark.executor.instances=1",
          "--conf", "spark.executor.cores=2", "--conf", "spark.executor.memory=2g",
          "--conf", "spark.yarn.am.memory=512m", "--conf", "spark.driver.memory=1g",
          "--conf", "spark.driver.host=127.0.0.1",
          "--conf", "spark.driver.bindAddress=127.0.0.1"]


def sparkpoint(home: Path, *args: str) -> dict:
    import json

    done = subprocess.run([sys.executable, "-m", "sparkpoint", "--home", str(home), args[0], "-o", "json",
                           *args[1:]], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"sparkpoint {args[0]} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout)


def commits(checkpoint: str) -> dict[int, float]:
    """The checkpoint's committed batches and their commit times (HDFS's modification times)."""
    storage, _ = storage_for(checkpoint)
    try:
        names = [e.name for e in storage.list(f"{checkpoint}/commits") if e.name.isdigit()]
    except FileNotFoundError:
        return {}
    return {int(n): storage.fs.info(f"{checkpoint}/commits/{n}")["modificationTime"] / 1000 for n in names}


def commit_after(checkpoint: str, batch: int, timeout: float = 600.0) -> tuple[int, float]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        later = {b: t for b, t in commits(checkpoint).items() if b > batch}
        if later:
            first = min(later)
            return first, later[first]
        time.sleep(0.1)
    raise TimeoutError(f"no commit after batch {batch} in {checkpoint}")


def await_commits(checkpoint: str, count: int) -> None:
    while len(commits(checkpoint)) < count:
        time.sleep(0.5)


def hadoop_fs(*args: str) -> None:
    """`hadoop fs ARGS`: Hadoop's FsShell, from the Spark's own Hadoop jars, with the cluster's client
    configuration on its classpath, as the `hadoop` script puts it."""
    classpath = f"{os.environ['HADOOP_CONF_DIR']}{os.pathsep}{PYSPARK}/jars/*"
    done = subprocess.run(["java", "-cp", classpath, "org.apache.hadoop.fs.FsShell", *args],
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"hadoop fs {' '.join(args)} failed: {done.stderr[-2000:]}")


def get_same_files(savepoint_path: str, checkpoint: str, destination: Path) -> float:
    """`hadoop fs -get` of the files the savepoint holds, from the running job's checkpoint onto the local disk as
    the savepoint was (one command per directory, all in one JVM: scripts/hadoop/FsShellBatch.java); seconds."""
    from sparkpoint.savepoints.savepoint import load

    by_directory: dict[str, list[str]] = {}
    for query in load(savepoint_path).queries:
        for entry in query["files"]:
            relative = entry["path"].split("/", 2)[2]  # queries/<name>/<path in the checkpoint>
            by_directory.setdefault(os.path.dirname(relative), []).append(f"{checkpoint}/{relative}")
    commands = []
    for directory, files in by_directory.items():
        (destination / directory).mkdir(parents=True, exist_ok=True)
        commands.append("\t".join(["-get", *files, str(destination / directory)]))
    classpath = f"{os.environ['HADOOP_CONF_DIR']}{os.pathsep}{PYSPARK}/jars/*"
    started = time.monotonic()
    done = subprocess.run(["java", "-cp", classpath, str(ROOT / "scripts" / "hadoop" / "FsShellBatch.java")],
                          input="\n".join(commands), capture_output=True, text=True)
    elapsed = time.monotonic() - started
    if done.returncode:
        raise RuntimeError(f"hadoop fs -get failed: {done.stderr[-2000:]}")
    return elapsed


def savepoint_against_copy(home: Path, job: dict, checkpoint: str, fs: str, work: Path,
                           rounds: int) -> tuple[float, float, float]:
    taken, gotten, copied = [], [], []
    hadoop_fs("-mkdir", "-p", f"{fs}/bench")
    for round_ in range(rounds):
        started = time.monotonic()
        created = sparkpoint(home, "savepoint", job["id"])
        taken.append(time.monotonic() - started)
        gotten.append(get_same_files(created["path"], checkpoint, work / f"get-{round_}"))
        started = time.monotonic()
        try:
            hadoop_fs("-cp", checkpoint, f"{fs}/bench/copy-{round_}")
            copied.append(time.monotonic() - started)
            whole = f"{copied[-1]:.2f} s"
        except RuntimeError as failed:
            # Spark purges older state files while the copy runs: a plain copy of a live checkpoint can fail (seen).
            whole = f"failed after {time.monotonic() - started:.2f} s, {str(failed).count('does not exist')} files " \
                    "purged by Spark meanwhile"
        print(f"  savepoint {taken[-1]:.2f} s ({created['bytes'] / 1e6:.0f} MB, {created['file_count']} files); "
              f"hadoop fs -get of the same files {gotten[-1]:.2f} s; hadoop fs -cp of the whole checkpoint {whole}",
              flush=True)
    return (statistics.median(taken), statistics.median(gotten),
            statistics.median(copied) if copied else float("nan"))


def stop_then_run(home: Path, job: dict, checkpoint: str, work: Path) -> tuple[float, float, dict]:
    """(the stop's start -> the restored job's first commit, commit gap, the restored job, still running)."""
    began = time.time()
    stopped = sparkpoint(home, "stop", job["id"])
    cut = stopped["queries"][0]["batch_id"]
    restored = sparkpoint(home, "run", "--detach", "--name", "keyed", "-s", stopped["id"], *SUBMIT, APP,
                          str(work), "1")
    new_checkpoint = f"{restored['checkpoint_root']}/keyed"
    _, first = commit_after(new_checkpoint, cut)
    print(f"    (stop + run -s: the stop {phases_said(stopped['phases'])}; the start "
          f"{start_said(started(home, restored['id']))})", flush=True)
    return first - began, first - commits(checkpoint)[cut], restored


def replace_in_one_step(home: Path, job: dict, work: Path) -> tuple[float, float]:
    """`run --replace` of ``job`` (client mode on YARN): (the command's start -> the new job's first commit,
    commit gap). The new job is cancelled."""
    checkpoint = f"{job['checkpoint_root']}/keyed"
    await_commits(checkpoint, 2)
    began = time.time()
    new = sparkpoint(home, "run", "--detach", "--name", "keyed", "--replace", job["id"], "--no-rollback", *SUBMIT,
                     APP, str(work), "1")
    cut = new["replaced"]["queries"][0]["batch_id"]
    _, first = commit_after(f"{new['checkpoint_root']}/keyed", cut)
    print(f"    (run --replace: the old version's stop {phases_said(new['replaced']['phases'])}; the start "
          f"{start_said(started(home, new['id']))})", flush=True)
    sparkpoint(home, "cancel", new["id"])
    return first - began, first - commits(checkpoint)[cut]


def plain_restart(work: Path, fs: str, round_: int) -> tuple[float, float]:
    checkpoint = f"{fs}/bench/plain-{round_}"
    command = [str(PYSPARK / "bin" / "spark-submit"), *SUBMIT, APP, str(work), "1", checkpoint]
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    driver = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    await_commits(checkpoint, 5)
    started = time.time()
    os.killpg(driver.pid, signal.SIGTERM)
    driver.wait()
    last = max(commits(checkpoint))
    again = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    _, first = commit_after(checkpoint, last)
    os.killpg(again.pid, signal.SIGTERM)
    again.wait()
    return first - started, first - commits(checkpoint)[last]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--savepoint-only", action="store_true", help="only the first comparison")
    parser.add_argument("--pit-stops-only", action="store_true", help="only the second comparison")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-yarn-"))
    print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; command: {' '.join(sys.argv)}")
    cluster = HadoopCluster(work / "hadoop").start()
    os.environ.update(HADOOP_CONF_DIR=str(cluster.conf_dir), SPARKPOINT_CHECKPOINTS=f"{cluster.fs}/checkpoints",
                      SPARK_LOCAL_IP="127.0.0.1")
    bench_jobs.ENV.update(os.environ)  # its `list` (started()) asks this cluster's ResourceManager
    home = work / "home"
    try:
        job = sparkpoint(home, "run", "--detach", "--name", "keyed", *SUBMIT, APP, str(work), "1")
        checkpoint = f"{job['checkpoint_root']}/keyed"
        await_commits(checkpoint, 5)
        if not options.pit_stops_only:
            taken, gotten, copied = savepoint_against_copy(home, job, checkpoint, cluster.fs, work, options.rounds)
            print(f"savepoint of the running job {taken:.2f} s against hadoop fs -get of the same files {gotten:.2f} "
                  f"s: {taken / gotten:.2f}x; against hadoop fs -cp of the whole checkpoint {copied:.2f} s: "
                  f"{taken / copied:.2f}x (medians of {options.rounds}; of the copies that completed)", flush=True)
        pit_stops, replaced, restarts = [], [], []
        for round_ in range(0 if options.savepoint_only else options.rounds):
            *pit_stop, restored = stop_then_run(home, job, checkpoint, work)
            pit_stops.append(pit_stop)
            replaced.append(replace_in_one_step(home, restored, work))
            restarts.append(plain_restart(work, cluster.fs, round_))
            print(f"  stop + run -s: {pit_stops[-1][0]:.2f} s to the first new commit (gap {pit_stops[-1][1]:.2f} s);"
                  f" run --replace: {replaced[-1][0]:.2f} s (gap {replaced[-1][1]:.2f} s);"
                  f" plain YARN restart: {restarts[-1][0]:.2f} s (gap {restarts[-1][1]:.2f} s)", flush=True)
            if round_ + 1 < options.rounds:
                job = sparkpoint(home, "run", "--detach", "--name", "keyed", *SUBMIT, APP, str(work), "1")
                checkpoint = f"{job['checkpoint_root']}/keyed"
                await_commits(checkpoint, 5)
        if options.savepoint_only:
            return
        down = statistics.median(p[0] for p in pit_stops), statistics.median(r[0] for r in restarts)
        gaps = statistics.median(p[1] for p in pit_stops), statistics.median(r[1] for r in restarts)
        print(f"stop + run -s {down[0]:.2f} s against a plain YARN restart {down[1]:.2f} s: {down[0] / down[1]:.2f}x; "
              f"commit gaps {gaps[0]:.2f} s and {gaps[1]:.2f} s: {gaps[0] / gaps[1]:.2f}x")
        one_step = statistics.median(r[1] for r in replaced)
        print(f"run --replace: commit gap {one_step:.2f} s against the plain restart's {gaps[1]:.2f} s: "
              f"{one_step / gaps[1]:.2f}x (medians of {options.rounds})")
    finally:
        for listed in sparkpoint(home, "list") if (home / "jobs").is_dir() else []:
            subprocess.run([sys.executable, "-m", "sparkpoint", "--home", str(home), "cancel", listed["id"]],
                           capture_output=True)
        cluster.stop()


if __name__ == "__main__":
    main()
