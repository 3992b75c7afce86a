"""Benchmark: start-up of the CLI's fast paths, which never import pyspark.

Times `sparkpoint --help`, `sparkpoint list` / `list --all` and `sparkpoint metrics` over a home with 100
registered jobs (ended jobs, 10 complete savepoints each of a file-source query: 1,000 in the catalog), as
whole processes, median of 7 runs after one warm-up; then the pages `sparkpoint ui` serves over that home
(the jobs, the catalog, one name's, one savepoint's), each request in this process. It prints figures; it is
never a pass/fail test.

    .venv/bin/python scripts/bench_cli.py [--jobs 100] [--savepoints-per-job 10] [--against DIR]

--against DIR: the same commands from another checkout (a `git worktree add DIR <rev>`), run alternately
with this one, 25 rounds, so that the machine's drift (a 2-core box's neighbours) falls on both alike:
it prints both medians and minimums.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sparkpoint.adapters.storage import storage_for
from sparkpoint.jobs.protocol import write_agent_file
from sparkpoint.jobs.registry import Registry
from sparkpoint.savepoints.create import QuerySource, create


def checkpoint(root: Path, inputs: Path) -> Path:
    """A stateless file-source query's checkpoint, batch 0 committed (one input file), as Spark 4.3 writes it."""
    inputs.mkdir(parents=True, exist_ok=True)
    (inputs / "part-0.json").write_text("{}")
    files = {"metadata": json.dumps({"id": "2f9a7c1e-bench"}),
             "offsets/0": "v1\n" + json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1_795_000_000_000,
                                                "conf": {}}) + '\n{"logOffset":0}',
             "commits/0": 'v1\n{"nextBatchWatermarkMs":0}',
             "sources/0/0": "v1\n" + json.dumps({"path": f"file://{inputs}/part-0.json",
                                                   "timestamp": 1_795_000_000_000, "batchId": 0})}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def populate(home: Path, count: int, savepoints_per_job: int) -> None:
    registry = Registry(str(home))
    source = checkpoint(home.parent / "ckpt" / "events", home.parent / "in")
    storage, path = storage_for(str(source))
    for index in range(count):
        job = registry.new_job(f"job{index:03d}", app=f"/apps/job{index}.py", app_args=[], master="local[2]",
                               submit_args=[])
        write_agent_file(job.directory, {"state": "finished", "exit_code": 0, "app_id": f"local-{index}"})
        target_storage, target = storage_for(str(home / "savepoints" / job.name))
        for number in range(savepoints_per_job):
            create([QuerySource("events", path)], storage, target, target_storage, job=job.name,
                   clock=lambda n=number: 1_795_000_000.0 + 3600 * n)


def timed(argv: list[str], runs: int = 7) -> float:
    subprocess.run(argv, capture_output=True, check=True)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def alternated(argv: list[str], checkouts: list[Path], rounds: int = 25) -> dict[Path, list[float]]:
    """Each round runs ``argv`` once from each checkout (``-m sparkpoint`` imports the one it runs in)."""
    samples: dict[Path, list[float]] = {checkout: [] for checkout in checkouts}
    for _ in range(rounds):
        for checkout in checkouts:
            start = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=True, cwd=checkout)
            samples[checkout].append(time.perf_counter() - start)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--savepoints-per-job", type=int, default=10)
    parser.add_argument("--against", type=Path, help="another checkout to compare with, run alternately")
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-bench-cli-"))
    try:
        populate(work / "home", options.jobs, options.savepoints_per_job)
        cli = [sys.executable, "-m", "sparkpoint", "--home", str(work / "home")]
        print(f"machine: nproc={os.cpu_count()}, python {sys.version.split()[0]}; {options.jobs} registered jobs, "
              f"{options.jobs * options.savepoints_per_job} savepoints")
        imported = subprocess.run([sys.executable, "-c", "import sys; from sparkpoint.cli.main import main; "
                                   f"main(['--home', {str(work / 'home')!r}, 'metrics']); "
                                   "print('pyspark' in sys.modules, file=sys.stderr)"],
                                  capture_output=True, text=True, check=True).stderr.split()[-1]
        print(f"sparkpoint metrics imported pyspark: {imported}")
        for label, argv in [("sparkpoint --help", [*cli, "--help"]),
                            ("sparkpoint list", [*cli, "list"]),
                            ("sparkpoint list --all", [*cli, "list", "--all"]),
                            ("sparkpoint list --all -o json", [*cli, "list", "--all", "-o", "json"]),
                            ("sparkpoint metrics", [*cli, "metrics"]),
                            ("python -c pass (interpreter floor)", [sys.executable, "-c", "pass"])]:
            if options.against is None:
                print(f"{label:40s} {timed(argv) * 1000:7.1f} ms (median of 7)")
                continue
            here = Path(__file__).resolve().parents[1]
            for checkout, runs in alternated(argv, [here, options.against.resolve()]).items():
                print(f"{label:40s} {checkout}: median {statistics.median(runs) * 1000:6.1f} ms, "
                      f"min {min(runs) * 1000:6.1f} ms (25 alternated)")
        pages(work / "home")
    finally:
        shutil.rmtree(work, ignore_errors=True)


def pages(home: Path) -> None:
    """The page's answers over the home, as `sparkpoint ui` serves them (through Starlette's test client)."""
    from starlette.testclient import TestClient

    from sparkpoint.config import load_settings
    from sparkpoint.savepoints import catalog
    from sparkpoint.web.app import make_app

    client = TestClient(make_app(load_settings(overrides={"home": str(home)}), "bench", "c"))
    client.cookies.set("c", "bench")
    some = catalog.scan(str(home / "savepoints"))[0].id
    for label, path in [("page: jobs (/)", "/"), ("page: the catalog (/savepoints)", "/savepoints"),
                        ("page: one name (/names/job000)", "/names/job000"),
                        ("page: one savepoint", f"/savepoints/{some}")]:
        assert client.get(path).status_code == 200, path
        samples = []
        for _ in range(7):
            start = time.perf_counter()
            client.get(path)
            samples.append(time.perf_counter() - start)
        print(f"{label:40s} {statistics.median(samples) * 1000:7.1f} ms (median of 7)")
    print(f"the pages imported pyspark: {'pyspark' in sys.modules}")


if __name__ == "__main__":
    main()
