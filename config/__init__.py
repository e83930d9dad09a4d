"""Data, not code: hardware profiles (profiles/*.yaml), RL algorithms (algorithms/*.yaml) and LoRA's settings
(lora.yaml), shipped inside the verl_p40 package as verl_p40.configs."""
