"""Time models by running a command (a device's own benchmark tool, `adb shell ...`) and reading its output.

The command is a template: ``{model}`` becomes the model's local path, ``{file}`` its path inside the
pack (for a copy on a device), ``{shape}`` its input shape as ``1,3,224,224``. The figure is read with a
regular expression: its groups ``value`` and ``unit`` (ms, us or s, as ``benchmark_app`` prints its median),
or a group named ``ms``, ``us``, ``s`` or ``fps`` (one call per frame: ms = 1000 / fps), else its first
group, in milliseconds; a group ``calls`` divides it (a total over that many calls, as ExecuTorch's
``executor_runner`` prints). Each model is run once per block, in a new shuffled order every
block (as the standalone protocol does in-process), and its figure is the median of its blocks.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ofa.lut.stats import Stats, repeat_stats
from ofa.utils.errors import OFAError

UNITS = {"ms": 1.0, "us": 1e-3, "s": 1e3}


@dataclass(frozen=True)
class CommandRunner:
    """A command that times one model and prints the figure; checked once."""

    command: str
    regex: str
    timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if "{model}" not in self.command and "{file}" not in self.command:
            raise OFAError(f"--runner: the command must name the model as {{model}} (or {{file}}): {self.command!r}")
        try:
            pattern = re.compile(self.regex)
        except re.error as exc:
            raise OFAError(f"--runner-regex: not a regular expression: {exc}") from None
        if pattern.groups < 1:
            raise OFAError("--runner-regex: needs a group around the number, e.g. 'Median: (?P<ms>[\\d.]+) ms'")

    def argv(self, model: Path, file: str, shape: Sequence[int]) -> list[str]:
        """The command line for one model (placeholders filled in, shell-quoted, then split)."""
        filled = (
            self.command.replace("{model}", shlex.quote(str(model)))
            .replace("{file}", shlex.quote(file))
            .replace("{shape}", ",".join(str(d) for d in shape))
        )
        return shlex.split(filled)

    def time_ms(self, model: Path, file: str, shape: Sequence[int]) -> float:
        """Run the command for one model; the figure it prints, in ms. One line when it fails or prints none."""
        argv = self.argv(model, file, shape)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise OFAError(f"--runner: {argv[0]}: {exc}") from None
        output = done.stdout + done.stderr
        if done.returncode != 0:
            last = output.strip().splitlines()[-1] if output.strip() else "no output"
            raise OFAError(f"--runner: exit status {done.returncode} on {model.name}: {last}")
        return self.parse(output, model.name)

    def parse(self, output: str, name: str = "model") -> float:
        """The figure in ``output`` as ms per call (see module doc)."""
        match = re.search(self.regex, output)
        if match is None:
            tail = output.strip().splitlines()[-1] if output.strip() else "no output"
            raise OFAError(f"--runner-regex: no match in the output for {name} (last line: {tail!r})")
        calls = match.groupdict().get("calls")
        return self._figure(match) / (int(calls) if calls else 1)

    @staticmethod
    def _figure(match: re.Match) -> float:
        named = match.groupdict()
        if named.get("value") is not None and named.get("unit") in UNITS:
            return float(named["value"]) * UNITS[named["unit"]]
        for unit, value in named.items():
            if value is not None and unit in (*UNITS, "fps"):
                number = float(value)
                return 1000.0 / number if unit == "fps" else number * UNITS[unit]
        return float(match.group(1))


def time_with_command(
    runner: CommandRunner,
    models: Mapping[str, tuple[Path, str, Sequence[int]]],
    blocks: int,
    seed: int = 0,
    progress: Callable[[int], Any] | None = None,
) -> dict[str, Stats]:
    """Every model (key → (path, file in pack, input shape)) timed ``blocks`` times in shuffled order."""
    names = list(models)
    figures: dict[str, list[float]] = {name: [] for name in names}
    rng = np.random.default_rng(seed)
    for _ in range(blocks):
        for i in rng.permutation(len(names)):
            figures[names[i]].append(runner.time_ms(*models[names[i]]))
            if progress:
                progress(1)
    return {name: repeat_stats(f) for name, f in figures.items()}
