"""`llamafit ls`'s row cache is keyed by every source file that changes a verdict (issue #26)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from llamafit.cli import cli
from llamafit.commands import ls as ls_cli
from tests.support.store_layouts import MODEL, count_header_reads


@pytest.fixture
def package_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A copy of the llamafit package (sizes and mtimes kept) that ls takes for its own source."""
    copy = tmp_path / "pkg" / "llamafit"
    shutil.copytree(ls_cli._PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    monkeypatch.setattr(ls_cli, "_PACKAGE", str(copy))
    ls_cli.source_key.cache_clear()
    yield copy
    ls_cli.source_key.cache_clear()


def touch(path: Path) -> None:
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def append_comment(path: Path) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write("# edited\n")


@pytest.mark.parametrize("edit", [touch, append_comment], ids=["mtime", "content"])
@pytest.mark.parametrize(
    "module",
    [
        "memory/kv.py",
        "fit/solver.py",
        "reader/header.py",
        "facts/hparams.py",
        "machine/catalog.py",
        "fit/speed.py",
        "commands/ls.py",
    ],
)
def test_editing_any_module_changes_the_code_key(
    package_copy: Path, module: str, edit: Callable[[Path], None]
) -> None:
    before = ls_cli.source_key(str(package_copy))
    assert before == ls_cli.source_key(ls_cli._PACKAGE)
    edit(package_copy / module)
    ls_cli.source_key.cache_clear()
    assert ls_cli.source_key(str(package_copy)) != before


def test_files_that_are_not_source_leave_the_key(package_copy: Path) -> None:
    before = ls_cli.source_key(str(package_copy))
    (package_copy / "memory" / "notes.txt").write_text("x")
    (package_copy / "__pycache__").mkdir(exist_ok=True)
    (package_copy / "__pycache__" / "kv.cpython-311.pyc").write_bytes(b"x")
    ls_cli.source_key.cache_clear()
    assert ls_cli.source_key(str(package_copy)) == before


def test_an_edited_memory_model_does_not_serve_cached_rows(
    package_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLAMAFIT_CACHE_DIR", str(tmp_path / "cache"))  # no row from another test
    models = tmp_path / "models"
    models.mkdir()
    (models / "m.gguf").symlink_to(MODEL)
    reads = count_header_reads(monkeypatch)

    def ls() -> dict:
        result = CliRunner().invoke(cli, ["ls", str(models), "--gpu", "8GiB", "--json"])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)["models"][0]

    first = ls()
    assert len(reads) == 1
    assert ls() == first and len(reads) == 1  # the cached row, no header read
    touch(package_copy / "memory" / "kv.py")  # as an edit of the KV cache model would
    ls_cli.source_key.cache_clear()  # a new process
    assert ls() == first and len(reads) == 2  # fitted again from the model's header
    assert ls() == first and len(reads) == 2  # and cached under the new key
