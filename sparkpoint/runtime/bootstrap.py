"""What ``sparkpoint run`` hands to spark-submit instead of the application: it starts the agent,
then runs the application unchanged in this same interpreter, and records how it ended.

usage (by sparkpoint only): bootstrap.py JOB_DIR APP.py [APP_ARGS...]
                            bootstrap.py --standby JOB_DIR IDLE_SECONDS (runtime.standby: a driver that
                            warms up and waits for the application a `run` hands it)
                            bootstrap.py --train-classes SCRATCH_DIR (runtime.standby.train: the driver whose
                            JVM dumps a class data sharing archive as it exits)
Environment: SPARKPOINT_AGENT_HOST (default 127.0.0.1), SPARKPOINT_ALLOW_NON_RESTORED_STATE (1/0),
SPARKPOINT_RESTORE_GRACE (seconds), SPARKPOINT_HANDOVER_FROM (the pid of a `run -s` or `run --replace`, or
"cluster" for a driver its cluster manager runs: the first query start waits for its hand-over, the restored
state in place and the saved queries' names, so that the JVM and the application's start overlap the restore
and the stop of a job being replaced; in cluster mode for at most SPARKPOINT_HANDOVER_WAIT seconds);
SPARKPOINT_CHECK_DIR and SPARKPOINT_CONTROLLER (`run -s`'s check, tried in this
driver before each saved query starts: see runtime.gate).
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import threading
import time
import traceback


def _end_with_the_jvm(parent: int) -> None:
    """This Python driver's JVM is its parent. When the JVM goes (a master's kill, a worker's end), nothing
    else ends this process: PySpark's gateway threads would keep it, an orphan, on the worker."""
    from sparkpoint.times import poll_until

    poll_until(lambda: os.getppid() != parent, None, 0.5)
    print("sparkpoint: the driver JVM ended; ending its Python driver", file=sys.stderr, flush=True)
    os._exit(137)


def _end_when_spark_stops_underneath(agent) -> None:
    """An application ended from outside its code (YARN killed it, a master removed it) stops the SparkContext in
    the JVM and nothing else: the application's Python waits on, its streaming queries idle, a driver that no
    cluster runs any more. Seen as a context stopped in the JVM that this Python still holds as active: an
    application's own stop() clears that a moment after it stops the JVM's, so it must last two looks."""
    from pyspark import SparkContext

    from sparkpoint.times import poll_until

    looks = []

    def stopped_underneath() -> bool:
        context = SparkContext._active_spark_context
        try:
            stopped = context is not None and context._jsc.sc().isStopped()
        except Exception:  # noqa: BLE001 - a gateway going away: the JVM watch ends this process
            stopped = False
        looks[:] = [*looks, True] if stopped else []
        return len(looks) >= 2

    poll_until(stopped_underneath, None, 1.0)
    print("sparkpoint: the Spark application was stopped from outside the application; ending its driver",
          file=sys.stderr, flush=True)
    agent.finish(1, "the Spark application was stopped from outside it (by its cluster manager?): see the "
                    "cluster manager's record of the application and the driver log")
    os._exit(1)


def _hand_the_cluster_secret_to_spark() -> None:
    """In cluster mode the master strips spark.authenticate.secret from a submission (it would show on the
    driver's command line) and the worker hands it to the driver as _SPARK_AUTH_SECRET instead; Spark's
    standalone driver reads it only from its configuration, so it goes there, inside the JVM."""
    secret = os.environ.get("_SPARK_AUTH_SECRET")
    if not secret:
        return
    from pyspark import SparkContext

    SparkContext._ensure_initialized()
    system = SparkContext._jvm.java.lang.System
    if system.getProperty("spark.authenticate.secret") is None:
        system.setProperty("spark.authenticate.secret", secret)


def main(argv: list[str]) -> int:
    driver_started = time.time()  # the restore's "spark-submit" phase ends here (jobs.startup)
    threading.Thread(target=_end_with_the_jvm, args=(os.getppid(),), name="sparkpoint-jvm-watch", daemon=True).start()
    if argv[:1] == ["--standby"]:
        from sparkpoint.runtime.standby import serve

        return serve(argv[1], float(argv[2]),
                     lambda job_argv, adopted_at: run_application(job_argv, adopted_at, adopted=True))
    if argv[:1] == ["--train-classes"]:
        from sparkpoint.runtime.standby import train

        return train(argv[1])
    return run_application(argv, driver_started)


def run_application(argv: list[str], driver_started: float, adopted: bool = False) -> int:
    """The agent, then the application. ``driver_started``: when this driver began, or was adopted (a standby)."""
    from sparkpoint.jobs.protocol import JOB_FILE, TOKEN_FILE

    job_dir, app, *app_args = argv
    with open(os.path.join(job_dir, JOB_FILE)) as handle:
        job = json.load(handle)
    with open(os.path.join(job_dir, TOKEN_FILE)) as handle:
        token = handle.read().strip()

    from sparkpoint.runtime.agent import Agent
    from sparkpoint.runtime.batch_writes import intercept_batch_writes
    from sparkpoint.runtime.gate import install_from_environment
    from sparkpoint.runtime.handover import hold_first_start

    # run -s and run --replace: the saved queries come with the hand-over, once their state is in place
    handover_from = os.environ.get("SPARKPOINT_HANDOVER_FROM")
    agent = Agent(
        job["id"], job_dir, token,
        host=os.environ.get("SPARKPOINT_AGENT_HOST", "127.0.0.1"),
        expected_queries=None if handover_from else (),
        allow_non_restored=os.environ.get("SPARKPOINT_ALLOW_NON_RESTORED_STATE") == "1",
        restore_grace=float(os.environ.get("SPARKPOINT_RESTORE_GRACE", "60")),
        driver_started=driver_started, adopted=adopted,
    )
    agent.start()
    threading.Thread(target=_end_when_spark_stops_underneath, args=(agent,), name="sparkpoint-context-watch",
                     daemon=True).start()
    _hand_the_cluster_secret_to_spark()
    if handover_from:  # installed first, so it runs after the gate: a query is checked, then held till the hand-over
        hold_first_start(job_dir, None if handover_from == "cluster" else int(handover_from), agent.expect,
                         timeout=float(os.environ.get("SPARKPOINT_HANDOVER_WAIT", "0")) or None)
    install_from_environment()
    intercept_batch_writes()

    # The application sees itself as __main__ with its own arguments and directory, as under spark-submit.
    sys.argv = [app, *app_args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(app)))
    exit_code, error = 0, None
    try:
        runpy.run_path(app, run_name="__main__")
    except SystemExit as exc:
        exit_code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            # Python prints such a message as it exits; caught here, it would be lost, and the job's error None.
            error = str(exc.code)
            print(error, file=sys.stderr)
    except BaseException as exc:  # noqa: BLE001 - recorded for the operator, then re-reported as spark-submit would
        traceback.print_exc()
        exit_code, error = 1, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    agent.finish(exit_code, error)
    return exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
