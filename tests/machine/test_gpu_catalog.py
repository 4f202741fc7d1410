"""The built-in GPU catalog: lookup spelling, close matches, Metal working set, smallest fitting
card."""

from __future__ import annotations

import pytest

from llamafit.errors import InputError
from llamafit.machine.catalog import (
    CATALOG,
    close_matches,
    find,
    host_ram,
    lookup,
    match_device,
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
            "unknown GPU 'rtx4091'; did you mean rtx4090, rtx4090d, rtx-a400, rtx5090, rtx4080? "
            "(or give a size such as 24GiB)",
        ),
        (
            "a100",
            "unknown GPU 'a100'; did you mean a100-40gb, a100-40gb-pcie, a100-80gb, "
            "a100-80gb-pcie, rtx-a1000? (or give a size such as 24GiB)",
        ),
        (
            "m3-max",
            "unknown GPU 'm3-max'; did you mean m3-max-36gb, m3-max-96gb, m3-max-48gb, "
            "m3-max-64gb, m3-max-128gb? (or give a size such as 24GiB)",
        ),
        (
            "H10",
            "unknown GPU 'H10'; did you mean h100, h100-pcie, h100-nvl? (or give a size such "
            "as 24GiB)",
        ),
        (
            "mi3000x",
            "unknown GPU 'mi3000x'; did you mean mi300x, mi300a, mi100, mi355x, mi325x? (or give a "
            "size such as 24GiB)",
        ),
    ],
)
def test_unknown_name_lists_close_matches(name: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        lookup(name)
    assert str(err.value) == message


def test_unknown_name_without_close_match_names_examples() -> None:
    with pytest.raises(InputError) as err:
        lookup("zzzz")
    assert str(err.value) == (
        "unknown GPU 'zzzz'; known: e.g. rtx4090, rx7900xtx, arc-b580, h100, m3-max-64gb; "
        "--gpu help lists all (or give a size such as 24GiB)"
    )
    assert close_matches("zzzz") == []


@pytest.mark.parametrize(
    ("need", "vendors", "expected"),
    [
        (0, None, "gtx1050"),  # the smallest card: 2 GiB
        (9 * GiB, None, "rtx3080-10gb"),
        (12 * GiB, None, "rtx3080-12gb"),  # 12 GiB: 912 GB/s beats the 4070's 504
        (24 * GiB, None, "rtx3090ti"),  # 1008 GB/s tie with the 4090: catalog order
        (17 * GiB, ("amd",), "rx7900xt"),
        (90 * GiB, ("apple",), "m1-ultra-128gb"),  # 96 GiB working set, 800 GB/s
        (100 * GiB, ("apple",), "m2-ultra-192gb"),
        (97 * GiB, None, "h200"),  # no Mac, no APU, no laptop without asking for one
        (193 * GiB, ("nvidia", "amd"), "mi325x"),
        (289 * GiB, ("nvidia", "amd"), None),
        (600 * GiB, None, None),
    ],
)
def test_smallest_fitting(need: int, vendors: tuple[str, ...] | None, expected: str | None) -> None:
    e = smallest_fitting(need, vendors=vendors)
    assert (e.key if e else None) == expected


@pytest.mark.parametrize(
    ("spelling", "key"),
    [
        ("rtx3080ti", "rtx3080ti"),
        ("RTX 3080 Ti", "rtx3080ti"),
        ("3080ti", "rtx3080ti"),  # the family prefix left out
        ("NVIDIA GeForce RTX 3080 Ti", "rtx3080ti"),  # as the driver names it
        ("4090", "rtx4090"),
        ("6700xt", "rx6700xt"),
        ("Radeon RX 9070 XT", "rx9070xt"),
        ("b580", "arc-b580"),
        ("M3 Max 64GB", "m3-max-64gb"),
        ("m2_ultra_192gb", "m2-ultra-192gb"),
        ("a4000", "rtx-a4000"),  # alias
        ("zzzz", None),
    ],
)
def test_forgiving_names(spelling: str, key: str | None) -> None:
    e = find(spelling)
    assert (e.key if e else None) == key


@pytest.mark.parametrize(
    ("name", "memory", "key"),
    [
        ("llvmpipe (LLVM 15.0.7, 256 bits)", None, "lavapipe"),  # the CPU-type Vulkan device
        ("AMD Radeon RX 7900 XTX (RADV NAVI31)", None, "rx7900xtx"),  # Vulkan's name
        ("Intel(R) Arc(TM) B580 Graphics (BMG G21)", None, "arc-b580"),
        ("NVIDIA GeForce RTX 4090", 24 * GiB, "rtx4090"),
        ("Apple M3 Max", 48 * GiB, "m3-max-64gb"),  # the Mac whose working set is nearest
        ("Apple M3 Max", None, None),  # 300 or 400 GB/s: the chip alone does not say
        ("Apple M2 Ultra", None, "m2-ultra-64gb"),  # one bandwidth at every size
        ("Some Future GPU", None, None),
    ],
)
def test_match_device(name: str, memory: int | None, key: str | None) -> None:
    e = match_device(name, memory)
    assert (e.key if e else None) == key


@pytest.mark.parametrize(
    ("name", "ram"),
    [("m3-max-64gb", 64 * GiB), ("M2 Ultra 192GB", 192 * GiB), ("rtx4090", None), ("24GiB", None)],
)
def test_host_ram_of_a_mac(name: str, ram: int | None) -> None:
    assert host_ram(name) == ram


def test_every_family_is_in_the_catalog() -> None:
    keys = {e.key for e in CATALOG}
    families = (
        "gtx1080ti rtx2080ti rtx3080ti rtx4070ti rtx5090 rtx4090-laptop quadro-p6000 rtx-a4000 "
        "rtx6000-ada p40 v100-32gb a100-80gb-pcie h100 h200 rx6700xt rx7900xtx rx9070xt "
        "radeon-ai-pro-r9700 mi100 mi210 mi300x mi355x arc-a770 arc-b580 m1-8gb m1-ultra-128gb "
        "m2-max-96gb m3-pro-36gb m3-max-36gb m3-ultra-512gb m4-pro-64gb m4-max-36gb m5-32gb"
    ).split()
    assert set(families) <= keys
    assert all(e.memory in ("gddr", "hbm", "unified", "host") for e in CATALOG)


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


@pytest.mark.parametrize(
    ("key", "cc"),
    [
        ("gtx1080ti", 610),
        ("p100-16gb", 600),
        ("v100-32gb", 700),
        ("t4", 750),
        ("rtx2000-ada", 890),
        ("a100-80gb", 800),
        ("rtx3090", 860),
        ("jetson-agx-orin-64gb", 870),
        ("rtx4090", 890),
        ("h100", 900),
        ("b200", 1000),
        ("rtx5090", 1200),
        ("gb10", 1210),
        ("rx7900xtx", 0x1001100),  # gfx1100: GGML_CUDA_CC_OFFSET_AMD + 0x1100
        ("rx6800", 0x1001030),
        ("ryzen-ai-max-395", 0x1001151),
        ("mi250", 0x100090A),
        ("mi300x", 0x1000942),
        ("arc-b580", None),  # SYCL / Vulkan: none
        ("m4-max-64gb", None),
    ],
)
def test_compute_capability(key: str, cc: int | None) -> None:
    assert lookup(key).cc == cc


def test_every_nvidia_and_amd_card_has_a_compute_capability() -> None:
    assert [e.key for e in CATALOG if e.vendor in ("nvidia", "amd") and e.cc is None] == []
