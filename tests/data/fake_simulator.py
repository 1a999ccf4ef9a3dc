"""A small stand-in simulator speaking ExternalSimulator's protocol (tests only).

Reads the JSON request on stdin, loads the matrix, and writes one JSON line per
config with cycles = nnz * feat / vector_width + row_panel * rows / col_panel
(deterministic, config-dependent). `--mode` makes it misbehave on purpose:
ok, crash (exit 3 after two results), hang (sleep after one result),
malformed (one garbage line and one line without an index), error (config 1
reports a simulator error), reverse (results in reverse order).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from cognate_tvm.matrix import load_matrix


def cycles(config: dict, nnz: int, rows: int, feat: int, hardware: dict) -> float:
    lanes = int(hardware.get("vector_width", 16))
    return nnz * feat / lanes + config["row_panel"] * rows / config["col_panel"] + config["split"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mode", default="ok",
                        choices=["ok", "crash", "hang", "malformed", "error", "reverse"])
    args = parser.parse_args()
    request = json.load(sys.stdin)
    matrix = load_matrix(request["matrix"])
    order = list(range(len(request["configs"])))
    if args.mode == "reverse":
        order.reverse()
    for n in order:
        config = request["configs"][n]
        if args.mode == "crash" and n == 2:
            print("simulated crash: segmentation fault", file=sys.stderr)
            return 3
        if args.mode == "hang" and n == 1:
            sys.stdout.flush()
            time.sleep(60)
        if args.mode == "malformed" and n == 1:
            print("this is not json")
            continue
        if args.mode == "malformed" and n == 2:
            print(json.dumps({"cycles": 5}))
            continue
        if args.mode == "error" and n == 1:
            print(json.dumps({"index": n, "error": "deadlock in tile 17"}))
            continue
        value = cycles(config, matrix.nnz, matrix.shape[0], request["feat"], request["hardware"])
        print(json.dumps({"index": n, "cycles": value, "nnz": matrix.nnz, "op": request["op"]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
