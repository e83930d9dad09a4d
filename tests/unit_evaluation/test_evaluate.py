"""`verl-p40 eval` on the CPU: a tiny random Qwen2 with the real Qwen2.5 tokenizer, 4 real GSM8K test rows."""

import json
import shutil

import pytest

from conftest import cli, make_tiny_qwen
from model_folders import cut_short, small_model
from verl_p40 import UserError, reward
from verl_p40.evaluation import evaluate, generation, stats
from verl_p40.evaluation.options import EvalOptions
from verl_p40.models import checkpoints


@pytest.fixture(scope="module")
def tiny_models(tokenizer_dir, tmp_path_factory):
    return [make_tiny_qwen(tokenizer_dir, tmp_path_factory.mktemp(f"tiny{seed}"), seed) for seed in (0, 1)]


def _eval(base, trained, prepared, out, *extra):
    return cli(
        "eval",
        "--model",
        str(base),
        "--compare",
        str(trained),
        "--data",
        str(prepared / "test.parquet"),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--max-new-tokens",
        "24",
        "--batch-size",
        "3",
        *extra,
    )


def test_report_agrees_with_answers(tiny_models, prepared, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "train-1.log").write_text(
        "".join(
            f"(TaskRunner pid=1) step:{i} - critic/score/mean:{i / 10} - actor/pg_loss:0.1 - critic/vf_loss:{1 / i} - "
            f"response_length/mean:{200 - i} - actor/reward_kl_penalty:0.001\n"
            for i in range(1, 6)
        )
    )
    result = _eval(*tiny_models, prepared, tmp_path / "out", "--limit", "4", "--logs", str(logs))
    assert result.returncode == 0, result.stderr
    out = tmp_path / "out"
    records = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    report = json.loads((out / "report.json").read_text())
    assert report["questions"] == 4 and set(report["models"]) == {"base", "trained"}
    for label, m in report["models"].items():
        rows = [r["models"][label] for r in records]
        for r, record in zip(rows, records):  # every stored score is the reward module's score of the stored answer
            scored = reward.compute_score("openai/gsm8k", r["answer"], record["ground_truth"])
            assert r["strict"] == scored["strict"] == scored["score"]
            assert (
                r["flexible"]
                == reward.compute_score("openai/gsm8k", r["answer"], record["ground_truth"], method="flexible")["score"]
            )
            assert 1 <= r["response_tokens"] <= 24
        assert m["accuracy_strict"] == round(sum(r["strict"] for r in rows) / 4, 4)
        assert m["accuracy_flexible"] == round(sum(r["flexible"] for r in rows) / 4, 4)
        assert m["format_rate"] == round(sum(r["format"] for r in rows) / 4, 4)
        assert m["mean_response_tokens"] == round(sum(r["response_tokens"] for r in rows) / 4, 1)
        assert m["samples_per_s"] > 0
    assert report["dtype"] == "fp32" and {r["dtype"] for r in records} == {"fp32"}
    assert report["comparison"] == evaluate.paired_differences(records, "base", "trained")
    md = (out / "report.md").read_text()
    assert "| base |" in md and "| trained |" in md and "4 questions, greedy decoding in fp32" in md
    for kind in ("strict accuracy", "flexible accuracy", "format rate"):  # every difference printed has its p-value
        c = report["comparison"][
            {"strict accuracy": "strict", "flexible accuracy": "flexible", "format rate": "format"}[kind]
        ]
        assert (
            f"| {kind} | {c['difference']:+.1%} | {c['trained_only']} | {c['base_only']} | {c['p_value']:.3g} |" in md
        )
    assert "sign test p =" in result.stdout
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG" and report["curves"] == "curves.png"
    assert records[0]["ground_truth"] == "18" and records[0]["question"].startswith("Janet")


def test_rerun_skips_done_questions(tiny_models, prepared, tmp_path):
    out = tmp_path / "out"
    assert _eval(*tiny_models, prepared, out, "--limit", "2").returncode == 0
    first = (out / "answers.jsonl").read_text().splitlines()
    result = _eval(*tiny_models, prepared, out, "--limit", "5")
    assert result.returncode == 0, result.stderr
    lines = (out / "answers.jsonl").read_text().splitlines()
    assert lines[:2] == first and len(lines) == 5
    assert json.loads((out / "report.json").read_text())["questions"] == 5


