"""Files and folders for the lent GPU machine, in pieces that each fit one device call beside the checkout.

A device call carries the checkout's tracked and untracked-not-ignored files and the paths it names in `carry`, 64 MiB
in all; the GPU machine reaches nothing else. So anything larger (the verl bundle, the real-weights GGUF, the image's
torch wheels) travels as chunks, one ignored folder each (`.gpu-NAME-00`, `.gpu-NAME-01`, ...), each call copying one
folder's chunk into /tmp/chunks/NAME; `join` there checks every chunk against the list that `split` wrote into the
first folder and puts the file (or folder) back together. The chunk size is what fits beside the checkout as it is
when `split` runs, less a margin for results committed later in the session (a chunk made before the checkout grew
past it is refused by the device tool: seen on 2026-12-03, 40 MiB chunks beside 24.4 MiB of tracked files).

Here:
    bash ../shared/gpu/real-model.sh      # the GGUF, in its cache (and its own 47 MiB chunks, which no longer travel)
    python3 bench/device/chunks.py split ~/.cache/verl-p40-real-model/qwen2.5-coder-0.5b-instruct.gguf --name model
    python3 bench/device/chunks.py split .gpu-bundle --name bundle               # a folder travels as a tar
    python3 bench/device/chunks.py fits                                          # the chunk size that fits now
one device call per folder (carry `.gpu-NAME-NN`):
    mkdir -p /tmp/chunks/NAME && cp .gpu-NAME-NN/* /tmp/chunks/NAME/
and there, once:
    python3 bench/device/chunks.py join --chunks /tmp/chunks/model --out /tmp/model.gguf
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.chunks import REPO, ChunkError, chunk_mib, fitting_mib, join, split  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    s = sub.add_parser("split", help="cut a file or folder into .gpu-NAME-NN folders that each fit one device call")
    s.add_argument("source", type=Path)
    s.add_argument("--name", required=True, help="the folders' name: .gpu-NAME-00 ...")
    s.add_argument("--chunk-mib", type=int, help="default: what fits beside the checkout now, less a margin")
    s.add_argument("--out", type=Path, default=REPO)
    j = sub.add_parser("join", help="on the GPU machine: check the chunks and put them back together")
    j.add_argument("--chunks", type=Path, required=True)
    j.add_argument("--out", type=Path, required=True)
    sub.add_parser("fits", help="the chunk size (MiB) that travels beside the checkout now")
    args = parser.parse_args()
    try:
        if args.action == "fits":
            print(fitting_mib())
        elif args.action == "split":
            if not args.source.exists():
                raise ChunkError(f"{args.source}: no such file or folder")
            mib = chunk_mib(args.chunk_mib)
            folders = split(args.source, args.out, args.name, mib)
            print(f"{args.source} in {len(folders)} chunks of {mib} MiB: {folders[0]} ... {folders[-1].name}")
        else:
            print(join(args.chunks, args.out))
    except ChunkError as error:
        print(f"chunks {args.action}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
