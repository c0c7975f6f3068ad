"""Hooks and fixtures. Kept light (no torch, no package import at the top): pytest's controller process loads
this file before it starts any worker; what the tests share lives in ``helpers.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest

if TYPE_CHECKING:
    from ofa.families.mbv3.space import SearchSpace

# Their runtimes' first use in a process costs seconds (ExecuTorch's import and XNNPACK's pattern graphs,
# NNCF's): under pytest-xdist both files share one worker.
EDGE_RUNTIME_FILES = {"test_edge_formats.py", "test_lut_int8_edge.py"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """An xdist group per test file (`--dist loadgroup`): a module-scoped fixture is built once, on one worker."""
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group("edge_runtimes" if name in EDGE_RUNTIME_FILES else name))


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
