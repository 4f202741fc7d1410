"""The side-model flags of a llama-server command line (a draft model, MTP, a projector): every
spelling llama-server takes and its LLAMA_ARG_* variables (common/arg.cpp at 0c1e570), parsed into
memory.side_models.SideFlags, and the flags a launch carries for the side models a plan keeps."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import InputError
from ..memory.config import NGL_ALL, NGL_AUTO
from ..memory.side_models import SPEC_TYPES, SideFlags
from ..memory.usage import SideUsage
from ..reader.ggml_types import KV_CACHE_TYPES
from .flags import arity, flag_groups

# every spelling of the side-model flags llama-server takes (common/arg.cpp), by the field they set
_DRAFT_MODEL = ("-md", "--model-draft", "--spec-draft-model")
_DRAFT_NGL = ("-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft", "--spec-draft-ngl")
_DRAFT_DEV = ("-devd", "--device-draft", "--spec-draft-device")
_DRAFT_CTK = ("-ctkd", "--cache-type-k-draft", "--spec-draft-type-k")
_DRAFT_CTV = ("-ctvd", "--cache-type-v-draft", "--spec-draft-type-v")
_DRAFT_OT = ("-otd", "--override-tensor-draft", "--spec-draft-override-tensor")
_DRAFT_NCMOE = ("-ncmoed", "--n-cpu-moe-draft", "--spec-draft-n-cpu-moe", "--spec-draft-ncmoe")
_DRAFT_CMOE = ("-cmoed", "--cpu-moe-draft", "--spec-draft-cpu-moe")
_DRAFT_CTX = ("-cd", "--ctx-size-draft")  # older builds only
_SPEC_TYPE = ("--spec-type",)
_DRAFT_N_MAX = ("--spec-draft-n-max",)  # --draft-max/--draft-n are accepted and ignored at 0c1e570
# --spec-ngram-*-size-m and -n-max: the most tokens each ngram speculator drafts (common/common.h
# defaults)
_NGRAM_SIZE = {
    "--spec-ngram-simple-size-m": "ngram-simple",
    "--spec-ngram-map-k-size-m": "ngram-map-k",
    "--spec-ngram-map-k4v-size-m": "ngram-map-k4v",
    "--spec-ngram-mod-n-max": "ngram-mod",
}
_MMPROJ = ("-mm", "--mmproj")
_MMPROJ_URL = ("-mmu", "--mmproj-url")
_NO_MMPROJ = ("--no-mmproj", "--no-mmproj-auto")
_MMPROJ_OFFLOAD = ("--mmproj-offload",)
_NO_MMPROJ_OFFLOAD = ("--no-mmproj-offload",)
_IMAGE_MIN = ("--image-min-tokens",)
_IMAGE_MAX = ("--image-max-tokens",)
SIDE_FLAGS = frozenset(
    _DRAFT_MODEL
    + _DRAFT_NGL
    + _DRAFT_DEV
    + _DRAFT_CTK
    + _DRAFT_CTV
    + _DRAFT_OT
    + _DRAFT_NCMOE
    + _DRAFT_CMOE
    + _DRAFT_CTX
    + _SPEC_TYPE
    + _DRAFT_N_MAX
    + tuple(_NGRAM_SIZE)
    + _MMPROJ
    + _MMPROJ_URL
    + _NO_MMPROJ
    + _MMPROJ_OFFLOAD
    + _NO_MMPROJ_OFFLOAD
    + _IMAGE_MIN
    + _IMAGE_MAX
)
# side models counted (others are warned about)
MODELLED = frozenset(_DRAFT_MODEL + _MMPROJ + _MMPROJ_URL)
_VALUELESS = frozenset(
    _DRAFT_CMOE + _NO_MMPROJ + _MMPROJ_OFFLOAD + _NO_MMPROJ_OFFLOAD + ("--mmproj-auto",)
)
# LLAMA_ARG_* variables of these flags (common/arg.cpp set_env), applied before the flags
_ENV = {
    "LLAMA_ARG_SPEC_DRAFT_MODEL": "draft_model",
    "LLAMA_ARG_N_GPU_LAYERS_DRAFT": "draft_ngl",
    "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K": "draft_type_k",
    "LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V": "draft_type_v",
    "LLAMA_ARG_SPEC_TYPE": "spec_types",
    "LLAMA_ARG_MMPROJ": "mmproj",
    "LLAMA_ARG_MMPROJ_URL": "mmproj",
    "LLAMA_ARG_IMAGE_MIN_TOKENS": "image_min_tokens",
    "LLAMA_ARG_IMAGE_MAX_TOKENS": "image_max_tokens",
    "LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE": "draft_n_cpu_moe",
    "LLAMA_ARG_SPEC_DRAFT_N_MAX": "draft_n_max",
}


def _int(value: str, who: str) -> int:
    if not re.fullmatch(r"\s*[+-]?\d+\s*", value):
        raise InputError(f"{who} expects an integer, got {value!r}")
    return int(value)


def _ngl(value: str, who: str) -> int:
    if value in ("auto", "all"):
        return NGL_AUTO if value == "auto" else NGL_ALL
    return max(_int(value, who), NGL_ALL)


def _cache_type(value: str, who: str) -> str:
    if value.lower() not in KV_CACHE_TYPES:
        raise InputError(f"{who} expects one of {', '.join(KV_CACHE_TYPES)}, got {value!r}")
    return value.lower()


def _spec_types(value: str, who: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in value.split(","))
    bad = [n for n in names if n not in SPEC_TYPES]
    if bad:
        raise InputError(
            f"{who}: unknown speculative type {bad[0]!r} (expected {', '.join(SPEC_TYPES)})"
        )
    return names


def _set(values: dict[str, Any], key: str, value: str, who: str) -> None:
    if key == "draft_ngl":
        values[key] = _ngl(value, who)
    elif key in ("draft_type_k", "draft_type_v"):
        values[key] = _cache_type(value, who)
    elif key == "spec_types":  # --spec-type appends (common/arg.cpp)
        values[key] = values.get(key, ()) + _spec_types(value, who)
    elif key == "ngram_n_max":
        values[key] = values.get(key, ()) + ((_NGRAM_SIZE[who], _int(value, who)),)
    elif key in (
        "image_min_tokens",
        "image_max_tokens",
        "draft_n_cpu_moe",
        "draft_ctx",
        "draft_n_max",
    ):
        values[key] = _int(value, who)
    else:
        values[key] = value


_BY_FLAG: dict[str, str] = {
    **dict.fromkeys(_DRAFT_MODEL, "draft_model"),
    **dict.fromkeys(_DRAFT_NGL, "draft_ngl"),
    **dict.fromkeys(_DRAFT_CTK, "draft_type_k"),
    **dict.fromkeys(_DRAFT_CTV, "draft_type_v"),
    **dict.fromkeys(_DRAFT_NCMOE, "draft_n_cpu_moe"),
    **dict.fromkeys(_DRAFT_CTX, "draft_ctx"),
    **dict.fromkeys(_SPEC_TYPE, "spec_types"),
    **dict.fromkeys(_DRAFT_N_MAX, "draft_n_max"),
    **dict.fromkeys(_NGRAM_SIZE, "ngram_n_max"),
    **dict.fromkeys(_MMPROJ + _MMPROJ_URL, "mmproj"),
    **dict.fromkeys(_IMAGE_MIN, "image_min_tokens"),
    **dict.fromkeys(_IMAGE_MAX, "image_max_tokens"),
}


def parse_side_flags(tokens: Sequence[str], env: Mapping[str, str] | None = None) -> SideFlags:
    """The side-model flags among llama-server's flags (the parser's passthrough list, or a whole
    argv; other flags are skipped with the value they take). The environment applies first, flags
    after."""
    values: dict[str, Any] = {}
    for name, key in _ENV.items():
        if env and name in env:
            _set(values, key, env[name], name)
    for flag, given in flag_groups(tokens, _side_arity):
        if flag in _BY_FLAG or flag in _DRAFT_DEV or flag in _DRAFT_OT:
            if not given:
                raise InputError(f"{flag} expects a value, but nothing follows it")
            _valued(values, flag, given[0])
        elif flag in _DRAFT_CMOE:
            values["draft_cpu_moe"] = True
        elif flag in _NO_MMPROJ:
            values["no_mmproj"] = True
        elif flag in _MMPROJ_OFFLOAD or flag in _NO_MMPROJ_OFFLOAD:
            values["mmproj_offload"] = flag in _MMPROJ_OFFLOAD
        elif flag == "--mmproj-auto":
            values.setdefault("mmproj", "auto")
    return SideFlags(**values, given=frozenset(values))


def _valued(values: dict[str, Any], flag: str, value: str) -> None:
    """One side flag that takes a value: a SideFlags field, -devd's devices, -otd's rules."""
    if flag in _BY_FLAG:
        _set(values, _BY_FLAG[flag], value, flag)
    elif flag in _DRAFT_DEV:
        values["draft_devices"] = tuple(value.split(","))
    else:
        pairs = [item.partition("=") for item in value.split(",")]
        if not all(sep and buft for _, sep, buft in pairs):
            raise InputError(f"{flag} expects <tensor regex>=<buffer type>[,...], got {value!r}")
        values["draft_overrides"] = values.get("draft_overrides", ()) + tuple(
            (r, b) for r, _, b in pairs
        )


def side_flag_tokens(tokens: Sequence[str]) -> list[str]:
    """The side-model flags (with their values) among `tokens`, in order: what a launch carries."""
    out: list[str] = []
    for flag, given in flag_groups(tokens, _carried_arity):
        if flag in SIDE_FLAGS or flag == "--mmproj-auto":
            out += [flag, *given]
    return out


def _side_arity(flag: str, rest: Sequence[str]) -> int:
    """A side flag takes the value it is given (-cd of older builds too); others llama-server's
    arity."""
    return 1 if flag in _BY_FLAG or flag in _DRAFT_DEV or flag in _DRAFT_OT else arity(flag) or 0


def _carried_arity(flag: str, rest: Sequence[str]) -> int:
    if flag in _VALUELESS:
        return 0
    return 1 if flag in SIDE_FLAGS else arity(flag) or 0


_MMPROJ_FLAGS = ("-mm", "--mmproj", "-mmu", "--mmproj-url")
_PROJECTOR_FLAGS = (
    "--mmproj-offload",
    "--no-mmproj-offload",
    "--image-min-tokens",
    "--image-max-tokens",
)


def launch_tokens(passthrough: Sequence[str], resident: Sequence[SideUsage]) -> list[str]:
    """The llama-server flags to launch with, from the user's and the side models the plan keeps
    (a breakdown's side_models): `--mmproj auto` resolved to the file, --no-mmproj-offload added
    when the plan moved the projector to the CPU, the flags of side models the plan left out
    removed."""
    kinds = {u.kind: u for u in resident}
    proj = kinds.get("mmproj")
    out: list[str] = []
    for flag, given in flag_groups(passthrough):
        out += _kept(flag, [flag, *given], kinds)
    if proj is not None and not any(f in out for f in _MMPROJ_FLAGS):
        # found next to the model (plan, run and script use it by default)
        out += ["--mmproj", proj.path]
    if (
        proj is not None
        and dict(proj.details).get("offload") == "off"
        and "--no-mmproj-offload" not in out
    ):
        out.append("--no-mmproj-offload")
    if "mtp" in kinds and "--spec-type" not in out:
        # turned on by the plan (--prefer speed, explain._auto_mtp)
        out += ["--spec-type", "draft-mtp"]
    return out


def _kept(flag: str, group: list[str], kinds: Mapping[str, SideUsage]) -> list[str]:
    """What launch_tokens keeps of one flag and its values: every flag but the side models', and
    of those the flags of the side models the plan keeps (`kinds`)."""
    proj = kinds.get("mmproj")
    if flag not in SIDE_FLAGS:
        return group
    if flag in _MMPROJ_FLAGS:
        if proj is None:
            return []
        return [flag, proj.path] if group[1:] == ["auto"] else group
    if flag in _PROJECTOR_FLAGS:
        return group if proj is not None else []
    if flag == "--spec-type":
        kept = [t for t in group[1].split(",") if t != "draft-mtp" or "mtp" in kinds]
        return ["--spec-type", ",".join(kept)] if kept else []
    return group if "draft" in kinds else []  # the draft model's own flags
