"""`memstore bench hermes --api-server`: its arguments and how it counts leaks.

The benchmark itself starts Hermes' gateway twice (minutes on a busy box), so
it is run by hand; its pieces that decide the reported numbers are checked here.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from memstore.bench.hermes_api import _leaks, _message, caller_word
from memstore.cli import cli

pytestmark = pytest.mark.hermes


@pytest.mark.parametrize(
    "args",
    [["--requests", "0"], ["--sessions", "0"], ["--callers", "0"], ["--sessions", "65"]],
)
def test_bad_arguments_are_refused(args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["bench", "hermes", "--api-server", *args])
    assert result.exit_code == 2 and "--sessions" in result.output


def test_caller_words_never_contain_each_other() -> None:
    words = [caller_word(m) for m in range(64)]
    assert len(set(words)) == 64
    assert not any(a != b and a in b for a in words for b in words)


def test_a_request_showing_another_callers_word_is_a_leak() -> None:
    own = _message(0, 1)
    clean = (own, f'{{"messages": [{{"content": "{own}"}}]}}')
    context = f"<memory-context>The user lives in {caller_word(0).title()}.</memory-context>"
    recalled = (f"{own}\n\n{context}", own + context)
    leaked = (own, own + f"<memory-context>The user lives in {caller_word(1)}.</memory-context>")
    untagged = ("hello", caller_word(1))
    out = _leaks([clean, recalled, leaked, untagged], callers=2)
    assert out == {"model_requests_checked": 3, "with_memory_context": 1, "leaks": 1}
