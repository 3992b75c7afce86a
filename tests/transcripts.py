"""The docs' console blocks (a `$ sparkpoint ...` line, then what it printed) held against a real run's transcript:
scripts/demo.py's for the README's tour, scripts/walkthrough.py's for the guides. What differs from run to run
(ids, times, sizes, rates, paths of temporary directories, the widths of table columns) is left out of the
comparison; every word, column, row and line is compared."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```console\n(.*?)^```", re.MULTILINE | re.DOTALL)
# What the demo and the walk-through print around the commands' output: their own narration.
NARRATION = ("$ ", "events:", "alarms:", "\x1b[1m==", "  [ok]", "  [FAILED]", "=>", "kept ")


UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# The random suffix of a job's, savepoint's or trash directory's id (alarms-3f9c, ...-1a2b3c): hex, which may
# hold no digit.
ID_SUFFIX = re.compile(r"(?<=-)[0-9a-f]{4,}\b")


def shape(line: str) -> str:
    """A line without what differs between runs: query ids, ids' random suffixes and every token with a digit are
    one `#` (ids, times, sizes, rates); a run of a table's border or of spaces is one."""
    line = ID_SUFFIX.sub("#", UUID.sub("#", line))
    line = re.sub(r"[0-9A-Za-z]*\d[0-9A-Za-z]*", "#", line)
    line = re.sub(r"#(?:[.:/,-]#)+", "#", line)
    return re.sub(r" +", " ", re.sub(r"([─━═])\1+", r"\1", line)).rstrip()


def transcript(text: str, work: str | None = None) -> list[tuple[str, list[str]]]:
    """(command, output lines) of each `$ sparkpoint` line of a run's stdout; its work directory, if given,
    written `$WORK` as the docs write it, and the repository's root left out of paths."""
    if work:
        text = text.replace(work, "$WORK")
    lines = text.replace(f"{ROOT}/", "").splitlines()
    found = []
    for index, line in enumerate(lines):
        if line.startswith("$ sparkpoint "):
            end = next((i for i in range(index + 1, len(lines)) if lines[i].startswith(NARRATION)), len(lines))
            output = lines[index + 1:end]
            while output and not output[-1].strip():
                output.pop()
            found.append((line, output))
    return found


def shown(page: Path) -> list[tuple[str, list[str]]]:
    """(command, output lines) of every console block of a page."""
    return [pair for block in FENCE.findall(page.read_text()) for pair in transcript(block)]


def disagreements(shown_pairs: list[tuple[str, list[str]]], run: list[tuple[str, list[str]]]) -> list[str]:
    """Each shown command the run did not run, or whose output it printed otherwise: one line each."""
    ran = {}
    for command, output in run:
        ran.setdefault(shape(command), []).append([shape(line) for line in output])
    problems = []
    for command, output in shown_pairs:
        outputs = ran.get(shape(command))
        if outputs is None:
            problems.append(f"not run: {command}")
        elif [shape(line) for line in output] not in outputs:
            problems.append(f"printed otherwise: {command}")
    return problems
