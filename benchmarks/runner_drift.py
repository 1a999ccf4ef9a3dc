"""MetaSchedule's runner records against timing the same kernels in this process.

The searches of `metaschedule_compare.py` rank their configs by the records of
MetaSchedule's ``LocalRunner`` (a worker process; the mean of 3 repeats of >= 20
ms), while `tune_sparse` and the benchmark's re-timing time built kernels in
this process (`BuiltKernel`, the median of 7). Records of one config moved up to
3x against the re-timing. This benchmark asks whether the runner itself is the
noisy or biased source, with nothing else running: each of `--configs` configs
of the MetaSchedule space, on each of `--matrices` matrices of the comparison,
is built once for each path, then timed in `--rounds` rounds, each round
measuring every config through the runner and in this process, the order
rotated.

    python benchmarks/runner_drift.py --out docs/results/runner_drift

Writes ``times.jsonl`` (per matrix, config and round: ``runner_ms``,
``process_ms``; a rerun skips the matrices it holds) and ``summary.json``/``summary.md``: per matrix and overall,
the ratio runner / in-process (median, p10, p90) and each source's spread, a
config's slowest round over its fastest (median over configs).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
from tqdm import tqdm

from common import eval_matrices, quantiles, setup_logging
from metaschedule_compare import EVAL_SEED, add_workload_arguments

log = logging.getLogger("runner_drift")


def sample_configs(op: str, matrix, feat: int, threads: int, count: int, seed: int) -> list:
    """`count` distinct configs of the MetaSchedule space that build on `matrix`, drawn with `seed`."""
    from cognate_tvm.errors import InvalidConfigError
    from cognate_tvm.metaschedule import schedule_config
    from cognate_tvm.space.cpu import CPUSpace

    pool = list(CPUSpace(op).candidates(threads))
    out = []
    for index in np.random.default_rng(seed).permutation(len(pool)):
        try:
            out.append((pool[index], schedule_config(op, matrix, feat, pool[index], workers=threads)))
        except InvalidConfigError:
            continue  # column panels or a tile outside this width: not in the MetaSchedule space
        if len(out) == count:
            break
    return out


class RunnerPath:
    """Kernels built by MetaSchedule's LocalBuilder and timed by its LocalRunner, as `tune_sparse`'s
    searches measure (`metaschedule.builder_and_runner`)."""

    def __init__(self, op: str, matrix, feat: int, threads: int, work_dir: Path):
        from tvm.s_tir import meta_schedule as ms

        from cognate_tvm import metaschedule as msc

        self.ms = ms
        inputs = msc.save_sparse_arguments(op, matrix, feat, work_dir / "inputs.npz")
        self.builder, self.runner = msc.builder_and_runner(inputs, threads)

    def build(self, mods, target) -> list:
        results = self.builder.build([self.ms.builder.BuilderInput(mod, target) for mod in mods])
        for result in results:
            if result.error_msg:
                raise RuntimeError(f"build failed: {result.error_msg}")
        return [(r.artifact_path, self.ms.arg_info.ArgInfo.from_prim_func(mod["main"]))
                for r, mod in zip(results, mods)]

    def time_ms(self, artifact) -> float:
        from cognate_tvm.metaschedule import record_ms

        path, args_info = artifact
        result = self.runner.run([self.ms.runner.RunnerInput(path, "cpu", args_info)])[0].result()
        if result.error_msg:
            raise RuntimeError(f"run failed: {result.error_msg}")
        return record_ms(result.run_secs)


def measure_matrix(name, matrix, *, op, feat, threads, configs, rounds, seed) -> list[dict]:
    """Every sampled config of `matrix` timed both ways in each round, the order rotated."""
    from cognate_tvm.kernels.cpu import cpu_target
    from cognate_tvm.backends.base import rotated_order
    from cognate_tvm.metaschedule import BuiltKernel, device_inputs

    target = cpu_target(threads)
    matrix = matrix.astype(np.float32)
    picks = sample_configs(op, matrix, feat, threads, configs, seed)
    inputs = device_inputs(op, matrix, feat)
    in_process = [BuiltKernel(op, mod, matrix, feat, target, inputs=inputs) for _, mod in picks]
    bad = [c.to_json() for (c, _), k in zip(picks, in_process) if not k.correct()]
    if bad:
        raise RuntimeError(f"{name}: wrong output from {bad}")
    rows = []
    with tempfile.TemporaryDirectory() as work_dir:
        runner = RunnerPath(op, matrix, feat, threads, Path(work_dir))
        artifacts = runner.build([mod for _, mod in picks], target)
        for r in range(rounds):
            for n in rotated_order(len(picks), r):
                rows.append({"matrix": name, "config": picks[n][0].to_json(), "round": r,
                             "runner_ms": runner.time_ms(artifacts[n]), "process_ms": in_process[n].time_ms()})
    return rows


def summarize(rows: list[dict]) -> dict:
    """Ratio runner / in-process per matrix and overall; each source's spread (a config's slowest
    round / its fastest, median over configs)."""
    def spread(subset, key):
        by_config: dict = {}
        for r in subset:
            by_config.setdefault((r["matrix"], r["config"]), []).append(r[key])
        return float(np.median([max(t) / min(t) for t in by_config.values()]))

    def block(subset):
        return {"ratio": quantiles([r["runner_ms"] / r["process_ms"] for r in subset]),
                "runner_spread": spread(subset, "runner_ms"), "process_spread": spread(subset, "process_ms")}

    names = list(dict.fromkeys(r["matrix"] for r in rows))
    return {"per_matrix": {m: block([r for r in rows if r["matrix"] == m]) for m in names}, "all": block(rows)}


def markdown(summary: dict) -> str:
    lines = ["# MetaSchedule runner records / the same kernels timed in this process", "",
             "| matrix | runner / in-process: median [p10, p90] | spread, runner | spread, in-process |",
             "|---|---|---|---|"]
    for name, b in list(summary["per_matrix"].items()) + [("all", summary["all"])]:
        q = b["ratio"]
        lines.append(f"| {name} | {q['median']:.2f} [{q['p10']:.2f}, {q['p90']:.2f}] | "
                     f"{b['runner_spread']:.2f} | {b['process_spread']:.2f} |")
    lines += ["", "Spread: a config's slowest round / its fastest, median over configs."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_workload_arguments(parser)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if min(args.matrices, args.configs, args.rounds) < 1:
        parser.error("--matrices, --configs and --rounds must be >= 1")
    os.environ["TVM_NUM_THREADS"] = str(args.threads)  # this process's kernels: as the runner's
    setup_logging()
    args.out.mkdir(parents=True, exist_ok=True)
    matrices = eval_matrices(args.matrices, min_rows=args.min_rows, max_rows=args.max_rows, seed=EVAL_SEED)
    times_path = args.out / "times.jsonl"
    rows = [json.loads(line) for line in times_path.read_text().splitlines()] if times_path.is_file() else []
    done = {r["matrix"] for r in rows}  # a matrix's rows are written together: resume after the last one
    for name, matrix in tqdm(matrices, desc="matrices", disable=None):
        if name in done:
            continue
        new_rows = measure_matrix(name, matrix, op=args.op, feat=args.feat, threads=args.threads,
                                  configs=args.configs, rounds=args.rounds, seed=args.seed)
        with times_path.open("a") as f:
            f.write("".join(json.dumps(r) + "\n" for r in new_rows))
        rows += new_rows
    summary = summarize(rows)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    (args.out / "summary.md").write_text(markdown(summary))
    print(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
