#!/bin/sh
# The export service: only hands its arguments to the CLI (settings come from the environment, see .env.example).
exec verl-p40 export "$@"
