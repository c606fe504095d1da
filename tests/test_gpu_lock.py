"""The GPU readers-writer lock, on the CPU (it is plain flock on files)."""

import threading
import time

from cuda_agent.sandbox.gpu import GpuLock


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
