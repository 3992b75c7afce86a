"""`metrics` and the job records under hostile input and a busy scraper (issue 32): each case as an attacker or a
clumsy operator would make it, answered in one line with its documented exit code, or counted in the scrape, with
nothing replaced, nothing hung and nothing left behind."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from clitools import SilentServer, cli, closed_port, free_ports, wait_for
from test_metrics import new_job, running, samples, states

from sparkpoint.cli.main import main
from sparkpoint.config import Settings
from sparkpoint.jobs import metrics
from sparkpoint.jobs.registry import Registry

NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
DEEP = "[" * 100_000 + "]" * 100_000


def errors_of(found: dict) -> dict[str, float]:
    return {dict(labels)["what"]: value for (name, labels), value in found.items()
            if name == "sparkpoint_scrape_errors"}


def one_line(capsys, *args) -> tuple[int, str, str]:
    """The CLI in-process: its exit status, stdout and stderr; never a traceback, and a failure in one line."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "internal error" not in err, (args, err)
    assert code == 0 or (err.count("\n") == 1 and err.startswith("sparkpoint: error: ")), (args, code, err)
    return code, out, err


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


# --- records: nested, out of range, unreadable, not a file (1 to 4) -------------------------------------------

@pytest.mark.parametrize("record", ["job.json", "savepoints.json", "agent.json"])
def test_a_deeply_nested_record_is_one_counted_error_everywhere(capsys, home, record):
    registry = Registry(str(home))
    deep, fine = new_job(registry, "deep"), new_job(registry, "fine")
    (Path(deep.directory) / record).write_text(DEEP)

    data, scrape = metrics.exposition(Settings(home=str(home)))
    found = samples(data.decode())
    what = "savepoint_record" if record == "savepoints.json" else "job_record"
    assert errors_of(found)[what] == 1 and sum(errors_of(found).values()) == 1
    assert f"{deep.id}/{record} is nested deeper than 32 levels" in scrape.problems[0]
    assert states(found, fine)["lost"] == 1  # the rest of the home is still there
    for args in (["list"], ["list", "--all"], ["horizon"], ["prune", "--keep-last", "1", "--dry-run"]):
        code, _, _ = one_line(capsys, "--home", home, *args)
        assert code == 0, args
    code, _, err = one_line(capsys, "--home", home, "savepoint", deep.id)
    # job.json: the job is unreadable (15); otherwise the job is read, and is not running (12)
    assert code == (15 if record == "job.json" else 12), err
    code, out, _ = one_line(capsys, "--home", home, "list", "--all", "-o", "json")
    if record == "job.json":
        assert {e["id"]: e["state"] for e in json.loads(out)}[deep.id] == "malformed"


@pytest.mark.parametrize("record, pid", [("job.json", 10**30), ("job.json", 2**31), ("agent.json", 10**30),
                                         ("agent.json", 2**31), ("agent.json", -5)])
def test_a_pid_out_of_range_is_a_malformed_record_not_an_overflow(capsys, home, record, pid):
    registry = Registry(str(home))
    job = new_job(registry, "big")
    path = Path(job.directory) / record
    existing = json.loads(path.read_text()) if path.exists() else {"state": "running", "host": "127.0.0.1",
                                                                      "port": closed_port()}
    path.write_text(json.dumps({**existing, "pid": pid}))

    data, scrape = metrics.exposition(Settings(home=str(home)))
    assert errors_of(samples(data.decode()))["job_record"] == 1, scrape.problems
    assert f"pid is {pid}" in scrape.problems[0]
    for args in (["list", "--all"], ["horizon"], ["prune", "--keep-last", "1", "--dry-run"]):
        assert one_line(capsys, "--home", home, *args)[0] == 0, args
    assert one_line(capsys, "--home", home, "savepoint", job.id)[0] == (15 if record == "job.json" else 12)


