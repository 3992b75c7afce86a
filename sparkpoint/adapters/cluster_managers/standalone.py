"""A Spark standalone master: its REST submission API (create, status, kill) and its JSON status page.

Both answer only requests carrying a short-lived JWS token signed with the key of Spark's JWSFilter
(``spark.org.apache.spark.ui.JWSFilter.param.secretKey``), read with the rest of the cluster's client
settings from ``$SPARK_CONF_DIR/spark-defaults.conf``, the file spark-submit reads too.
"""

from __future__ import annotations

import base64
import os
import re
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from sparkpoint.adapters import http
from sparkpoint.adapters.cluster_managers.manager import ClusterManager, DriverLaunch
from sparkpoint.adapters.local_files import read_configuration
from sparkpoint.adapters.spark_submit import VALUELESS_OPTIONS
from sparkpoint.errors import BadArgumentError, ConfigError, EnvironmentSetupError, SparkFailureError, UnreachableError

JWS_KEY = "spark.org.apache.spark.ui.JWSFilter.param.secretKey"
PYTHON_RUNNER = "org.apache.spark.deploy.PythonRunner"
TOKEN_SECONDS = 60
PROPERTIES_BYTES = 1 << 20  # a spark-defaults.conf is a few lines
_SEPARATOR = re.compile(r"\s*[=:\s]\s*")  # Java properties: key=value, key: value, key value
# spark-submit options that cluster mode turns into Spark properties of the REST submission.
SUBMIT_OPTION_PROPERTIES = {
    "--py-files": "spark.submit.pyFiles", "--jars": "spark.jars", "--files": "spark.files",
    "--archives": "spark.archives", "--packages": "spark.jars.packages", "--driver-memory": "spark.driver.memory",
    "--driver-cores": "spark.driver.cores", "--executor-memory": "spark.executor.memory",
    "--executor-cores": "spark.executor.cores", "--total-executor-cores": "spark.cores.max",
    "--driver-java-options": "spark.driver.extraJavaOptions", "--driver-class-path": "spark.driver.extraClassPath",
}
# The master's driver states, as sparkpoint's job states.
DRIVER_STATES = {"SUBMITTED": "starting", "RUNNING": "running", "RELAUNCHING": "starting", "FINISHED": "finished",
                 "FAILED": "failed", "ERROR": "failed", "KILLED": "cancelled", "UNKNOWN": "lost"}


def read_properties(path: Path) -> dict[str, str]:
    """A spark-defaults.conf: ``key value`` or ``key=value`` lines, ``#`` comments; {} when there is none. Read
    as sparkpoint's records are: a FIFO or device in its place is refused (exit 3), never waited on."""
    text = read_configuration(path, PROPERTIES_BYTES, "the Spark configuration")
    if text is None:
        return {}
    properties = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, value = (*_SEPARATOR.split(line, 1), "")[:2]
        properties[key] = value.strip()
    return properties


def client_properties(conf_dir: str | None = None) -> dict[str, str]:
    conf_dir = conf_dir or os.environ.get("SPARK_CONF_DIR")
    if not conf_dir:
        return {}
    return read_properties(Path(conf_dir) / "spark-defaults.conf")


def submission_properties(submit_args: list[str]) -> dict[str, str]:
    """spark-submit's options as the Spark properties a REST submission carries."""
    properties, index = {}, 0
    while index < len(submit_args):
        option = submit_args[index]
        name, has_value, value = option.partition("=")
        if not has_value and name not in VALUELESS_OPTIONS:
            value = submit_args[index + 1] if index + 1 < len(submit_args) else ""
            index += 1
        index += 1
        if name == "--conf":
            key, _, conf_value = value.partition("=")
            properties[key] = conf_value
        elif name in SUBMIT_OPTION_PROPERTIES:
            properties[SUBMIT_OPTION_PROPERTIES[name]] = value
        else:
            known = ", ".join(sorted(SUBMIT_OPTION_PROPERTIES))
            raise BadArgumentError(f"{name} cannot be passed in cluster mode (REST submission); known: {known}, --conf")
    return properties


