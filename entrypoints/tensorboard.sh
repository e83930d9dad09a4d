#!/bin/sh
# The tensorboard service: TensorBoard on the trainer's event files (read-only), nothing else.
exec tensorboard "$@"