def test_a_job_directory_it_may_not_read_is_counted_and_an_unreadable_jobs_dir_is_one_line(home):
    registry = Registry(str(home))
    fine, private = new_job(registry, "fine"), new_job(registry, "private")
    Path(private.directory).chmod(0)  # another user's, in a shared home (root is made subject to modes by NO_DAC)
    try:
        code, out, err = cli(home, "metrics", prefix=NO_DAC)
        assert code == 0 and "Traceback" not in err, err
        assert errors_of(samples(out))["job_record"] == 1 and states(samples(out), fine)["lost"] == 1
        assert f"{private.id}/job.json cannot be read: Permission denied" in err
        code, out, err = cli(home, "list", "-o", "json", prefix=NO_DAC)
        assert code == 0 and [e["state"] for e in json.loads(out)] == ["malformed"], err
        code, _, err = cli(home, "savepoint", private.id, prefix=NO_DAC)
        assert code == 15 and err.count("\n") == 1 and "Permission denied" in err, err

        (home / "jobs").chmod(0)
        code, out, err = cli(home, "metrics", prefix=NO_DAC)
        assert code == 0 and errors_of(samples(out))["job_record"] == 1, err
        assert "cannot read the jobs directory" in err
        code, out, err = cli(home, "list", prefix=NO_DAC)
        assert (code, out, err.count("\n")) == (9, "", 1) and "cannot read the jobs directory" in err, err
    finally:
        (home / "jobs").chmod(0o700)
        Path(private.directory).chmod(0o700)


@pytest.mark.parametrize("make, kind", [(os.mkfifo, "a FIFO"), (lambda p: p.symlink_to("/dev/zero"),
                                                                 "a character device"), (os.mkdir, "a directory")])
def test_a_job_json_that_is_not_a_file_is_counted_listed_and_exit_15(capsys, home, make, kind):
    registry = Registry(str(home))
    job = new_job(registry, "odd")
    (Path(job.directory) / "job.json").unlink()
    make(Path(job.directory) / "job.json")
    data, scrape = metrics.exposition(Settings(home=str(home)))
    assert errors_of(samples(data.decode()))["job_record"] == 1
    assert f"job.json is not a regular file ({kind})" in scrape.problems[0]
    code, out, err = one_line(capsys, "--home", home, "list")
    assert code == 0 and job.id in out and "malformed" in out and f"({kind})" in err
    code, _, err = one_line(capsys, "--home", home, "savepoint", job.id)
    assert code == 15 and f"{job.id}/job.json is not a regular file" in err


def test_a_directory_without_a_job_json_is_not_a_job(home):
    """`run` makes the directory before its job.json: a job being made is not a malformed one."""
    registry = Registry(str(home))
    new_job(registry)
    (home / "jobs" / "making-0000").mkdir()
    (home / "jobs" / "stray-file").write_text("")
    assert errors_of(samples(metrics.exposition(Settings(home=str(home)))[0].decode()))["job_record"] == 0


def test_an_ended_state_no_sparkpoint_writes_is_a_counted_error(home):
    registry = Registry(str(home))
    job = new_job(registry, "banana")
    record = json.loads((Path(job.directory) / "job.json").read_text())
    (Path(job.directory) / "job.json").write_text(json.dumps({**record, "ended": {"state": "banana"}}))
    data, scrape = metrics.exposition(Settings(home=str(home)))
    found = samples(data.decode())
    assert errors_of(found)["job_record"] == 1 and 'ended is {"state": "banana"}' in scrape.problems[0]
    assert not [labels for (name, labels) in found if name == "sparkpoint_job_state"]  # no six zero samples


def test_an_agent_record_with_a_port_no_socket_takes_is_counted(home):
    registry = Registry(str(home))
    job = running(registry, "porty", closed_port())
    record = json.loads((Path(job.directory) / "agent.json").read_text())
    (Path(job.directory) / "agent.json").write_text(json.dumps({**record, "port": 10**30}))
    data, scrape = metrics.exposition(Settings(home=str(home)))
    assert errors_of(samples(data.decode()))["job_record"] == 1 and "port is 1000000" in scrape.problems[0]


