"""verl-p40: RL post-training (PPO, GRPO and kin) of small LLMs with verl 0.5.0 on old and small NVIDIA GPUs."""

__version__ = "0.1.0"
VERL_VERSION = "0.5.0"


class UserError(Exception):
    """An error caused by input or environment that the CLI reports in one line, without a traceback."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code
