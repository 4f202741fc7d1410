"""A skip says what is missing and how to provide it: never a path that only a CI machine or a
developer's checkout has (build/…, ../shared/…)."""

from __future__ import annotations

import ast

from tests.support import TESTS, VK_RPC_BIN_ABSENT, VULKANINFO_ABSENT

# folders a user's checkout does not have: CI unpacks them, or they live beside the repository
NOT_THEIRS = ("build/", "../", "shared/llama")


def _reasons(tree: ast.AST) -> list[str]:
    """The literal text of every skip reason: pytest.skip(...), skipif(..., reason=...),
    importorskip(..., reason=...)."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        args = [*node.args[:1]] if name == "skip" else []
        args += [k.value for k in node.keywords if k.arg == "reason"]
        out += [
            "".join(
                part.value
                for part in ast.walk(arg)
                if isinstance(part, ast.Constant) and isinstance(part.value, str)
            )
            for arg in args
        ]
    return out


def test_no_skip_reason_names_a_path_a_user_does_not_have() -> None:
    named = [
        (str(path.relative_to(TESTS)), reason)
        for path in sorted(TESTS.rglob("*.py"))
        for reason in _reasons(ast.parse(path.read_text(encoding="utf-8")))
        if any(p in reason for p in NOT_THEIRS)
    ]
    assert named == []
    for reason in (VK_RPC_BIN_ABSENT, VULKANINFO_ABSENT):
        assert not any(p in reason for p in NOT_THEIRS)


def test_the_reasons_are_found() -> None:
    tree = ast.parse(
        "pytest.skip('a')\n@pytest.mark.skipif(x, reason='b' 'c')\ndef f(): pass\n"
        "pytest.importorskip('m', reason=f'd{x}')\n"
    )
    assert sorted(_reasons(tree)) == ["a", "bc", "d"]