# --- the token file (5 to 7, and the smaller ones) ----------------------------------------------------------

def serve(home: Path, *args: str, port: int | None = None) -> subprocess.Popen:
    port = port or free_ports(1)[0]
    return subprocess.Popen([sys.executable, "-m", "sparkpoint", "--home", str(home), "metrics", "--serve",
                             *args], stderr=subprocess.PIPE, text=True)


def refused_at_once(home: Path, *args: str) -> str:
    """``metrics --serve`` with ``args`` ends within seconds, exit 2, in one line: what it said."""
    started = time.monotonic()
    server = serve(home, *args)
    try:
        code = server.wait(timeout=20)
    finally:
        server.kill()
    err = server.stderr.read()
    assert code == 2 and err.count("\n") == 1 and err.startswith("sparkpoint: error: "), err
    assert time.monotonic() - started < 15
    return err


def test_a_token_file_that_is_not_one_token_is_refused_at_once(tmp_path, home):
    port = str(free_ports(1)[0])
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "is not a regular file (a FIFO)" in refused_at_once(home, port, "--token-file", str(fifo))
    (tmp_path / "zero").symlink_to("/dev/zero")
    assert "(a character device)" in refused_at_once(home, port, "--token-file", str(tmp_path / "zero"))
    (tmp_path / "latin1").write_bytes(b"s\xe9cret\n")
    assert "is not UTF-8 text" in refused_at_once(home, port, "--token-file", str(tmp_path / "latin1"))
    (tmp_path / "two").write_text("first\nsecond\n")
    assert "one line of printable ASCII" in refused_at_once(home, port, "--token-file", str(tmp_path / "two"))
    (tmp_path / "empty").write_text("\n")
    assert "(it is empty)" in refused_at_once(home, port, "--token-file", str(tmp_path / "empty"))
    assert "--token-file" in refused_at_once(home, port, "--token-file", "")
    home.mkdir()
    os.mkfifo(home / "metrics.token")  # the home's own token
    assert "metrics.token is not a regular file (a FIFO)" in refused_at_once(home, port)


# --- the metrics file (8 to 10) -----------------------------------------------------------------------------

