"""YARN: a cluster-mode driver is submitted by spark-submit (``--deploy-mode cluster``, returning once the
ResourceManager has the application) and then known by its application id; how it is, its kill and its log come
from the ResourceManager's REST API (``/ws/v1/cluster/apps``).

The ResourceManager's web address is read where spark-submit reads the cluster's client configuration:
``yarn-site.xml`` in ``$YARN_CONF_DIR`` or ``$HADOOP_CONF_DIR``. Requests carry ``user.name`` (Hadoop's simple
HTTP authentication: the user the application runs as); a Kerberos-secured ResourceManager (SPNEGO) is not
reached, and says so (401).
"""

from __future__ import annotations

import getpass
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sparkpoint.adapters import http
from sparkpoint.adapters.cluster_managers.manager import ClusterManager, DriverLaunch
from sparkpoint.adapters.hadoop_conf import client_address, conf_dirs, read_site
from sparkpoint.adapters.spark_submit import driver_environment
from sparkpoint.errors import (
    ConfigError,
    EnvironmentSetupError,
    NotFoundError,
    SparkFailureError,
    UnreachableError,
)
from sparkpoint.times import poll_until

SUBMIT_SECONDS = 120.0  # for spark-submit to hand the application over (it uploads the application's files)
# YARN's application states, as sparkpoint's job states (a FINISHED application is as its final status says).
APP_STATES = {"NEW": "starting", "NEW_SAVING": "starting", "SUBMITTED": "starting", "ACCEPTED": "starting",
              "RUNNING": "running", "FAILED": "failed", "KILLED": "cancelled"}
FINAL_STATES = {"SUCCEEDED": "finished", "FAILED": "failed", "KILLED": "cancelled", "UNDEFINED": "finished"}
_APPLICATION_ID = re.compile(r"application_\d+_\d+")


def web_addresses(site: dict[str, str]) -> list[str]:
    """The ResourceManager's web addresses (each of an HA pair's), as a client reaches them."""
    https = site.get("yarn.http.policy") == "HTTPS_ONLY"
    key = "yarn.resourcemanager.webapp.https.address" if https else "yarn.resourcemanager.webapp.address"
    port = "8090" if https else "8088"
    ids = [i.strip() for i in site.get("yarn.resourcemanager.ha.rm-ids", "").split(",") if i.strip()]
    suffixes = [f".{rm_id}" for rm_id in ids] if site.get("yarn.resourcemanager.ha.enabled") == "true" else [""]
    return [f"{'https' if https else 'http'}://" + client_address(
        site.get(key + suffix) or f"{site.get('yarn.resourcemanager.hostname' + suffix, '0.0.0.0')}:{port}")
        for suffix in suffixes]


def yarn_site() -> dict[str, str]:
    found = conf_dirs("YARN_CONF_DIR", "HADOOP_CONF_DIR")
    if not found:
        raise EnvironmentSetupError("--master yarn needs the cluster's client configuration: set HADOOP_CONF_DIR "
                                    "(or YARN_CONF_DIR) to the directory with its yarn-site.xml, as spark-submit does")
    return read_site(found[0], "yarn-site.xml")


class ResourceManager:
    """The REST API of a ResourceManager: the first of an HA pair that answers (a standby redirects to the
    active one, and the redirect is followed)."""

    def __init__(self, addresses: list[str], user: str, timeout: float = 10.0):
        self.addresses = addresses
        self.user = user
        self.timeout = timeout

    def _call(self, method: str, path: str, params: dict[str, str] | None = None, **kwargs) -> dict[str, Any]:
        last: UnreachableError | None = None
        for address in self.addresses:
            url = f"{address}/ws/v1/cluster/{path}"
            try:
                with http.session({"Accept": "application/json"}) as client:
                    status, answer = http.call(
                        client, method, url, params={**(params or {}), "user.name": self.user}, timeout=self.timeout,
                        what="the ResourceManager", unreachable=lambda reason, where=address: UnreachableError(
                            f"the YARN ResourceManager at {where} does not answer: {reason}"), **kwargs)
            except UnreachableError as exc:
                last = exc
                continue
            if status == 401:
                raise ConfigError(f"the ResourceManager at {address} refused user {self.user!r} (401): a secured "
                                  "(Kerberos) ResourceManager is not reached by sparkpoint")
            if status == 404:
                raise NotFoundError(f"the ResourceManager at {address} knows no {path}")
            if not isinstance(answer, dict) or status >= 400:
                raise SparkFailureError(f"the ResourceManager answered {url} with status {status}: {str(answer)[:200]}")
            return answer
        raise last or UnreachableError("no ResourceManager address is configured")

    def application(self, app_id: str) -> dict[str, Any]:
        return self._call("GET", f"apps/{quote(app_id)}").get("app") or {}

    def tagged(self, tag: str) -> list[dict[str, Any]]:
        return ((self._call("GET", "apps", params={"applicationTags": tag})
                 .get("apps") or {}).get("app") or [])

    def kill(self, app_id: str) -> None:
        self._call("PUT", f"apps/{quote(app_id)}/state", json={"state": "KILLED"})


