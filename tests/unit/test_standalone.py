"""The standalone master adapter and the bootstrap's JVM watch, without a cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from sparkpoint.adapters.cluster_managers.standalone import StandaloneMaster, read_properties, submission_properties
from sparkpoint.adapters.processes import pid_alive
from sparkpoint.errors import BadArgumentError, UnreachableError
from sparkpoint.times import poll_until


def test_spark_submit_options_become_submission_properties():
    properties = submission_properties(["--py-files", "deps.zip", "--conf", "spark.x=a=b", "--driver-memory=2g",
                                        "--packages", "g:a:1"])
    assert properties == {"spark.submit.pyFiles": "deps.zip", "spark.x": "a=b", "spark.driver.memory": "2g",
                          "spark.jars.packages": "g:a:1"}
    with pytest.raises(BadArgumentError, match="--proxy-user cannot be passed in cluster mode"):
        submission_properties(["--proxy-user", "bob"])
    # A flag takes no value: the option after it is not swallowed, and the flag itself is refused.
    with pytest.raises(BadArgumentError, match="--verbose cannot be passed in cluster mode"):
        submission_properties(["--conf", "spark.x=1", "--verbose", "--conf", "spark.y=2"])


def test_properties_files_in_their_three_spellings(tmp_path):
    path = tmp_path / "spark-defaults.conf"
    path.write_text("# comment\n\nspark.a  1\nspark.b=2\nspark.c: x y\n")
    assert read_properties(path) == {"spark.a": "1", "spark.b": "2", "spark.c": "x y"}


def test_master_urls_and_an_unreachable_master():
    with pytest.raises(BadArgumentError, match="not a standalone master URL"):
        StandaloneMaster("yarn", {})
    master = StandaloneMaster("spark://127.0.0.1:7077", {"spark.master.rest.port": "9"}, timeout=2)
    assert master.rest_url == "http://127.0.0.1:9/v1/submissions"
    with pytest.raises(UnreachableError, match="127.0.0.1:9 does not answer"):
        master.driver_state("driver-1")


def test_the_python_driver_ends_when_its_jvm_goes():
    # A stand-in JVM (the parent) starts the Python driver with the bootstrap's watch, then is killed.
    child = ("import sys, time, threading; from sparkpoint.runtime.bootstrap import _end_with_the_jvm; "
             "import os; threading.Thread(target=_end_with_the_jvm, args=(os.getppid(),), daemon=True).start(); "
             "print(os.getpid(), flush=True); time.sleep(600)")
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); "
                               "time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    driver_pid = int(parent.stdout.readline())
    assert pid_alive(driver_pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    assert poll_until(lambda: not pid_alive(driver_pid), 10, 0.1)
