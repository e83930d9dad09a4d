"""Stage 4, doctor: the preflight checks of a RunPlan and of this host (`runner`), of the GPU and software stack
(`stack_checks`), of the host's files, disk and memory (`host_checks`) and of a cluster of hosts."""
