"""Write a real-shape Gemma 3 (SigLIP) projector GGUF of zeros that llama.cpp's clip.cpp loads.

    python scripts/make_projector.py OUT.gguf --projection-dim 640 [--layers 27]

--projection-dim must equal the text model's n_embd (mtmd checks it): 640 for Gemma 3 270M, 2560 for
4B.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.projector_files import write_gemma3_projector  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--projection-dim", type=int, required=True)
    ap.add_argument("--layers", type=int, default=27)
    a = ap.parse_args()
    write_gemma3_projector(a.out, projection_dim=a.projection_dim, n_layer=a.layers)
    print(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
