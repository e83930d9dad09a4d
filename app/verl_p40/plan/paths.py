"""The plan's paths step: the model for actor, reference, critic and tokenizer, the data files (and the split verl
validates on), the checkpoint folder, the logs and the allocator's setting for the trainer's environment."""

from __future__ import annotations

from pathlib import Path

from verl_p40 import UserError
from verl_p40.patches.p40_run_folder import VALIDATION_FOLDER
from verl_p40.plan import layout as layout_mod
from verl_p40.plan.inputs import ALLOCATOR_ENV, HELD_OUT, Inputs, data_folder, validation_file
from verl_p40.plan.part import MINE, Part
from verl_p40.plan.run_options import RunOptions
from verl_p40.plan.verlconfig import Override, hydra_value

MODEL_PATH_KEYS = ("actor_rollout_ref.model.path", "critic.model.path", "critic.model.tokenizer_path")
VALIDATION_EVERY = 10  # steps between validations on val.parquet; trainer.test_freq=N (a later value) wins


def validation_split(held_out: bool, notes: list[str]) -> str:
    """The file verl validates on (inputs.validation_file), said in `notes` when it is prep's held-out slice."""
    if held_out:
        notes.append(f"validation: {HELD_OUT} (train rows held out by prep; the test split stays unseen)")
    return validation_file(held_out)


def paths(options: RunOptions, user: list[Override], layout: layout_mod.Layout, inputs: Inputs) -> Part:
    """One model for actor, reference, critic and tokenizer; the data files; the checkpoint folder (with each
    validation's per-question results in its `validation/`); the logs; the allocator's setting. `inputs`: whether the
    data folder holds a validation slice, and the allocator's variable, read at the door."""
    o = options
    for item in user:  # a model path given as a verl key is refused before anything else reads it
        if item.key.lstrip("+") in MODEL_PATH_KEYS:
            raise UserError(
                f"{item.origin}: give the model as --model {item.value} instead: it sets the actor, the reference, the "
                "critic and the tokenizer together, and the preflight checks that folder"
            )
    model = str(Path(o.model).expanduser())
    data = data_folder(o)
    checkpoints = Path(o.checkpoints).expanduser().absolute()
    notes: list[str] = []
    out = [
        Override("actor_rollout_ref.model.path", hydra_value(model), MINE),
        Override("critic.model.path", hydra_value(model), MINE),
        Override("data.train_files", hydra_value(str(data / "train.parquet")), MINE),
        Override("data.val_files", hydra_value(str(data / validation_split(inputs.held_out, notes))), MINE),
        Override("trainer.default_local_dir", f"{hydra_value(str(checkpoints))}/${{trainer.experiment_name}}", MINE),
        # every validation's answers, question by question, beside the checkpoints: `best` pairs steps on them
        Override(
            "trainer.validation_data_dir",
            f"{hydra_value(str(checkpoints))}/${{trainer.experiment_name}}/{VALIDATION_FOLDER}",
            MINE,
        ),
    ]
    if inputs.held_out:  # a slice held out to choose settings on: validate on it as the run goes
        # saved at every validation, so the best validated step is on disk (retention keeps it: p40_checkpoints);
        # validated before the first step too, so the gain is measured against the model before training
        origin = "val.parquet (held out by prep)"
        out += [
            Override("trainer.test_freq", str(VALIDATION_EVERY), origin),
            Override("trainer.save_freq", str(VALIDATION_EVERY), origin),
            Override("trainer.val_before_train", "true", origin),
        ]
    env = {
        "TENSORBOARD_DIR": str(Path(o.logs).expanduser().absolute() / "tensorboard"),
        **layout_mod.env(layout),
    }
    # Without expandable segments the caching allocator kept 4 GB reserved-but-unusable at the 24 GB cap and
    # the actor update ran out of memory (bench/results, first p40-profile run).
    env[ALLOCATOR_ENV] = "expandable_segments:True" if inputs.allocator is None else inputs.allocator
    return Part(overrides=out, env=env, notes=notes)
