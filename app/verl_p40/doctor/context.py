"""What every doctor check is handed (Context) and how it answers besides its PASS line: CheckFailed (with the fix)
or CheckSkipped (with the reason)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl_p40 import UserError
from verl_p40.gpu.nvml import GPUInfo
from verl_p40.plan.facts import Facts
from verl_p40.plan.inputs import Inputs
from verl_p40.plan.planner import RunPlan, plan
from verl_p40.plan.run_options import RunOptions


class CheckFailed(Exception):
    def __init__(self, detail: str, fix: str):
        super().__init__(detail)
        self.detail, self.fix = detail, fix


class CheckSkipped(Exception):
    pass


@dataclass
class Context:
    """What the checks look at: the run's options, its plan, the machine (`Facts`: GPUs, driver) and the folders the
    plan read (`Inputs`). `train` and `bench` hand in the plan they made (with its Inputs) and the Facts they made it
    for (a run is planned once, the hardware and the folders read once); `verl-p40 doctor` lets the first check that
    needs them make them. A plan that fails skips only the checks that need it: the others still run and report."""

    options: RunOptions
    run: RunPlan | None = None
    facts: Facts | None = None
    _cache: dict = field(default_factory=dict)

    def machine(self) -> Facts:
        """This machine's Facts: the ones handed in, else read once here."""
        if self.facts is None:
            self.facts = Facts.here()
        return self.facts

    def inputs(self) -> Inputs:
        """The folders and variables the run's plan reads (`Inputs`): the plan's when one was handed in, else read
        once here, as `verl-p40 train` reads them (`Inputs.read`)."""
        if self.run is not None:
            return self.run.inputs
        if "inputs" not in self._cache:
            self._cache["inputs"] = Inputs.read(self.options)
        return self._cache["inputs"]

    def plan(self) -> RunPlan:
        if self.run is None and "plan" not in self._cache:
            try:
                self.run = plan(self.options, self.machine(), self.inputs())
            except UserError as exc:
                self._cache["plan"] = exc
        if self.run is None:
            raise CheckSkipped(f"needs the run's config, which failed: {self._cache['plan']}")
        return self.run

    def gpus(self) -> tuple[GPUInfo, ...]:
        gpus = self.machine().gpus
        if gpus is None:
            raise CheckSkipped("needs a GPU (see the gpu check)")
        return gpus


def check_plan(ctx: Context) -> str:
    """The run planned as `verl-p40 train` will plan it (same options, same machine): a plan the trainer would refuse
    fails here, so the doctor never passes a run that cannot start (with `up -d`, a trainer that exits 2)."""
    from verl_p40.run import status

    try:
        run = ctx.plan()
    except CheckSkipped:
        raise CheckFailed(
            str(ctx._cache["plan"]),
            status.phrased(
                "change the setting it names in .env (GPUS=, BATCH=, TRAIN_ARGS=), then `docker compose up -d trainer`",
                "change the option it names; `verl-p40 config` shows the plan",
            ),
        ) from None
    layout = [note.removeprefix("layout: ") for note in run.notes if note.startswith("layout: ")]
    return "; ".join(layout) or "planned"
