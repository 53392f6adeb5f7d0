"""Problem loader: every bundled problem shrinks and runs on the CPU; malformed files give clear errors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from kernelwright.errors import ProblemLoadError
from kernelwright.problem import load_problem, load_shrunk, shrink_value
from kernelwright.problem_estimates import bundled_estimates_now
from kernelwright.problem_files import (
    bundled_categories,
    bundled_estimates,
    bundled_problem_ids,
    resolve_problem_path,
)

CORPUS = Path(__file__).parent / "problem_corpus"

MALFORMED = {
    "syntax_error.py": "syntax error",
    "missing_model.py": "missing Model",
    "missing_get_inputs.py": "missing get_inputs",
    "get_inputs_raises.py": "get_inputs() raised RuntimeError: no inputs today",
    "model_init_raises.py": "raised ValueError: bad width 3",
    "model_not_module.py": "subclass of torch.nn.Module",
    "import_error.py": "ModuleNotFoundError",
    "inputs_not_list.py": "must return a list",
    # user code that exits: a clear error, not a silent exit with its status
    "exits_on_import.py": "executing the file raised SystemExit: 5",
    "get_inputs_exits.py": "get_inputs() raised SystemExit: no inputs here",
}


@pytest.mark.parametrize("filename", sorted(MALFORMED))
def test_malformed_problem_gives_clear_message(filename):
    path = CORPUS / filename
    with pytest.raises(ProblemLoadError) as info:
        problem = load_problem(path)
        problem.build_model()
        problem.inputs()
    message = str(info.value)
    assert str(path) in message
    assert MALFORMED[filename] in message


def test_a_forward_that_exits_fails_shrinking_with_a_clear_message():
    message = r"no shrunk variant runs \(cap 16: SystemExit: forward gave up"
    with pytest.raises(ProblemLoadError, match=message):
        load_shrunk(CORPUS / "forward_exits.py")


def test_missing_file_names_the_problem():
    with pytest.raises(ProblemLoadError, match="no_such_problem.py: no such file"):
        load_problem("no_such_problem.py")


def test_bundled_suite_has_three_levels_and_enough_problems():
    ids = bundled_problem_ids()
    assert len(ids) >= 60
    for level in (1, 2, 3):
        assert bundled_problem_ids(level), f"level{level} is empty"
    names = [pid.split("/", 1)[1].split("_", 1)[1] for pid in ids]
    assert len(names) == len(set(names)), "problem names must be unique"
    categories = bundled_categories()
    assert set(ids) <= set(categories), "every bundled problem has a category"


@pytest.mark.parametrize("problem_id", bundled_problem_ids())
def test_bundled_problem_shrinks_and_runs_on_cpu(problem_id):
    path = resolve_problem_path(problem_id)
    full = load_problem(path)
    assert full.description, "each problem has a one-line docstring"
    start = time.perf_counter()
    problem = load_shrunk(problem_id)
    model = problem.build_model()
    with torch.no_grad():
        out = model(*problem.inputs())
    elapsed = time.perf_counter() - start
    outs = out if isinstance(out, (tuple, list)) else [out]
    for tensor in outs:
        assert isinstance(tensor, torch.Tensor)
        if tensor.is_floating_point():
            assert tensor.dtype == torch.float32
            assert torch.isfinite(tensor).all()
    assert elapsed < 2.0, f"shrunk problem took {elapsed:.2f}s on the CPU"


def test_shrink_keeps_divisibility_and_oddness():
    assert shrink_value(8, 16) == 8
    assert shrink_value(393216, 16) == 16
    assert shrink_value(1000, 16) == 10
    assert shrink_value(4093, 16) == 17  # a prime stays odd


def test_overrides_recompute_derived_constants(tmp_path):
    path = tmp_path / "derived.py"
    path.write_text(
        "import torch\nimport torch.nn as nn\n"
        "class Model(nn.Module):\n    def forward(self, x):\n        return x * 2\n"
        "dim = 4096\nwide = dim * 2\n"
        "def get_inputs():\n    return [torch.rand(wide)]\n"
        "def get_init_inputs():\n    return []\n"
    )
    problem = load_problem(path, {"dim": 8})
    assert problem.module.wide == 16
    assert problem.inputs()[0].shape == (16,)


def test_seeded_construction_is_reproducible():
    problem = load_shrunk(bundled_problem_ids(1)[0])
    a, b = problem.build_model(seed=3), problem.build_model(seed=3)
    for pa, pb in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb)
    assert all(torch.equal(x, y) for x, y in zip(problem.inputs(seed=5), problem.inputs(seed=5), strict=True))


def test_bundled_estimates_are_current():
    """`kernelwright problems` reads sizes from problems/estimates.json (no torch); after changing a problem,
    `python -m kernelwright.problem_estimates` rewrites it."""
    assert bundled_estimates() == bundled_estimates_now()


@pytest.mark.parametrize("filename", sorted(MALFORMED))
def test_optimize_of_a_malformed_problem_is_one_line_and_writes_nothing(filename, tmp_path, capsys):
    """A problem that does not load, build or make its inputs is the user's to fix: exit 2, a one-line
    error, no ModelNew file (not a whole-model fallback that hides it)."""
    from kernelwright.cli import main

    output = tmp_path / "new.py"
    code = main(["optimize", str(CORPUS / filename), "--no-verify", "-o", str(output), "--fresh"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and not output.exists()
    last = err.splitlines()[-1]  # after the progress header, if it got that far
    assert last.startswith("error:") and MALFORMED[filename] in last and "Traceback" not in err
