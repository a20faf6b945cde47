"""The tests' layout: `tests/<package>/test_<module>.py`, each folder a package of its own.

pytest imports test files in its default `prepend` mode: `tests/` (the first folder up without an
`__init__.py`) goes on sys.path, so the helpers there (`fakes`, `engines`, `clirun`) import as they always
have, and a test file in a folder with an `__init__.py` is the module `<folder>.test_<module>`, so
`tests/cards/test_run.py` and `tests/bench/test_run.py` may both exist. A folder without the `__init__.py`
would make both `test_run` and the second fail to import ("import file mismatch"), so each one has it.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_folder_of_tests_is_a_package() -> None:
    folders = sorted({p.parent for p in TESTS.rglob("test_*.py")} - {TESTS})
    assert folders, "no test folder found"
    bare = [f.relative_to(TESTS).as_posix() for f in folders if not (f / "__init__.py").is_file()]
    assert not bare, f"test folders without an __init__.py (add an empty one): {bare}"