def test_single_model_and_bad_inputs(tiny_models, prepared, tmp_path):
    result = cli(
        "eval",
        "--model",
        str(tiny_models[0]),
        "--data",
        str(prepared / "test.parquet"),
        "--out",
        str(tmp_path / "one"),
        "--device",
        "cpu",
        "--max-new-tokens",
        "8",
        "--limit",
        "2",
    )
    assert result.returncode == 0, result.stderr
    assert set(json.loads((tmp_path / "one" / "report.json").read_text())["models"]) == {"base"}
    missing = cli(
        "eval",
        "--model",
        str(tmp_path / "nothing"),
        "--data",
        str(prepared / "test.parquet"),
        "--out",
        str(tmp_path / "x"),
        "--device",
        "cpu",
    )
    assert missing.returncode == 2 and "neither a Hugging Face model folder" in missing.stderr
    latest = cli(
        "eval",
        "--model",
        "latest",
        "--checkpoints",
        str(tmp_path),
        "--data",
        str(prepared / "test.parquet"),
        "--out",
        str(tmp_path / "y"),
        "--device",
        "cpu",
    )
    assert latest.returncode == 2 and "no verl checkpoint" in latest.stderr


def test_latest_checkpoint_and_merge_command(tmp_path):
    for step in (10, 20):
        actor = tmp_path / "exp" / f"global_step_{step}" / "actor"
        actor.mkdir(parents=True)
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"")
    (tmp_path / "exp" / "latest_checkpointed_iteration.txt").write_text("20")
    actor = checkpoints.latest_checkpoint(tmp_path)
    assert actor == tmp_path / "exp" / "global_step_20" / "actor" and checkpoints.is_fsdp_checkpoint(actor)
    cmd = checkpoints.merge_command(actor, actor / "merged")
    assert cmd[1:5] == ["-m", "verl.model_merger", "merge", "--backend"] and cmd[-1] == str(actor / "merged")
    merged = small_model(actor / checkpoints.MERGED)
    assert checkpoints.resolve_model("latest", tmp_path) == merged  # cached merge is reused
    # a step folder, as the README names one (.../global_step_N), is its actor
    assert checkpoints.resolve_model(str(tmp_path / "exp" / "global_step_20"), tmp_path) == merged
    with pytest.raises(UserError, match="global_step_30: neither a Hugging Face model folder"):
        checkpoints.resolve_model(str(tmp_path / "exp" / "global_step_30"), tmp_path)
    cut_short(merged)  # ...when it is whole
    with pytest.raises(UserError, match="merged_hf_fp32: not a usable model folder: model.safetensors: cut short"):
        checkpoints.resolve_model("latest", tmp_path)


def test_latest_never_falls_back_to_an_older_run_when_the_newest_tracker_is_broken(tmp_path):
    """Two experiments: the older one whole, the newer one's tracker naming a step that is gone. `latest` means the
    newer run; scoring the older one's model instead would be a silent wrong result."""
    import os

    old = tmp_path / "old" / "global_step_10" / "actor"
    old.mkdir(parents=True)
    (old / "model_world_size_1_rank_0.pt").write_bytes(b"")
    (tmp_path / "old" / "latest_checkpointed_iteration.txt").write_text("10")
    os.utime(tmp_path / "old" / "latest_checkpointed_iteration.txt", (1_000, 1_000))
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "latest_checkpointed_iteration.txt").write_text("30")
    with pytest.raises(UserError, match=r"new/latest_checkpointed_iteration.txt: names step 30, but .* is not there"):
        checkpoints.latest_checkpoint(tmp_path)
    os.utime(tmp_path / "new" / "latest_checkpointed_iteration.txt", (10, 10))  # the broken one older: the good one
    assert checkpoints.latest_checkpoint(tmp_path) == old
    (tmp_path / "new" / "latest_checkpointed_iteration.txt").write_text("\u00b2")  # a digit to isdigit, not to int
    os.utime(tmp_path / "new" / "latest_checkpointed_iteration.txt", (2_000, 2_000))
    with pytest.raises(UserError, match="says '\u00b2', not a step number"):
        checkpoints.latest_checkpoint(tmp_path)


def test_engine_choice_without_vllm():
    from verl_p40 import UserError

    assert generation.pick_engine("auto", "cpu") is generation.HfGenerator
    assert generation.pick_engine("hf", "cpu") is generation.HfGenerator
    with pytest.raises(UserError, match="needs the vllm package"):
        generation.pick_engine("vllm", "cpu")


