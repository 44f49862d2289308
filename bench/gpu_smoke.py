"""GPU smoke: SGLang 0.5.12 serves the synthetic EAGLE-3 pair on both worker paths, greedy output
equals the oracle, and the accept length falls as the draft's wrong-successor fraction p rises.

Servers are started with plain ``python -m sglang.launch_server`` (this package installed, no gate
option), which also shows that installing the plugin changes nothing for a server that did not ask.

Usage (GPU machine): python -m bench.gpu_smoke --models-root DIR --out bench/results/gpu-smoke.json
(DIR holds one pair per p: p0.0/, p0.2/, p0.5/ from bench.synthetic_models)
"""

from __future__ import annotations

import argparse
import json
import statistics
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Dict

from bench.oracle_check import check_many, make_prompts
from bench.server_harness import (
    eagle3_args,
    missing_pair_files,
    record_failure,
    server_info,
    spec_path_log_line,
    start_server,
    stop_server,
    wait_ready,
    write_json,
)

RUNS = [  # (p, overlap)
    (0.0, True),
    (0.2, True),
    (0.5, True),
    (0.2, False),
]


def run_one(p: float, overlap: bool, root: Path, port: int, log_dir: Path, mem_fraction: float) -> Dict[str, Any]:
    from bench.synthetic_models import Oracle

    models = root / f"p{p}"
    oracle = Oracle.load(models / "oracle.json")
    args = eagle3_args(str(models / "target"), str(models / "draft"), overlap=overlap,
                       mem_fraction=mem_fraction)
    name = f"smoke-p{p}-{'v2' if overlap else 'v1'}"
    rec: Dict[str, Any] = {"name": name, "p_wrong": p, "disable_overlap_schedule": not overlap,
                           "launch_args": args}
    server = start_server(name, args, port, log_dir, patched=False)
    try:
        wait_ready(server)
        rec["startup_s"] = round(server.ready_s, 1)
        info = server_info(server.url)
        rec["sglang_version"] = info.get("version")
        vocab = oracle.vocab
        ok, res = check_many(server.url, oracle, make_prompts(vocab, 8, 32, 7), 256, 8)
        rec["oracle_match"] = ok
        rec["mismatches"] = [r for r in res if not r["match"]][:3]
        acc = [r["spec_accept_length"] for r in res if r["spec_accept_length"]]
        rec["accept_length"] = round(statistics.mean(acc), 3) if acc else None
        rec["avg_spec_accept_length_server"] = info["internal_states"][0].get("avg_spec_accept_length")
        rec["expected_accept_length"] = oracle.expected_accept_length(3)
        rec["spec_path_log_line"] = spec_path_log_line(server.log_text())
        rec["gate_hooks_in_log"] = "spec_gate:" in server.log_text()
    except Exception as exc:  # keep the other runs going; the record says why this one failed
        record_failure(rec, server, exc)
    finally:
        rec["exit_code"] = stop_server(server)
    return rec


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.gpu_smoke", description=__doc__.splitlines()[0])
    ap.add_argument("--models-root", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--mem-fraction", type=float, default=0.15)
    ap.add_argument("--log-dir", type=Path, default=Path("/tmp/specconsole-logs"))
    a = ap.parse_args(argv)
    for p in sorted({p for p, _ in RUNS}):
        missing = missing_pair_files(a.models_root / f"p{p}")
        if missing:
            ap.error(f"--models-root {a.models_root}: p{p}/ lacks {', '.join(missing)} (one pair per p, made by "
                     f"python -m bench.synthetic_models --out {a.models_root}/p{p} --p-wrong {p})")
    if a.parallel < 1:
        ap.error(f"--parallel must be >= 1, got {a.parallel}")
    if not 0 < a.mem_fraction < 1:
        ap.error(f"--mem-fraction must be between 0 and 1 (SGLang's --mem-fraction-static), got {a.mem_fraction}")
    with ThreadPoolExecutor(max_workers=a.parallel) as pool:
        futs = [pool.submit(run_one, p, ov, a.models_root, 30100 + 10 * i, a.log_dir, a.mem_fraction)
                for i, (p, ov) in enumerate(RUNS)]
        results = [f.result() for f in futs]
    write_json(a.out, results)
    for r in results:
        print(json.dumps({k: r.get(k) for k in ("name", "oracle_match", "accept_length",
                                                 "expected_accept_length", "spec_path_log_line", "error")}))


if __name__ == "__main__":
    main()
