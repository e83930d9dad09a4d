"""The verl 0.5.0 patch set: where verl assumes bf16 and FlashAttention, and what it does instead.

Every edit keeps verl's default behaviour when the new settings are absent: attention stays
`flash_attention_2` unless `override_config.attn_implementation` says otherwise, autocast stays bf16 unless
the configured dtype is another. What each edit is for is in its `why`.
"""

from __future__ import annotations

from pathlib import Path

from verl_p40.patches.edit import Edit

_BERT_PADDING = (Path(__file__).parent / "bert_padding_torch.py").read_text(encoding="utf-8")
_P40_DTYPES = (Path(__file__).parent / "p40_dtypes.py").read_text(encoding="utf-8")
_P40_TRIM = (Path(__file__).parent / "p40_trim.py").read_text(encoding="utf-8")
_P40_CHECKPOINTS = (Path(__file__).parent / "p40_checkpoints.py").read_text(encoding="utf-8")
_P40_BEST = (Path(__file__).parent / "p40_best.py").read_text(encoding="utf-8")
_P40_RUN_FOLDER = (Path(__file__).parent / "p40_run_folder.py").read_text(encoding="utf-8")
_P40_DECODE = (Path(__file__).parent / "p40_decode.py").read_text(encoding="utf-8")
_P40_PHASE_PEAKS = (Path(__file__).parent / "p40_phase_peaks.py").read_text(encoding="utf-8")
_P40_UPDATE = (Path(__file__).parent / "p40_update.py").read_text(encoding="utf-8")
_P40_OLD_LOG_PROBS = (Path(__file__).parent / "p40_old_log_probs.py").read_text(encoding="utf-8")
_SEQLEN_IMPORT = "from verl.utils.seqlen_balancing import prepare_dynamic_batch, restore_dynamic_batch\n"
_TRIM_IMPORT = _SEQLEN_IMPORT + (
    "from verl.utils.p40_trim import forward_trimmed, length_grouped, pad_trimmed\n"
    "from verl.utils.p40_update import add_metrics, flush_metrics, regroup\n"
)
_MODEL_CALL_ARGS = """                    input_ids=input_ids,
                    attention_mask=attention_mask,
                    position_ids=position_ids,
                    **multi_modal_inputs,
                    use_cache=False,
"""
_SPLIT_OLD = "        else:\n            micro_batches = data.split(micro_batch_size)\n\n"
_SPLIT_NEW = (
    "        elif self.trim_padding:  # verl-p40: rows of similar length share a micro-batch (p40_trim.py)\n"
    "            micro_batches, batch_idx_list = length_grouped(data, micro_batch_size)\n"
    "            use_dynamic_bsz = True  # put back in order below by verl's restore_dynamic_batch\n"
) + _SPLIT_OLD
_TRIM_WHY = (
    "without flash-attn verl runs every micro-batch at max_prompt_length + max_response_length (576 columns "
    "where GSM8K rows hold ~330 tokens); trim_padding runs the model on the columns some row uses"
)

_FLASH_IMPORT_OLD = """if is_cuda_available:
    from flash_attn.bert_padding import index_first_axis, pad_input, rearrange, unpad_input
"""
_FLASH_IMPORT_NEW = """if is_cuda_available:
    try:
        from flash_attn.bert_padding import index_first_axis, pad_input, rearrange, unpad_input
    except ImportError:  # verl-p40: no flash-attn below sm_80 (Tesla P40); the same helpers in pure torch
        from verl.utils.bert_padding_torch import index_first_axis, pad_input, rearrange, unpad_input
"""

# The actor's policy losses (actor.policy_loss.loss_mode) whose regrouped update is verl's own gradient
# (tests/unit_base/test_update_regroup.py runs tests/update_probe.py on them): vanilla and gpg weigh each token alone.
# clip_cov and kl_cov choose tokens per micro-batch (clip_cov's count from the micro-batch's response_mask and a random
# permutation, kl_cov's top-k): regrouped, the actor's gradient moved by 1.19 and 0.041 (issue 67). The plan reads it
# (plan/workload.py) to offer, or refuse, a token budget.
REGROUP_LOSS_MODES = ("vanilla", "gpg")
_UPDATE_WHY = (
    "verl averages the loss per micro-batch (token-mean): regrouping rows by length would change each token's "
    "weight; with p40_update_tokens set (and trim_padding on, token-mean, and for the actor a policy loss that "
    "weighs each token alone: vanilla or gpg, not clip_cov or kl_cov, which choose tokens per micro-batch), the "
    "update runs length-grouped micro-batches within that many rows x columns, every token weighted as in verl's "
    "own micro-batches"
)


