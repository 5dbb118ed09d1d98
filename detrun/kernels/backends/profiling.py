"""Kernel names of a backend's cells (torch.profiler), for the kernel audit: shared by the backends that
run FlashInfer (flashinfer.py, sglang.py) and the torch ones (torch_attn.py). The backend has its profile knobs
(spec.flashinfer's, spec.sdpa's, spec.flex's: profile_kernels, profile_repeats) in self.opts."""

from __future__ import annotations

import json
from typing import Dict, List, Set, Tuple

import torch

from ...spec.matrix import share_of
from .base import capture_and_replay


class KernelProfiling:
    """_profiled picks the first cell of each distinct (path, plan); _kernels records its CUDA kernels."""

    _profiled_plans: Set[Tuple[str, str]]
    # (this task's share, the number of tasks of its GPU slot) and its first repeat (the worker sets them from
    # its shard: spec/matrix.py profile_share); one task alone: (0, 1) and 0
    profile_share: Tuple[int, int] = (0, 1)
    profile_from: int = 0

    def _profiled(self, repeat: int, path: str, plan: Dict[str, object]) -> bool:
        """Profile this cell? Only the first cell of each distinct (path, plan) in the task, within its first
        profile_repeats repeats: the kernels are a function of the path and plan (compare audits per plan). When
        the slot's repeats are split among several tasks, each profiles only the plans whose hash falls to it
        (share_of), so every plan is still profiled once per slot and no one task carries every profile."""
        limit = self.opts.profile_repeats  # type: ignore[attr-defined]
        if not self.opts.profile_kernels or (limit is not None and repeat - self.profile_from >= limit):  # type: ignore[attr-defined]
            return False
        key = (path, json.dumps(plan, sort_keys=True))  # the plan as the row records it
        share, shares = self.profile_share
        if key in self._profiled_plans or (limit is not None and shares > 1 and share_of(key, shares) != share):
            return False
        self._profiled_plans.add(key)
        return True

    def _kernels(self, run, graph: bool) -> List[str]:
        """CUDA kernel names of one more run (eager) or capture+replay (graph) of a cell _profiled picked."""
        from torch.profiler import ProfilerActivity, profile

        device = self.device  # type: ignore[attr-defined]
        with self.stages("profile"):  # type: ignore[attr-defined]  # the profiler's start, one more run, parsing
            # Earlier cells' digests (on their own stream) must not run inside the profiled window.
            torch.cuda.synchronize(device)
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                if graph:
                    capture_and_replay(run, device)
                else:
                    run()
                torch.cuda.synchronize(device)
            names = {e.name for e in prof.events() if str(e.device_type).endswith("CUDA")}
        return sorted(n[:300] for n in names)