class StandaloneMaster:
    def __init__(self, master_url: str, properties: dict[str, str] | None = None, timeout: float = 10.0):
        parts = urlsplit(master_url)
        if parts.scheme != "spark" or not parts.hostname:
            raise BadArgumentError(f"{master_url!r} is not a standalone master URL (spark://HOST:PORT)")
        self.master_url = master_url
        self.properties = client_properties() if properties is None else properties
        host = parts.hostname
        self.rest_url = f"http://{host}:{self.properties.get('spark.master.rest.port', '6066')}/v1/submissions"
        self.ui_url = f"http://{host}:{self.properties.get('spark.master.ui.port', '8080')}"
        self.timeout = timeout

    def require_rest(self) -> None:
        """--deploy-mode cluster submits through the REST server: refused at once on a master without one."""
        if self.properties.get("spark.master.rest.enabled") == "false":
            raise EnvironmentSetupError(
                f"the master at {self.master_url} runs no REST submission server (spark.master.rest.enabled=false in "
                "its client configuration), which --deploy-mode cluster needs: run in client mode (a Spark 3.5, "
                "4.0.0 or 4.1.0 master cannot run REST beside its RPC secret)")

    def _headers(self) -> dict[str, str]:
        key = self.properties.get(JWS_KEY)
        if not key:
            return {}
        import jwt  # here: only commands that talk to a master pay for the import

        token = jwt.encode({"sub": "sparkpoint", "exp": int(time.time()) + TOKEN_SECONDS},
                           base64.urlsafe_b64decode(key + "=" * (-len(key) % 4)), algorithm="HS256")
        return {"Authorization": f"Bearer {token}"}

    def _call(self, method: str, url: str, **kwargs) -> dict[str, Any]:
        where = urlsplit(url).netloc
        with http.session() as client:
            status, answer = http.call(
                client, method, url, headers=self._headers(), timeout=self.timeout, what="the master",
                unreachable=lambda reason: UnreachableError(f"the standalone master at {where} does not answer: "
                                                            f"{reason}"), **kwargs)
        if status in (401, 403):
            raise ConfigError(f"the master refused sparkpoint's token ({status}): "
                              "is SPARK_CONF_DIR the cluster's client configuration?")
        if not isinstance(answer, dict):  # an error page (a master still starting): no answer to read
            raise SparkFailureError(f"the master answered {url} with status {status}: {str(answer)[:200]}")
        return answer

    def create(self, app_resource: str, app_args: list[str], spark_properties: dict[str, str],
               environment: dict[str, str]) -> str:
        body = {
            "action": "CreateSubmissionRequest", "clientSparkVersion": "4.3.0", "appResource": app_resource,
            "mainClass": PYTHON_RUNNER, "appArgs": app_args, "environmentVariables": environment,
            "sparkProperties": {"spark.master": self.master_url, "spark.submit.deployMode": "cluster",
                                **{k: v for k, v in self.properties.items() if k.startswith("spark.authenticate")},
                                **spark_properties},
        }
        answer = self._call("POST", f"{self.rest_url}/create", json=body)
        if not answer.get("success"):
            raise SparkFailureError(f"the master refused the submission: {answer.get('message', answer)}")
        return answer["submissionId"]

    def driver_state(self, submission_id: str) -> dict[str, Any]:
        return self._call("GET", f"{self.rest_url}/status/{submission_id}")

    def kill(self, submission_id: str) -> dict[str, Any]:
        return self._call("POST", f"{self.rest_url}/kill/{submission_id}")

    def overview(self) -> dict[str, Any]:
        """The master's JSON page: workers, active and completed applications and drivers."""
        return self._call("GET", f"{self.ui_url}/json/")


class StandaloneManager(ClusterManager):
    """A standalone master: a cluster-mode driver is submitted through its REST API (spark-submit refuses Python
    cluster mode on standalone, while Spark's PythonRunner, named directly, runs it)."""

    kind = "standalone"

    def __init__(self, master: str, timeout: float = 10.0):
        super().__init__(master)
        self.rest = StandaloneMaster(master, timeout=timeout)  # a bad master URL is refused here, before a launch

    def needs_spark_here(self, deploy_mode: str) -> bool:
        return deploy_mode == "client"

    def refuse_deploy_mode(self, deploy_mode: str) -> None:
        if deploy_mode == "cluster":
            self.rest.require_rest()

    def submit(self, launch: DriverLaunch) -> str:
        properties = submission_properties(launch.submit_args)
        py_files = properties.get("spark.submit.pyFiles", "")
        properties.update({"spark.app.name": launch.job_id, "spark.pyspark.python": sys.executable,
                           "spark.pyspark.driver.python": sys.executable})
        return self.rest.create(launch.bootstrap, [launch.bootstrap, py_files, *launch.arguments], properties,
                                launch.environment)

    def driver_status(self, driver_id: str) -> dict[str, Any]:
        answer = self.rest.driver_state(driver_id)
        said = answer.get("driverState", "UNKNOWN")
        return {**answer, "driverState": said, "state": DRIVER_STATES.get(said, "lost")}

    def kill(self, driver_id: str) -> None:
        self.rest.kill(driver_id)

    def application_states(self, app_ids: set[str]) -> dict[str, str]:
        page = self.rest.overview()
        return {a.get("id"): a.get("state") for a in [*page.get("activeapps", []), *page.get("completedapps", [])]
                if a.get("id") in app_ids}
