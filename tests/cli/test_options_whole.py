"""`eval` and `export` hand their options object whole to the stage (as trl's scripts take their dataclass): what the
command line resolved is what `evaluate.run` and `export.run` receive, so a new flag needs no copying in cli.py."""

from __future__ import annotations

from verl_p40 import cli
from verl_p40.evaluation import evaluate
from verl_p40.evaluation.options import EvalOptions
from verl_p40.models import export
from verl_p40.models.options import ExportOptions


def test_eval_gets_its_options_whole(tmp_path, monkeypatch):
    got = []
    report = {"models": {}, "comparison": None, "questions": 0}
    monkeypatch.setattr(evaluate, "run", lambda *args, **kwargs: got.append((args, kwargs)) or report)
    argv = ["eval", "--model", str(tmp_path), "--out", str(tmp_path / "out"), "--limit", "3", "--dtype", "fp16"]
    assert cli.main([*argv, "--examples", "2", "--decode", "off", "--device", "cpu"]) == 0
    ((args, kwargs),) = got
    assert kwargs == {} and len(args) == 1 and isinstance(args[0], EvalOptions)
    options = args[0]
    assert (options.model, options.limit, options.dtype) == (str(tmp_path), 3, "fp16")
    assert (options.examples, options.decode, options.device) == (2, "off", "cpu")


def test_export_gets_its_options_whole(tmp_path, monkeypatch):
    got = []
    monkeypatch.setattr(export, "run", lambda *args, **kwargs: got.append((args, kwargs)) or [])
    argv = ["export", "--model", "latest", "--out", str(tmp_path / "x"), "--gguf", "f16,q8_0", "--lora", "adapter"]
    assert cli.main(argv) == 0
    ((args, kwargs),) = got
    assert kwargs == {} and len(args) == 1 and isinstance(args[0], ExportOptions)
    assert (args[0].model, args[0].gguf, args[0].lora) == ("latest", ["f16", "q8_0"], "adapter")
