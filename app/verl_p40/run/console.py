"""What of the trainer's output reaches the console: all of it but the dumps a user cannot act on, which stay in the
log file. Those are verl's whole config (printed once by its TaskRunner, ~300 lines; `verl-p40 config` prints the
same) and the model config each Ray worker prints for every model it builds (`Model config after override:
Qwen2Config {...}`, ~50 lines, twice or more a run)."""

from __future__ import annotations

import re

from verl_p40.run.progress import content

# a dump starts with one of these and goes on with indented lines (and a closing brace on a line of its own)
_DUMP_STARTS = (
    re.compile(r"^\{'actor_rollout_ref': "),  # verl's config, pretty-printed
    re.compile(r"^Model config after override: \w+ \{$"),  # a worker's model config (transformers' JSON)
)


class Console:
    """`shows(line)`: whether a line of the trainer's output goes to the console (every line goes to the log)."""

    def __init__(self) -> None:
        self.in_dump = False

    def shows(self, line: str) -> bool:
        text = content(line)
        if self.in_dump:
            if text[:1].isspace() or text in ("}", ""):
                self.in_dump = text != ""  # the empty line after a closing brace ends the dump too
                return False
            self.in_dump = False
        if any(start.search(text) for start in _DUMP_STARTS):
            self.in_dump = True
            return False
        return True
