"""run/beside.py: cases built on a thread while the task's thread is held, joined before it goes on."""

import threading
import time

import pytest

from detrun.run.beside import build_while


def test_the_thread_builds_in_order_until_the_foreground_returns_then_is_joined():
    built, released = [], threading.Event()

    def build(case):
        built.append(case)
        if case == "case2":
            released.set()
        time.sleep(0.01)

    def foreground():  # held until the thread reached its third case
        assert released.wait(10)

    cases = [f"case{i}" for i in range(200)]  # 2 s of builds: the thread stops long before their end
    seconds, count = build_while(foreground, cases, build)
    assert built[:3] == cases[:3] and count == len(built) < len(cases)  # stopped after the foreground returned
    assert seconds > 0 and not any(t.name == "detrun-inputs" for t in threading.enumerate())  # joined
    n = len(built)
    time.sleep(0.05)
    assert len(built) == n  # nothing built after it returned


def test_a_build_that_raises_stops_the_thread_and_a_foreground_error_still_joins_it():
    built = []

    def build(case):
        if case == "bad":
            raise RuntimeError("CUDA error: out of memory")
        built.append(case)

    seconds, count = build_while(lambda: time.sleep(0.05), ["a", "bad", "c"], build)
    assert built == ["a"] and count == 1  # the cell of "bad" builds it again and meets the error as its own

    def failing():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_while(failing, ["a"] * 1000, lambda case: time.sleep(0.001))
    assert not any(t.name == "detrun-inputs" for t in threading.enumerate())
