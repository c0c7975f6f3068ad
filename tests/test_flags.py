"""Each verb's options come from its config dataclass: change a field's default and the flag follows; the
recipe's ``pipeline:`` section, ``--set pipeline.KEY=...`` and the flags give the same settings; errors name
the field and its flag."""

from __future__ import annotations

import argparse
import dataclasses
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Literal, get_args, get_origin, get_type_hints

import pytest
from helpers import TINY_RECIPE

import ofa.commands
from ofa import cli
from ofa.cli import build_parser, main
from ofa.commands import pipeline as pipeline_command
from ofa.commands._flags import add_flags, flag_values, option_fields
from ofa.commands.lut import BuildProtocol
from ofa.export.export import ExportConfig
from ofa.export.push import PushConfig
from ofa.families.mbv3.official import ImportConfig as OfficialImportConfig
from ofa.lut.build import TableBuildConfig
from ofa.lut.check import CheckConfig
from ofa.lut.pack import ImportConfig, PackConfig
from ofa.pipeline import PipelineConfig
from ofa.train.noise_measure import NoiseMeasureConfig
from ofa.train.recipe import PipelineSettings, load_recipe
from ofa.utils.errors import OFAError
from ofa.utils.fields import field_label, flags_of
from ofa.utils.io import read_yaml, write_yaml
from search.predictor.collect import CollectConfig
from search.predictor.fit import FitConfig
from search.search_config import EvolutionConfig, SearchConfig

# every verb with options from a config: the rest of its least command line, and its configs
VERBS: dict[tuple[str, ...], tuple[tuple[str, ...], tuple[type, ...]]] = {
    ("export",): (("--out", "m.onnx"), (ExportConfig,)),
    ("import",): (("ckpt.pth", "--out", "s.pt"), (OfficialImportConfig,)),
    ("lut", "build"): (("--space", "mbv3", "--out", "t.yaml"), (TableBuildConfig, BuildProtocol)),
    ("lut", "check"): (("t.yaml",), (CheckConfig,)),
    ("lut", "pack"): (("--backend", "onnx", "--space", "mbv3", "--out", "p"), (PackConfig,)),
    ("lut", "import"): (("p", "--timings", "t.csv", "--out", "t.yaml"), (ImportConfig,)),
    ("noise-scale",): (("r.yaml",), (NoiseMeasureConfig,)),
    ("pipeline",): (("r.yaml",), (PipelineConfig,)),
    ("predictor", "collect"): (("s.pt",), (CollectConfig,)),
    ("predictor", "fit"): (("acc.jsonl",), (FitConfig,)),
    ("push",): (("folder", "--repo-id", "me/x"), (PushConfig,)),
    ("search",): (
        ("--supernet", "s", "--predictor", "p", "--lut", "t", "--latency-ms", "3"),
        (SearchConfig, EvolutionConfig),
    ),
}
NO_CONFIG = {("train",), ("finetune",)}  # a recipe, files and --set: no config dataclass behind them


