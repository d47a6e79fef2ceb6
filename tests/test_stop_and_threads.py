"""The one stop class (``aah_viz.stop.StopRequest``) and the one thread limiter
(``aah_viz.torch_import.limit_threads``) that every long command uses."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from aah_viz.errors import ConfigError
from aah_viz.stop import StopRequest


def test_a_signal_asks_for_a_stop_and_puts_every_handler_back():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    with StopRequest(signals=(signal.SIGINT, signal.SIGTERM)) as stop:
        assert all(signal.getsignal(sig) != old for sig, old in before.items())  # ours while inside
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested == "SIGINT"
        # the first signal gave both back, so a second one acts as usual
        assert {sig: signal.getsignal(sig) for sig in before} == before
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_sigterm_only_by_default_and_nothing_installed_off_the_main_thread():
    before = signal.getsignal(signal.SIGINT)
    with StopRequest() as stop:
        assert signal.getsignal(signal.SIGINT) == before  # only SIGTERM is taken
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested == "SIGTERM"
    seen = {}

    def elsewhere():
        with StopRequest() as other:
            seen["enabled"] = other.enabled
            other.request("cancelled")  # code may still ask, from any thread
            seen["requested"] = other.requested

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    assert seen == {"enabled": False, "requested": "cancelled"}


def test_threads_are_limited_for_torch_and_the_blas_and_the_blas_limit_is_scoped():
    torch = pytest.importorskip("torch")
    from threadpoolctl import threadpool_info

    from aah_viz.torch_import import limit_threads, threads_in_use

    def blas() -> int | None:
        return max((int(p["num_threads"]) for p in threadpool_info()), default=None)

    torch_before, blas_before, rayon = torch.get_num_threads(), blas(), os.environ.get("RAYON_NUM_THREADS")
    try:
        with limit_threads(1):
            assert threads_in_use() == {"torch": 1, "blas": None if blas_before is None else 1}
            assert os.environ["RAYON_NUM_THREADS"] == "1"
        assert blas() == blas_before  # the BLAS limit ends with the block; torch's stays set
        assert torch.get_num_threads() == 1
        torch.set_num_threads(torch_before)
        with limit_threads(None), limit_threads(0):  # their own choice: nothing changes
            assert torch.get_num_threads() == torch_before and blas() == blas_before
        for bad in (-1, 5000, 1.5, True):
            with pytest.raises(ConfigError, match="--threads must be an integer from 1 to 4096"):
                limit_threads(bad)
    finally:
        torch.set_num_threads(torch_before)
        if rayon is None:
            os.environ.pop("RAYON_NUM_THREADS", None)
        else:
            os.environ["RAYON_NUM_THREADS"] = rayon
