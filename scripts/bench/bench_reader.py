"""Header read time: llamafit's reader vs gguf.GGUFReader, side by side in one run.

    python scripts/bench/bench_reader.py [--repeat N] [--skip-ggufreader]

Files: the real Gemma 3 270M Q4_K_M (`llamafit[demo]`) and two synthetic models written here with
gguf.GGUFWriter, each with a 262,144-token vocabulary (tokens, scores, token types) and 1,200
tensors: one SPM-like (no merges, as Gemma 3) and one BPE-like with 131,072 merges as well.
Targets (issue 2): <= 30 ms per read, >= 500x faster than GGUFReader.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from llamafit.fetch.demo import demo_model_path  # noqa: E402
from llamafit.reader.model import read_model  # noqa: E402

N_VOCAB = 262_144
N_TENSORS = 1_200


def write_synthetic(path: Path, *, merges: int) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(N_TENSORS // 12)
    w.add_context_length(131072)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i:06d}".encode() for i in range(N_VOCAB)])
    w.add_token_scores([float(i) for i in range(N_VOCAB)])
    w.add_token_types([1] * N_VOCAB)
    if merges:
        w.add_token_merges([f"t{i} k{i}" for i in range(merges)])
    rows = np.zeros((1, 32), dtype=np.float32)
    for i in range(N_TENSORS):
        w.add_tensor(f"blk.{i // 12}.t{i % 12}.weight", rows)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def best_of(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench(path: Path, repeat: int, with_reader: bool) -> None:
    ours = best_of(lambda: read_model(path), repeat)
    line = f"{path.name:<40} llamafit {ours * 1e3:8.2f} ms"
    if with_reader:
        import gguf

        theirs = best_of(lambda: gguf.GGUFReader(str(path)), 1)
        line += f"   GGUFReader {theirs * 1e3:10.1f} ms   ratio {theirs / ours:8.0f}x"
    print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--skip-ggufreader", action="store_true", help="time llamafit's reader only")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # SPM-like, as Gemma 3
        spm = write_synthetic(Path(tmp) / "synthetic-262k-vocab.gguf", merges=0)
        # BPE-like
        bpe = write_synthetic(
            Path(tmp) / "synthetic-262k-vocab-131k-merges.gguf", merges=N_VOCAB // 2
        )
        for path in (demo_model_path(), spm, bpe):
            bench(path, args.repeat, not args.skip_ggufreader)
    print(f"best of {args.repeat} reads (llamafit), 1 read (GGUFReader)")


if __name__ == "__main__":
    main()
