"""Models torch.export (or the IR) cannot represent get a CaptureError that names the cause, never a crash:
`optimize` then keeps the whole original forward."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelwright.capture import capture
from kernelwright.errors import CaptureError
from kernelwright.problem import load_problem

CORPUS = Path(__file__).parent / "unexportable"

EXPECTED = {
    "data_dependent_branch": "data-dependent control flow",
    "item_sized_output": "data-dependent control flow or shape",
    "boolean_mask": "data-dependent output shape",
    "numpy_roundtrip": "numpy",
    "mutates_input": "modifies its argument `x` in place",
    "dict_output": "forward returns a dict",
    "list_argument": "forward argument 0 is a list",
}


def test_every_corpus_file_has_an_expectation():
    assert {p.stem for p in CORPUS.glob("*.py")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_unexportable_model_gets_a_clear_message(name, capsys):
    with pytest.raises(CaptureError) as info:
        capture(load_problem(CORPUS / f"{name}.py"))
    message = str(info.value)
    assert message.startswith(f"{name}: ")
    assert EXPECTED[name] in message
    assert "Traceback" not in message
    assert "def forward" not in capsys.readouterr().err  # torch's partial-graph dump is silenced
