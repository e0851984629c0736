"""A stand-in client program for the runner's test: `--seconds S` sleeps, `--log-kib K` writes
K KiB to stderr first (as a library logging every throttle would); then one JSON line with the
time it got there."""

import argparse
import json
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--name")
parser.add_argument("--seconds", type=float, default=0.0)
parser.add_argument("--log-kib", type=int, default=0)
args = parser.parse_args()
for _ in range(args.log_kib):
    sys.stderr.write("x" * 1023 + "\n")
sys.stderr.flush()
time.sleep(args.seconds)
print(json.dumps({"name": args.name, "done": time.time()}), flush=True)
