"""Model stores: each laid out as its tool writes it, broken ones side by side
(tests/store_layouts.py)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from llamafit.fetch.store_scan import (
    scan,
    scan_dir,
    scan_hub,
    scan_llama_cache,
    scan_lmstudio,
    scan_ollama,
)
from llamafit.fetch.stores import (
    Found,
    Root,
    best_sibling,
    default_roots,
    file_tag,
    group_files,
    hf_hub_cache,
    llama_flat_cache,
    ollama_name,
    parse_ollama_ref,
    repo_name,
)
from tests.support.store_layouts import (
    COMMIT,
    MODEL,
    MOE,
    SPLIT,
    hf_repo,
    lmstudio_model,
    lora,
    mmproj,
    ollama_model,
)

HOME = "/home/u"
TIED = MODEL.parent / "tied-llama.gguf"


@pytest.mark.parametrize(
    "env, expected",
    [
        ({}, "/home/u/.cache/huggingface/hub"),
        ({"XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub"),
        ({"HF_HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/h/hub"),
        ({"HUGGINGFACE_HUB_CACHE": "/old", "HF_HOME": "/h"}, "/old"),
        ({"HF_HUB_CACHE": "/new", "HUGGINGFACE_HUB_CACHE": "/old"}, "/new"),
    ],
)
def test_hf_hub_cache_follows_huggingface_hub(env: dict[str, str], expected: str) -> None:
    assert hf_hub_cache(env, HOME) == expected


def test_hf_hub_cache_agrees_with_huggingface_hub_constants(tmp_path: Path) -> None:
    import subprocess
    import sys

    envs = (
        {"HF_HOME": str(tmp_path / "h")},
        {"HF_HUB_CACHE": str(tmp_path / "c")},
        {"XDG_CACHE_HOME": str(tmp_path)},
    )
    for env in envs:
        full = {"PATH": os.environ["PATH"], "HOME": HOME, **env}
        out = subprocess.run(
            [sys.executable, "-c", "import huggingface_hub.constants as c; print(c.HF_HUB_CACHE)"],
            env=full,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert hf_hub_cache(full, HOME) == out


@pytest.mark.parametrize(
    "env, system, expected",
    [
        ({}, "Linux", "/home/u/.cache/llama.cpp"),
        ({"XDG_CACHE_HOME": "/x"}, "Linux", "/x/llama.cpp"),
        ({}, "Darwin", "/home/u/Library/Caches/llama.cpp"),
        ({"LOCALAPPDATA": "C:/L"}, "Windows", "C:/L/llama.cpp"),
        ({"LLAMA_CACHE": "/l", "XDG_CACHE_HOME": "/x"}, "Linux", "/l"),
    ],
)
def test_llama_cpp_flat_cache_per_os(env: dict[str, str], system: str, expected: str) -> None:
    assert llama_flat_cache(env, HOME, system) == expected


def test_default_roots_with_llama_cache_set() -> None:
    roots = default_roots({"LLAMA_CACHE": "/l", "OLLAMA_MODELS": "/o"}, HOME, "Linux")
    assert roots == [
        Root("hf", "/home/u/.cache/huggingface/hub"),
        Root("llama.cpp", "/l"),
        Root("ollama", "/o"),
        Root("lmstudio", "/home/u/.lmstudio/models"),
        Root("lmstudio", "/home/u/.cache/lm-studio/models"),
    ]


@pytest.mark.parametrize(
    "path, tag",
    [
        ("Qwen2.5-32B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("model.q8_0.gguf", "Q8_0"),
        ("sub/x-IQ4_XS-00001-of-00002.gguf", "IQ4_XS"),
        ("plain.gguf", ""),
        ("readme.md", ""),
    ],
)
def test_file_tag_is_llama_cpps(path: str, tag: str) -> None:
    assert file_tag(path) == tag


def test_repo_name_round_trips_through_the_quant_rule() -> None:
    files = ["m-Q4_K_M.gguf", "m-Q8_0.gguf", "mmproj-m-f16.gguf", "other.gguf"]
    assert repo_name("org/repo", "m-Q8_0.gguf", files) == "org/repo:Q8_0"
    assert repo_name("org/repo", "other.gguf", files) == "org/repo/other.gguf"
    # the tag of `x-Q4_K_M.gguf` also picks `a-Q4_K_M.gguf` first: the file is named by its path
    assert (
        repo_name("org/repo", "x/b-Q4_K_M.gguf", ["a-Q4_K_M.gguf", "x/b-Q4_K_M.gguf"])
        == "org/repo/x/b-Q4_K_M.gguf"
    )


@pytest.mark.parametrize(
    "parts, name",
    [
        (("registry.ollama.ai", "library", "qwen2.5", "32b"), "qwen2.5:32b"),
        (("registry.ollama.ai", "jmorgan", "tiny", "latest"), "jmorgan/tiny:latest"),
        (
            ("hf.co", "bartowski", "Llama-3.2-1B-GGUF", "Q4_K_M"),
            "hf.co/bartowski/Llama-3.2-1B-GGUF:Q4_K_M",
        ),
    ],
)
def test_ollama_names_round_trip(parts: tuple[str, str, str, str], name: str) -> None:
    assert ollama_name(*parts) == name
    assert parse_ollama_ref(name) == parts


def test_ollama_ref_defaults_to_latest() -> None:
    assert parse_ollama_ref("llama3") == ("registry.ollama.ai", "library", "llama3", "latest")


def test_group_files_splits_and_mmproj() -> None:
    files = [
        "m-00001-of-00002.gguf",
        "m-00002-of-00002.gguf",
        "mmproj-F16.gguf",
        "mmproj-Q8_0.gguf",
        "x-Q8_0.gguf",
        "broken-00001-of-00003.gguf",
        "broken-00003-of-00003.gguf",
        "imatrix.gguf",
    ]
    groups, problems = group_files(files)
    assert [(g.shards, g.mmproj) for g in groups] == [
        (
            ("m-00001-of-00002.gguf", "m-00002-of-00002.gguf"),
            "mmproj-Q8_0.gguf",
        ),  # closest bits to 0
        (("x-Q8_0.gguf",), "mmproj-Q8_0.gguf"),
    ]
    assert problems == [("broken-00001-of-00003.gguf", "missing-shard", "shard 2 of 3 is missing")]


_NESTED = ["mmproj-F16.gguf", "q4/mmproj-F16.gguf", "q4/m-Q4_K_M.gguf", "other/mmproj-F16.gguf"]


@pytest.mark.parametrize(
    "files, model, keyword, tag, expected",
    [
        (
            ["mmproj-F16.gguf", "mmproj-Q8_0.gguf", "m-Q4_K_M.gguf"],
            "m-Q4_K_M.gguf",
            "mmproj",
            "",
            "mmproj-Q8_0.gguf",
        ),
        (["mmproj-F16.gguf", "mmproj-Q8_0.gguf"], "m-F16.gguf", "mmproj", "", "mmproj-F16.gguf"),
        (
            ["vision/mmproj-F16.gguf", "mmproj-Q8_0.gguf"],
            "m-Q4_K_M.gguf",
            "mmproj",
            "",
            "mmproj-Q8_0.gguf",
        ),  # no subdir
        (
            ["q4/mmproj-F16.gguf", "mmproj-Q8_0.gguf"],
            "q4/m-Q4_K_M.gguf",
            "mmproj",
            "",
            "q4/mmproj-F16.gguf",
        ),  # deeper
        (_NESTED, "q4/m-Q4_K_M.gguf", "mmproj", "", "q4/mmproj-F16.gguf"),
        (_NESTED, "m.gguf", "mmproj", "", "mmproj-F16.gguf"),
        (
            ["mmproj-F16.gguf", "mmproj-BF16.gguf"],
            "m-Q4_K_M.gguf",
            "mmproj",
            "BF16",
            "mmproj-BF16.gguf",
        ),  # exact tag
        (
            ["mmproj-F16.gguf", "mmproj-BF16.gguf"],
            "m-Q4_K_M.gguf",
            "mmproj",
            "bf16",
            "mmproj-BF16.gguf",
        ),  # any case
        (
            ["mtp-Q8_0.gguf", "mtp-Q4_K_M.gguf", "mmproj-Q4_0.gguf"],
            "m-Q4_K_M.gguf",
            "mtp-",
            "Q8_0",
            "mtp-Q8_0.gguf",
        ),
        (
            ["mmproj-Q8_0.gguf", "mmproj-Q4_0.gguf"],
            "m-Q4_K_M.gguf",
            "mmproj",
            "",
            "mmproj-Q4_0.gguf",
        ),  # closest bits
        (
            ["mmproj-Q4_0.gguf", "mmproj-Q4_1.gguf"],
            "m-Q4_K_M.gguf",
            "mmproj",
            "",
            "mmproj-Q4_0.gguf",
        ),  # first of equals
        (["mmproj.bin", "m-Q4_K_M.gguf"], "m-Q4_K_M.gguf", "mmproj", "", None),
    ],
)
def test_best_sibling_is_llama_cpps(
    files: list[str], model: str, keyword: str, tag: str, expected: str | None
) -> None:
    """common/download.cpp find_best_sibling, the one rule behind mmproj pairing and --mmproj
    auto."""
    assert best_sibling(files, model, keyword, tag) == expected


# --- real layouts, broken ones side by side ---------------------------------------------------


def test_hub_cache_as_huggingface_hub_reads_it(tmp_path: Path) -> None:
    from huggingface_hub import scan_cache_dir, try_to_load_from_cache

    cache = tmp_path / "hub"
    proj = mmproj(tmp_path / "mmproj.gguf")
    hf_repo(
        cache,
        "acme/tiny-GGUF",
        {"tiny-Q8_0.gguf": MODEL, "mmproj-tiny-F16.gguf": proj, **{p.name: p for p in SPLIT}},
    )
    broken = hf_repo(cache, "acme/broken-GGUF", {"b-Q4_0.gguf": MOE})
    gone = next((broken / "blobs").iterdir())
    gone.unlink()  # the snapshot link now dangles
    (broken / "blobs" / "abc.incomplete").write_bytes(b"GGUF")
    # huggingface_hub itself reads this layout
    info = scan_cache_dir(cache)
    assert {r.repo_id for r in info.repos} == {"acme/tiny-GGUF"}
    assert try_to_load_from_cache("acme/tiny-GGUF", "tiny-Q8_0.gguf", cache_dir=cache) == str(
        cache / "models--acme--tiny-GGUF" / "snapshots" / COMMIT / "tiny-Q8_0.gguf"
    )

    found, notes = scan_hub(str(cache))
    snap = cache / "models--acme--tiny-GGUF" / "snapshots" / COMMIT
    assert found == [
        Found(
            "hf",
            "acme/tiny-GGUF:LLAMA",
            "hf:acme/tiny-GGUF:LLAMA",
            tuple(str(snap / p.name) for p in SPLIT),
            str(snap / "mmproj-tiny-F16.gguf"),
        ),
        Found(
            "hf",
            "acme/tiny-GGUF:Q8_0",
            "hf:acme/tiny-GGUF:Q8_0",
            (str(snap / "tiny-Q8_0.gguf"),),
            str(snap / "mmproj-tiny-F16.gguf"),
        ),
    ]
    bsnap = broken / "snapshots" / COMMIT
    assert [(n.code, n.path) for n in notes] == [
        ("partial-download", str(broken / "blobs" / "abc.incomplete")),
        ("dangling-symlink", str(bsnap / "b-Q4_0.gguf")),
    ]


def test_ollama_store(tmp_path: Path) -> None:
    root = tmp_path / "ollama"
    proj = mmproj(tmp_path / "proj.gguf")
    ollama_model(root, ("registry.ollama.ai", "library", "tiny", "8b"), MODEL, projector=proj)
    ollama_model(root, ("hf.co", "acme", "moe-GGUF", "Q8_0"), MOE)
    ollama_model(root, ("registry.ollama.ai", "library", "gone", "latest"), TIED, missing=True)
    ollama_model(
        root,
        ("registry.ollama.ai", "library", "styled", "latest"),
        MODEL,
        adapter=lora(tmp_path / "l.gguf"),
    )
    bad = root / "manifests" / "registry.ollama.ai" / "library" / "junk" / "latest"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    (root / "blobs" / ("sha256-" + "0" * 64 + "-partial")).write_bytes(b"")
    found, notes = scan_ollama(str(root))

    def blob(p: Path) -> str:
        return str(root / "blobs" / ("sha256-" + hashlib.sha256(p.read_bytes()).hexdigest()))

    assert [(f.name, f.ref, f.shards, f.mmproj) for f in found] == [
        ("hf.co/acme/moe-GGUF:Q8_0", "ollama:hf.co/acme/moe-GGUF:Q8_0", (blob(MOE),), None),
        ("styled:latest", "ollama:styled:latest", (blob(MODEL),), None),
        ("tiny:8b", "ollama:tiny:8b", (blob(MODEL),), blob(proj)),
    ]
    assert [(n.code, Path(n.path).name) for n in notes] == [
        ("partial-download", "sha256-" + "0" * 64 + "-partial"),
        ("missing-blob", Path(blob(TIED)).name),
        ("bad-manifest", "latest"),
        ("lora-adapter", "latest"),
    ]


def test_lmstudio_and_plain_directories(tmp_path: Path) -> None:
    lms = tmp_path / "lms"
    lmstudio_model(
        lms, "lmstudio-community", "tiny-GGUF", {"tiny-Q8_0.gguf": MODEL, "tiny-Q4_0.gguf": MOE}
    )
    found, notes = scan_lmstudio(str(lms))
    assert [(f.name, f.ref) for f in found] == [
        ("lmstudio-community/tiny-GGUF:Q4_0", "lmstudio:lmstudio-community/tiny-GGUF:Q4_0"),
        ("lmstudio-community/tiny-GGUF:Q8_0", "lmstudio:lmstudio-community/tiny-GGUF:Q8_0"),
    ]
    assert notes == []
    d = tmp_path / "models"
    (d / "sub").mkdir(parents=True)
    (d / "a.gguf").write_bytes(MODEL.read_bytes())
    (d / "sub" / "gone.gguf").symlink_to(d / "nowhere.gguf")
    (d / "sub" / "partial.gguf.downloadInProgress").write_bytes(b"")
    locked = d / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        found, notes = scan_dir(str(d))
    finally:
        locked.chmod(0o755)
    assert [(f.name, f.ref) for f in found] == [("a", str(d / "a.gguf"))]
    codes = sorted((n.code, Path(n.path).name) for n in notes)
    if os.geteuid() == 0:  # root reads a mode-0 directory
        codes.append(("unreadable", "locked"))
    assert sorted(codes) == [
        ("dangling-symlink", "gone.gguf"),
        ("partial-download", "partial.gguf.downloadInProgress"),
        ("unreadable", "locked"),
    ]


def test_llama_cpp_cache_holds_hub_repos_and_flat_files(tmp_path: Path) -> None:
    cache = tmp_path / "llama.cpp"
    hf_repo(cache, "acme/tiny-GGUF", {"tiny-Q8_0.gguf": MODEL})
    (cache / "acme_old-GGUF_old-Q4_0.gguf").write_bytes(MOE.read_bytes())
    (cache / "acme_old-GGUF_old-Q4_0.gguf.etag").write_text("x")
    (cache / "next.gguf.downloadInProgress").write_bytes(b"")
    found, notes = scan_llama_cache(str(cache))
    assert [(f.store, f.name) for f in found] == [
        ("llama.cpp", "acme/tiny-GGUF:Q8_0"),
        ("llama.cpp", "acme_old-GGUF_old-Q4_0"),
    ]
    assert [(n.code, Path(n.path).name) for n in notes] == [
        ("partial-download", "next.gguf.downloadInProgress")
    ]


def test_a_file_found_twice_is_listed_once(tmp_path: Path) -> None:
    d = tmp_path / "m"
    d.mkdir()
    (d / "a.gguf").write_bytes(MODEL.read_bytes())
    (d / "link.gguf").symlink_to(d / "a.gguf")
    found, _ = scan([Root("dir", str(d)), Root("dir", str(d))])
    assert [f.name for f in found] == ["a"]
