"""Hooks and fixtures. Kept light (no torch, no package import at the top): pytest's controller process loads
this file before it starts any worker; what the tests share lives in ``helpers.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from ofa.families.mbv3.space import SearchSpace

# Test files that lower models to ExecuTorch, run on one xdist worker: a process's first lowering costs about
# 16 s (importing exir, then its passes' first run), which a second worker would pay again.
EXECUTORCH_FILES = ("tests/test_edge_formats.py", "tests/test_lut_int8_edge.py")


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadfile``, with the ExecuTorch files as one unit of work."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LoadFileSharingExecuTorch(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return EXECUTORCH_FILES[0] if scope in EXECUTORCH_FILES else scope

    return LoadFileSharingExecuTorch(config, log)


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny models: one intra-op thread is faster, and no thread spin-waits for a core another process holds."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def no_curves():
    """No training-curves PNG for a module's runs (`pytest.mark.usefixtures("no_curves")`): its tests do not read
    it (tests/test_train.py checks it), and drawing it is a fair share of a run that small."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("ofa.train.loop.plot_training_curves", lambda *a: None)
        yield


@pytest.fixture
def space() -> SearchSpace:
    from helpers import tiny_space

    return tiny_space()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(0)
