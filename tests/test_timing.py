"""``xsim.ScopedTimer`` times a block as Warp's does: ``elapsed`` in milliseconds of wall clock, the line
``name took 1.23 ms`` printed at exit (indented per enclosing printing timer), durations appended to a
``dict`` of lists, nothing measured when inactive or when timers are disabled."""

import re
import time

import pytest

import xsim


def test_elapsed_is_the_blocks_wall_time_in_milliseconds_and_is_printed(capsys):
    with xsim.ScopedTimer("sleep") as timer:
        before = time.perf_counter()
        time.sleep(0.05)
        slept = (time.perf_counter() - before) * 1000.0
    assert slept <= timer.elapsed < slept + 20.0
    assert capsys.readouterr().out == f"sleep took {timer.elapsed:.2f} ms\n"


def test_nested_timers_indent_and_extra_msg_follows_the_time(capsys):
    with xsim.ScopedTimer("outer") as outer, xsim.ScopedTimer("inner") as inner:
        inner.extra_msg = "(3 steps)"
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"    inner took {inner.elapsed:.2f} ms (3 steps)", f"outer took {outer.elapsed:.2f} ms"]
    assert outer.elapsed >= inner.elapsed


def test_durations_are_appended_to_the_dict_under_the_name(capsys):
    times: dict[str, list[float]] = {}
    for _ in range(3):
        with xsim.ScopedTimer("step", dict=times, print=False) as timer:
            pass
    assert list(times) == ["step"] and len(times["step"]) == 3 and times["step"][-1] == timer.elapsed
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("how", ["inactive", "disabled"])
def test_an_inactive_or_disabled_timer_measures_and_prints_nothing(capsys, monkeypatch, how):
    times: dict[str, list[float]] = {}
    if how == "disabled":
        monkeypatch.setattr(xsim.ScopedTimer, "enabled", False)
    with xsim.ScopedTimer("off", active=how != "inactive", dict=times) as timer:
        time.sleep(0.01)
    assert timer.elapsed == 0.0 and times == {"off": []} and capsys.readouterr().out == ""


def test_the_printed_line_has_warps_form(capsys):
    with xsim.ScopedTimer("render", synchronize=True, cuda_filter=1) as timer:
        pass
    assert re.fullmatch(r"render took \d+\.\d\d ms\n", capsys.readouterr().out)
    assert timer.timing_results == []
