"""The doctor's one option that other commands share: `--skip-check`, declared once (`verl_p40.options`) for train,
cluster, bench and doctor."""

from __future__ import annotations

from typing import Any

from verl_p40.doctor.runner import SKIP_ENV, names_help
from verl_p40.options import option


def skip_check_option() -> Any:
    return option(
        [],
        f"skip a preflight check by name (also ${SKIP_ENV}); checks: {names_help()}",
        many=True,
        metavar="NAME[,NAME]",
    )
