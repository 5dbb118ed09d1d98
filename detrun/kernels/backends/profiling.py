"""Kernel names of a backend's cells (torch.profiler), for the kernel audit: shared by the backends that
run FlashInfer (flashinfer.py, sglang.py) and the torch ones (torch_attn.py). The backend has its profile knobs
(spec.flashinfer's, spec.sdpa's, spec.flex's: profile_kernels, profile_repeats) in self.opts.

A backend that sets one_session (flashinfer.py) records, on a GPU with profile_repeats bounded, the cell's own
run inside one session over the task's profile window (kernel_session.py); the others, and an unbounded
window, profile one more run of the cell in a session of its own (_kernels)."""

from __future__ import annotations

import contextlib
import json
import logging
from typing import ContextManager, Dict, List, Optional, Set, Tuple

import torch

from ...errors import first_line
from ...spec.matrix import share_of
from ...stages import PROFILE_START, PROFILE_STOP
from .base import capture_and_replay
from .kernel_session import NAME_CHARS, ProfileSession

log = logging.getLogger(__name__)


class KernelProfiling:
    """_profiled picks the first cell of each distinct (path, plan); _kernels records its CUDA kernels."""

    _profiled_plans: Set[Tuple[str, str]]
    # (this task's share, the number of tasks of its GPU slot) and its first repeat (the worker sets them from
    # its shard: spec/matrix.py profile_share); one task alone: (0, 1) and 0
    profile_share: Tuple[int, int] = (0, 1)
    profile_from: int = 0
    one_session = False  # the cell's own run in one session over the profile window (kernel_session.py)
    _session: Optional[ProfileSession] = None
    _session_done = False  # the window's session closed: no other opens in this task
    profile_note = ""  # why the window's kernel names were not recorded (a ProfileError), for the task's note

    def _profiled(self, repeat: int, path: str, plan: Dict[str, object]) -> bool:
        """Profile this cell? Only the first cell of each distinct (path, plan) in the task, within its first
        profile_repeats repeats: the kernels are a function of the path and plan (compare audits per plan). When
        the slot's repeats are split among several tasks, each profiles only the plans whose hash falls to it
        (share_of), so every plan is still profiled once per slot and no one task carries every profile."""
        if not self.opts.profile_kernels or not self.profile_window(repeat):  # type: ignore[attr-defined]
            return False
        key = (path, json.dumps(plan, sort_keys=True))  # the plan as the row records it
        share, shares = self.profile_share
        limit = self.opts.profile_repeats  # type: ignore[attr-defined]
        if key in self._profiled_plans or (limit is not None and shares > 1 and share_of(key, shares) != share):
            return False
        self._profiled_plans.add(key)
        return True

    def profile_window(self, repeat: int) -> bool:
        """Is a cell of this repeat in the task's profile window? The worker asks before each cell (the backend
        again at its plan): a one_session backend on a GPU opens the window's session at its first cell, so every
        graph the window captures is captured inside it, and closes it at the first cell past it."""
        inside = self._in_window(repeat)
        if not inside:
            self.close_profile()
        elif self.opens_at(repeat):
            with self.stages(PROFILE_START):  # type: ignore[attr-defined]
                try:
                    self._session = self._open_session()
                except Exception as exc:  # then each profiled cell is profiled alone (_kernels)
                    self._session_done, self.profile_note = True, f"kernel profile session did not start: {exc}"
        return inside

    def _in_window(self, repeat: int) -> bool:
        limit = self.opts.profile_repeats  # type: ignore[attr-defined]
        return limit is None or repeat - self.profile_from < limit

    def opens_at(self, repeat: int) -> bool:
        """Would profile_window(repeat) open the window's session now (CUPTI's set-up: seconds on a GPU)?"""
        return (self._session is None and not self._session_done and self.opts.profile_repeats is not None  # type: ignore[attr-defined]
                and self._session_here() and self._in_window(repeat))

    def _session_here(self) -> bool:
        return self.one_session and self.opts.profile_kernels and self.device.type == "cuda"  # type: ignore[attr-defined]

    def _open_session(self) -> ProfileSession:
        """The window's session, recorded as DETRUN_KERNEL_TRACER says: "auto" takes CUPTI's kernel records where
        cupti-python imports (its set-up takes milliseconds, torch.profiler's seconds), else torch.profiler."""
        tracer = self.flags.kernel_tracer  # type: ignore[attr-defined]
        if tracer != "torch":
            from .kernel_session_cupti import CuptiKernels, cupti_events, cupti_python

            try:
                cupti = cupti_python()
            except Exception:  # not installed, or for another CUDA (its libraries fail to load)
                if tracer == "cupti":
                    raise
            else:
                return ProfileSession(self.device, profiler=lambda: CuptiKernels(cupti),  # type: ignore[attr-defined]
                                      events=cupti_events)
        return ProfileSession(self.device)  # type: ignore[attr-defined]

    @property
    def session_open(self) -> bool:
        return self._session is not None

    @property
    def session_ahead(self) -> bool:
        """May a session still open or close in this task? (After its window, nothing is left to do.)"""
        return self.one_session and not self._session_done

    def _recording(self, profiled: bool) -> ContextManager[List[str]]:
        """Around a profiled cell's own run in the session: the list its kernel names go into at close."""
        if not profiled or self._session is None:
            return contextlib.nullcontext([])
        return self._session.cell()

    def close_profile(self) -> None:
        """Close the window's session: the device drains once, every profiled cell's list is filled. A
        ProfileError leaves them empty (the compare then says which plans have no kernels) and is said in
        profile_note."""
        session, self._session, self._session_done = self._session, None, True
        if session is None:
            return
        with self.stages(PROFILE_STOP):  # type: ignore[attr-defined]
            try:
                session.close()
            except Exception as exc:  # a ProfileError, the CUDA context gone (the cells say so): the rows first
                self.profile_note = first_line(exc)
                log.warning("detrun: %s", self.profile_note)

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
        return sorted(n[:NAME_CHARS] for n in names)
