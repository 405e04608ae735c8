"""No interrupt is lost to schemagen: importing it registers no garbage-collection hook
(an exception a signal handler raises while such a hook runs is swallowed by the
collector), and a synthesis resumes the collector it pauses."""

from __future__ import annotations

import gc
import random
import subprocess
import sys
import textwrap

from vllm_sim.schemagen import SynthesisSettings, budgeted, synthesize

# Timer signals land while the process collects garbage non-stop; each must reach the
# loop as the exception its handler raises. A collector hook in Python lost some of them
# (the collector prints "Exception ignored in: <... callback>" and goes on).
_PROBE = textwrap.dedent(
    """
    import gc, signal, sys, time
    import vllm_sim.schemagen  # noqa: F401  (imports the limits)

    class Tick(Exception):
        pass

    def tick(number, frame):
        raise Tick

    signal.signal(signal.SIGALRM, tick)
    garbage = [[i] for i in range(2000)]
    lost = 0
    for attempt in range(40):
        signal.setitimer(signal.ITIMER_REAL, 0.002)
        deadline = time.monotonic() + 0.5
        try:
            while time.monotonic() < deadline:
                gc.collect(0)
            lost += 1
        except Tick:
            pass
    print(lost)
    """
)


def test_a_signal_during_a_garbage_collection_is_never_swallowed() -> None:
    run = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "0", run.stderr[-2000:]
    assert "Exception ignored" not in run.stderr


def test_no_collector_hook_is_registered() -> None:
    assert not [cb for cb in gc.callbacks if "schemagen" in getattr(cb, "__module__", "")]


def test_a_synthesis_resumes_the_collector() -> None:
    assert gc.isenabled()
    with budgeted():
        schema = {"type": "object", "properties": {"a": {"type": "string"}}}
        synthesize(random.Random(0), schema, SynthesisSettings())
    assert gc.isenabled()
