"""What `sparkpoint run` is asked (RunRequest: run's options), and the options that cannot go together, refused
before anything runs."""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkpoint.errors import BadArgumentError
from sparkpoint.jobs.check import Launch


@dataclass
class RunRequest(Launch):
    name: str | None = None
    detach: bool = False
    savepoint: str | None = None
    fork: bool = False  # with savepoint: the restored queries get new query ids
    partitions: int | None = None  # with savepoint: rescale it to this many state partitions first
    claim: bool = False
    replace: str | None = None  # a running job to stop with a savepoint and continue from
    savepoint_path: str | None = None  # with replace: where that savepoint goes
    stop_timeout: float = 60.0  # with replace: seconds to wait for the old job's batch boundary
    deploy_mode: str = "client"  # cluster: the cluster manager runs the driver (adapters.cluster_managers)
    check: bool = True  # with -s or --replace: refuse an application that will not restore (sparkpoint check)
    probation: float | None = 30.0  # with replace or rollback_to: seconds past the first batch to roll back in
    rollback_to: str | None = None  # with -s: a savepoint of the previous version, to start it again from
    healthy_when: list[str] = field(default_factory=list)  # conditions the new version must meet on probation
    rollback_sink: bool = False  # with -s: roll the file sinks' outputs and Delta tables back to the cut first
    standby: bool = True  # --detach in client mode: adopt a standby driver launched as this driver would be


def refuse_what_cannot_go_together(request: RunRequest) -> None:
    if request.replace and request.savepoint:
        raise BadArgumentError("--replace restores from the savepoint it takes of that job: drop -s")
    if (request.rollback_to or request.healthy_when) and request.probation is None:
        raise BadArgumentError("--no-rollback leaves nothing for --rollback-to or --healthy-when to do: drop one")
    if request.rollback_to and not request.savepoint:
        raise BadArgumentError("--rollback-to goes with -s (with --replace, the rollback goes to the hand-over's "
                               "savepoint by itself)")
    if request.claim and (request.rollback_to or request.replace):
        raise BadArgumentError("--claim-mode claim disposes of the savepoint the rollback would start the previous "
                               "version from: drop one")
    if request.rollback_sink and not request.savepoint:
        raise BadArgumentError("--rollback-sink rolls the sinks back to the savepoint of -s: use it with -s")
    if request.keep_sink_output and not request.savepoint:
        raise BadArgumentError("--keep-sink-output keeps the sinks the savepoint of -s writes: use it with -s")
    if request.keep_sink_output and request.rollback_sink:
        raise BadArgumentError("--keep-sink-output keeps what --rollback-sink would undo: choose one")
    if request.fork and not request.savepoint:
        raise BadArgumentError("--fork gives the queries restored by -s new ids: use it with -s")
    if request.partitions is not None and not request.savepoint:
        raise BadArgumentError("--partitions rescales the savepoint of -s: use it with -s (to rescale a running job, "
                               "`stop` it, then run -s with the savepoint the stop took)")
    if request.healthy_when and not (request.replace or request.rollback_to):
        raise BadArgumentError("--healthy-when is judged on probation: use it with --replace or --rollback-to")
