"""The GPU activities launched between two consecutive decode forwards (DECODE or TARGET_VERIFY spans
on the scheduler thread), per step, by activity and CPU site: what an OFF step adds to a decode step
outside its forward. Read in the twelfth session from this run's torch traces (not kept here: 7.7 MB):

    python bench/results/h100-2026-12-07e/between_decode_steps.py TRACE.json.gz > OUT.txt

(the none and the auto traces of ab-triton-p0.5/profile/{a,c}/); the output is committed beside it.
"""

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from bench import trace_summary as ts  # noqa: E402

DECODE_MODES = ("DECODE", "TARGET_VERIFY")


def main(path: str) -> None:
    complete = ts._complete(ts.load_events(Path(path)))
    gpu = ts._gpu_events(complete)
    spans, _ = ts.forward_spans(complete)
    ops = ts.cpu_ops_by_thread(complete)
    launches = ts._launches(complete)
    count, dur, steps = collections.Counter(), collections.Counter(), 0
    for s0, s1 in zip(spans, spans[1:]):
        if s0["mode"] not in DECODE_MODES or s1["mode"] not in DECODE_MODES:
            continue
        steps += 1
        for g in gpu:
            launch = launches.get(g.get("args", {}).get("correlation"))
            if launch is not None and s0["end"] <= launch["ts"] < s1["ts"]:
                key = (g["name"][:60], ts.site_of(ops, launch)[:90])
                count[key] += 1
                dur[key] += g["dur"]
    print(f"{Path(path).parent.name}: {steps} pairs of decode forwards; per step {sum(count.values()) / steps:.1f} "
          f"GPU activities, {sum(dur.values()) / steps:.1f} us of GPU time")
    print("per step: count, us, activity | CPU site of its launch")
    for key, n in count.most_common(40):
        print(f"{n / steps:5.2f} {dur[key] / steps:6.2f}  {key[0]} | {key[1]}")


if __name__ == "__main__":
    main(sys.argv[1])
