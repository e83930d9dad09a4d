"""Stage 2, plan: a run's options to a checked RunPlan (`planner`): hardware profiles, algorithms, engines, the
GPU/host layout, Hydra overrides composed against verl's config, the rules verl would enforce later, the memory and
disk budget."""
