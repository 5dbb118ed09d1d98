"""The recording layer around SGLang's FlashInfer wrappers (no SGLang needed): a run records its LSE while the
caller gets only what it asked for, and a wrapper that fails says whether it was planned for this batch."""

from types import SimpleNamespace

import pytest

from detrun.kernels.backends.sglang_record import Recorder, WrapperRunError, recording_class


class _Base:
    def plan(self, *args, **kwargs):
        self.planned_with = args

    def run(self, q, *args, return_lse=False, **kwargs):
        if not hasattr(self, "planned_with"):
            raise AttributeError("'Wrapper' object has no attribute '_cached_module'")
        return (q * 2, q + 1) if return_lse else q * 2


def _wrapper():
    rec = Recorder()
    cls = recording_class(_Base, rec)
    w = cls()
    rec.backend = SimpleNamespace(prefill_wrapper_ragged=w)  # SGLang keeps it there: its label
    return rec, w


def test_a_run_records_the_lse_and_returns_what_the_caller_asked_for():
    rec, w = _wrapper()
    w.begin_forward("batch")  # SGLang's alias of plan
    assert rec.planned == [w]
    assert w.run(3) == 6 and rec.results[id(w)] == (6, 4)
    assert w.run_return_lse(3) == (6, 4)


def test_a_wrapper_run_without_a_plan_for_this_batch_says_so():
    rec, w = _wrapper()
    with pytest.raises(WrapperRunError) as err:
        w.run(3)
    assert str(err.value) == ("SGLang ran prefill_ragged without a plan for this batch: "
                              "AttributeError: 'Wrapper' object has no attribute '_cached_module'")


class _Crashing(_Base):
    def run(self, q, *args, return_lse=False, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")


def test_a_planned_wrapper_that_fails_is_named_without_the_plan_remark():
    rec = Recorder()
    w = recording_class(_Crashing, rec)()
    rec.backend = SimpleNamespace(prefill_wrapper_ragged=w)
    w.plan("batch")
    with pytest.raises(WrapperRunError, match=r"^SGLang ran prefill_ragged: RuntimeError: CUDA error: an "
                                              r"illegal memory access was encountered$"):
        w.run(3)
