"""The systemd units that keep node_exporter's textfile of the lane's facts fresh: a oneshot service running
`gb300lane metrics --textfile PATH` and a timer that starts it every so many seconds.

Their text is the templates `gb300lane-metrics.service` and `gb300lane-metrics.timer` (a user's
`./templates/` copies win); every value is quoted for systemd here (`systemd_quote`) before a template
sees it, so a path with blanks, quotes, `%` or `$` reads back as written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from gb300lane import templating
from gb300lane.errors import StateError
from gb300lane.fsio import atomic_write

#: The units `metrics --systemd DIR` writes: a oneshot service and the timer that starts it.
SYSTEMD_UNITS = ("gb300lane-metrics.service", "gb300lane-metrics.timer")
#: What systemd reads specially in a unit value: specifiers (%) and variables ($), besides quotes and blanks.
_SYSTEMD_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./$-]+")


def systemd_quote(word: str, *, command: bool = True) -> str:
    """One word of a unit's ExecStart= (`command`) or Environment= value, as systemd reads it back: `%` doubled
    (no specifier is expanded), `$` doubled on a command line (no variable is), and double quotes (with `\\` and
    `"` escaped) around anything else."""
    word = word.replace("%", "%%")
    if command:
        word = word.replace("$", "$$")
    if word and _SYSTEMD_PLAIN.fullmatch(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_units(
    textfile: Path, *, every_s: int, program: Sequence[str], workdir: Path, environment: dict[str, str]
) -> dict[str, str]:
    """The service and timer (file name -> text) that write the lane's facts to `textfile` every `every_s`
    seconds: `program` (the tool's command line) `metrics --textfile PATH`, run in `workdir` with `environment`
    (the state directory, so the timer reads the lane this command reads), from the templates of the same names."""
    if every_s < 1:
        raise StateError(f"--every {every_s}: the timer needs at least 1 second between writes")
    exec_words = [systemd_quote(w) for w in [*program, "metrics", "--textfile", str(textfile)]]
    env = [systemd_quote(f"{k}={v}", command=False) for k, v in sorted(environment.items())]
    context = {
        "exec": exec_words,
        "environment": env,
        "workdir": str(workdir).replace("%", "%%"),  # the rest of the line, blanks and all: no quotes
        "textfile_text": str(textfile).replace("%", "%%"),
        "every_s": every_s,
    }
    return {name: templating.render(name, **context) for name in SYSTEMD_UNITS}


def write_systemd_units(
    out_dir: Path, textfile: Path, *, every_s: int, program: Sequence[str], workdir: Path, environment: dict[str, str]
) -> list[Path]:
    """Write `systemd_units` into `out_dir` (atomically, each file); returns the paths written."""
    units = systemd_units(textfile, every_s=every_s, program=program, workdir=workdir, environment=environment)
    return [atomic_write(out_dir / name, text) for name, text in units.items()]
