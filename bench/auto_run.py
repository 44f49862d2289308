"""GPU: the auto threshold against the static configurations on realistic traffic, one server at a time.

For each draft quality and configuration (``none``: no speculation; ``always``: EAGLE-3 always on;
``auto``: EAGLE-3 with ``--speculative-disable-batch-threshold auto``) this starts a server on the
synthetic pair (:mod:`bench.server_harness`), waits for it, and measures on it:

* the realistic workloads of ``bench.throughput traffic`` (variable lengths; closed loop at
  ``--concurrency`` levels, Poisson arrivals at ``--rates``), rows appended to
  ``OUT/auto-threshold.csv`` (the columns of ``real-traffic.csv``);
* the time-varying load of the uniform benchmark (``bench.throughput.TIME_VARYING``: 1 -> 64 -> 4
  -> 128 -> 2 concurrent requests, the same work for every configuration): wall time into
  ``OUT/time-varying.json``;
* on the ``auto`` server, afterwards: its final ``spec_gate`` (the learned curve) into
  ``OUT/spec-gate-auto-pP.json``, and the same server forced off (threshold 1) on the
  variable-length closed loop at ``--off-levels`` into ``OUT/real-traffic.csv`` (``config`` =
  ``off``; the ``none`` rows of the same run are its baseline);
* with ``--profile-row`` (e.g. ``varied-closed:64``), that row profiled on the ``none`` server and
  on the ``auto`` server forced off (``bench.throughput compare-profiles`` compares the two).

No speculation does not depend on the draft: ``none`` runs once, with the first pair.

    python -m bench.auto_run --pairs /tmp/models/8b/p0.2,/tmp/models/8b/p0.5 --out OUT

Every step prints one JSON line and writes its files as it ends, so a run cut short keeps what it
measured; a failed step is recorded (``OUT/auto-run.json``) and the next one runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Dict, List

from server_patch.contract import AUTO, THRESHOLD_FLAG

CONFIGS = ("none", "always", "auto")


def _log(record: Dict[str, Any]) -> None:
    print(json.dumps(record), flush=True)


def _append_json(path: Path, record: Dict[str, Any]) -> None:
    data = json.loads(path.read_text()) if path.exists() else []
    data.append(record)
    path.write_text(json.dumps(data, indent=1))


def server_args(pair: Path, config: str, mem_fraction: float, attention_backend: str = "",
                worker: str = "v2") -> List[str]:
    """The SGLang arguments of ``config`` on the synthetic ``pair``: ``bench.traffic.launch_args``
    (128 requests; triton attention unless ``attention_backend`` names another, e.g. ``fa3``,
    SGLang's default on H200; ``worker`` ``v1``: ``--disable-overlap-schedule``), and for ``auto``
    the auto threshold."""
    from bench.traffic import launch_args

    args = launch_args(config, str(pair / "target"), str(pair / "draft"), worker=worker,
                       attention_backend=attention_backend, mem_fraction=mem_fraction)
    return args + ([THRESHOLD_FLAG, AUTO] if config == "auto" else [])


def traffic(url: str, config: str, p_wrong: str, out: Path, csv_name: str, a: argparse.Namespace,
            levels: str, workloads: str, rates: str = "", profile_row: str = "") -> int:
    """``bench.throughput traffic --url`` in this process (SGLang's bench_serving imports are paid
    once per run, not once per call: 14-15 s each on the H200 host). Returns its exit status."""
    from bench import throughput

    argv = ["traffic", "--url", url, "--config", config, "--p-wrong", p_wrong, "--out", str(out),
            "--csv-name", csv_name, "--workloads", workloads, "--concurrency", levels,
            "--row-seconds", str(a.row_seconds)]
    if rates:
        argv += ["--rates", rates]
    if profile_row:
        argv += ["--profile-row", profile_row]
        if a.profile_delay is not None:
            argv += ["--profile-delay", str(a.profile_delay)]
    _log({"step": "traffic", "cmd": "python -m bench.throughput " + " ".join(argv)})
    return throughput.main_in_process(argv)


def run_config(pair: Path, config: str, a: argparse.Namespace, record: Dict[str, Any]) -> None:
    from bench import throughput
    from bench.server_harness import set_gate, spec_gate, start_server, stop_server, wait_ready
    from bench.traffic import greedy_server_env

    p_wrong = pair.name.removeprefix("p")
    port = a.port
    server = start_server(f"auto-run-{config}-p{p_wrong}",
                          server_args(pair, config, a.mem_fraction, a.attention_backend, a.worker), port,
                          a.out / "server-logs", env=greedy_server_env())
    try:
        wait_ready(server, timeout_s=900)
        record["startup_s"] = round(server.ready_s, 1)
        record["traffic_rc"] = traffic(server.url, config, p_wrong, a.out, "auto-threshold.csv", a,
                                       a.concurrency, "varied-closed,varied-poisson", a.rates,
                                       profile_row=a.profile_row if config == "none" else "")
        work = a.out / "work"
        work.mkdir(parents=True, exist_ok=True)
        t0 = time.time()
        tv = throughput.time_varying(f"{config}-p{p_wrong}", port, work)
        tv.update({"p_wrong": p_wrong, "config": config, "measured_s": round(time.time() - t0, 1)})
        _append_json(a.out / "time-varying.json", tv)
        _log({"step": "time_varying", **tv})
        if config == "auto":
            gate = spec_gate(server.url)
            (a.out / f"spec-gate-auto-p{p_wrong}.json").write_text(json.dumps(gate, indent=1))
            _log({"step": "spec_gate", "threshold": gate.get("threshold"), "auto_probes": gate.get("auto_probes"),
                  "auto_probe_share": gate.get("auto_probe_share"), "switches": gate.get("switches")})
            if a.off_levels:
                set_gate(server.url, threshold=1, hysteresis=0)
                record["off_rc"] = traffic(server.url, "off", p_wrong, a.out, "real-traffic.csv", a,
                                           a.off_levels, "varied-closed", profile_row=a.profile_row)
                set_gate(server.url, threshold=AUTO)
    finally:
        record["exit_code"] = stop_server(server)


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.auto_run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", required=True, help="comma-separated synthetic pair dirs (.../p0.2,...)")
    ap.add_argument("--configs", default="none,always,auto")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--concurrency", default="1,16,64,128", help="closed-loop levels (req)")
    ap.add_argument("--rates", default="4,16,48", help="Poisson rates (req/s)")
    ap.add_argument("--off-levels", default="32,64,128", help="the auto server forced off, closed loop ('' skips)")
    ap.add_argument("--row-seconds", type=float, default=8.0)
    ap.add_argument("--profile-row", default="", metavar="WORKLOAD:LEVEL",
                    help="profile this row (bench.throughput traffic --profile-row) on the none server and on the "
                         "auto server forced off (a varied-closed level must be in --off-levels too)")
    ap.add_argument("--profile-delay", type=float, default=None, metavar="S",
                    help="with --profile-row: start recording S seconds into the profiled pass "
                         "(bench.throughput traffic's default otherwise; keep it below --row-seconds)")
    ap.add_argument("--attention-backend", default="", metavar="NAME",
                    help="every server's attention backend (default: triton, as bench.server_harness; fa3 is "
                         "SGLang's default on H200 and needs its kernel: ../shared/gpu/fetch-fa3.sh)")
    ap.add_argument("--worker", choices=("v2", "v1"), default="v2",
                    help="v1: every server with --disable-overlap-schedule (EAGLEWorker), default v2")
    ap.add_argument("--mem-fraction", type=float, default=0.8)
    ap.add_argument("--port", type=int, default=30700)
    a = ap.parse_args(argv)
    configs = [c for c in a.configs.split(",") if c]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or not configs:
        ap.error(f"--configs: unknown {','.join(unknown) or repr(a.configs)}; choose from {','.join(CONFIGS)}")
    from bench import traffic

    try:  # the levels and rates as bench.throughput traffic will read them
        traffic._ints(a.concurrency)
        traffic._rates(a.rates)
        if a.off_levels:
            traffic._ints(a.off_levels)
        if a.profile_row:
            traffic.parse_profile_row(a.profile_row)
    except (argparse.ArgumentTypeError, ValueError) as exc:
        ap.error(str(exc))
    if a.row_seconds <= 0 or not 0 < a.mem_fraction < 1 or not 1 <= a.port <= 65535:
        ap.error("--row-seconds must be > 0, --mem-fraction in (0, 1), --port in 1..65535")
    pairs = [Path(p) for p in a.pairs.split(",") if p]
    if not pairs:
        ap.error("--pairs names no pair")
    missing = [str(p) for p in pairs if not (p / "target").is_dir()]
    if missing:
        print(f"no synthetic pair at {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        a.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        ap.error(f"--out {a.out}: {exc.strerror or exc}")
    runs = []
    for i, pair in enumerate(pairs):
        for config in configs:
            if config == "none" and i > 0:
                continue  # the same target: no speculation does not depend on the draft
            record: Dict[str, Any] = {"pair": str(pair), "config": config, "started": time.strftime("%F %T")}
            try:
                run_config(pair, config, a, record)
            except Exception as exc:  # noqa: BLE001 - recorded; the next configuration still runs
                record["error"] = f"{type(exc).__name__}: {exc}"
            runs.append(record)
            (a.out / "auto-run.json").write_text(json.dumps({"argv": sys.argv, "runs": runs}, indent=1))
            _log({"step": "config done", **record})
    failed = [r for r in runs if r.get("error") or r.get("traffic_rc") or r.get("off_rc")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
