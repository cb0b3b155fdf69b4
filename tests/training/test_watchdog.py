"""The hung-trainer rule (training.process.watchdog) on a clock the test moves: how long a run
may be silent follows its own pace, with a floor, a ceiling, and room for the phases nothing has
timed yet. The real thing (a trainer frozen mid-run) is tests/reliability/test_trainer_hangs.py."""

from types import SimpleNamespace

from training.process.watchdog import Watchdog


def batch(n, of=10, epoch=1, epochs=5):
    return SimpleNamespace(batch=n, batches=of, epoch=epoch, epochs=epochs)


def epoch(n, epochs=5):
    return SimpleNamespace(epoch=n, epochs=epochs)


def val(n, of=4):
    return SimpleNamespace(batch=n, batches=of, epoch=1)


def dog(**kw):
    return Watchdog(**{"floor": 5.0, "ceiling": 100.0, "factor": 10.0, "now": 0.0, **kw})


def test_starting_gets_the_ceiling_and_logs_count_only_then():
    w = dog()
    assert w.allowance() == 100.0
    assert w.event("log", None, 50.0)  # scanning labels: alive
    assert w.stalled(149.0) is None and w.stalled(151.0).silent == 101.0
    w.event("batch", batch(1), 60.0)
    assert not w.event("log", None, 61.0)  # a logging thread talks while the loop is stuck
    assert not w.event("system", None, 61.0)


def test_the_pace_of_batches_sets_the_allowance_twice_as_long_in_the_first_epoch():
    w = dog()
    w.event("batch", batch(1), 10.0)
    w.event("batch", batch(2), 11.0)
    w.event("batch", batch(3), 12.0)  # 1 s a batch
    assert w.allowance() == 20.0  # 10 × 1 s, doubled in the first epoch
    assert w.stalled(31.0) is None
    stall = w.stalled(33.0)
    assert stall.silent == 21.0 and stall.allowance == 20.0
    w.event("batch", batch(10), 13.0)  # the last one: validation follows
    assert w.allowance() == 100.0  # the first validation's set-up: untimed
    w.event("val_batch", val(1), 40.0)  # set-up took 27 s: not learnt as a pace
    w.event("val_batch", val(2), 41.0)
    assert w.longest == 1.0 and w.allowance() == 20.0  # validation: twice the pace
    w.event("epoch", epoch(1), 42.0)
    w.event("checkpoint", epoch(1), 42.1)
    assert w.allowance() == 10.0  # past the first epoch: the pace itself
    w.event("batch", batch(1, epoch=2), 43.0)
    assert w.allowance() == 10.0


def test_the_floor_and_the_ceiling_bound_it():
    w = dog()
    for i in range(1, 5):
        w.event("batch", batch(i), i * 0.1)
    w.event("epoch", epoch(1), 0.5)
    w.event("batch", batch(1, epoch=2), 0.6)
    assert w.allowance() == 5.0  # 10 × 0.1 s is under the floor
    slow = dog()
    slow.event("batch", batch(1), 0.0)
    slow.event("batch", batch(2), 30.0)
    slow.event("epoch", epoch(1), 31.0)
    assert slow.allowance() == 100.0  # 10 × 30 s is over the ceiling


def test_a_fault_of_redis_or_the_database_is_not_the_trainers_silence():
    w = dog()
    w.event("batch", batch(1), 0.0)
    w.event("batch", batch(2), 1.0)
    w.fault_cleared(60.0)  # Redis was away for a minute; events come in a burst after
    assert w.stalled(60.5) is None
    w.event("batch", batch(3), 60.6)
    assert w.longest == 1.0  # the gap across the fault teaches nothing


def test_after_the_last_epoch_the_final_validation_then_the_end():
    w = dog()
    w.event("batch", batch(1, of=2, epochs=1), 0.0)
    w.event("batch", batch(2, of=2, epochs=1), 1.0)
    w.event("val_batch", val(1), 3.0)
    w.event("epoch", epoch(1, epochs=1), 4.0)
    assert w.phase == "validating" and w.allowance() == 20.0  # the final validation of best.pt
    w.event("final", SimpleNamespace(), 8.0)
    assert w.allowance() == 100.0  # plots and results: untimed
    w.event("done", SimpleNamespace(), 9.0)
    assert w.allowance() == 5.0  # exiting
