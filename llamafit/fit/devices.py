"""The devices a plan is for: `-dev`/`--device` among the llama-server flags names them.

llama.cpp's common/arg.cpp `parse_device_list`: `none` alone means no device (no offload at all,
"including for large batches", PR #10497); otherwise each name is looked up with
`ggml_backend_dev_by_name` (case-insensitive since PR #10497), an unknown name or the CPU is an
error ("invalid device: NAME"), and the model's devices are the named ones in the order given
(llama_model_load_from_file_impl: `params.devices` replaces the default list of every GPU).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputError
from ..machine.devices import DeviceSpec
from ..memory.model import DeviceUsage


def named_devices(gpus: Sequence[DeviceSpec], names: Sequence[str]) -> tuple[int, ...]:
    """The indices in `gpus` of the devices `-dev` names, in its order; every GPU where it names
    none (no -dev given)."""
    if not names:
        return tuple(range(len(gpus)))
    if tuple(names) == ("none",):
        return ()
    by_name = {g.name.lower(): i for i, g in enumerate(gpus)}
    out = []
    for name in names:
        found = by_name.get(name.lower())
        if found is None:
            known = ", ".join(g.name for g in gpus) or "none"
            raise InputError(
                f"-dev: invalid device: {name} (this machine's GPUs: {known}; `llamafit gpus` "
                "lists them by the names llama-server uses)"
            )
        out.append(found)
    return tuple(out)


def used_per_gpu(gpus: Sequence[DeviceSpec], rows: Sequence[DeviceUsage]) -> tuple[int, ...]:
    """The bytes a breakdown's rows use on each of `gpus`, in their order: 0 on a GPU the plan
    leaves out (solver.device_subsets: -sm none -mg i, or -dev naming the others)."""
    used = {d.name: d.used_bytes for d in rows if d.kind == "gpu"}
    return tuple(used.get(g.name, 0) for g in gpus)
