"""A `cpu` platform for VERL's platform registry (selected with VERL_PLATFORM=cpu).

VERL asks its platform for the device name, the collective backend (gloo here), a
torch.cuda-like device module and the Ray resource that placement groups count. VERL's
resource pools count GPUs, so the platform names its Ray resource "GPU" and the launcher
fakes one with `ray_init.num_gpus=1`.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import torch
from verl.plugin.platform import PlatformBase, PlatformRegistry

PLATFORM_NAME = "cpu"


_ZERO_STATS = frozenset({"memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"})


def _noop(*_args: Any, **_kwargs: Any) -> None:
    return None


class CPUDeviceModule(ModuleType):
    """Stands in for torch.cuda: real answers for seeds and RNG state, zeros or no-ops elsewhere."""

    def __init__(self) -> None:
        super().__init__("verl_cpu_device")

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return 1

    def current_device(self) -> str:
        return "cpu"

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    manual_seed_all = manual_seed

    def get_rng_state(self, *_args: Any, **_kwargs: Any) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state: torch.Tensor, *_args: Any, **_kwargs: Any) -> None:
        torch.set_rng_state(state)

    def mem_get_info(self, *_args: Any, **_kwargs: Any) -> tuple[int, int]:
        try:
            import psutil

            vm = psutil.virtual_memory()
            return vm.available, vm.total
        except ImportError:
            return 0, 0

    def get_device_name(self, *_args: Any, **_kwargs: Any) -> str:
        return "cpu"

    def get_device_capability(self, *_args: Any, **_kwargs: Any) -> tuple[None, None]:
        return None, None

    def is_bf16_supported(self, *_args: Any, **_kwargs: Any) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        # memory_allocated, synchronize, empty_cache, reset_peak_memory_stats ...: nothing to do on CPU.
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _ZERO_STATS:
            return lambda *_a, **_k: 0
        return getattr(torch.cpu, name, _noop)


DEVICE_MODULE = CPUDeviceModule()


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return True

    def current_device(self) -> Any:
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"  # faked with ray_init.num_gpus: VERL's resource pools count GPUs

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> None:
        return None
