"""What a model's call costs more timed in a pytest-benchmark round of its own than called back to back.

Validation measures the whole model as a user's pytest-benchmark test would: one call per round of
``benchmark.pedantic``, after the round's setup (which times the model's bricks again, calls the model
untimed and writes its inputs again). A brick's calls are timed one after the other, each after its
inputs are written again. Between the setup and the
model's timed call pytest-benchmark runs a little Python of its own (it makes the round's runner, pauses
tracers, reads the clock): if the model's call is slower after it, the bricks cannot show it, and on
models of microseconds it decides their estimate.

For each model (the user's file with its sample inputs, or synthetic ones at the zoo manifest's sizes,
as validation runs it), in one pytest session, block after block alternating: each round's setup is
validation's own (:class:`~pytest_dlbricks.estimating.validation.BrickRounds`), with the model as its one brick: it
calls the model five times untimed (fewer once they took 10 ms), times three calls one after the other,
each after its inputs are written again (their median is the round's ``back-to-back`` time), calls it
untimed as often again and writes its inputs again; pytest-benchmark then times the round's one call
(``in round``). Per model it prints the medians over rounds, their difference in
microseconds and ratio, and the ratio's range over the blocks (how far the machine moved); models
whose call takes longer than ``--max-ms`` are left out (a microsecond does not matter to them).

Run it from the repository root, in the environment where pytest-dlbricks is installed::

    python bench/round_cost.py [--zoo DIR] [--only NAMES] [--blocks 3] [--rounds 300] [--max-ms 2]
                               [MODEL.onnx ...]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from breakdown import DEFAULT_ZOO, zoo_models  # the same models, by the same names

from pytest_dlbricks.core.clock import time_calls
from pytest_dlbricks.core.runtime import use_thread_pool
from pytest_dlbricks.core.settings import Settings
from pytest_dlbricks.cut.loading import whole_model
from pytest_dlbricks.cut.samples import find_samples
from pytest_dlbricks.estimating.validation import BrickRounds
from pytest_dlbricks.timing.running import ModelRunner

TEST_MODULE = """
import pytest

@pytest.mark.parametrize("name", {names!r})
@pytest.mark.parametrize("block", range({blocks}))
def test_round(name, block, benchmark, round_cost):
    round_cost(name, benchmark)
"""


class RoundCost:
    """The pytest plugin giving each test its model and keeping both times of every round."""

    def __init__(self, runners: dict[str, ModelRunner], rounds: int) -> None:
        self.runners = runners
        self.rounds = rounds
        #: Per model, one entry per block: (back-to-back times, in-round times), seconds.
        self.blocks: dict[str, list[tuple[list[float], list[float]]]] = {name: [] for name in runners}

    @pytest.fixture
    def round_cost(self):
        def measure(name: str, benchmark) -> None:
            run = self.runners[name]
            setup = BrickRounds({name: run}, run)  # validation's own round, the model as its one brick
            benchmark.pedantic(run, setup=setup, rounds=self.rounds, warmup_rounds=1)
            in_round = list(benchmark.stats.stats.data)
            back_to_back = [times[name] for times in setup.rounds]
            self.blocks[name].append((back_to_back[-len(in_round) :], in_round))

        return measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path, help="model files (default: the zoo's models)")
    parser.add_argument("--zoo", type=Path, default=DEFAULT_ZOO, help="zoo folder (default: %(default)s)")
    parser.add_argument("--only", help="comma-separated zoo model names")
    parser.add_argument("--blocks", type=int, default=3, help="blocks of rounds per model, alternated")
    parser.add_argument("--rounds", type=int, default=300, help="rounds per block (default: %(default)s)")
    parser.add_argument("--max-ms", type=float, default=2.0, help="leave out models slower than this")
    args = parser.parse_args()
    settings = Settings(granularity=1)  # the whole model only: no brick is cut
    use_thread_pool(settings.thread_pool, settings.intra_op_threads)
    runners = {}
    for name, path, dims in zoo_models(args):
        try:
            model, feeds = whole_model(path, dims, sample=find_samples(path))
            runner = ModelRunner(model, feeds, settings, data_dir=None if isinstance(model, Path) else path.parent)
            runner.check()
        except Exception as error:  # one model that cannot run does not stop the others
            print(f"{name}: {type(error).__name__}: {error}", file=sys.stderr)
            continue
        if min(time_calls(runner, 5)) <= args.max_ms / 1e3:  # tells microseconds from milliseconds
            runners[name] = runner
    if not runners:
        sys.exit(f"no model runs within {args.max_ms} ms")
    plugin = RoundCost(runners, args.rounds)
    with tempfile.TemporaryDirectory() as folder:
        test = Path(folder) / "test_round_cost.py"
        test.write_text(textwrap.dedent(TEST_MODULE.format(blocks=args.blocks, names=list(runners))))
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            code = pytest.main(
                [str(test), "-q", "-p", "no:dlbricks", "-p", "no:cacheprovider", "--benchmark-columns=median"],
                plugins=[plugin],
            )
    if code != 0:
        sys.exit(f"the timing session failed (pytest exit {code}):\n{output.getvalue()}")
    print(_table(plugin.blocks))


def _table(blocks: dict[str, list[tuple[list[float], list[float]]]]) -> str:
    width = max(len(name) for name in blocks)
    lines = [f"{'model':{width}s}  back-to-back_us  in-round_us  more_us  ratio  ratio over blocks"]
    ratios = []
    for name, measured in blocks.items():
        back = statistics.median(t for b, _ in measured for t in b)
        in_round = statistics.median(t for _, r in measured for t in r)
        per_block = [statistics.median(r) / statistics.median(b) for b, r in measured]
        ratios.append(in_round / back)
        lines.append(
            f"{name:{width}s}  {back * 1e6:15.2f}  {in_round * 1e6:11.2f}  {(in_round - back) * 1e6:7.2f}"
            f"  {in_round / back:5.3f}  {min(per_block):.3f} to {max(per_block):.3f}"
        )
    lines.append(f"\n{len(ratios)} models: in round / back to back, median {statistics.median(ratios):.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
