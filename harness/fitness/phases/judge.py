"""`judge` (advisory): an LLM judge grading open-ended answers against binary checklists,
plus a cross-judge agreement check (>= 75 % or a loud warning). Judge metrics never gate.

Not built yet: without `judge.url`, `judge.model` and `judge.key_env` the phase is skipped
for want of a judge; with them, it is skipped saying the judge pass is not built (rather
than reporting numbers it did not measure).
"""

from __future__ import annotations

import os
from typing import Any

from harness.errors import UserError
from harness.fitness.config import FitnessConfig
from harness.fitness.phases import Ctx, Skip


def check_offline(cfg: FitnessConfig) -> str:
    j = cfg.judge
    if not (j.url and j.model and j.key_env):
        return "no judge configured (judge.url, judge.model, judge.key_env): the phase will be skipped"
    if not os.environ.get(j.key_env):
        raise UserError(f"${j.key_env} is not set", field="judge.key_env",
                        fix=f"export {j.key_env}=<the judge's key> (the config names the variable, never the key)")
    return f"judge {j.model} at {j.url} (key in ${j.key_env})"


def run(ctx: Ctx) -> tuple[dict[str, float | None], dict[str, Any]]:
    j = ctx.cfg.judge
    if not (j.url and j.model and j.key_env):
        raise Skip("no judge endpoint configured (set judge.url, judge.model and judge.key_env)")
    raise Skip("the judge pass (checklists, checkpointed per item, cross-judge agreement) is not built in this "
               "version; judge metrics are advisory and never gate")
