#!/bin/sh
# The status one-off: only hands its arguments to the CLI (reads /logs/status.json; settings from the environment).
exec verl-p40 status "$@"
