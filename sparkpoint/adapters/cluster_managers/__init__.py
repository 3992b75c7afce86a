"""Where a job's driver runs: one module per cluster manager, behind one interface.

In client mode every manager is alike: spark-submit runs the driver on this machine, and its process is the
job's (``sparkpoint.jobs.run``). What differs is what the manager itself is asked — for a driver it runs in
cluster mode (submit it, how it is, end it, where its output is), and of the applications it runs (their
states, for `list`). A manager that cannot run a driver for sparkpoint refuses cluster mode before anything
starts. The master URL picks the manager (``manager_for``), as spark-submit's ``--master`` does.

How a cluster-mode driver's agent reaches the CLI is the same everywhere: the driver writes its address into the
job's directory in the home, which every driver must reach (a shared mount, see docs/howto/move.md), and
answers only requests carrying the job's token, which is in that directory too (owner-only).
"""

from __future__ import annotations

from sparkpoint.adapters.cluster_managers.manager import ClientOnly, ClusterManager

KUBERNETES_CLUSTER_MODE = ("--deploy-mode cluster on Kubernetes is not run by sparkpoint: restore the savepoint "
                           "into the checkpoint the driver pod mounts (`sparkpoint restore`, an init container), "
                           "or run the driver here in client mode")


def manager_for(master: str, timeout: float = 10.0) -> ClusterManager:
    """The manager behind a master URL, as spark-submit reads it. An unknown scheme runs as client-only: the
    driver here, whatever spark-submit makes of the URL."""
    if master.startswith("spark://"):
        from sparkpoint.adapters.cluster_managers.standalone import StandaloneManager

        return StandaloneManager(master, timeout=timeout)
    if master == "yarn" or master.startswith("yarn-"):
        from sparkpoint.adapters.cluster_managers.yarn import YarnManager

        return YarnManager(master, timeout=timeout)
    if master.startswith("k8s://"):
        return ClientOnly(master, "kubernetes", KUBERNETES_CLUSTER_MODE)
    return ClientOnly(master, "local" if master.startswith("local") else "other")
