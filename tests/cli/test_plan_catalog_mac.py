"""A Mac named from the catalog is the whole machine (issue #35): `plan … --gpu m2-ultra-192gb`
plans with its unified memory as the host's RAM, no --ram needed."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from llamafit.cli import cli
from scripts.fixtures import make_shapes

GIB = 1 << 30


def test_an_80b_model_fits_the_192gb_mac_it_names(shapes_dir: Path) -> None:
    path = str(make_shapes.write_shape("qwen3-next-80b-a3b", shapes_dir))  # 45 GiB of weights
    result = CliRunner().invoke(cli, ["plan", path, "--gpu", "m2-ultra-192gb", "--json"])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["fits"] is True
    assert [(h["name"], h["total_bytes"]) for h in d["hardware"]] == [
        ("MTL0", 144 * GIB),  # Metal's working set: 3/4 of 192 GiB
        ("CPU", 192 * GIB),  # the Mac's RAM, not this machine's
    ]
    assert d["speed"]["inputs"]["devices"][0]["efficiency_source"].startswith("Metal: public")