def test_greedy_ignores_the_checkpoints_repetition_penalty(tokenizer_dir, prepared, tmp_path):
    """Eval decodes the policy greedily as trained: a repetition penalty in generation_config.json is not applied."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig

    model_dir = make_tiny_qwen(tokenizer_dir, tmp_path / "tiny")  # default-scale weights: repeats one token
    GenerationConfig(repetition_penalty=5.0, eos_token_id=151645).save_pretrained(model_dir)
    question = generation.load_questions(prepared / "test.parquet", 1)[0]
    generator = generation.HfGenerator(model_dir, "cpu", max_new_tokens=8)
    ((answer, _),) = generator([question.prompt])
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    text = generator.tokenizer.apply_chat_template(question.prompt, add_generation_prompt=True, tokenize=False)
    ids = generator.tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        plain = model.generate(
            **ids,
            max_new_tokens=8,
            do_sample=False,
            repetition_penalty=1.0,
            eos_token_id=generator.eos,
            pad_token_id=generator.tokenizer.pad_token_id,
        )
        penalised = model.generate(
            **ids,
            max_new_tokens=8,
            do_sample=False,
            repetition_penalty=5.0,
            eos_token_id=generator.eos,
            pad_token_id=generator.tokenizer.pad_token_id,
        )
    decode = lambda row: generator.tokenizer.decode(row[ids["input_ids"].shape[1] :], skip_special_tokens=True)  # noqa: E731
    assert decode(plain[0]) != decode(penalised[0])  # the penalty would change this model's answer
    assert answer == decode(plain[0])


def test_sign_test_values():
    # exact two-sided binomial p-values, worked by hand: 2 * P(X <= min) for X ~ Bin(n, 1/2)
    assert stats.sign_test(12, 0) == pytest.approx(2 / 2**12)
    assert stats.sign_test(7, 2) == pytest.approx(2 * (1 + 9 + 36) / 2**9)  # 0.1797
    assert stats.sign_test(2, 7) == stats.sign_test(7, 2)
    assert stats.sign_test(5, 5) == 1.0 and stats.sign_test(0, 0) == 1.0
    assert stats.sign_test(1, 0) == 1.0  # one discordant question proves nothing


def test_compare_counts_only_discordant_questions():
    def rec(base, trained):
        return {
            "models": {
                "base": {"strict": base, "flexible": base, "format": 0.0},
                "trained": {"strict": trained, "flexible": trained, "format": 1.0},
            }
        }

    # 10 questions only the trained model gets, 1 only the base, 30 both, 59 neither
    records = [rec(0.0, 1.0)] * 10 + [rec(1.0, 0.0)] + [rec(1.0, 1.0)] * 30 + [rec(0.0, 0.0)] * 59
    c = evaluate.paired_differences(records, "base", "trained")
    assert c["flexible"] == {
        "difference": 0.09,
        "trained_only": 10,
        "base_only": 1,
        "p_value": pytest.approx(2 * (1 + 11) / 2**11, rel=1e-3),
    }
    # a tiny p is kept in significant digits: 100 against 0 is 2 / 2**100, not the 0 six decimal places would give
    assert c["format"]["trained_only"] == 100 and c["format"]["p_value"] == pytest.approx(2 / 2**100, rel=1e-3)


def test_a_device_is_one_this_machine_has(monkeypatch):
    """--device names one of the machine's devices (cpu, cuda, cuda:N); anything else is the one line naming those it
    has, said before any model is read (torch's own error came after the model was loaded)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert generation.devices() == ["cpu"]
    assert generation.check_device("cpu") == "cpu" and generation.check_device("cpu:0") == "cpu:0"
    absent, unknown = "not a device of this machine", "not a device name"
    for name, what in [("cuda", absent), ("cuda:0", absent), ("cdua", unknown), ("gpu", unknown), ("", unknown)]:
        with pytest.raises(UserError) as refused:
            generation.check_device(name)
        assert str(refused.value) == (
            f"--device {name}: {what}; this machine has cpu: use one of them, or leave --device out (cpu here)"
        )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert generation.devices() == ["cpu", "cuda:0", "cuda:1"]
    assert [generation.check_device(d) for d in ("cuda", "cuda:0", "cuda:1")] == ["cuda", "cuda:0", "cuda:1"]
    with pytest.raises(UserError, match=r"^--device cuda:2: not a device of this machine; this machine has cpu, "):
        generation.check_device("cuda:2")
    with pytest.raises(UserError, match=r"this machine has cpu, cuda:0, cuda:1: use one of them, .*\(cuda here\)$"):
        generation.check_device("mps")


def test_a_device_refused_before_any_model_or_checkpoint_is_read(tmp_path, monkeypatch):
    """evaluate.run checks the device (and its engine and dtype) first: a checkpoint to merge is not even looked for,
    and nothing is written."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    looked = []
    monkeypatch.setattr(evaluate, "resolve_model", lambda *a: looked.append(a))
    monkeypatch.setattr(evaluate, "load_questions", lambda *a: looked.append(a))
    common = dict(model="latest", data=str(tmp_path / "d.parquet"), out=str(tmp_path / "out"), batch_size=1,
                  max_new_tokens=1, checkpoints=str(tmp_path / "ck"), logs="", examples=0)  # fmt: skip
    with pytest.raises(UserError, match="--device cuda: not a device of this machine"):
        evaluate.run(EvalOptions(device="cuda", **common))
    with pytest.raises(UserError, match="--engine vllm needs the vllm package"):
        evaluate.run(EvalOptions(device="cpu", engine="vllm", **common))
    assert looked == [] and list(tmp_path.iterdir()) == []


def test_dtype_choice_and_refusals(tiny_models, prepared, tmp_path, monkeypatch):
    import torch

    assert generation.torch_dtype("fp32", "cpu") is torch.float32
    assert generation.torch_dtype("bf16", "cpu") is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (6, 1))
    with pytest.raises(UserError, match="sm_61 and has no bf16"):
        generation.torch_dtype("bf16", "cuda:0")
    assert generation.torch_dtype("fp32", "cuda:0") is torch.float32
    # answers generated in one dtype are not continued in another: that file is kept aside, the run starts over
    out = tmp_path / "out"
    assert _eval(*tiny_models, prepared, out, "--limit", "1").returncode == 0
    before = (out / "answers.jsonl").read_bytes()
    result = _eval(*tiny_models, prepared, out, "--limit", "2", "--dtype", "bf16")
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert "answers generated in fp32, this run asks for bf16: kept as answers-until-" in result.stderr
    (kept,) = out.glob("answers-until-*.jsonl")
    assert kept.read_bytes() == before
    assert all(json.loads(line)["settings"]["dtype"] == "bf16" for line in (out / "answers.jsonl").open())


def test_data_may_be_the_prep_folder_and_means_its_test_split(tiny_models, prepared, tmp_path):
    """The folder prep wrote (train, test, val) is what train, doctor and config take: eval reads its test split only
    (reading every parquet in it evaluated 7,473 train questions, their indexes overwriting the test rows')."""
    result = cli(
        "eval",
        "--model",
        str(tiny_models[0]),
        "--data",
        str(prepared),
        "--out",
        str(tmp_path / "out"),
        "--device",
        "cpu",
        "--max-new-tokens",
        "4",
        "--limit",
        "2",
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["data"] == str(prepared / "test.parquet") and report["questions"] == 2


def test_a_folder_without_test_split_or_rows_of_one_index_twice_are_refused_and_nothing_is_written(
    tiny_models, prepared, tmp_path
):
    import pyarrow as pa
    import pyarrow.parquet as pq

    lone = tmp_path / "train-only"
    lone.mkdir()
    shutil.copy(prepared / "train.parquet", lone / "train.parquet")
    both = tmp_path / "both.parquet"  # two splits in one file: their extra_info.index restart at 0
    pq.write_table(
        pa.concat_tables(
            [
                pq.read_table(prepared / "test.parquet").slice(0, 2),
                pq.read_table(prepared / "train.parquet").slice(0, 2),
            ]
        ),
        both,
    )
    for data, line in (
        (lone, f"{lone}: a folder without test.parquet; pass the folder `verl-p40 prep` wrote"),
        (both, f"{both}: row 3: extra_info.index 0 is also row 1's; pass one split"),
    ):
        out = tmp_path / f"out-{data.stem}"
        result = cli(
            "eval",
            "--model",
            str(tiny_models[0]),
            "--data",
            str(data),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--max-new-tokens",
            "4",
        )
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"verl-p40 eval: error: {line}")
        assert "Traceback" not in result.stderr and not out.exists()


def _one(model, data, out, *extra):
    return cli(
        "eval", "--model", str(model), "--data", str(data), "--out", str(out), "--device", "cpu", "--limit", "2",
        "--max-new-tokens", "4", *extra,
    )  # fmt: skip


def test_answers_are_continued_only_for_the_same_questions_model_and_settings(tiny_models, prepared, tmp_path):
    """The same --out across evaluations (compose's eval always writes /logs/eval): answers of other data, another
    model at the same label (more training since: `--compare latest` is another model) or other settings are never
    reported as this run's (they were, silently): that file is kept under a new name, byte for byte, one line says
    so, and the evaluation starts over. Answers of the same run are continued."""
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    answers = out / "answers.jsonl"
    other_data = tmp_path / "other.parquet"  # other questions under the same indexes
    pq.write_table(pq.read_table(prepared / "train.parquet").slice(0, 4), other_data)
    assert _one(tiny_models[0], prepared / "test.parquet", out).returncode == 0
    first = answers.read_bytes()
    assert _one(tiny_models[0], prepared / "test.parquet", out, "--limit", "3").returncode == 0  # the same: continued
    assert answers.read_bytes().startswith(first) and len(answers.read_text().splitlines()) == 3
    kept: list[bytes] = []
    for args, line in (
        ((tiny_models[0], other_data, out), "the answer to question 0 is for another question (other --data?)"),
        (
            (tiny_models[1], prepared / "test.parquet", out),
            f"answers of another base model ({tiny_models[0]}), or its weights changed since",
        ),
        (
            (tiny_models[1], prepared / "test.parquet", out, "--max-new-tokens", "8"),
            "answers of at most 4 new tokens, this run asks for 8",
        ),
    ):
        kept.append(answers.read_bytes())
        result = _one(*args)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        assert f"[eval] {answers}:1: {line}: kept as answers-until-" in result.stderr
        assert sorted(p.read_bytes() for p in out.glob("answers-until-*.jsonl")) == sorted(kept)
    assert json.loads(answers.read_text().splitlines()[0])["settings"]["max_new_tokens"] == 8


def test_a_last_line_cut_short_by_a_kill_is_dropped_and_answered_again(tiny_models, prepared, tmp_path):
    out = tmp_path / "out"
    assert _one(tiny_models[0], prepared / "test.parquet", out).returncode == 0
    lines = (out / "answers.jsonl").read_text().splitlines()
    (out / "answers.jsonl").write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed mid-line
    result = _one(tiny_models[0], prepared / "test.parquet", out)
    assert result.returncode == 0, result.stderr
    again = (out / "answers.jsonl").read_text().splitlines()
    assert again[0] == lines[0] and len(again) == 2  # the cut line is gone, and question 1 answered again
    assert json.loads(again[1])["models"]["base"]["answer"] == json.loads(lines[1])["models"]["base"]["answer"]
    (out / "answers.jsonl").write_text("not json\n" + lines[1] + "\n")
    broken = _one(tiny_models[0], prepared / "test.parquet", out)
    assert broken.returncode == 2 and f"{out / 'answers.jsonl'}:1: not valid JSON" in broken.stderr


def test_the_decoder_and_generate_give_the_same_answers(tiny_models, prepared, tmp_path):
    """eval --decode auto (the rollout's decoder, the default) and --decode off (transformers' generate()): the same
    answers and scores for the same questions; the decoder says it ran."""
    runs = {}
    for decode in ("auto", "off"):
        out = tmp_path / decode
        result = cli(
            *("eval", "--model", str(tiny_models[0]), "--compare", str(tiny_models[1])),
            *("--data", str(prepared / "test.parquet"), "--out", str(out), "--device", "cpu"),
            *("--max-new-tokens", "12", "--limit", "6", "--decode", decode),
        )
        assert result.returncode == 0, result.stderr
        assert ("[verl-p40] decoding: static KV cache" in result.stdout) == (decode == "auto")
        runs[decode] = [json.loads(line) for line in (out / "answers.jsonl").read_text().splitlines()]
    answer = lambda r: {k: (v["answer"], v["flexible"]) for k, v in r.get("models", {}).items()}  # noqa: E731
    assert [answer(r) for r in runs["auto"]] == [answer(r) for r in runs["off"]]
    assert sum(bool(answer(r)) for r in runs["auto"]) == 6
