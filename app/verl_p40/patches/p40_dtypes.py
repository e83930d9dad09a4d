# Installed into verl by verl-p40's patch set as verl/utils/p40_dtypes.py.
"""The dtypes verl-p40's edits ask for: worker autocasts follow the configured FSDP param dtype (verl 0.5.0 hard-codes
bf16, which Pascal does not have), and merged checkpoints keep the dtype `$VERL_MERGE_DTYPE` names."""

import os

from verl.utils.torch_dtypes import PrecisionType


def autocast_dtype_from_config(fsdp_config, default="bf16"):
    """The dtype worker autocasts use: fsdp_config.mixed_precision.param_dtype (bf16 when unset)."""
    mixed_precision = (fsdp_config or {}).get("mixed_precision", None) or {}
    return PrecisionType.to_dtype(mixed_precision.get("param_dtype", default))


def merge_dtype():
    """The dtype of merged HF checkpoints: $VERL_MERGE_DTYPE (bf16 when unset, as before)."""
    return PrecisionType.to_dtype(os.environ.get("VERL_MERGE_DTYPE", "bf16"))