def _update_edits(role: str) -> list[Edit]:
    """The regrouped update's edits to the actor's update_policy or the critic's update_critic (p40_update.py)."""
    file = "workers/actor/dp_actor.py" if role == "actor" else "workers/critic/dp_critic.py"
    loss = "policy_loss" if role == "actor" else "vf_loss"
    method = "    def update_" + ("policy" if role == "actor" else "critic") + "(self, data: DataProto):\n"
    split = "                    micro_batches = mini_batch.split(self.config.ppo_micro_batch_size_per_gpu)\n"
    scaled = f"                        loss = {loss} / self.gradient_accumulation\n"
    step = "                grad_norm = self._optimizer_step()\n"
    # the actor's policy losses whose regrouped update is verl's gradient (REGROUP_LOSS_MODES)
    exact = (
        '            and (self.config.get("policy_loss") or {}).get("loss_mode", "vanilla") in '
        f"{REGROUP_LOSS_MODES!r}\n"
        if role == "actor"
        else ""
    )
    changes = {  # name: (old, new)
        "setting": (
            method,
            method + "        # verl-p40: rows x columns an update micro-batch may hold, length-grouped; 0: verl's\n"
            '        self.p40_update_tokens = int(self.config.get("p40_update_tokens", 0) or 0) if (\n'
            '            self.trim_padding and self.config.get("loss_agg_mode", "token-mean") == "token-mean"\n'
            + exact
            + "        ) else 0\n",
        ),
        "regroup": (
            split,
            split + "                    micro_batches = regroup(  # verl-p40: verl's micro_batches when off\n"
            "                        mini_batch, micro_batches, self.config.ppo_micro_batch_size_per_gpu,\n"
            "                        self.gradient_accumulation, self.p40_update_tokens,\n"
            "                    )\n",
        ),
        "token-weights": (
            '                    response_mask = model_inputs["response_mask"]\n',
            "                    response_mask = model_inputs.get(  # verl-p40: weights of verl's micro-batches\n"
            '                        "p40_token_weight", model_inputs["response_mask"]\n'
            "                    )\n",
        ),
        "loss-fraction": (
            scaled,
            scaled + '                    if "p40_loss_fraction" in model_inputs:  # verl-p40: not 1 / GA\n'
            f'                        loss = {loss} * model_inputs["p40_loss_fraction"][0]\n',
        ),
        "metrics": (
            "                    append_to_dict(metrics, micro_batch_metrics)\n",
            "                    add_metrics(metrics, micro_batch_metrics, model_inputs)  # verl-p40: weighted\n",
        ),
        "metrics-flush": (
            step,
            "                flush_metrics(metrics)  # verl-p40: a regrouped mini-batch's\n" + step,
        ),
    }
    return [
        Edit(name=f"{role}-update-{name}", file=file, old=old, new=new, why=_UPDATE_WHY)
        for name, (old, new) in changes.items()
    ]


