"""Data, not code: hardware profiles (profiles/*.yaml) shipped inside the verl_p40 package as verl_p40.configs."""
