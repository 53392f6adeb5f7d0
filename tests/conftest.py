"""Shared test configuration: `gpu` tests are skipped with a reason when CUDA is absent; paths to the
read-only seeds in ../shared (tests that need them skip when a user's clone has none)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `python -m pytest -m gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared (seeds and seed problems) is not present beside this clone")
    return SHARED


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster for the `--ray` tests (Ray is an optional extra: they skip without it): 2 CPUs and
    2 GPUs that are resources only, so that tasks asking for a GPU are scheduled (and given none)."""
    ray = pytest.importorskip("ray", reason="Ray is optional: pip install -e '.[ray]' to run the --ray tests")
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
