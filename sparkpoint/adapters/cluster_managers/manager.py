"""What sparkpoint asks of the place a job's driver runs (ClusterManager), what it hands a manager to start a
cluster-mode driver (DriverLaunch), and the managers that run drivers here only (ClientOnly). Which manager a
master URL names is the package's (``manager_for``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparkpoint.adapters.spark_install import Spark
from sparkpoint.errors import BadArgumentError

# A driver's state as sparkpoint's job states name it (sparkpoint.jobs.job_state): what a manager's
# driver_status answers under "state".
DRIVER_JOB_STATES = ("starting", "running", "finished", "failed", "cancelled", "lost")


@dataclass(frozen=True)
class DriverLaunch:
    """A driver to start in cluster mode: spark-submit's options, the bootstrap with its arguments (the job's
    directory, the application, its arguments), and the settings the bootstrap reads from its environment."""

    job_id: str
    job_directory: str
    bootstrap: str
    arguments: list[str]
    submit_args: list[str]  # --conf KEY=VALUE and the user's spark-submit options
    environment: dict[str, str]
    spark: Spark | None  # the Spark here; None where the manager needs none (a standalone REST submission)


class ClusterManager:
    """What sparkpoint asks of the place a job's driver runs. As it stands, a manager that runs drivers here
    only: each other one overrides what it does in cluster mode."""

    kind: str  # local, standalone, yarn, kubernetes, other

    def __init__(self, master: str):
        self.master = master

    def needs_spark_here(self, deploy_mode: str) -> bool:
        """Whether the launch runs spark-submit on this machine (client mode always does)."""
        return True

    def refuse_deploy_mode(self, deploy_mode: str) -> None:
        """Refused before anything starts: a deploy mode this manager cannot run a sparkpoint job in."""
        if deploy_mode == "cluster":
            raise BadArgumentError(self.no_cluster_mode)

    no_cluster_mode = "--deploy-mode cluster needs a cluster manager: --master spark://HOST:PORT or yarn"

    def submit(self, launch: DriverLaunch) -> str:
        """Start the driver in cluster mode; the id the manager knows it by (recorded as the job's
        ``submission_id``)."""
        raise BadArgumentError(self.no_cluster_mode)

    def driver_status(self, driver_id: str) -> dict[str, Any]:
        """How the manager says a cluster-mode driver is: ``driverState`` (its own word), ``state`` (one of
        DRIVER_JOB_STATES), and where it has them ``message`` (why it failed) and ``log`` (its output)."""
        raise BadArgumentError(self.no_cluster_mode)

    def kill(self, driver_id: str) -> None:
        raise BadArgumentError(self.no_cluster_mode)

    def application_states(self, app_ids: set[str]) -> dict[str, str]:
        """The manager's state of each of these applications it knows (RUNNING, FINISHED, KILLED, ...), by id.
        Asked for `list`, within its deadline: a manager that runs no applications of its own says nothing."""
        return {}


class ClientOnly(ClusterManager):
    """Local mode, and managers sparkpoint runs drivers for only here (Kubernetes: its cluster-mode driver
    runs in a pod that no test here can start, docs/howto/clusters.md)."""

    def __init__(self, master: str, kind: str, no_cluster_mode: str | None = None):
        super().__init__(master)
        self.kind = kind
        if no_cluster_mode:
            self.no_cluster_mode = no_cluster_mode