EDITS: list[Edit] = [
    Edit(
        name="bert-padding-torch",
        file="utils/bert_padding_torch.py",
        old=None,
        new=_BERT_PADDING,
        why="pure-torch flash_attn.bert_padding helpers, the fallback the two import edits below use",
    ),
    Edit(
        name="actor-lazy-flash-attn",
        file="workers/actor/dp_actor.py",
        old=_FLASH_IMPORT_OLD,
        new=_FLASH_IMPORT_NEW,
        why="dp_actor imports flash_attn.bert_padding at import time on any CUDA machine; flash-attn cannot be "
        "installed for sm_61, so the actor failed to import (No module named 'flash_attn')",
    ),
    Edit(
        name="critic-lazy-flash-attn",
        file="workers/critic/dp_critic.py",
        old=_FLASH_IMPORT_OLD,
        new=_FLASH_IMPORT_NEW,
        why="the same import-time flash_attn dependency in the critic",
    ),
    Edit(
        name="actor-attn-implementation",
        file="workers/fsdp_workers.py",
        old='            local_path, trust_remote_code=trust_remote_code, attn_implementation="flash_attention_2"\n',
        new="            local_path,\n"
        "            trust_remote_code=trust_remote_code,\n"
        '            attn_implementation=override_model_config.get("attn_implementation", "flash_attention_2"),\n',
        why="actor/ref/rollout model config hard-codes flash_attention_2; honour "
        "actor_rollout_ref.model.override_config.attn_implementation (sdpa on Pascal)",
    ),
    Edit(
        name="critic-attn-implementation",
        file="workers/fsdp_workers.py",
        old='            attn_implementation="flash_attention_2",\n'
        '            trust_remote_code=config.model.get("trust_remote_code", False),\n',
        new='            attn_implementation=override_config.get("attn_implementation", "flash_attention_2"),\n'
        '            trust_remote_code=config.model.get("trust_remote_code", False),\n',
        why="the critic's model config hard-codes flash_attention_2; honour critic.model.override_config.attn_implementation",
    ),
    Edit(
        name="valuehead-attn-token-classification",
        file="utils/model.py",
        old='            config=model_config,\n            attn_implementation="flash_attention_2",\n',
        new="            config=model_config,\n"
        '            attn_implementation=getattr(model_config, "_attn_implementation_internal", None) or "flash_attention_2",\n',
        why="load_valuehead_model (the critic's loader) hard-codes flash_attention_2 again; use the attention "
        "the critic config carries. Without it the critic fails with 'not a value head model'",
    ),
    Edit(
        name="valuehead-attn-causal-lm",
        file="utils/model.py",
        old='        config=model_config,\n        attn_implementation="flash_attention_2",\n',
        new="        config=model_config,\n"
        '        attn_implementation=getattr(model_config, "_attn_implementation_internal", None) or "flash_attention_2",\n',
        why="the second hard-coded flash_attention_2 in load_valuehead_model (the trl value-head fallback)",
    ),
    Edit(
        name="p40-dtypes",
        file="utils/p40_dtypes.py",
        old=None,
        new=_P40_DTYPES,
        why="helpers for the dtype edits: autocast follows the configured FSDP param dtype; the model merger's "
        "output dtype is configurable",
    ),
    Edit(
        name="actor-autocast-dtype",
        file="workers/actor/dp_actor.py",
        old="        with torch.autocast(device_type=self.device_name, dtype=torch.bfloat16):\n",
        new="        from verl.utils.p40_dtypes import autocast_dtype_from_config\n\n"
        '        autocast_dtype = autocast_dtype_from_config(self.config.get("fsdp_config", None))\n'
        "        with torch.autocast(\n"
        "            device_type=self.device_name, dtype=autocast_dtype, enabled=autocast_dtype != torch.float32\n"
        "        ):\n",
        why="the actor/ref forward autocasts to bf16 unconditionally; Pascal has no bf16. Follow "
        "fsdp_config.mixed_precision.param_dtype, no autocast in fp32",
    ),
    Edit(
        name="critic-autocast-dtype",
        file="workers/critic/dp_critic.py",
        old="        with torch.autocast(device_type=self.device_name, dtype=torch.bfloat16):\n",
        new="        from verl.utils.p40_dtypes import autocast_dtype_from_config\n\n"
        '        autocast_dtype = autocast_dtype_from_config(self.config.model.get("fsdp_config", None))\n'
        "        with torch.autocast(\n"
        "            device_type=self.device_name, dtype=autocast_dtype, enabled=autocast_dtype != torch.float32\n"
        "        ):\n",
        why="the same bf16 autocast in the critic's forward",
    ),
    Edit(
        name="hf-rollout-autocast-dtype",
        file="workers/rollout/hf_rollout.py",
        old="        with param_ctx, torch.autocast(device_type=get_device_name(), dtype=torch.bfloat16):\n",
        new="        from verl.utils.torch_dtypes import PrecisionType\n\n"
        '        autocast_dtype = PrecisionType.to_dtype(self.config.get("dtype", "bfloat16"))\n'
        "        with param_ctx, torch.autocast(\n"
        "            device_type=get_device_name(), dtype=autocast_dtype, enabled=autocast_dtype != torch.float32\n"
        "        ):\n",
        why="HF rollout generates under a bf16 autocast; follow actor_rollout_ref.rollout.dtype (float32 on Pascal)",
    ),
    Edit(
        name="hf-rollout-generate-positions",
        file="workers/rollout/hf_rollout.py",
        old="                attention_mask=attention_mask,\n                position_ids=position_ids,\n",
        new="                attention_mask=attention_mask,\n"
        "                # verl-p40: no position_ids: transformers slices the prompt's to the last token at every\n"
        "                # decoding step, so each new token got the last prompt position; it derives them itself\n",
        why="HF rollout passes the prompt's position_ids to generate(); transformers 4.53 reuses the last prompt "
        "position for every generated token, and the model degenerates (verl issue #2344): a real Qwen2.5 "
        "scored 0.8% in verl's validation against 25% with plain generate()",
    ),
    Edit(
        name="hf-rollout-sampling-settings",
        file="workers/rollout/hf_rollout.py",
        old="                generation_config=generation_config,\n",
        new="                generation_config=generation_config,\n"
        "                # verl-p40: transformers replaces settings left at its defaults (temperature 1.0, top_p 1.0,\n"
        "                # repetition_penalty 1.0) with the checkpoint's generation_config.json; keywords win\n"
        '                **{key: value for key, value in kwargs.items() if key != "do_sample"},\n'
        "                repetition_penalty=1.0,\n",
        why="HF rollout's GenerationConfig is back-filled from the checkpoint's generation_config.json (Qwen2.5: "
        "temperature 0.7, top_p 0.8, repetition_penalty 1.05), so PPO sampled from another distribution than "
        "the configured policy it computes log-probs for (verl issue #7270)",
    ),
    Edit(
        name="hf-rollout-fsdp2-peft-root",
        file="workers/rollout/hf_rollout.py",
        old="            param_ctx = FSDP.summon_full_params(self.module, writeback=False, recurse=False)\n",
        new="            param_ctx = FSDP.summon_full_params(self.module, writeback=False, recurse=False)\n"
        '        elif hasattr(self.module, "unshard") and hasattr(self.module, "peft_config"):\n'
        "            # verl-p40: a LoRA actor under FSDP2: PeftModel.generate() calls the inner model, not the root,\n"
        "            # so the root's pre-forward hook never gathers its own weights (embeddings, norm, lm_head), and\n"
        "            # FSDP2 must see a forward through the root before its layers': one token through it first\n"
        "            with torch.no_grad():\n"
        "                self.module(input_ids=idx[:1, -1:], use_cache=False)\n"
        "            self.module.unshard()\n"
        "            param_ctx = contextlib.ExitStack()\n"
        "            param_ctx.callback(self.module.reshard)\n",
        why="with --lora-rank the actor is a peft model sharded by FSDP2; the HF rollout's generate() stopped with "
        "'aten.embedding.default got mixed torch.Tensor and DTensor', then 'FSDP requires running forward through the "
        "root module first' (seen in the CPU LoRA test)",
    ),
    Edit(
        name="hf-rollout-uneven-pieces",
        file="workers/rollout/hf_rollout.py",
        old='        num_chunks = max(batch_size // self.config.get("micro_batch_size", batch_size), 1)\n'
        "        batch_prompts = prompts.chunk(chunks=num_chunks)\n",
        new="        # verl-p40: pieces of at most micro_batch_size, the last one smaller where the batch is not a multiple\n"
        "        # of it; chunk(batch // micro) asserted an equal split, and its pieces could exceed micro_batch_size\n"
        '        batch_prompts = prompts.split(self.config.get("micro_batch_size") or batch_size)\n',
        why="validation hands the rollout the whole validation set at once, and verl 0.5.0 cut it into batch // "
        "micro_batch_size equal chunks: 1,319 test questions at the memory plan's 128 stopped the run with 'only "
        "support equal chunk. Got size of DataProto 1319 and chunk 10' (seen on the H200), and a set of 300 at 128 "
        "made two pieces of 150, more than the plan sized generation for",
    ),
    Edit(
        name="hf-rollout-one-sequence-per-prompt",
        file="workers/rollout/hf_rollout.py",
        old='                "num_return_sequences": self.config.n,\n',
        new="                # verl-p40: the trainer already repeats each prompt rollout.n times (GRPO, RLOO, ...); asking\n"
        "                # generate() for n more made n x n sequences per prompt\n"
        '                "num_return_sequences": 1,\n',
        why="with rollout.n > 1 verl's trainer repeats every prompt n times and the HF rollout then asked generate() "
        "for n sequences each: n x n per prompt, and the trainer stopped with 'Two tensor dict must have identical "
        "batch size' (64 vs 256 for GRPO n=4 at batch 16, seen on the GPU machine)",
    ),
    Edit(
        name="p40-decode",
        file="utils/p40_decode.py",
        old=None,
        new=_P40_DECODE,
        why="generation for the HF rollout without generate()'s per-token host work: weights unsharded once, a "
        "static KV cache, grouped attention for the new token, the step replayed as a CUDA graph",
    ),
    Edit(
        name="hf-rollout-decode-import",
        file="workers/rollout/hf_rollout.py",
        old="from verl.utils.torch_functional import get_response_mask\n",
        new="from verl.utils.p40_decode import generator as p40_generator\n"
        "from verl.utils.torch_functional import get_response_mask\n",
        why="import for hf-rollout-decode",
    ),
    Edit(
        name="hf-rollout-decode",
        file="workers/rollout/hf_rollout.py",
        old="            output = self.module.generate(\n",
        new="            # verl-p40: rollout.p40_decode; the sampled tokens' log-probs at the rollout's temperature (training)\n"
        "            output = p40_generator(self.module, self.config, None if is_validate else temperature)(\n",
        why="generate() on the FSDP-wrapped actor spent ~68 ms a token in host work on the H200 (FSDP hooks, a "
        "concatenated KV cache, a sync a token) and copied every layer's keys and values to all heads; "
        "actor_rollout_ref.rollout.p40_decode (p40_decode.py) decodes with a static cache and a CUDA graph; "
        "absent or off, generate() as before",
    ),
    Edit(
        name="hf-rollout-log-probs",
        file="workers/rollout/hf_rollout.py",
        old='                "position_ids": position_ids,\n            },\n            batch_size=generated_batch_size,\n        )\n',
        new='                "position_ids": position_ids,\n            },\n            batch_size=generated_batch_size,\n        )\n'
        "        # verl-p40: the decoder's log-probs and entropies (rollout_log_probs, as verl's vLLM rollout names them)\n"
        "        from verl.utils.p40_decode import add_log_probs\n"
        "\n"
        "        add_log_probs(batch, output, self.config.response_length)\n",
        why="the decoder computes the logits of every token it samples, in fp32 with the actor's weights; "
        "rollout.p40_log_probs=rollout (or verl's calculate_log_probs) returns their log-probs and entropies at the "
        "rollout's temperature, so the trainer need not run the actor again for them",
    ),
    Edit(
        name="hf-rollout-log-probs-all-or-none",
        file="workers/rollout/hf_rollout.py",
        old="        output = DataProto.concat(output)\n",
        new="        from verl.utils.p40_decode import all_or_none  # verl-p40: log-probs from every piece, or none\n"
        "\n"
        "        output = DataProto.concat(all_or_none(output))\n",
        why="a decoder that fails after the step's first piece, or on one rank only, leaves the rest to generate(), "
        "which returns no log-probs; verl's concat of pieces (or of the ranks' outputs) with other keys would stop "
        "the run, so unless every piece of every rank has them (an all-reduce) the step keeps none and the trainer "
        "runs its old_log_prob pass",
    ),
    Edit(
        name="p40-old-log-probs",
        file="utils/p40_old_log_probs.py",
        old=None,
        new=_P40_OLD_LOG_PROBS,
        why="the trainer's old log-probs taken from the rollout's values (p40_old_log_probs.py)",
    ),
    Edit(
        name="old-log-probs-from-the-rollout",
        file="trainer/ppo/ray_trainer.py",
        old="                        old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)\n",
        new="                        # verl-p40: rollout.p40_log_probs=rollout: the rollout's own values, no pass where it\n"
        "                        # returned them (p40_old_log_probs.py); verl's pass otherwise\n"
        "                        from verl.utils.p40_old_log_probs import from_rollout\n"
        "\n"
        "                        old_log_prob = from_rollout(batch, self.config)\n"
        '                        metrics["perf/p40_old_log_prob_pass"] = float(old_log_prob is None)\n'
        "                        if old_log_prob is None:\n"
        "                            old_log_prob = self.actor_rollout_wg.compute_log_prob(batch)\n",
        why="verl's old_log_prob pass runs the actor over every sampled sequence again for numbers the HF rollout "
        "with verl-p40's decoder already computed with the same fp32 weights (~17.7 s of a 110.8 s P40 step "
        "projected, issue 60); actor/entropy is aggregated from the rollout's entropies as from the pass's; "
        "perf/p40_old_log_prob_pass says every step whether the pass ran (the P40 projection prices it only then)",
    ),
    Edit(
        name="no-triton-cross-entropy-below-sm70",
        file="utils/torch_functional.py",
        old="    if FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE:\n        batch_dim = logits.shape[:-1]\n",
        new="    if FLAH_ATTN_CROSS_ENTROPY_LOSS_AVAILABLE and (\n"
        "        not logits.is_cuda or torch.cuda.get_device_capability(logits.device) >= (7, 0)\n"
        "    ):  # verl-p40: flash-attn's Triton cross-entropy; Triton does not run below sm_70\n"
        "        batch_dim = logits.shape[:-1]\n",
        why="FlashAttention's Triton cross-entropy is used whenever flash-attn imports; Triton cannot run on "
        "Pascal, so fall back to verl's torch log-softmax path there",
    ),
    Edit(
        name="merger-dtype-import",
        file="model_merger/fsdp_model_merger.py",
        old="from .base_model_merger import BaseModelMerger\n",
        new="from verl.utils.p40_dtypes import merge_dtype\n\nfrom .base_model_merger import BaseModelMerger\n",
        why="import for the two merger edits below",
    ),
    Edit(
        name="merger-keep-dtype-dtensor",
        file="model_merger/fsdp_model_merger.py",
        old="                    state_dict[key].append(tensor._local_tensor.bfloat16())\n",
        new="                    state_dict[key].append(tensor._local_tensor.to(merge_dtype()))\n",
        why="the FSDP checkpoint merger casts every weight to bf16; PPO updates at lr 1e-6 are below bf16's "
        "resolution for weights of ~0.02, so a bf16 merge of an fp32 (P40) run loses most of what training "
        "changed. VERL_MERGE_DTYPE=fp32 keeps fp32 (verl-p40 eval sets it)",
    ),
    Edit(
        name="merger-keep-dtype-tensor",
        file="model_merger/fsdp_model_merger.py",
        old="                    state_dict[key].append(tensor.bfloat16())\n",
        new="                    state_dict[key].append(tensor.to(merge_dtype()))\n",
        why="the same cast for plain (non-DTensor) checkpoint tensors",
    ),
    Edit(
        name="merger-model-dtype",
        file="model_merger/base_model_merger.py",
        old="                self.model_config, torch_dtype=torch.bfloat16, trust_remote_code=self.config.trust_remote_code\n",
        new="                self.model_config, torch_dtype=merge_dtype(), trust_remote_code=self.config.trust_remote_code\n",
        why="the merged model's config dtype follows VERL_MERGE_DTYPE too",
    ),
    Edit(
        name="merger-base-import",
        file="model_merger/base_model_merger.py",
        old="from verl.utils import hf_processor, hf_tokenizer\n",
        new="from verl.utils import hf_processor, hf_tokenizer\nfrom verl.utils.p40_dtypes import merge_dtype\n",
        why="import for merger-model-dtype",
    ),
    Edit(
        name="stop-request-saves-the-step",
        file="trainer/ppo/ray_trainer.py",
        old="                    if self.config.trainer.save_freq > 0 and (\n                        is_last_step\n",
        new="                    # verl-p40: `verl-p40 train` got SIGTERM/SIGINT and wrote trainer.stop_file: this step is the\n"
        "                    # last, saved like the last step of the run\n"
        '                    stop_file = self.config.trainer.get("stop_file", None)\n'
        "                    stop_requested = bool(stop_file) and os.path.exists(stop_file)\n"
        "                    if self.config.trainer.save_freq > 0 and (\n"
        "                        is_last_step\n"
        "                        or stop_requested\n",
        why="a stop (docker compose stop, Ctrl-C) killed the run and lost every step since the last checkpoint; a stop "
        "request is now checked between steps and the step in progress is saved",
    ),
    Edit(
        name="stop-request-ends-the-run",
        file="trainer/ppo/ray_trainer.py",
        old='                    pprint(f"Final validation metrics: {last_val_metrics}")\n'
        "                    progress_bar.close()\n"
        "                    return\n",
        new='                    pprint(f"Final validation metrics: {last_val_metrics}")\n'
        "                    progress_bar.close()\n"
        "                    return\n"
        "                if stop_requested:  # verl-p40: the stop request above, after the step's checkpoint\n"
        '                    print(f"verl-p40: stopped on request after step {self.global_steps - 1}", flush=True)\n'
        "                    progress_bar.close()\n"
        "                    return\n",
        why="the stop request ends the training loop after the saved step, so main_ppo exits 0 and a resume continues "
        "with the next step",
    ),
    Edit(
        name="worker-settings-reach-every-host",
        file="trainer/constants_ppo.py",
        old='            runtime_env["env_vars"].pop(key, None)\n    return runtime_env\n',
        new='            runtime_env["env_vars"].pop(key, None)\n'
        "    # verl-p40: what verl_p40.memcap applies in each worker (memory cap, TF32, cuDNN attention) goes with the\n"
        "    # job, so it also reaches the workers of a Ray cluster started before the trainer (verl-p40 cluster, the\n"
        "    # ray-* services)\n"
        "    try:\n"
        "        from verl_p40.defaults import is_worker_setting\n"
        "    except ImportError:  # verl patched, then run where verl-p40 is not installed: nothing of its to send\n"
        "        return runtime_env\n"
        '    runtime_env["env_vars"].update({k: v for k, v in os.environ.items() if is_worker_setting(k)})\n'
        "    return runtime_env\n",
        why="the trainer's environment reaches verl's workers only when the trainer starts Ray itself; on a cluster "
        "started first (verl-p40 cluster head/join) the workers inherit the Ray daemon's environment, so the memory "
        "cap, TF32 and cuDNN attention settings of the run's plan did not reach them",
    ),
    Edit(
        name="reward-parts-in-training-metrics",
        file="trainer/ppo/ray_trainer.py",
        old="                            batch.non_tensor_batch.update({k: np.array(v) for k, v in reward_extra_infos_dict.items()})\n",
        new="                            batch.non_tensor_batch.update({k: np.array(v) for k, v in reward_extra_infos_dict.items()})\n"
        "                            # verl-p40: the reward's parts (correct answers, format) as training metrics\n"
        "                            metrics.update({\n"
        '                                f"reward/{k}/mean": float(np.mean(v)) for k, v in reward_extra_infos_dict.items()\n'
        "                                if len(v) and isinstance(v[0], (bool, int, float, np.number))\n"
        "                            })\n",
        why="verl 0.5.0 turns a reward function's extra values into metrics only in validation; in training a run "
        "showed one number (critic/score/mean) that mixed correct answers with a format bonus, and a score that rose "
        "while the held-out skill fell (the learning issue). reward/acc/mean, reward/format/mean, ... are logged "
        "every step",
    ),
    Edit(
        name="p40-trim",
        file="utils/p40_trim.py",
        old=None,
        new=_P40_TRIM,
        why="helpers for the trim edits: a model call on the columns in use, its outputs laid out as verl slices "
        "them, and length-grouped micro-batches for forward-only passes",
    ),
    Edit(
        name="actor-trim-import",
        file="workers/actor/dp_actor.py",
        old=_SEQLEN_IMPORT,
        new=_TRIM_IMPORT,
        why="import for the actor's trim edits",
    ),
    Edit(
        name="actor-trim-setting",
        file="workers/actor/dp_actor.py",
        old='        self.use_fused_kernels = self.config.get("use_fused_kernels", False)\n',
        new='        self.use_fused_kernels = self.config.get("use_fused_kernels", False)\n'
        "        # verl-p40: model.trim_padding (copied into the actor/ref config by the worker), where rmpad is off\n"
        '        self.trim_padding = bool(self.config.get("trim_padding", False)) and not (\n'
        "            self.use_remove_padding or self.use_fused_kernels\n"
        "        )\n",
        why=_TRIM_WHY,
    ),
    Edit(
        name="actor-trim-forward",
        file="workers/actor/dp_actor.py",
        old="                output = self.actor_module(\n" + _MODEL_CALL_ARGS + "                    **extra_args,\n",
        new="                output = forward_trimmed(  # verl-p40: the columns in use (p40_trim.py); as before when off\n"
        "                    self.actor_module,\n"
        "                    self.trim_padding and not multi_modal_inputs,\n"
        "                    response_length,\n"
        "                    True,\n" + _MODEL_CALL_ARGS + "                    **extra_args,\n",
        why=_TRIM_WHY + " (actor updates, old log-probs and the reference)",
    ),
    Edit(
        name="actor-trim-log-probs",
        file="workers/actor/dp_actor.py",
        old="                    logits = logits[:, -response_length - 1 : -1, :]  # (bsz, response_length, vocab_size)\n"
        '                    log_probs = logprobs_from_logits(logits, micro_batch["responses"])\n',
        new="                    # verl-p40: trimmed, the logits hold the last prompt column and the kept response columns\n"
        "                    # only (kept + 1 <= response_length; p40_trim.py): each predicts the response token at its index\n"
        "                    if logits.shape[1] > response_length:\n"
        "                        logits = logits[:, -response_length - 1 : -1, :]  # (bsz, response_length, vocab_size)\n"
        '                    log_probs = logprobs_from_logits(logits, micro_batch["responses"][:, : logits.shape[1]])\n',
        why="forward_trimmed padded every row's logits back to response_length + 1 columns, and the log-prob path "
        "holds ~3 copies of them: ~1 GB a Qwen2.5 row at 512 answer tokens whatever the row's length, so a "
        "length-grouped update of many short rows ran out of memory (issue 67: 13.24 against 7.96 GB on the CPU); "
        "the log-probs (and entropy) of the kept columns are computed, then padded (actor-trim-pad)",
    ),
    Edit(
        name="actor-trim-pad",
        file="workers/actor/dp_actor.py",
        old="                            entropy = torch.utils.checkpoint.checkpoint(verl_F.entropy_from_logits, logits)\n"
        "\n            return entropy, log_probs\n",
        new="                            entropy = torch.utils.checkpoint.checkpoint(verl_F.entropy_from_logits, logits)\n"
        "                    # verl-p40: (bsz, response_length), padded as from zero logits (p40_trim.py)\n"
        "                    log_probs, entropy = pad_trimmed(response_length, logits.shape[-1], log_probs, entropy)\n"
        "\n            return entropy, log_probs\n",
        why="the kept columns' log-probs and entropy padded to verl's response width (actor-trim-log-probs)",
    ),
    Edit(
        name="actor-trim-grouping",
        file="workers/actor/dp_actor.py",
        old=_SPLIT_OLD + "        log_probs_lst = []\n",
        new=_SPLIT_NEW + "        log_probs_lst = []\n",
        why="old log-probs and the reference are forward-only: ordering their rows by length before cutting "
        "micro-batches lets trimming cut more, and the order is restored exactly",
    ),
    Edit(
        name="actor-update-reports-pass-tokens",
        file="workers/actor/dp_actor.py",
        old="        self.actor_optimizer.zero_grad()\n        return metrics\n",
        new="        self.actor_optimizer.zero_grad()\n"
        "        from verl.utils.p40_decode import take_rows\n"
        "        from verl.utils.p40_trim import take_counts  # verl-p40: the step's passes, in tokens\n"
        "\n"
        "        metrics.update(take_counts())\n"
        "        metrics.update(take_rows())  # and the rows its rollout's decoding steps ran on\n"
        "        return metrics\n",
        why="the P40 projection priced every pass at the step's longest prompt + longest answer (a bound); the "
        "rows x columns each pass of the step ran on (actor and critic, forward-only and update) are logged as "
        "perf/p40_tokens/* with the actor's update metrics, so the projection prices what ran (the rollout's "
        "decoding steps too: rows x steps, fewer with p40_decode_compact)",
    ),
    Edit(
        name="critic-trim-import",
        file="workers/critic/dp_critic.py",
        old=_SEQLEN_IMPORT,
        new=_TRIM_IMPORT,
        why="import for the critic's trim edits",
    ),
    Edit(
        name="critic-trim-setting",
        file="workers/critic/dp_critic.py",
        old='        self.use_remove_padding = self.config.model.get("use_remove_padding", False)\n',
        new='        self.use_remove_padding = self.config.model.get("use_remove_padding", False)\n'
        '        self.trim_padding = bool(self.config.model.get("trim_padding", False)) and not self.use_remove_padding\n',
        why=_TRIM_WHY,
    ),
    Edit(
        name="critic-trim-forward",
        file="workers/critic/dp_critic.py",
        old="                output = self.critic_module(\n" + _MODEL_CALL_ARGS,
        new="                output = forward_trimmed(  # verl-p40: the columns in use (p40_trim.py); as before when off\n"
        "                    self.critic_module,\n"
        '                    self.trim_padding and not multi_modal_inputs and not hasattr(self.critic_module, "v_head"),\n'
        "                    response_length,\n"
        "                    False,\n" + _MODEL_CALL_ARGS,
        why=_TRIM_WHY + " (critic updates and values)",
    ),
    Edit(
        name="critic-trim-grouping",
        file="workers/critic/dp_critic.py",
        old=_SPLIT_OLD + "        values_lst = []\n",
        new=_SPLIT_NEW + "        values_lst = []\n",
        why="the value pass is forward-only: length-ordered micro-batches, order restored exactly",
    ),
    Edit(
        name="p40-update",
        file="utils/p40_update.py",
        old=None,
        new=_P40_UPDATE,
        why="helpers for the update edits: length-grouped update micro-batches within a token budget, each token "
        "weighted as in verl's own micro-batches, and the metrics weighted the same way",
    ),
    *[edit for role in ("actor", "critic") for edit in _update_edits(role)],
    Edit(
        name="actor-trim-config",
        file="workers/fsdp_workers.py",
        old="                self.config.actor.use_remove_padding = use_remove_padding\n",
        new="                self.config.actor.use_remove_padding = use_remove_padding\n"
        '                self.config.actor.trim_padding = self.config.model.get("trim_padding", False)  # verl-p40\n',
        why="actor_rollout_ref.model.trim_padding reaches the actor as use_remove_padding does",
    ),
    Edit(
        name="ref-trim-config",
        file="workers/fsdp_workers.py",
        old="                self.config.ref.use_remove_padding = use_remove_padding\n",
        new="                self.config.ref.use_remove_padding = use_remove_padding\n"
        '                self.config.ref.trim_padding = self.config.model.get("trim_padding", False)  # verl-p40\n',
        why="and the reference model",
    ),
    Edit(
        name="p40-checkpoints",
        file="utils/p40_checkpoints.py",
        old=None,
        new=_P40_CHECKPOINTS,
        why="helpers for the checkpoint edits below: fsyncs, the completion marker, the tracker written durably, "
        "retention after the tracker, and the best validated step (verl_p40.models.checkpoints reads the same file)",
    ),
    Edit(
        name="p40-best",
        file="utils/p40_best.py",
        old=None,
        new=_P40_BEST,
        why="the rule naming the step `best` hands over (the newest validated one unless an earlier one beats it on "
        "the same validation questions by a paired exact test), imported by p40_checkpoints.py; `best` in eval and "
        "export reads the same file",
    ),
    Edit(
        name="p40-run-folder",
        file="utils/p40_run_folder.py",
        old=None,
        new=_P40_RUN_FOLDER,
        why="the one reader of a run's folder (the tracker, complete steps, the run record, each validation's "
        "answers, the validation metric's key), imported by p40_checkpoints.py and p40_best.py; eval, export and "
        "train's resume check read the same file, so a damaged record is found the same way in both processes",
    ),
    Edit(
        name="save-starts-incomplete",
        file="trainer/ppo/ray_trainer.py",
        old='        actor_local_path = os.path.join(local_global_step_folder, "actor")\n',
        new='        actor_local_path = os.path.join(local_global_step_folder, "actor")\n'
        "        from verl.utils.p40_checkpoints import begin, commit  # verl-p40: durable saves (p40_checkpoints.py)\n"
        "\n"
        "        begin(local_global_step_folder)\n",
        why="a step folder saved again (the step after a resume from an older one) kept its completion marker while "
        "its files were rewritten; the marker goes first, so a kill during the save leaves the folder incomplete",
    ),
    Edit(
        name="actor-retention-after-the-tracker",
        file="trainer/ppo/ray_trainer.py",
        old="            actor_local_path, actor_remote_path, self.global_steps, max_ckpt_to_keep=max_actor_ckpt_to_keep\n",
        new="            actor_local_path, actor_remote_path, self.global_steps, max_ckpt_to_keep=None  # verl-p40: commit()\n",
        why="verl's checkpoint manager deletes the oldest checkpoint BEFORE it writes the new one, from a list kept in "
        "memory (empty after a resume): with max_actor_ckpt_to_keep=1 no complete checkpoint exists during a save, "
        "and the best validated step is deleted like any other. Retention moves to commit(), after the tracker",
    ),
    Edit(
        name="critic-retention-after-the-tracker",
        file="trainer/ppo/ray_trainer.py",
        old="                critic_local_path, critic_remote_path, self.global_steps, max_ckpt_to_keep=max_critic_ckpt_to_keep\n",
        new="                critic_local_path, critic_remote_path, self.global_steps, max_ckpt_to_keep=None  # verl-p40\n",
        why="the same delete-before-write in the critic's checkpoint manager",
    ),
    Edit(
        name="tracker-written-durably",
        file="trainer/ppo/ray_trainer.py",
        old='        with open(local_latest_checkpointed_iteration, "w") as f:\n'
        "            f.write(str(self.global_steps))\n",
        new="        # verl-p40: the step's files fsynced, its completion marker, then the tracker (temp file, fsync, rename),\n"
        "        # then retention: the tracker always names a complete step and one is always on disk\n"
        "        keep = [k for k in (max_actor_ckpt_to_keep, max_critic_ckpt_to_keep if self.use_critic else None) if k]\n"
        "        commit(os.path.dirname(local_latest_checkpointed_iteration), self.global_steps, min(keep, default=None))\n",
        why="verl writes the tracker with a plain open('w') and no fsync: after a power cut it can be empty or name a "
        "step whose files never reached the disk, and the run resumes from scratch or fails to load",
    ),
    Edit(
        name="validation-before-training-recorded",
        file="trainer/ppo/ray_trainer.py",
        old='            pprint(f"Initial validation metrics: {val_metrics}")\n',
        new='            pprint(f"Initial validation metrics: {val_metrics}")\n'
        "            from verl.utils.p40_checkpoints import record_validation  # verl-p40: the best step's baseline\n"
        "\n"
        "            record_validation(self.config.trainer.default_local_dir, self.global_steps, val_metrics, False)\n",
        why="the validation before training is what the best step's gain is measured against (the run record)",
    ),
    Edit(
        name="validation-names-the-best-step",
        file="trainer/ppo/ray_trainer.py",
        old="                            val_metrics: dict = self._validate()\n",
        new="                            val_metrics: dict = self._validate()\n"
        "                            from verl.utils.p40_checkpoints import record_validation  # verl-p40\n"
        "\n"
        "                            save_freq = self.config.trainer.save_freq\n"
        "                            record_validation(\n"
        "                                self.config.trainer.default_local_dir,\n"
        "                                self.global_steps,\n"
        "                                val_metrics,\n"
        "                                save_freq > 0 and (is_last_step or self.global_steps % save_freq == 0),\n"
        "                            )\n",
        why="nothing said which step was best: every validation is kept in the run record (verl-p40-run.json) with "
        "the best saved step and its gain, retention never deletes that step, and a console line names it",
    ),
    Edit(
        name="phase-peaks",
        file="utils/p40_phase_peaks.py",
        old=None,
        new=_P40_PHASE_PEAKS,
        why="the GPU memory peak of each phase of a step: the memory plan predicts one a phase, verl logs one a "
        "process (since it started), so a run over or under the plan could not say which phase",
    ),
    Edit(
        name="phase-peaks-import",
        file="workers/fsdp_workers.py",
        old="from verl.utils.model import compute_position_id_with_mask\n",
        new="from verl.utils.model import compute_position_id_with_mask\n"
        "from verl.utils.p40_phase_peaks import measured, take  # verl-p40: each phase's memory peak\n",
        why="import for the phase-peak edits below",
    ),
    Edit(
        name="phase-peak-generation",
        file="workers/fsdp_workers.py",
        old='    @DistProfiler.annotate(color="red", role="rollout_generate")\n    def generate_sequences(self, prompts: DataProto):\n',
        new='    @DistProfiler.annotate(color="red", role="rollout_generate")\n    @measured("generation")  # verl-p40\n    def generate_sequences(self, prompts: DataProto):\n',
        why="the generation phase's own peak (p40_phase_peaks.py)",
    ),
    Edit(
        name="phase-peak-old-log-prob",
        file="workers/fsdp_workers.py",
        old='    @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")\n    def compute_log_prob(self, data: DataProto):\n',
        new='    @DistProfiler.annotate(color="blue", role="actor_compute_log_prob")\n    @measured("old_log_prob")  # verl-p40\n    def compute_log_prob(self, data: DataProto):\n',
        why="the old_log_prob phase's own peak (p40_phase_peaks.py)",
    ),
    Edit(
        name="phase-peak-ref",
        file="workers/fsdp_workers.py",
        old='    @DistProfiler.annotate(color="olive", role="ref_compute_log_prob")\n    def compute_ref_log_prob(self, data: DataProto):\n',
        new='    @DistProfiler.annotate(color="olive", role="ref_compute_log_prob")\n    @measured("ref")  # verl-p40\n    def compute_ref_log_prob(self, data: DataProto):\n',
        why="the ref phase's own peak (p40_phase_peaks.py)",
    ),
    Edit(
        name="phase-peak-values",
        file="workers/fsdp_workers.py",
        old='    @DistProfiler.annotate(color="cyan")\n    def compute_values(self, data: DataProto):\n',
        new='    @DistProfiler.annotate(color="cyan")\n    @measured("values")  # verl-p40\n    def compute_values(self, data: DataProto):\n',
        why="the values phase's own peak (p40_phase_peaks.py)",
    ),
    Edit(
        name="phase-peak-update-critic",
        file="workers/fsdp_workers.py",
        old='    @DistProfiler.annotate(color="pink")\n    def update_critic(self, data: DataProto):\n',
        new='    @DistProfiler.annotate(color="pink")\n    @measured("update_critic")  # verl-p40\n    def update_critic(self, data: DataProto):\n',
        why="the update_critic phase's own peak (p40_phase_peaks.py)",
    ),
    Edit(
        name="phase-peak-update-actor",
        file="workers/fsdp_workers.py",
        old='    @DistProfiler.annotate(color="red", role="actor_update")\n    def update_actor(self, data: DataProto):\n',
        new='    @DistProfiler.annotate(color="red", role="actor_update")\n    @measured("update_actor")  # verl-p40\n    def update_actor(self, data: DataProto):\n',
        why="the update_actor phase's own peak (p40_phase_peaks.py)",
    ),
    Edit(
        name="phase-peaks-reported",
        file="workers/fsdp_workers.py",
        old='            metrics["perf/max_memory_allocated_gb"] = get_torch_device().max_memory_allocated() / (1024**3)\n'
        '            metrics["perf/max_memory_reserved_gb"] = get_torch_device().max_memory_reserved() / (1024**3)\n',
        new="            metrics.update(take(\"update_actor\"))  # verl-p40: each phase's peak; the process's as before\n",
        why="the phases' peaks reach the step's metrics with the actor's update (perf/peak_allocated_gb/<phase>); "
        "perf/max_memory_*_gb stay the process's peaks since it started, which the resets would otherwise cut",
    ),
]
