"""The scrape under load (issue 32): prints how `metrics --serve` answers a busy scraper while idle connections
are held, and how long one scrape takes over cluster-mode jobs whose master accepts connections and never answers.
No Spark needed; everything on 127.0.0.1, stopped at the end.

    .venv/bin/python scripts/bench_scrape.py [--jobs 40] [--scrapers 8] [--scrapes 25] [--idle 8]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

sys.path[:0] = [str(Path(__file__).resolve().parents[1] / "tests")]
from clitools import SilentServer  # noqa: E402 - the tests' silent server, from where they keep it

from sparkpoint.config import Settings
from sparkpoint.jobs import metrics
from sparkpoint.jobs.registry import Registry


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def hung_master_scrape(root: Path, jobs: int, rounds: int = 3) -> list[float]:
    master = SilentServer()
    conf = root / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(f"spark.master.rest.port {master.socket.getsockname()[1]}\n")
    os.environ["SPARK_CONF_DIR"] = str(conf)
    home = root / "cluster-home"
    registry = Registry(str(home))
    for index in range(jobs):
        job = registry.new_job(f"cluster{index:03d}", app="app.py", app_args=[], master="spark://127.0.0.1:7077",
                               submit_args=[])
        job.submission_id = f"driver-{index:04d}"
        registry.save(job)
    timings = []
    try:
        for _ in range(rounds):
            began = time.monotonic()
            metrics.scrape(Settings(home=str(home)))
            timings.append(time.monotonic() - began)
    finally:
        master.close()
        del os.environ["SPARK_CONF_DIR"]
    return timings


def busy_scraper(root: Path, scrapers: int, scrapes: int, idle: int) -> tuple[int, list[float], float]:
    home = root / "serve-home"
    registry = Registry(str(home))
    for index in range(5):
        registry.new_job(f"job{index}", app="app.py", app_args=[], master="local[2]", submit_args=[])
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "sparkpoint", "--home", str(home), "metrics", "--serve",
                               str(port)], stderr=subprocess.PIPE, text=True)
    held = []
    try:
        server.stderr.readline()
        token = (home / "metrics.token").read_text().strip()
        url = f"http://127.0.0.1:{port}/metrics"
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(idle)]
        latencies: list[float] = []

        def run(_index: int) -> int:
            answered = 0
            with requests.Session() as session:
                for _ in range(scrapes):
                    began = time.monotonic()
                    try:
                        ok = session.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=15).ok
                    except requests.RequestException:
                        ok = False
                    latencies.append(time.monotonic() - began)
                    answered += ok
            return answered

        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=scrapers) as pool:
            answered = sum(pool.map(run, range(scrapers)))
        return answered, latencies, time.monotonic() - began
    finally:
        for connection in held:
            connection.close()
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--scrapers", type=int, default=8)
    parser.add_argument("--scrapes", type=int, default=25)
    parser.add_argument("--idle", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as root:
        timings = hung_master_scrape(Path(root), args.jobs)
        print(f"scrape over {args.jobs} cluster-mode jobs, their master hung: "
              f"{', '.join(f'{t:.2f}' for t in timings)} s (median {statistics.median(timings):.2f} s)")
        answered, latencies, took = busy_scraper(Path(root), args.scrapers, args.scrapes, args.idle)
        total = args.scrapers * args.scrapes
        latencies.sort()
        p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)]
        print(f"{args.scrapers} scrapers x {args.scrapes} scrapes with {args.idle} idle connections held: "
              f"{answered}/{total} answered in {took:.2f} s; latency median "
              f"{statistics.median(latencies) * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms, "
              f"max {latencies[-1] * 1000:.1f} ms")


if __name__ == "__main__":
    main()
