"""The built-in GPU catalog: lookup spelling, close matches, Metal working set, smallest fitting
card."""

from __future__ import annotations

import pytest

from llamafit.errors import InputError
from llamafit.machine.catalog import (
    CATALOG,
    close_matches,
    lookup,
    metal_working_set,
    normalize,
    smallest_fitting,
)

GiB = 1 << 30

REQUIRED = (
    "rtx3060-12gb rtx3070 rtx3080-10gb rtx3090 rtx4060-8gb rtx4060ti-16gb rtx4070 rtx4080 rtx4090 "
    "rtx5090 a10 a100-40gb a100-80gb h100 h100-nvl h200 l4 l40s t4 v100-32gb mi210 mi250 mi300x "
    "m2-max-96gb m3-max-128gb m4-max-128gb m2-ultra-192gb"
).split()


def test_catalog_has_required_cards_with_unique_spellings() -> None:
    keys = [e.key for e in CATALOG]
    assert set(REQUIRED) <= set(keys)
    assert len({normalize(k) for k in keys}) == len(keys)


@pytest.mark.parametrize(
    ("spelling", "key", "vram", "bandwidth", "backend"),
    [
        ("rtx4090", "rtx4090", 24 * GiB, 1_008_000_000_000, "cuda"),
        ("RTX 4090", "rtx4090", 24 * GiB, 1_008_000_000_000, "cuda"),
        ("rtx_3060_12GB", "rtx3060-12gb", 12 * GiB, 360_000_000_000, "cuda"),
        ("RTX3060", "rtx3060-12gb", 12 * GiB, 360_000_000_000, "cuda"),  # alias
        ("h100-sxm", "h100", 80 * GiB, 3_350_000_000_000, "cuda"),  # alias
        ("H100_NVL", "h100-nvl", 94 * GiB, 3_900_000_000_000, "cuda"),
        ("h200", "h200", 141 * GiB, 4_800_000_000_000, "cuda"),
        ("rtx4080", "rtx4080", 16 * GiB, 716_800_000_000, "cuda"),
        ("MI300X", "mi300x", 192 * GiB, 5_300_000_000_000, "rocm"),
        ("mi250x", "mi250", 64 * GiB, 1_638_400_000_000, "rocm"),  # per GCD
        ("M2-Max-96GB", "m2-max-96gb", 96 * GiB, 400_000_000_000, "metal"),
    ],
)
def test_lookup(spelling: str, key: str, vram: int, bandwidth: int, backend: str) -> None:
    e = lookup(spelling)
    assert (e.key, e.vram_bytes, e.bandwidth_bytes_per_s, e.backend) == (
        key,
        vram,
        bandwidth,
        backend,
    )


@pytest.mark.parametrize(
    ("key", "usable", "devices", "unified"),
    [
        ("rtx4090", 24 * GiB, 1, False),
        ("mi250", 64 * GiB, 2, False),
        ("m2-max-96gb", 72 * GiB, 1, True),  # 3/4 of 96 GiB
        ("m1-max-64gb", 48 * GiB, 1, True),
        ("m2-ultra-192gb", 144 * GiB, 1, True),
    ],
)
def test_usable_bytes(key: str, usable: int, devices: int, unified: bool) -> None:
    e = lookup(key)
    assert (e.usable_bytes, e.devices, e.unified) == (usable, devices, unified)


@pytest.mark.parametrize(
    ("ram", "wired_limit_mb", "expected"),
    [
        (16 * GiB, 0, 11_453_246_122),  # 2/3: ggml-metal prints 10922.67 MiB
        (32 * GiB, 0, 22_906_492_245),  # 2/3: 21845.33 MiB
        (36 * GiB, 0, 24 * GiB),  # still 2/3 at 36 GiB
        (64 * GiB, 0, 48 * GiB),  # 3/4 above
        (96 * GiB, 0, 72 * GiB),
        (96 * GiB, 90_000, 90_000 << 20),  # iogpu.wired_limit_mb wins
        (16 * GiB, 90_000, 16 * GiB),  # never above RAM
    ],
)
def test_metal_working_set(ram: int, wired_limit_mb: int, expected: int) -> None:
    assert metal_working_set(ram, wired_limit_mb) == expected


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "rtx4091",
            "unknown GPU 'rtx4091'; did you mean rtx4090, rtx5090, rtx4080, rtx4070, rtx3090? "
            "(or give a size such as 24GiB)",
        ),
        (
            "a100",
            "unknown GPU 'a100'; did you mean a100-40gb, a100-80gb? (or give a size such as 24GiB)",
        ),
        ("4090", "unknown GPU '4090'; did you mean rtx4090? (or give a size such as 24GiB)"),
        (
            "H10",
            "unknown GPU 'H10'; did you mean h100, h100-pcie, h100-nvl? (or give a size such "
            "as 24GiB)",
        ),
        ("mi3000x", "unknown GPU 'mi3000x'; did you mean mi300x? (or give a size such as 24GiB)"),
    ],
)
def test_unknown_name_lists_close_matches(name: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        lookup(name)
    assert str(err.value) == message


def test_unknown_name_without_close_match_lists_catalog() -> None:
    known = r"^unknown GPU 'zzzz'; known: rtx3060-12gb, rtx3070, .*m3-ultra-512gb, lavapipe \("
    with pytest.raises(InputError, match=known):
        lookup("zzzz")
    assert close_matches("zzzz") == []


@pytest.mark.parametrize(
    ("need", "vendors", "expected"),
    [
        (0, None, "rtx3070"),  # 8 GiB cards: 448 GB/s beats 272
        (9 * GiB, None, "rtx3080-10gb"),
        (12 * GiB, None, "rtx4070"),  # 12 GiB: 504 GB/s beats the 3060's 360
        (24 * GiB, None, "rtx3090ti"),  # 1008 GB/s tie with the 4090: catalog order
        (17 * GiB, ("amd",), "rx7900xtx"),
        (90 * GiB, ("apple",), "m4-max-128gb"),  # 96 GiB working set, 546 GB/s
        (100 * GiB, ("apple",), "m2-ultra-192gb"),
        (193 * GiB, ("nvidia", "amd"), None),
        (600 * GiB, None, None),
    ],
)
def test_smallest_fitting(need: int, vendors: tuple[str, ...] | None, expected: str | None) -> None:
    e = smallest_fitting(need, vendors=vendors)
    assert (e.key if e else None) == expected


@pytest.mark.parametrize(
    "values",
    [[936e9], [936e9, 1008e9], [448e9, 1008e9, 936e9], [51.0, 142.0, 81.0, 119.0], [3, 1, 2, 2]],
)
def test_assumed_median_is_statistics_median(values: list[float]) -> None:
    """speed_inputs._median (statistics is not imported for it) gives statistics.median."""
    import statistics

    from llamafit.commands.speed_inputs import _median

    assert _median(values) == statistics.median(values)
    assert type(_median(values)) is type(statistics.median(values))
