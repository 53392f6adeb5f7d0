"""Shared test configuration: `gpu` tests are skipped with a reason when CUDA is absent; the seed answers
and their problems live in tests/fixtures (copies: no test depends on a folder outside the repository)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True)
def _own_result_cache(tmp_path_factory, monkeypatch):
    """Every test its own result cache: a test that runs `optimize` must not be answered by another's run
    of the same problem (kernelwright/result_cache.py)."""
    monkeypatch.setenv("KERNELWRIGHT_RESULT_CACHE", str(tmp_path_factory.mktemp("results")))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `python -m pytest -m gpu` on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def fixtures_dir() -> Path:
    """`seeds/` (LLM answers, numbered as DESIGN.md cites them) and `seed_problems/` (their problems)."""
    return FIXTURES


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster for the `--ray` tests (Ray is an optional extra: they skip without it): 2 CPUs and
    2 GPUs that are resources only, so that tasks asking for a GPU are scheduled (and given none)."""
    ray = pytest.importorskip("ray", reason="Ray is optional: pip install -e '.[ray]' to run the --ray tests")
    ray.init(address="local", num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
