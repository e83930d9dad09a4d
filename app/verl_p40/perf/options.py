"""`verl-p40 bench`'s options, declared once (`verl_p40.options`): a run's options with bench's own. The command line
builds them and `perf.bench` takes them whole; it runs a variant of them built with `dataclasses.replace`
(`bench.bench_options`), never changing the user's."""

from __future__ import annotations

import os
from dataclasses import dataclass

from verl_p40 import defaults
from verl_p40.doctor.options import skip_check_option
from verl_p40.options import FILE, FOLDER, option
from verl_p40.plan.run_options import VerlRunOptions


@dataclass
class BenchOptions(VerlRunOptions):
    skip_check: list[str] = skip_check_option()
    steps: int = option(4, "training steps; the first is warm-up", kind=int, low=2)
    out: str = option(
        os.path.join(defaults.LOGS.value, "bench.json"),
        "the result",
        env=defaults.LOGS.env,
        below="bench.json",
        path=FILE,
    )
    keep_model: str | None = option(
        None, "build the random-weight model here once and reuse it", metavar="DIR", path=FOLDER
    )
