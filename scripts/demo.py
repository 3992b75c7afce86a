"""The sparkpoint demo, narrated: savepoint a real streaming query, lose its checkpoint, restore
the savepoint elsewhere, and continue exactly where it stopped.

usage: python scripts/demo.py [--keep]   (scripts/demo.sh sets up the environment first)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "scripts" / "demo_app.py"
ROOMS = ["kitchen", "hall", "garage"]
FIRST_MTIME = 1_700_000_000


def say(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def write_events(input_dir: Path, batch: int) -> None:
    """One file per micro-batch; its modification time orders it (the file source sorts by it)."""
    input_dir.mkdir(parents=True, exist_ok=True)
    path = input_dir / f"events-{batch:03d}.json"
    lines = [
        json.dumps({"room": ROOMS[(batch + i) % 3], "event": "motion" if (batch + 2 * i) % 5 else "door", "ts": batch * 100 + i})
        for i in range(6)
    ]
    path.write_text("\n".join(lines) + "\n")
    os.utime(path, (FIRST_MTIME + batch, FIRST_MTIME + batch))


def run_app(input_dir: Path, checkpoint_root: Path) -> str:
    done = subprocess.run([sys.executable, str(APP), str(input_dir), str(checkpoint_root)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the streaming application failed:\n{done.stderr[-3000:]}")
    output = "\n".join(line for line in done.stdout.splitlines() if line.startswith("  batch"))
    print(output, flush=True)
    return output


def last_counts(app_output: str) -> str:
    return app_output.splitlines()[-1].split(": ", 1)[1]


def sparkpoint(home: Path, *args: str) -> str:
    command = [sys.executable, "-m", "sparkpoint", "--home", str(home), *args]
    print("$ sparkpoint " + " ".join(args), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        sys.exit(f"sparkpoint exited {done.returncode}: {done.stderr}")
    return done.stdout


def main() -> None:
    keep = "--keep" in sys.argv
    work = Path(tempfile.mkdtemp(prefix="sparkpoint-demo-"))
    home, events = work / "home", work / "events"
    try:
        say(f"A streaming job counts motion-sensor events per room (work dir {work})")
        for batch in range(3):
            write_events(events, batch)
        run_app(events, work / "cluster-a")

        say("Take a savepoint of its checkpoint (a live query's checkpoint works the same way)")
        created = json.loads(sparkpoint(home, "savepoint", "--from-checkpoint", str(work / "cluster-a"),
                                        "--job", "room-activity", "--output", "json"))
        savepoint_id = created["id"]
        print(f"savepoint {savepoint_id}: room_activity cut at batch {created['queries'][0]['batch_id']}")
        sparkpoint(home, "savepoints")

        say("Inspect it: the cut, the source offsets, the operator, and the state rows themselves")
        sparkpoint(home, "inspect", savepoint_id, "--state")

        say("Disaster: the original checkpoint is gone")
        shutil.rmtree(work / "cluster-a")

        say("Restore the savepoint as a fresh checkpoint root for the job, on 'another cluster'")
        sparkpoint(home, "restore", savepoint_id, str(work / "cluster-b"))

        say("New events arrive; the job resumes from the savepoint: counts continue from batch 3")
        for batch in range(3, 5):
            write_events(events, batch)
        resumed = run_app(events, work / "cluster-b")

        say("Check: an uninterrupted run over the same events ends with the same counts")
        reference = run_app(events, work / "reference")
        verdict = "identical" if last_counts(resumed) == last_counts(reference) else "DIFFERENT"
        print(f"final counts after restore: {last_counts(resumed)}\n"
              f"uninterrupted run:         {last_counts(reference)}\n=> {verdict}")

        say("Verify checksums, and see what retention would prune")
        sparkpoint(home, "verify", savepoint_id)
        sparkpoint(home, "prune", "--keep-last", "0", "--dry-run")
        if verdict != "identical":
            sys.exit(1)
    finally:
        if keep:
            print(f"\nkept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
