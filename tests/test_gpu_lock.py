"""The GPU readers-writer lock, on the CPU (it is plain flock on files)."""

import threading
import time

from cuda_agent.sandbox.gpu import GpuLock

from .conftest import wait_until_locked


def test_sharers_overlap_a_timer_waits_and_every_hold_is_recorded(tmp_path):
    a, b, c = GpuLock(tmp_path), GpuLock(tmp_path), GpuLock(tmp_path)
    events = []

    def timer():
        with c.exclusive():
            events.append(("exclusive", time.time()))

    with a.shared():
        with b.shared():  # a second sharer gets in while the first holds it
            events.append(("both shared", time.time()))
            t = threading.Thread(target=timer)
            t.start()
            time.sleep(0.3)
            assert not any(e[0] == "exclusive" for e in events)  # the timer waits for the sharers
        time.sleep(0.1)
        released = time.time()
    t.join(5)
    (stamp,) = [e[1] for e in events if e[0] == "exclusive"]
    assert stamp >= released - 0.01
    assert len(a.intervals) == len(b.intervals) == len(c.intervals) == 1
    (s, e), = a.intervals
    # intervals are rounded to the millisecond (and floats near 1.8e9 s differ by ~2e-7): held_s is exact
    assert e - s >= 0.4 - 1e-3 and a.held_s >= 0.4 and a.exclusive_s == 0
    assert c.exclusive_s > 0 and c.intervals[0][0] >= s


def test_a_setup_hold_keeps_a_timer_out_but_is_not_counted_as_the_gpu_in_use(tmp_path):
    """The compile baseline's first run and the candidate's setup hold the lock shared with busy=False:
    a timer waits for them as for any sharer, but their mostly-CPU time stays out of the busy intervals."""
    a, c = GpuLock(tmp_path), GpuLock(tmp_path)
    done = []

    def timer():
        with c.exclusive():
            done.append(time.time())

    with a.shared(busy=False):
        t = threading.Thread(target=timer)
        t.start()
        time.sleep(0.3)
        assert not done  # the timer waits for the setup hold
        released = time.time()
    t.join(5)
    assert done and done[0] >= released - 0.01
    assert a.intervals == [] and a.held_s == 0 and a.exclusive_s == 0
    assert len(a.setup_holds) == 1 and a.setup_s >= 0.3
    assert c.exclusive_s > 0 and c.setup_holds == []


def test_quiet_waits_for_every_candidate_code_hold_and_new_holds_queue_behind_it(tmp_path):
    """Candidate code (a loaded candidate, an agent's command) holds the code lock shared; the baselines are timed
    quiet: once the last hold is released, and no new hold begins until they are done (a waiter cannot starve)."""
    a, b, q = GpuLock(tmp_path), GpuLock(tmp_path), GpuLock(tmp_path)
    events = []
    first, second = a.candidate_code(), b.candidate_code()  # two at once

    def timer():
        with q.quiet():
            events.append(("quiet", time.time()))
            time.sleep(0.3)
        events.append(("quiet done", time.time()))

    def newcomer():
        with GpuLock(tmp_path).candidate_code():
            events.append(("new hold", time.time()))

    t = threading.Thread(target=timer)
    t.start()
    assert wait_until_locked(q.code_gate)  # the timer waits, holding the gate
    first.release()
    time.sleep(0.2)
    assert not events  # one hold is left
    late = threading.Thread(target=newcomer)
    late.start()  # comes while quiet waits: queues behind it
    time.sleep(0.2)
    assert not events
    released = time.time()
    second.release()
    t.join(5)
    late.join(5)
    stamps = dict(events)
    assert stamps["quiet"] >= released - 0.01 and stamps["new hold"] >= stamps["quiet done"] - 0.01, events
    (asked, start, end, quiet), = q.quiet_holds
    assert quiet and start >= released - 0.01 and end - start >= 0.3


def test_a_code_hold_ends_with_the_processes_that_ran_the_code(tmp_path):
    """A SIGKILLed worker's threads and queued kernels end with its processes, not with the signal: the hold is
    released once no process is left in the worker's process groups."""
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        hold, q, got = GpuLock(tmp_path).candidate_code(), GpuLock(tmp_path), []
        hold.release([proc.pid], background=True)

        def waiter():
            with q.quiet():
                got.append(time.time())

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.4)
        assert not got  # the process lives on: still held
        killed = time.time()
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        t.join(5)
        assert got and got[0] >= killed
    finally:
        proc.kill()


def test_quiet_gives_up_after_its_wait_and_says_so(tmp_path):
    """A hold that never ends (a stuck evaluation, an agent's long command) does not stop every later baseline:
    after ``wait_s`` quiet yields False, unheld (the evaluator then times the baselines without caching them)."""
    hold, q = GpuLock(tmp_path).candidate_code(), GpuLock(tmp_path)
    with q.quiet(wait_s=0.3) as quiet:
        assert quiet is False
    (asked, start, end, quiet), = q.quiet_holds
    assert not quiet and 0.3 <= start - asked < 60
    hold.release()
    with q.quiet(wait_s=0.3) as quiet:
        assert quiet is True
    with GpuLock(tmp_path).candidate_code():  # the gate was let go after giving up
        pass
