"""The CPU thread choice (xsim/kernels/threads.py): small launches stay serial, large ones use every
thread, and the choice never changes a result."""

import struct

import numpy as np
import pytest

import xsim
from xsim.kernels import threads as threads_mod


@xsim.kernel
def scale_by_two(x: xsim.array(dtype=float), y: xsim.array(dtype=float)):
    i = xsim.tid()
    y[i] = 2.0 * x[i]


def _threads_of(buf: bytes) -> int:
    return struct.unpack_from("=i", buf, 40)[0]  # the launch buffer's thread budget (launch.cpu_buffer)


@pytest.fixture
def two_threads(monkeypatch):
    monkeypatch.setattr(threads_mod, "_max_threads", 2)


def test_a_pacer_calibrates_serially_then_keeps_small_work_serial(two_threads):
    pacer, calls = threads_mod.Pacer(), []
    for _ in range(threads_mod.CALIBRATION_RUNS):
        assert pacer.threads(1000) == 1
        pacer.run(calls.append, b"", 1000, 1)
    assert pacer.runs == threads_mod.CALIBRATION_RUNS and len(calls) == 3
    assert pacer.per_thread < threads_mod.SERIAL_BELOW_S / 1000  # an empty call: far below the cut-off
    assert pacer.threads(1000) == 1
    assert pacer.threads(threads_mod.CALIBRATE_BELOW) == 2


def test_a_pacer_parallelises_work_whose_serial_time_is_long(two_threads):
    pacer = threads_mod.Pacer()
    pacer.per_thread, pacer.runs = 1e-6, threads_mod.CALIBRATION_RUNS  # 1 us per thread, measured
    assert pacer.threads(10) == 1            # 10 us of work: not worth a wake-up
    assert pacer.threads(1000) == 2          # 1 ms of work: timed on both threads next


class FakeClock:
    """time.perf_counter for the pacer: each native call takes ``per_thread[threads] * n`` seconds."""

    def __init__(self):
        self.now, self.per_thread = 0.0, {1: 1e-6, 2: 1e-6}

    def __call__(self):
        return self.now

    def entry(self, n, threads):
        def call(buf):
            self.now += self.per_thread[threads] * n
        return call


def launches(pacer, clock, n, count):
    """The thread counts the pacer chose for ``count`` launches of ``n`` threads, each run on the fake clock."""
    chosen = []
    for _ in range(count):
        t = pacer.threads(n)
        pacer.run(clock.entry(n, t), b"", n, t)
        chosen.append(t)
    return chosen


def test_a_pacer_keeps_the_faster_mode_and_follows_the_load(two_threads, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(threads_mod.time, "perf_counter", clock)
    pacer, n, runs = threads_mod.Pacer(), 1000, threads_mod.CALIBRATION_RUNS
    clock.per_thread = {1: 1e-6, 2: 0.6e-6}   # a quiet machine: both threads nearly halve the time
    assert launches(pacer, clock, n, 2 * runs) == [1] * runs + [2] * runs
    probe = threads_mod.PROBE_EVERY
    chosen = launches(pacer, clock, n, probe)
    assert chosen == [2] * (probe - 1) + [1]  # the probe: a serial launch now and then
    clock.per_thread = {1: 1e-6, 2: 3e-6}     # another process holds a core: parallel launches wait for it
    chosen = launches(pacer, clock, n, 2 * probe)
    assert chosen[0] == 2 and chosen[3:].count(2) == 2   # serial within a few launches, but for two probes
    clock.per_thread = {1: 1e-6, 2: 0.6e-6}   # the other process ends: the next probe finds the workers again
    chosen = launches(pacer, clock, n, 2 * probe)
    first = chosen.index(2)
    assert first < probe and chosen[first:].count(1) <= 2  # from the probe on, parallel but for serial probes


def test_small_launches_pass_one_thread_and_large_ones_all(two_threads, monkeypatch):
    seen = []
    for n in (64, threads_mod.CALIBRATE_BELOW + 5):
        x = xsim.array(np.arange(n, dtype=np.float32))
        y = xsim.zeros(n, dtype=float)
        xsim.launch(scale_by_two, n, inputs=[x], outputs=[y])  # prepares the kernel
        prep = scale_by_two.launch_cache
        native = prep.forward
        monkeypatch.setattr(prep, "forward", lambda buf, native=native: (seen.append(_threads_of(buf)), native(buf))[1])
        for _ in range(threads_mod.CALIBRATION_RUNS + 2):
            xsim.launch(scale_by_two, n, inputs=[x], outputs=[y])
        monkeypatch.undo()
        monkeypatch.setattr(threads_mod, "_max_threads", 2)
        np.testing.assert_array_equal(y.numpy(), 2.0 * np.arange(n, dtype=np.float32))
    small, large = seen[:5], seen[5:]
    assert small == [1] * 5
    assert large == [2] * 5


def test_set_max_threads_refuses_less_than_one_thread():
    with pytest.raises(ValueError, match="set_max_threads: need at least one thread, got 0"):
        threads_mod.set_max_threads(0)


@xsim.func_native("#if defined(__CUDACC__) || defined(__CUDACC_RTC__)\nreturn 0;\n#else\n"
                  "return __builtin_omp_get_thread_num();\n#endif")
def openmp_thread(unused: int) -> int:
    ...


@xsim.kernel
def slow_sum(x: xsim.array(dtype=float), y: xsim.array(dtype=float), who: xsim.array(dtype=int)):
    i = xsim.tid()
    s = float(0.0)  # noqa: UP018 (a variable, not a constant, as Warp wants in a loop)
    for k in range(20000):
        s += x[i] * float(k % 7)
    y[i] = s
    who[i] = openmp_thread(0)


def test_a_few_hundred_threads_of_long_work_run_on_every_thread_and_agree(two_threads):
    """The pacer's measured cut-off is the only one: 200 threads of long work (like a rigid pyramid's contact
    pairs) run on both OpenMP threads once calibrated, and compute what the serial calibration runs did."""
    n = 200
    x = xsim.array(np.linspace(0.0, 1.0, n, dtype=np.float32))
    y, who = xsim.zeros(n, dtype=float), xsim.zeros(n, dtype=int)
    xsim.launch(slow_sum, n, inputs=[x], outputs=[y, who])
    serial = y.numpy().copy()
    assert set(who.numpy()) == {0}
    for _ in range(threads_mod.CALIBRATION_RUNS + 1):
        y.zero_()
        xsim.launch(slow_sum, n, inputs=[x], outputs=[y, who])
        np.testing.assert_array_equal(y.numpy(), serial)
    assert set(who.numpy()) == {0, 1}
    weights = sum(float(k % 7) for k in range(20000))
    np.testing.assert_allclose(serial, np.linspace(0.0, 1.0, n) * weights, rtol=1e-3)  # 20000 float32 adds