def test_a_metrics_file_that_is_not_a_regular_file_is_refused_and_left_as_it_is(capsys, tmp_path, home):
    new_job(Registry(str(home)))
    fifo, directory = tmp_path / "fifo", tmp_path / "dir"
    os.mkfifo(fifo)
    directory.mkdir()
    (tmp_path / "to-fifo").symlink_to(fifo)
    targets = [fifo, directory, tmp_path / "to-fifo"]
    try:  # a device node of its own, where the machine allows it: the real /dev/null is never put at risk
        os.mknod(tmp_path / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        targets.append(tmp_path / "null")
    except PermissionError:
        pass
    for target in targets:
        before = os.stat(target)
        code, out, err = one_line(capsys, "--home", home, "metrics", "--metrics-file", target)
        assert code == 2 and "not a regular file" in err and "left as it is" in err, err
        # savepoint's --metrics-file: refused before the savepoint is attempted (it would say: no job, exit 4)
        code, _, err = one_line(capsys, "--home", home, "savepoint", "nosuchjob", "--metrics-file", target)
        assert code == 2 and "not a regular file" in err, err
        after = os.stat(target)
        assert (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["fifo", "dir", "to-fifo", "home"]
                                                                + (["null"] if len(targets) == 4 else []))


def test_a_link_at_the_metrics_file_is_replaced_never_written_through(capsys, tmp_path, home):
    """A link planted in a shared (sticky) directory must not lead a root cron job to overwrite, or create, the
    file it names (review of issue 32: the file it named was replaced)."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    (tmp_path / "planted.prom").symlink_to(victim)
    (tmp_path / "dangling.prom").symlink_to(tmp_path / "elsewhere" / "made-by-root")
    for link in ("planted.prom", "dangling.prom"):
        code, _, err = one_line(capsys, "--home", home, "metrics", "--metrics-file", tmp_path / link)
        assert code == 0, err
        assert not (tmp_path / link).is_symlink() and "sparkpoint_scrape_errors" in (tmp_path / link).read_text()
    assert victim.read_text() == "precious\n" and stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert not (tmp_path / "elsewhere").exists()
    code, _, err = one_line(capsys, "--home", home, "metrics", "--metrics-file", tmp_path / "nope" / "x.prom")
    assert code == 2 and "does not exist" in err


def test_the_metrics_file_is_0644_whatever_the_umask(tmp_path, home):
    target = tmp_path / "sparkpoint.prom"
    done = subprocess.run([sys.executable, "-m", "sparkpoint", "--home", str(home), "metrics", "--metrics-file",
                           str(target)], capture_output=True, text=True, preexec_fn=lambda: os.umask(0o077))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


@pytest.mark.parametrize("args", [["metrics", "--metrics-file", ""], ["savepoint", "x", "--metrics-file", ""],
                                  ["stop", "x", "--metrics-file", ""]])
def test_an_empty_metrics_file_is_a_usage_error_not_stdout(capsys, home, args):
    code, out, err = one_line(capsys, "--home", home, *args)
    assert (code, out) == (2, "") and "--metrics-file" in err and "is empty" in err


# --- the scrape server (11 to 13, and the smaller ones) -----------------------------------------------------

def started(home: Path, address: str) -> tuple[subprocess.Popen, str, list[str]]:
    """``metrics --serve address``, up: the process, its token and what it said before serving."""
    server = serve(home, address)
    said = []
    while not said or "Serving the metrics" not in said[-1]:
        line = server.stderr.readline()
        assert line, f"the server ended: {said}"
        said.append(line)
    return server, (home / "metrics.token").read_text().strip(), said


def test_serve_answers_every_scrape_of_eight_scrapers_while_eight_idle_connections_are_held(home):
    new_job(Registry(str(home)))
    (port,) = free_ports(1)
    server, token, said = started(home, str(port))
    idle = []
    try:
        assert not [line for line in said if "warning" in line]  # loopback: nothing to warn of
        url = f"http://127.0.0.1:{port}/metrics"
        for _ in range(8):  # connected, and never a byte sent (no token needed for that)
            idle.append(socket.create_connection(("127.0.0.1", port)))
        time.sleep(0.3)

        def scrapes(_index: int) -> int:
            answered = 0
            with requests.Session() as session:
                for _ in range(25):
                    answer = session.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
                    answered += answer.status_code == 200 and "sparkpoint_job_state" in answer.text
            return answered

        began = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            answered = sum(pool.map(scrapes, range(8)))
        took = time.monotonic() - began
        assert answered == 200, answered
        assert took < 8, took  # never an idle connection's 10 s

        # An attacker who reconnects as fast as it can does not starve a scrape either.
        stop = threading.Event()

        def hog():
            while not stop.is_set():
                with socket.create_connection(("127.0.0.1", port)) as held:
                    held.settimeout(0.05)
                    with contextlib.suppress(OSError):  # closed to make room, or our own time-out
                        held.recv(1)

        hogs = [threading.Thread(target=hog, daemon=True) for _ in range(4)]
        for thread in hogs:
            thread.start()
        try:
            for _ in range(10):
                assert requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=5).status_code == 200
        finally:
            stop.set()
            for thread in hogs:
                thread.join(5)
    finally:
        for connection in idle:
            connection.close()
        server.terminate()
        server.wait(timeout=30)


def test_serve_speaks_http_as_a_scraper_expects(tmp_path, home):
    (port,) = free_ports(1)
    server, token, said = started(home, f"[::1]:{port}")  # IPv6
    try:
        assert f"http://[::1]:{port}/metrics" in said[-1]
        url = f"http://[::1]:{port}/metrics"
        assert requests.get(url, headers={"Authorization": f"bearer {token}"}, timeout=10).status_code == 200
        assert requests.get(url, headers={"Authorization": f"BEARER  {token}"}, timeout=10).status_code == 200
        assert requests.get(url, headers={"Authorization": f"Basic {token}"}, timeout=10).status_code == 401
        assert requests.get(url, headers={"Authorization": token}, timeout=10).status_code == 401
        for method in ("POST", "PUT", "DELETE", "HEAD", "OPTIONS", "BREW"):
            connection = http.client.HTTPConnection("::1", port, timeout=10)
            connection.request(method, "/metrics", headers={"Authorization": f"Bearer {token}"})
            answer = connection.getresponse()
            assert (answer.status, answer.getheader("Allow")) == (405, "GET"), method
            assert "html" not in (answer.getheader("Content-Type") or "")
            connection.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_serve_beyond_loopback_warns_that_the_token_travels_in_clear_text(tmp_path, home):
    (port,) = free_ports(1)
    server, _token, said = started(home, f"0.0.0.0:{port}")
    try:
        assert any("warning" in line and "clear text" in line for line in said), said
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_a_world_readable_token_file_is_used_with_a_warning(tmp_path, home):
    token = tmp_path / "token"
    token.write_text("a-token\n")
    token.chmod(0o644)
    (port,) = free_ports(1)
    server = serve(home, str(port), "--token-file", str(token))
    try:
        first = server.stderr.readline()
        assert "warning" in first and "readable by every user" in first, first
        assert "Serving the metrics" in server.stderr.readline()
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_scrapers_at_once_share_one_scrape(home, monkeypatch):
    """Eight scrapers at once cost about one scrape, not eight in a row, and none gets a scrape older than its
    question."""
    calls = []
    real = metrics.scrape

    def slow(settings, clock=time.monotonic):
        calls.append(clock())
        time.sleep(0.3)
        return real(settings, clock)

    monkeypatch.setattr(metrics, "scrape", slow)
    registry, _collector = metrics.registry_of(Settings(home=str(home)))
    from prometheus_client import generate_latest

    asked = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda _: generate_latest(registry), range(8)))
    assert 1 <= len(calls) <= 2 and all(call >= asked for call in calls), calls
    assert time.monotonic() - asked < 1.5


# --- cluster-mode jobs whose master hangs (14) --------------------------------------------------------------

def test_a_scrape_over_forty_cluster_jobs_with_a_hung_master_takes_under_three_seconds(tmp_path, home, monkeypatch):
    hanging = SilentServer()  # accepts and never answers: the master's REST server, wedged
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(f"spark.master.rest.port {hanging.socket.getsockname()[1]}\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(conf))
    registry = Registry(str(home))
    try:
        for index in range(40):
            job = new_job(registry, f"cluster{index:02d}")
            job.master, job.submission_id = "spark://127.0.0.1:7077", f"driver-2026-{index:04d}"
            registry.save(job)
        began = time.monotonic()
        scrape = metrics.scrape(Settings(home=str(home)))
        took = time.monotonic() - began
        assert took < 3, took
        lost = [labels for labels, value in scrape.samples[metrics.JOB_STATE] if labels[2] == "lost" and value == 1]
        assert len(lost) == 40
        wait_for(lambda: len(hanging.held) >= 40, timeout=10, what="every driver to have been asked")
    finally:
        hanging.close()


# --- found by the review of the fix ------------------------------------------------------------------------

class TricklingServer:
    """Answers every connection at once with headers, then a byte of its body every ``every`` seconds, for at most
    ``seconds``: a master or agent that holds its caller with a reply that never ends."""

    def __init__(self, every: float = 0.3, seconds: float = 60.0):
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.every, self.seconds, self.stopping = every, seconds, threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stopping.is_set():
            try:
                connection = self.socket.accept()[0]
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(connection,), daemon=True).start()

    def _trickle(self, connection):
        ends = time.monotonic() + self.seconds
        with contextlib.suppress(OSError), connection:
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n")
            while not self.stopping.wait(self.every) and time.monotonic() < ends:
                connection.sendall(b" ")

    def close(self):
        self.stopping.set()
        self.socket.close()


def test_a_master_or_agent_that_trickles_its_reply_holds_nothing(tmp_path, home, monkeypatch):
    trickler = TricklingServer()
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(f"spark.master.rest.port {trickler.port}\n"
                                               f"spark.master.ui.port {trickler.port}\n")
    registry = Registry(str(home))
    try:
        for index in range(20):
            job = new_job(registry, f"cluster{index:02d}")
            job.master, job.submission_id = f"spark://127.0.0.1:{7001 + index % 4}", f"driver-{index:04d}"
            registry.save(job)
        running(registry, "trickled", trickler.port)  # its agent trickles too
        env = {**os.environ, "SPARK_CONF_DIR": str(conf)}
        for args in (["metrics"], ["list", "--all"], ["horizon"]):
            began = time.monotonic()
            code, _, err = cli(home, *args, env=env, timeout=30)
            took = time.monotonic() - began
            assert code == 0 and took < 12, (args, took, err)  # a process start and 2 s asked, not 60 s trickled
    finally:
        trickler.close()


def test_a_string_no_encoder_takes_is_a_malformed_record(capsys, home):
    registry = Registry(str(home))
    job = new_job(registry, "odd")
    path = Path(job.directory) / "job.json"
    path.write_text(path.read_text().replace('"name": "odd"', '"name": "\\ud800"'))
    data, scrape = metrics.exposition(Settings(home=str(home)))
    assert errors_of(samples(data.decode()))["job_record"] == 1 and "lone surrogate" in scrape.problems[0]
    code, out, _ = one_line(capsys, "--home", home, "list", "--all", "-o", "json")
    assert code == 0 and json.loads(out)[0]["state"] == "malformed"


def test_a_record_larger_than_any_sparkpoint_writes_is_malformed(home):
    registry = Registry(str(home))
    job = new_job(registry, "big")
    (Path(job.directory) / "job.json").write_text("[" + ",".join(["0"] * 5_000_000) + "]")  # about 10 MB
    _data, scrape = metrics.exposition(Settings(home=str(home)))
    assert "is larger than 8388608 bytes" in scrape.problems[0]


def test_a_job_json_linked_to_nothing_is_malformed_not_missing(capsys, home):
    registry = Registry(str(home))
    job = new_job(registry, "dangling")
    (Path(job.directory) / "job.json").unlink()
    (Path(job.directory) / "job.json").symlink_to("/nonexistent/job.json")
    _data, scrape = metrics.exposition(Settings(home=str(home)))
    assert "is a link to nothing" in scrape.problems[0]
    code, _, err = one_line(capsys, "--home", home, "savepoint", job.id)
    assert code == 15 and "is a link to nothing" in err


def test_a_fifo_in_a_record_s_place_is_never_opened(home):
    """Opening a FIFO for reading wakes a writer blocked on it: a record that is not a file is refused unopened."""
    registry = Registry(str(home))
    job = new_job(registry, "fifo")
    fifo = Path(job.directory) / "job.json"
    fifo.unlink()
    os.mkfifo(fifo)
    woken = threading.Event()

    def writer():
        with open(fifo, "w"):  # blocks until a reader opens it
            woken.set()

    threading.Thread(target=writer, daemon=True).start()
    time.sleep(0.2)
    metrics.exposition(Settings(home=str(home)))
    assert not woken.wait(0.5)
    os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # let the writer go
    assert woken.wait(5)


def test_a_cluster_directory_with_a_fifo_is_answered_at_once(capsys, tmp_path):
    cluster = tmp_path / "cluster"
    (cluster / "pids").mkdir(parents=True)
    os.mkfifo(cluster / "pids" / "master.pid")
    (cluster / "conf").mkdir()
    os.mkfifo(cluster / "conf" / "spark-defaults.conf")
    code, _, err = one_line(capsys, "cluster", "status", "--dir", cluster, "--master-port", closed_port(),
                            "--master-ui-port", closed_port())
    assert code == 3 and "is not a regular file (a FIFO)" in err


def test_a_failed_scrape_is_no_answer_to_those_who_waited_for_it(home, monkeypatch):
    """Three scrapers at 0, 0.05 and 0.1 s: the first runs scrape 1; the second, behind it, runs scrape 2, which
    fails; the third asked before scrape 2 started but after scrape 1 did, so neither answers it: it scrapes
    anew (it was answered with scrape 1)."""
    real, calls = metrics.scrape, []

    def flaky(settings, clock=time.monotonic):
        calls.append(clock())
        time.sleep(0.3)
        if len(calls) == 2:
            raise RuntimeError("a scrape that failed")
        return real(settings, clock)

    monkeypatch.setattr(metrics, "scrape", flaky)
    registry, _collector = metrics.registry_of(Settings(home=str(home)))
    from prometheus_client import generate_latest

    outcomes = {}

    def ask(delay):
        time.sleep(delay)
        try:
            generate_latest(registry)
            outcomes[delay] = "ok"
        except RuntimeError:
            outcomes[delay] = "failed"

    threads = [threading.Thread(target=ask, args=(delay,)) for delay in (0.0, 0.05, 0.1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(calls) == 3 and outcomes == {0.0: "ok", 0.05: "failed", 0.1: "ok"}, (outcomes, calls)


def test_an_unreadable_token_of_a_running_job_is_counted(home):
    registry = Registry(str(home))
    job = running(registry, "tokenless", closed_port())
    (Path(job.directory) / "token").unlink()
    os.mkfifo(Path(job.directory) / "token")
    _data, scrape = metrics.exposition(Settings(home=str(home)))
    assert scrape.errors["job_record"] == 1 and "token" in scrape.problems[0] and "FIFO" in scrape.problems[0]


def test_the_horizon_says_a_job_it_cannot_read_is_not_counted(capsys, home):
    registry = Registry(str(home))
    job = new_job(registry, "unreadable")
    (Path(job.directory) / "job.json").write_text("{")
    code, _, err = one_line(capsys, "--home", home, "horizon")
    assert code == 0 and f"job {job.id} is not counted: its record cannot be read" in err
    code, _, err = one_line(capsys, "--home", home, "prune", "--keep-last", "1", "--dry-run")
    assert code == 0 and f"job {job.id} is not counted" in err


@pytest.mark.parametrize("address", ["[::1]]:9464", "::1:9464", "a:b:9464", "9464:", "[::1]:70000"])
def test_an_address_of_another_shape_is_refused(capsys, home, address):
    code, _, err = one_line(capsys, "--home", home, "metrics", "--serve", address)
    assert code == 2 and "[HOST:]PORT" in err


def test_a_head_request_gets_405_without_a_body(home):
    (port,) = free_ports(1)
    server, token, said = started(home, f"[::1]:{port}")
    try:
        assert f"http://[::1]:{port}/metrics" in said[-1]
        with socket.create_connection(("::1", port), timeout=10) as connection:
            connection.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + token.encode()
                               + b"\r\n\r\n")
            reply = b""
            while chunk := connection.recv(4096):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.0 405") and b"Allow: GET" in head and body == b""
    finally:
        server.terminate()
        server.wait(timeout=30)
