"""What the engine image carries, decided without a Docker engine."""

from __future__ import annotations

import pytest

from gb300lane.runtime import image


def test_distributions_walk_the_requirements_minus_plots_and_the_docker_sdk() -> None:
    names = {d.metadata["Name"].lower().replace("_", "-") for d in image.engine_distributions()}
    assert {"numpy", "aiohttp", "pydantic", "pydantic-core", "prometheus-client"} <= names
    assert "multidict" in names  # transitive, through aiohttp
    assert not names & {"matplotlib", "docker", "pytest", "pip"}


def test_project_source_is_the_engine_and_its_import_closure() -> None:
    rel = {str(p.relative_to(image.package_root())) for p in image.project_source_files()}
    assert "engine/__main__.py" in rel and "__init__.py" in rel and "errors.py" in rel
    assert not any(r.startswith(("lane/", "runtime/", "cli/", "cards/", "promote/")) for r in rel)
    assert not any("__pycache__" in r for r in rel)


@pytest.mark.slow
def test_source_hash_is_stable_and_short() -> None:
    assert image.source_hash() == image.source_hash()
    assert len(image.source_hash()) == 16


def test_dockerfile_starts_from_scratch_and_smoke_imports_the_engine() -> None:
    text = image.dockerfile()
    assert text.startswith("FROM scratch\n") and "gb300lane.engine" in text and "{{" not in text


def test_an_image_build_holds_the_machines_build_lock(tmp_path, monkeypatch) -> None:
    # Two builds of the engine image at once race in the Docker engine; a second build waits for the first.
    import subprocess
    import sys

    from gb300lane.locks import is_locked

    monkeypatch.setattr(image.tempfile, "gettempdir", lambda: str(tmp_path))
    lock = tmp_path / "gb300lane-engine-image.lock"
    with image._build_lock():
        assert is_locked(lock)
        # Another process cannot take it while this build holds it.
        probe = (
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY)\n"
            "try:\n    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(3)"
        )
        assert subprocess.run([sys.executable, "-c", probe, str(lock)], timeout=60).returncode == 3
    assert not is_locked(lock)
    # Where the lock file cannot be made, the build runs unlocked rather than failing.
    (tmp_path / "a-file").write_text("")
    monkeypatch.setattr(image.tempfile, "gettempdir", lambda: str(tmp_path / "a-file"))
    with image._build_lock():
        pass