class YarnManager(ClusterManager):
    kind = "yarn"

    def __init__(self, master: str, timeout: float = 10.0):
        super().__init__(master)
        self.timeout = timeout
        self._rm: ResourceManager | None = None

    @property
    def rm(self) -> ResourceManager:
        """Read when first needed: a job of a YARN master listed on a machine without its configuration asks
        nothing of it."""
        if self._rm is None:
            user = os.environ.get("HADOOP_USER_NAME") or getpass.getuser()  # as Hadoop's simple authentication
            self._rm = ResourceManager(web_addresses(yarn_site()), user, self.timeout)
        return self._rm

    def refuse_deploy_mode(self, deploy_mode: str) -> None:
        yarn_site()

    def submit(self, launch: DriverLaunch) -> str:
        """spark-submit in cluster mode, returning once the ResourceManager has the application; the application
        is then found by a tag of the job's, not by spark-submit's log (whose level the user's log4j sets)."""
        tag = application_tag(launch.job_id)
        environment = {**launch.environment, **({"SPARKPOINT_AGENT_HOST": os.environ["SPARKPOINT_AGENT_HOST"]}
                                                if os.environ.get("SPARKPOINT_AGENT_HOST") else {})}
        argv = [launch.spark.submit, "--master", "yarn", "--deploy-mode", "cluster", "--name", launch.job_id,
                "--conf", "spark.yarn.submit.waitAppCompletion=false", "--conf", f"spark.yarn.tags={tag}",
                "--conf", f"spark.pyspark.python={os.environ.get('PYSPARK_PYTHON') or sys.executable}",
                *(arg for name, value in environment.items()
                  for arg in ("--conf", f"spark.yarn.appMasterEnv.{name}={value}")),
                *launch.submit_args, launch.bootstrap, *launch.arguments]
        log = Path(launch.job_directory) / "submit.log"
        with open(log, "ab") as output:
            try:
                done = subprocess.run(argv, env=driver_environment(launch.spark), stdin=subprocess.DEVNULL,
                                      stdout=output, stderr=subprocess.STDOUT, timeout=SUBMIT_SECONDS)
            except subprocess.TimeoutExpired:
                raise SparkFailureError(f"spark-submit did not hand the application to YARN within "
                                        f"{SUBMIT_SECONDS:g} s; see {log}") from None
        found = poll_until(lambda: [a for a in self.rm.tagged(tag) if a.get("name") == launch.job_id],
                           10.0 if done.returncode == 0 else 0.0, 0.5)
        if not found:
            raise SparkFailureError(f"spark-submit exited with status {done.returncode} and YARN has no application "
                                    f"of job {launch.job_id}; see {log}")
        return found[0]["id"]

    def driver_status(self, driver_id: str) -> dict[str, Any]:
        app = self.rm.application(driver_id)
        said = app.get("state", "UNKNOWN")
        state = (FINAL_STATES.get(app.get("finalStatus", "UNDEFINED"), "failed") if said == "FINISHED"
                 else APP_STATES.get(said, "lost"))
        return {"driverState": said, "state": state, "final_status": app.get("finalStatus"),
                **({"message": app["diagnostics"]} if app.get("diagnostics") else {}),
                **({"log": app["amContainerLogs"]} if app.get("amContainerLogs") else {})}

    def kill(self, driver_id: str) -> None:
        self.rm.kill(driver_id)

    def application_states(self, app_ids: set[str]) -> dict[str, str]:
        states = {}
        for app_id in sorted(app_ids):
            if _APPLICATION_ID.fullmatch(app_id):  # a local-mode run's id (local-...) is not YARN's to know
                states[app_id] = self.rm.application(app_id).get("state")
        return states


def application_tag(job_id: str) -> str:
    """YARN keeps tags lower-cased: the job's id is matched again on the application's name."""
    return f"sparkpoint-{job_id.lower()}"
