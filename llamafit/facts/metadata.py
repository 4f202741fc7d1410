"""Typed access to GGUF metadata with llama.cpp's lookup rules (src/llama-model-loader.cpp)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import ModelFactsError
from ..reader.header import SkippedArray


class Metadata:
    """Key lookups for one model: `{arch}` in a key is replaced by the architecture name."""

    def __init__(self, path: str, arch: str, kv: Mapping[str, Any]) -> None:
        self.path = path
        self.arch = arch
        self.kv = kv

    def key(self, name: str) -> str:
        return name.replace("{arch}", self.arch)

    def has(self, name: str) -> bool:
        return self.key(name) in self.kv

    def _get(self, name: str, kinds: tuple[type, ...], default: Any) -> Any:
        key = self.key(name)
        if key not in self.kv:
            if default is _REQUIRED:
                raise ModelFactsError(f"{self.path}: key not found in model: {key}")
            return default
        value = self.kv[key]
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            found, expected = type(value).__name__, kinds[0].__name__
            raise ModelFactsError(f"{self.path}: key {key} has type {found}, expected {expected}")
        return value

    def _count(self, name: str, value: Any) -> Any:
        """llama.cpp reads counts and sizes as uint32 (llama_model_loader::get_key): refuse the
        rest."""
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= UINT32_MAX:
            what = "negative" if value < 0 else "larger than a 32-bit count"
            raise ModelFactsError(f"{self.path}: key {self.key(name)} = {value} is {what}")
        return value

    def get_int(self, name: str, default: Any = None) -> Any:
        return self._count(name, self._get(name, (int,), default))

    def get_float(self, name: str, default: Any = None) -> Any:
        return self._get(name, (float, int), default)

    def get_str(self, name: str, default: Any = None) -> Any:
        return self._get(name, (str,), default)

    def get_bool(self, name: str, default: Any = None) -> Any:
        return self._get(name, (bool,), default)

    def required_int(self, name: str) -> int:
        return int(self._count(name, self._get(name, (int,), _REQUIRED)))

    def count(self, name: str) -> int:
        """Length of an array key (kept or skipped); 0 when absent."""
        value = self.kv.get(self.key(name))
        return len(value) if isinstance(value, (list, SkippedArray)) else 0

    def per_layer(
        self, name: str, n_layer: int, default: tuple[int, ...] | None
    ) -> tuple[int, ...] | None:
        """get_key_or_arr: a scalar for every layer, or an array of exactly n_layer values."""
        key = self.key(name)
        if key not in self.kv:
            return default
        value = self.kv[key]
        if isinstance(value, SkippedArray):
            raise ModelFactsError(
                f"{self.path}: key {key} is an array of {value.count} values; expected {n_layer}"
            )
        if isinstance(value, list):
            if len(value) != n_layer:
                raise ModelFactsError(
                    f"{self.path}: key {key} has wrong array length; expected {n_layer}, got "
                    f"{len(value)}"
                )
            if not all(isinstance(v, (int, bool)) for v in value):
                raise ModelFactsError(f"{self.path}: key {key} must hold integers")
            return tuple(int(self._count(name, v)) for v in value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelFactsError(
                f"{self.path}: key {key} must be an integer or an array of integers"
            )
        return (self._count(name, value),) * n_layer


UINT32_MAX = 2**32 - 1
_REQUIRED = object()
