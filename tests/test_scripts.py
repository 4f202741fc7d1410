"""scripts/ is grouped by purpose (issue #24): every script sits in a group folder (a package, so
that scripts import each other as `scripts.GROUP.NAME`), each name once, and the scripts page
(docs/scripts.md, "Every script") lists every group with one line per script."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support import ROOT
from tests.support.scripts import SCRIPTS, script_path

PAGE = ROOT / "docs" / "scripts.md"


def scripts_in(root: Path) -> set[tuple[str, str]]:
    """(group, name) of every scripts/GROUP/NAME.py."""
    return {(p.parent.name, p.stem) for p in root.glob("*/*.py") if p.name != "__init__.py"}


def listed(page: str) -> set[tuple[str, str]]:
    """(group, name) of each script the page's "## Every script" section lists: a line
    "- `scripts/GROUP/`: …" opens a group, and "  - `NAME.py`: …" lines under it name its
    scripts."""
    section = page.split("\n## Every script\n", 1)[1].split("\n## ", 1)[0]
    out = set()
    group = None
    for line in section.splitlines():
        if m := re.match(r"- `scripts/(\w+)/`", line):
            group = m[1]
        elif (m := re.match(r"  - `(\w+)\.py`", line)) and group:
            out.add((group, m[1]))
    return out


def test_every_script_is_in_a_group_package() -> None:
    assert sorted(p.name for p in SCRIPTS.glob("*.py")) == ["__init__.py"]
    groups = {g for g, _ in scripts_in(SCRIPTS)}
    assert groups == {"fixtures", "bench", "audit", "calibration", "fuzz", "graph_dump"}
    assert all((SCRIPTS / g / "__init__.py").is_file() for g in groups)


def test_script_names_are_unique_across_groups() -> None:
    names = [n for _, n in scripts_in(SCRIPTS)]
    assert len(names) == len(set(names))


def test_the_scripts_page_lists_every_script_in_its_group() -> None:
    assert listed(PAGE.read_text()) == scripts_in(SCRIPTS)


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("- `scripts/a/`: x\n  - `one.py`: y\n  - `two.py`: z\n", {("a", "one"), ("a", "two")}),
        (
            "- `scripts/a/`: x\n  - `one.py`: y\n- `scripts/b/`: w\n  - `one.py`: v\n",
            {("a", "one"), ("b", "one")},
        ),
        ("  - `orphan.py`: before any group\n- `scripts/a/`: x\n", set()),
        ("- `scripts/a/`: x\n    - `deeper.py`: not a script line\n", set()),
    ],
)
def test_listed_reads_groups_and_their_scripts(
    section: str, expected: set[tuple[str, str]]
) -> None:
    page = f"# R\n\n## Every script\n\n{section}\n## Next\n- `scripts/z/`: x\n  - `no.py`: y\n"
    assert listed(page) == expected


def test_script_path_finds_the_one_file() -> None:
    assert script_path("make_shapes") == "scripts/fixtures/make_shapes.py"
    with pytest.raises(FileNotFoundError):
        script_path("no_such_script")
