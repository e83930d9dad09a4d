#!/bin/sh
# The ray-head service (several hosts): only hands its arguments to the CLI (settings from the environment).
exec verl-p40 cluster head "$@"