def _verbs(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {prefix}
    return {v for name, p in subs[0].choices.items() for v in _verbs(p, (*prefix, name))}


def _other(tp: Any, default: Any) -> Any:
    """A value of type ``tp`` that is not ``default``."""
    args = get_args(tp)
    if type(None) in args:
        tp = next(a for a in args if a is not type(None))
    if get_origin(tp) is tuple:
        return (_other(get_args(tp)[0], None),)
    if get_origin(tp) is Literal:
        return next(c for c in get_args(tp) if c != default)
    if tp is bool:
        return not default
    if tp in (int, float):
        return (default or 0) + 3
    return tp("patched")  # str, Path


def test_every_verb_is_covered():
    assert _verbs(build_parser()) == set(VERBS) | NO_CONFIG


def test_every_command_module_is_a_verb_and_a_verb_builds_its_parser_alone():
    modules = {m.name for m in pkgutil.iter_modules(ofa.commands.__path__) if not m.name.startswith("_")}
    assert set(cli.VERBS.values()) == modules
    for verb in cli.VERBS:
        assert _verbs(build_parser(verb)) == {v for v in set(VERBS) | NO_CONFIG if v[0] == verb}


def test_a_verb_imports_its_own_libraries_only():
    """`ofa search` has no reason to import the training loop or the other verbs (a fresh interpreter: this one
    has imported everything)."""
    probe = "import sys; from ofa.cli import build_parser; build_parser('search'); print(sorted(sys.modules))"
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert "ofa.commands.search" in run.stdout and "ofa.train.loop" not in run.stdout, run.stderr[-2000:]
    assert "ofa.commands.train" not in run.stdout and "ofa.commands.export" not in run.stdout


@pytest.mark.parametrize("verb", list(VERBS), ids=" ".join)
def test_flag_defaults_come_from_the_config(verb, monkeypatch):
    """Every option's default (but those the command line must give) is its field's, read when the parser is built."""
    rest, configs = VERBS[verb]
    patched = {}
    for cls in configs:
        hints = get_type_hints(cls)
        for f in option_fields(cls):
            if f.default is not dataclasses.MISSING and not set(flags_of(cls, f.name)) & set(rest):
                patched[cls, f.name] = _other(hints[f.name], f.default)
                monkeypatch.setattr(f, "default", patched[cls, f.name])
    args = build_parser().parse_args([*verb, *rest])
    assert patched
    for (cls, name), value in patched.items():
        assert flag_values(cls, args)[name] == value, (cls.__name__, name)


def test_options_from_annotations():
    @dataclasses.dataclass(frozen=True)
    class Config:
        size: tuple[int, ...] | None = dataclasses.field(default=None, metadata={"help": "sizes"})
        mode: Literal["a", "b"] = dataclasses.field(default="a", metadata={"help": "mode"})
        fast: bool = dataclasses.field(default=False, metadata={"help": "go fast"})
        progress: bool = dataclasses.field(default=True, metadata={"flag": "--quiet", "invert": True, "help": "hush"})
        tags: tuple[str, ...] = dataclasses.field(default=(), metadata={"flag": "--tag", "repeat": True, "help": "t"})
        rate: float = dataclasses.field(default=0.5, metadata={"flag": ("--rate", "--r"), "help": "rate"})
        internal: int = 0  # no help: not an option

    parser = argparse.ArgumentParser()
    add_flags(parser, Config)
    defaults = {"size": None, "mode": "a", "fast": False, "progress": True, "tags": (), "rate": 0.5}
    assert flag_values(Config, parser.parse_args([])) == defaults
    args = parser.parse_args(["--size", "1", "2", "--mode", "b", "--fast", "--quiet", "--tag", "x", "--tag", "y"])
    assert Config(**flag_values(Config, args)) == Config((1, 2), "b", True, False, ("x", "y"))
    assert flag_values(Config, parser.parse_args(["--r", "2", "--no-fast"]))["rate"] == 2.0
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "c"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--internal", "1"])


def _pipeline_settings(argv: list[str]) -> PipelineSettings:
    cfg = pipeline_command.config(build_parser().parse_args(["pipeline", *argv]))
    return cfg.settings(load_recipe(cfg.recipe, cfg.overrides))


def test_pipeline_section_round_trips_through_set(tmp_path):
    raw = read_yaml(TINY_RECIPE)
    raw["pipeline"] = {
        "subnets": 50,
        "targets_ms": [1.5, 3.0],
        "lut_budget_s": 0.25,
        "lut_block_ms": 8,
        "lut_blocks": 6,
        "lut_reference_every": 2,
        "int8": True,
    }
    recipe = write_yaml(tmp_path / "recipe.yaml", raw)
    from_section = _pipeline_settings([str(recipe)])
    assert from_section == PipelineSettings(
        subnets=50,
        targets_ms=(1.5, 3.0),
        lut_budget_s=0.25,
        lut_block_ms=8.0,
        lut_blocks=6,
        lut_reference_every=2,
        int8=True,
    )

    section = load_recipe(recipe).to_dict()["pipeline"]  # every key, spelled out
    sets = [f"--set=pipeline.{key}={json.dumps(value)}" for key, value in section.items()]
    assert _pipeline_settings([str(TINY_RECIPE), *sets]) == from_section
    flags = ["--subnets", "50", "--targets-ms", "1.5", "3", "--lut-budget", "0.25", "--lut-block-ms", "8"]
    flags += ["--lut-blocks", "6", "--lut-reference-every", "2", "--int8"]
    assert _pipeline_settings([str(TINY_RECIPE), *flags]) == from_section
    # a flag wins over the section, --no-int8 too
    assert _pipeline_settings([str(recipe), "--subnets", "20", "--no-int8"]) == dataclasses.replace(
        from_section, subnets=20, int8=False
    )


def test_setting_errors_name_the_recipe_key_and_the_flag(tmp_path, capsys):
    raw = read_yaml(TINY_RECIPE)
    raw["pipeline"] = {"subnets": 3}
    recipe = write_yaml(tmp_path / "recipe.yaml", raw)
    with pytest.raises(OFAError) as err:
        load_recipe(recipe)
    assert str(err.value).startswith(f"{recipe}: pipeline.subnets / --subnets must be at least 10")
    argv = ["pipeline", str(TINY_RECIPE), "--out", str(tmp_path / "run"), "--set", "pipeline.max_noise_pct=-1"]
    assert main(argv) == 2
    err_line = capsys.readouterr().err.strip()
    assert "pipeline.max_noise_pct / --max-noise: expected a positive percentage" in err_line
    assert main([*argv[:-1], "pipeline.lut_block_ms=0"]) == 2
    assert "pipeline.lut_block_ms / --lut-block-ms: expected milliseconds > 0" in capsys.readouterr().err
    assert main([*argv[:-1], "pipeline.lut_blocks=2"]) == 2
    assert "pipeline.lut_blocks / --lut-blocks: expected at least 3 blocks, got 2" in capsys.readouterr().err
    assert main([*argv[:-1], "pipeline.lut_reference_every=0"]) == 2
    assert "pipeline.lut_reference_every / --lut-reference-every must be at least 1, got 0" in capsys.readouterr().err
    assert main([*argv[:-1], "pipeline.threads=0"]) == 2
    assert "pipeline.threads / --threads must be at least 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_library_errors_name_the_field_and_its_flag():
    assert field_label(FitConfig, "max_epochs") == "max_epochs / --epochs"
    assert field_label(PipelineSettings, "lut_budget_s", "pipeline") == "pipeline.lut_budget_s / --lut-budget"
    with pytest.raises(OFAError, match=r"^max_epochs / --epochs must be positive, got 0$"):
        FitConfig(max_epochs=0)
    with pytest.raises(OFAError, match=r"^num_workers / --workers must be >= 0"):
        CollectConfig(num_workers=-1)
    with pytest.raises(OFAError, match=r"^format / --backend: unknown format"):
        PackConfig(Path("p"), "tflite")
    with pytest.raises(OFAError, match=r"^accumulate / --accumulate: need at least 2"):
        NoiseMeasureConfig(accumulate=1)
