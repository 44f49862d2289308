"""bench.auto_shift on CPU: the analysis on exact step traces, and the whole CLI against a stand-in
server (threading http.server) whose fake spec_gate flips its mode a known number of decode steps
after the prompt family changes."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest

from bench import auto_shift
from bench.closed_loop import ClosedLoop, check_ids, triangle_concurrency
from bench.recovery_oracle import oracle_from_maps
from server_patch.contract import HYSTERESIS_KEY, THRESHOLD_FLAG, THRESHOLD_KEY

P_FAMILIES = [0.1, 0.6]


@pytest.fixture(scope="module")
def oracle():
    return oracle_from_maps(256, 0.0, 3, P_FAMILIES)


# -- exact traces ----------------------------------------------------------------------------------


def trace(modes, rate=1000.0, every=10):
    """Polls of a gate whose decode step ``i`` ran ``modes[i]`` (True: on), one poll every
    ``every`` steps at ``rate`` steps/s; ``last_switch`` as the gate reports it."""
    samples, last = [], None
    for c in range(0, len(modes) + 1, every):
        for i in range(max(1, c - every), c):
            if modes[i] != modes[i - 1]:
                last = (i, "on" if modes[i] else "off")
        gate = {"decode_steps_on": sum(modes[:c]), "decode_steps_off": c - sum(modes[:c]),
                "spec_enabled": modes[c - 1] if c else modes[0], "mode": "auto", "threshold": None,
                "last_decode_batch_size": 16, "accept_length_recent": 3.0, "auto_probes": 0,
                "last_switch": None if last is None else {"step": last[0], "direction": last[1], "batch_size": 16}}
        samples.append(auto_shift.sample_of(gate, c / rate))
    return samples


def segments(*parts):
    """``segments((100, True), (50, False))`` -> 100 ON steps then 50 OFF steps."""
    return [on for n, on in parts for _ in range(n)]


def windows(bounds, families):
    return [{"family": f, "t_from_s": a / 1000.0, "t_to_s": b / 1000.0}
            for f, (a, b) in zip(families, zip(bounds, bounds[1:]))]


def test_steps_to_refind_are_exact_from_last_switch_and_probes_do_not_count():
    # phase 0 (family 0): ON, one 8-step OFF probe; phase 1 from step 1000: OFF at 1137, an 8-step
    # ON probe at 1500; phase 2 from 2000: back ON at 2061
    modes = segments((400, True), (8, False), (592, True), (137, True), (363, False), (8, True), (492, False),
                     (61, False), (939, True))
    r = auto_shift.analyze(trace(modes), windows([0, 1000, 2000, 3000], [0, 1, 0]))
    p0, p1, p2 = r["phases"]
    assert (p0["steady_mode"], p1["steady_mode"], p2["steady_mode"]) == ("on", "off", "on")
    assert p0["settled_step"] == 0 and p0["flipped"] is None
    c1, c2 = r["changes"]
    assert (c1["change_step"], c1["flip_step"], c1["steps_to_refind"]) == (1000, 1137, 137)
    assert (c2["change_step"], c2["flip_step"], c2["steps_to_refind"]) == (2000, 2061, 61)
    assert c1["seconds_to_refind"] == pytest.approx(0.137, abs=1e-3)
    assert c1["observed_direction"] == "on->off" and c2["observed_direction"] == "off->on"
    assert c1["flipped"] is True and c1["held_share"] == pytest.approx((860 - 8) / 860, abs=1e-3)
    # the steady ON share counts the probe; the whole phase's share counts the steps before the flip
    assert p1["steady_on_share"] == pytest.approx(8 / 860, abs=1e-3)
    assert p1["on_share"] == pytest.approx((137 + 8) / 1000, abs=1e-3)
    assert p2["steady_on_share"] == 1.0


def test_a_short_false_flip_does_not_count_as_re_found():
    # phase 1: OFF for 20 steps at 1050, back ON, then OFF for good at 1300
    modes = segments((1000, True), (50, True), (20, False), (230, True), (700, False))
    r = auto_shift.analyze(trace(modes), windows([0, 1000, 2000], [0, 1]))
    c = r["changes"][0]
    assert c["flipped"] is True and c["steps_to_refind"] == 300 and c["flip_step"] == 1300


def test_without_last_switch_the_poll_that_saw_the_mode_is_the_flip():
    modes = segments((1000, True), (137, True), (863, False))
    samples = trace(modes)
    for s in samples:
        s["last_switch_step"] = s["last_switch_direction"] = None
    c = auto_shift.analyze(samples, windows([0, 1000, 2000], [0, 1]))["changes"][0]
    assert c["steps_to_refind"] == 140  # the first poll after step 1137


def test_the_decision_that_never_flips_is_said_so():
    modes = segments((2000, True))
    c = auto_shift.analyze(trace(modes), windows([0, 1000, 2000], [0, 1]))["changes"][0]
    assert c["flipped"] is False and c["steps_to_refind"] is None and c["observed_direction"] == "none"
    assert "never flips" in c["note"] and "family 1" in c["note"]


def test_a_mode_that_never_holds_is_not_settled():
    modes = segments((1000, True), *[(50, i % 2 == 0) for i in range(20)])
    r = auto_shift.analyze(trace(modes), windows([0, 1000, 2000], [0, 1]))
    assert r["phases"][1]["settled_step"] is None and "never settled" in r["phases"][1]["note"]
    assert r["changes"][0]["steps_to_refind"] is None


def test_a_phase_with_too_few_polls_says_so():
    r = auto_shift.analyze_phase(trace(segments((100, True)), every=50), 0.0, 0.01)
    assert r["note"] == "fewer than two polls in this phase" and r["steady_mode"] is None


def test_expected_mode_from_the_oracle_and_the_measured_step_times():
    # t_on / t_off = 2: accept_length * off / on = 3 * 450 / (4.5 * 3 / 0.02)
    bucket = {"lo": 4, "hi": 5, "on_tok_s": 675.0, "off_tok_s": 450.0, "on_samples": 9, "off_samples": 9,
              "accept_length": 3.0, "on": True}
    assert auto_shift.bucket_for([{"lo": 1, "hi": 1}, bucket], 4.6) is bucket
    assert auto_shift.bucket_for([bucket], 7) is None
    good = auto_shift.expectation(bucket, 3.43)
    assert good["step_time_ratio"] == 2.0 and good["expected_mode"] == "on" and good["margin"] == pytest.approx(0.715)
    assert auto_shift.expectation(bucket, 1.62)["expected_mode"] == "off"
    assert auto_shift.expectation(None, 3.4)["why_unknown"].startswith("no auto_buckets")
    assert auto_shift.expectation({**bucket, "off_tok_s": None}, 3.4)["expected_mode"] is None
    modes = segments((1000, True), (100, True), (900, False))
    c = auto_shift.analyze(trace(modes), windows([0, 1000, 2000], [0, 1]), ["on", "off"])["changes"][0]
    assert c["expected_direction"] == "on->off" and c["direction_matches"] is True
    c = auto_shift.analyze(trace(modes), windows([0, 1000, 2000], [0, 1]), ["on", "on"])["changes"][0]
    assert c["expected_direction"] == "none" and c["direction_matches"] is False


def test_closed_loop_helpers(oracle):
    assert [triangle_concurrency(t, 48, 8.0) for t in (0, 2, 4, 6, 8)] == [1, 25, 48, 25, 1]
    p = [1, 2, 3]
    chain = oracle.chain(3, 5)
    assert check_ids(oracle, p, chain, 5) is None
    assert check_ids(oracle, p, chain[:2] + [chain[2] + 1] + chain[3:], 5) == 2
    assert check_ids(oracle, p, chain[:4], 5) == 4
    calls = []
    loop = ClosedLoop(lambda i: calls.append(i) or {"i": i} if len(calls) < 3 else 1 / 0, 1).start()
    time.sleep(0.2)
    assert loop.stop(5) and len(loop.snapshot()) == 3 and loop.errors[0].startswith("ZeroDivisionError")
    with pytest.raises(ValueError):
        ClosedLoop(lambda i: {}, 0)


# -- the stand-in server ---------------------------------------------------------------------------

RATE = 500.0  # fake decode steps per second
DELAY = 200  # decode steps from the first request of a new family to the fake gate's flip
MODES = {0: True, 1: False}


class FakeGate:
    """A gate whose decode steps advance with the clock; ``DELAY`` steps after the first request of
    a new family it switches to ``modes[family]``."""

    def __init__(self, oracle, modes, curve=None):
        self.oracle, self.modes, self.curve = oracle, modes, curve
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.segments = [(0, True)]
        self.family, self.family_since = None, -1e9
        self.pending = None
        self.last_switch = None
        self.change_steps = []
        self.mode, self.threshold, self.hysteresis = "manual", 16, 0
        self.generated = 0

    def steps(self):
        return int((time.monotonic() - self.t0) * RATE)

    def _advance(self, n):
        if self.pending is not None and n >= self.pending[0]:
            step, on = self.pending
            self.pending = None
            if on != self.segments[-1][1]:
                self.segments.append((step, on))
                self.last_switch = {"step": step, "direction": "on" if on else "off", "batch_size": 4}

    def saw(self, family):
        with self.lock:
            n = self.steps()
            self._advance(n)
            if family != self.family and time.monotonic() - self.family_since > 0.3:
                self.family, self.family_since = family, time.monotonic()
                self.change_steps.append(n)
                self.pending = (n + DELAY, self.modes[family])
            self.generated += 1

    def snapshot(self):
        with self.lock:
            n = self.steps()
            self._advance(n)
            on = 0
            for i, (start, m) in enumerate(self.segments):
                end = self.segments[i + 1][0] if i + 1 < len(self.segments) else n
                on += max(0, min(end, n) - start) if m else 0
            fam = self.family or 0
            accept = self.oracle.expected_accept_length(3, fam)
            spec = self.segments[-1][1]
            return {
                "worker_class": "EAGLEWorkerV2", "spec_version": "v2", "topk": 1, "num_steps": 3,
                "spec_enabled": spec, "mode": self.mode,
                "threshold": None if self.mode == "auto" else self.threshold, "hysteresis": self.hysteresis,
                "decode_steps_on": on, "decode_steps_off": n - on, "last_decode_batch_size": 4,
                "last_switch": self.last_switch, "accept_length_recent": accept, "auto_probes": 0,
                "auto_reason": f"auto: {'ON' if spec else 'OFF'} at batch 4" if self.mode == "auto" else None,
                # t_on / t_off = 2 at batch 4: family 0 (A 3.43) pays, family 1 (A 1.62) does not
                "auto_buckets": self.curve or [{"lo": 4, "hi": 5, "on_tok_s": 4.5 * accept / 0.02, "off_tok_s": 450.0,
                                                "on_samples": 9, "off_samples": 9, "accept_length": accept, "on": spec}],
                "ranks": [{"tp_rank": 0, "decisions_digest": 5, "switches": len(self.segments) - 1,
                           "decode_steps_on": on, "decode_steps_off": n - on, "mode": self.mode}],
            }


def serve(fake):
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path == "/server_info":
                self.reply({"internal_states": [{"spec_gate": fake.snapshot()}]})
            else:
                self.send_error(404)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/generate":
                ids, n = body["input_ids"], body["sampling_params"]["max_new_tokens"]
                assert body["sampling_params"]["temperature"] == 0 and body["sampling_params"]["ignore_eos"]
                fake.saw(fake.oracle.family_of(ids[-1]))
                time.sleep(0.05)
                self.reply({"output_ids": fake.oracle.chain(ids[-1], n), "meta_info": {}})
            elif self.path == "/set_internal_state":
                args = body["server_args"]
                value = args.get(THRESHOLD_KEY)
                if value == "auto":
                    fake.mode = "auto"
                elif value is not None:
                    fake.mode, fake.threshold = "manual", value
                fake.hysteresis = args.get(HYSTERESIS_KEY, fake.hysteresis)
                self.reply({"updated": True, "reason": None, "threshold": value, "hysteresis": fake.hysteresis,
                            "decode_step": fake.steps()})
            else:
                self.send_error(404)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture
def models(tmp_path, oracle):
    d = tmp_path / "pair"
    d.mkdir()
    oracle.save(d / "oracle.json")
    return d


def run_cli(models, tmp_path, capsys, modes):
    fake = FakeGate(auto_shift_oracle(models), modes)
    srv = serve(fake)
    out = tmp_path / "shift.json"
    try:
        code = auto_shift.main(["--models", str(models), "--out", str(out), "--url",
                                f"http://127.0.0.1:{srv.server_address[1]}", "--concurrency", "4",
                                "--phase-seconds", "1.2", "--output-len", "16", "--poll-interval", "0.02"])
    finally:
        srv.shutdown()
        srv.server_close()
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    return code, json.loads(out.read_text()), lines, fake


def auto_shift_oracle(models):
    from bench.synthetic_models import Oracle

    return Oracle.load(models / "oracle.json")


def test_cli_against_a_stand_in_server_measures_the_known_delay(models, tmp_path, capsys):
    code, rec, lines, fake = run_cli(models, tmp_path, capsys, MODES)
    assert code == 0, rec.get("error")
    assert rec["command"].startswith("python -m bench.auto_shift --models") and rec["date"][:2] == "20"
    assert rec["oracle_match"] is True and rec["request_errors"] == 0 and rec["poll_errors"] == 0
    # manual mode was set to auto for the run and back at the end
    assert rec["set_auto_reply"]["threshold"] == "auto" and rec["restored_gate"] == {"threshold": 16, "hysteresis": 0}
    assert fake.mode == "manual"
    assert len(fake.change_steps) == 3
    p0, p1, p2 = rec["phases"]
    assert [p["family"] for p in rec["phases"]] == [0, 1, 0]
    assert (p0["steady_mode"], p1["steady_mode"], p2["steady_mode"]) == ("on", "off", "on")
    for change, true_step in zip(rec["changes"], fake.change_steps[1:]):
        assert change["flipped"] is True
        assert abs(change["change_step"] - true_step) <= 10, (change, fake.change_steps)
        assert change["flip_step"] == true_step + DELAY  # from last_switch, exact
        assert abs(change["steps_to_refind"] - DELAY) <= 10, change
        # wall-clock seconds of the stand-in server: only that they are measured (steps are the exact measure)
        assert change["seconds_to_refind"] > 0
        assert change["direction_matches"] is True
    assert [c["observed_direction"] for c in rec["changes"]] == ["on->off", "off->on"]
    assert p1["steady_on_share"] == 0.0 and p2["steady_on_share"] == 1.0
    assert p0["accept_length_oracle"] == pytest.approx(3.43, abs=0.01)
    assert p1["expectation"]["step_time_ratio"] == pytest.approx(2.0, abs=0.01)
    assert p1["requests"] > 4 and p1["oracle_mismatches"] == 0
    assert {"t_s", "decode_steps", "spec_enabled", "threshold", "mode", "auto_reason", "batch_size",
            "accept_length_recent", "auto_probes"} <= set(rec["samples"][0])
    # one JSON line per phase as it ends, then the summary
    assert [x.get("phase") for x in lines] == [0, 1, 2, None]
    assert lines[1]["change"]["steps_to_refind"] == rec["changes"][0]["steps_to_refind"]
    assert lines[-1]["out"] == str(tmp_path / "shift.json") and len(lines[-1]["changes"]) == 2
    # the last poll (the load over, before the gate is set back): every rank decided alike
    assert rec["ranks_agree_auto"] is True and lines[-1]["ranks_agree_auto"] is True


def test_cli_reports_a_decision_that_never_flips(models, tmp_path, capsys):
    code, rec, _, _ = run_cli(models, tmp_path, capsys, {0: True, 1: True})
    assert code == 0
    for c in rec["changes"]:
        assert c["flipped"] is False and c["steps_to_refind"] is None and "never flips" in c["note"]
    # the measured step times say family 1 should have turned speculation off
    assert rec["changes"][0]["expected_direction"] == "on->off" and rec["changes"][0]["direction_matches"] is False


def test_cli_refuses_a_pair_without_families_and_a_bad_sequence(tmp_path, capsys):
    d = tmp_path / "one"
    d.mkdir()
    oracle_from_maps(64, 0.2, 0).save(d / "oracle.json")
    for argv, says in ((["--models", str(d), "--url", "http://x:1"], "one prompt family"),
                       (["--models", str(tmp_path), "--url", "http://x:1"], "no oracle"),
                       (["--models", str(tmp_path)], "missing target, draft, oracle.json"),
                       (["--models", str(d), "--url", "http://x:1", "--sequence", "0"], "two or more"),
                       (["--models", str(d), "--url", "http://x:1", "--", "--tp-size", "2"], "arguments after --"),
                       (["--models", str(d), "--url", "http://x:1", "--concurrency", "0"], "--concurrency must be > 0")):
        with pytest.raises(SystemExit) as exc:
            auto_shift.main(["--out", str(tmp_path / "o.json"), *argv])
        assert exc.value.code == 2 and says in capsys.readouterr().err, argv
    assert not (tmp_path / "o.json").exists()


def test_cli_writes_the_error_when_the_server_cannot_be_reached(models, tmp_path, capsys):
    out = tmp_path / "o.json"
    code = auto_shift.main(["--models", str(models), "--url", "http://127.0.0.1:9", "--out", str(out)])
    assert code == 1
    rec = json.loads(out.read_text())
    assert "nothing answers at http://127.0.0.1:9" in rec["error"] and rec["command"].startswith("python -m bench.auto_shift")
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["error"] == rec["error"]


def test_start_mode_server_arguments(tmp_path):
    a = auto_shift.parser().parse_args(["--models", str(tmp_path), "--out", "x.json", "--worker", "v1", "--tp", "2"])
    a.server_args = ["--foo"]
    args = auto_shift.server_args(a)
    assert args[args.index(THRESHOLD_FLAG) + 1] == "auto"
    assert "--disable-overlap-schedule" in args and args[args.index("--tp-size") + 1] == "2" and args[-1] == "--foo"
    assert args[args.index("--model-path") + 1] == str(tmp_path / "target")


@pytest.mark.parametrize("module", ["bench.auto_shift", "bench.gate_correctness"])
def test_both_tools_answer_help(module):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=root, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "--models" in proc.stdout and "--out" in proc.stdout
    assert ("--auto" in proc.stdout) == (module == "bench.gate_correctness")


def test_the_recorded_h100_run_re_analyzed_from_its_polls_gives_what_it_reported():
    """bench/results/h100-2026-12-06c/auto-shift.json (one H100, 8B pair with families p = 0.1 / 0.6,
    4 requests, two phases before the device time ran out): its 203 spec_gate polls, analyzed again
    with the recorded phase windows, give the recorded phases and the one change, where the decision
    did not flip (speculation paid for both families at batch 4) and that is what the measured step
    times expect."""
    from pathlib import Path

    rec = json.loads((Path(__file__).parents[1] / "bench/results/h100-2026-12-06c/auto-shift.json").read_text())
    windows = [{"family": p["family"], "t_from_s": p["t_from_s"], "t_to_s": p["t_to_s"]} for p in rec["phases"]]
    again = auto_shift.analyze(rec["samples"], windows, [p["expected_mode"] for p in rec["phases"]])
    keys = ("change_step", "end_step", "steps", "on_share", "steady_mode", "settled_step", "steps_to_settle",
            "probes", "flipped")
    assert [{k: p[k] for k in keys} for p in again["phases"]] == [{k: p[k] for k in keys} for p in rec["phases"]]
    (change,) = again["changes"]
    assert change["flipped"] is False and change["observed_direction"] == change["expected_direction"] == "none"
    assert change["direction_matches"] is True and change["batch_size"] == 4
    assert [p["steady_mode"] for p in again["phases"]] == ["on", "on"]


@pytest.mark.parametrize("path, expected", [
    ("h200-2026-12-02/auto/spec-gate-auto-p0.2.json", 7),  # triton, H200: t_on / t_off 1.2 at 1 -> 5.8 at 96-127
    ("h200-2026-12-02/auto-p05/spec-gate-auto-p0.5.json", 6),
    ("h100-2026-12-06b/ab-auto-p0.2/repeat0/c/traffic-auto-v2-p0.2.json", None),  # fa3, H100: 0.9-1.3, no flip
])
def test_the_concurrency_is_picked_where_the_learned_ratio_lies_between_the_families(path, expected):
    """Recorded curves: the fit of t_on / t_off over the buckets reaches the geometric mean of the
    families' accept lengths (3.44 and 1.62: 2.36) at the batch picked; a curve that never gets
    there picks nothing (the run then uses --concurrency and says why)."""
    from pathlib import Path

    record = json.loads((Path(__file__).parents[1] / "bench/results" / path).read_text())
    pick = auto_shift.pick_concurrency(auto_shift.learned_buckets(record), [3.4385, 1.6238])
    assert pick["concurrency"] == expected, pick
    assert pick["target_ratio"] == 2.363 and pick["ratios"]
    if expected is None:
        assert "outside the sizes measured" in pick["why"]


def test_a_noisy_bucket_does_not_decide_the_pick_and_a_flat_curve_picks_nothing():
    curve = [{"lo": lo, "hi": hi, "on_tok_s": 100.0, "off_tok_s": 100.0 * r / 3.0, "accept_length": 3.0,
              "on_samples": 50, "off_samples": 20} for lo, hi, r in
             ((1, 1, 1.2), (4, 5, 1.9), (8, 11, 2.4), (16, 23, 2.9), (24, 31, 2.3), (64, 95, 4.0))]
    pick = auto_shift.pick_concurrency(curve, [3.44, 1.62])
    assert 6 <= pick["concurrency"] <= 12, pick  # not 24-31, whose one reading is nearest 2.36
    flat = [dict(b, off_tok_s=80.0) for b in curve]
    assert auto_shift.pick_concurrency(flat, [3.44, 1.62])["concurrency"] is None
    assert "nothing to fit" in auto_shift.pick_concurrency(curve[:1], [3.44, 1.62])["why"]
    assert auto_shift.learned_buckets({"runs": [{"final_spec_gate": {"auto_buckets": curve}}]}) == curve
    assert auto_shift.learned_buckets({"final_spec_gate": {"auto_buckets": curve}}) == curve
    assert auto_shift.learned_buckets({"rows": []}) is None and auto_shift.learned_buckets([]) is None


def test_cli_concurrency_from_a_learned_curve_and_its_refusals(models, tmp_path, capsys):
    """--concurrency-from: the pick goes into the record (and is used); a curve without a flip
    falls back to --concurrency and says so; a file without auto_buckets or not JSON is refused."""
    from pathlib import Path

    curves = Path(__file__).parents[1] / "bench/results"
    out = tmp_path / "o.json"
    argv = ["--models", str(models), "--url", "http://127.0.0.1:9", "--out", str(out)]
    assert auto_shift.main(argv + ["--concurrency-from", str(curves / "h200-2026-12-02/auto/spec-gate-auto-p0.2.json")]) == 1
    rec = json.loads(out.read_text())  # the server is not there: but the pick is recorded
    assert rec["concurrency"] == 7 and rec["concurrency_pick"]["concurrency"] == 7
    assert "auto_shift: concurrency 7: the fit" in capsys.readouterr().out
    out.unlink()  # an --out that exists is refused (the record is rewritten per phase)
    fa3 = curves / "h100-2026-12-06b/ab-auto-p0.2/repeat0/c/traffic-auto-v2-p0.2.json"
    assert auto_shift.main(argv + ["--concurrency", "5", "--concurrency-from", str(fa3)]) == 1
    rec = json.loads(out.read_text())
    assert rec["concurrency"] == 5 and rec["concurrency_pick"]["fallback"] == 5
    assert "; --concurrency 5 instead" in capsys.readouterr().out
    out.unlink()
    bad = tmp_path / "bad.json"
    for text, says in (("{}", "no auto_buckets"), ("not json", "--concurrency-from")):
        bad.write_text(text)
        with pytest.raises(SystemExit) as exc:
            auto_shift.main(argv + ["--concurrency-from", str(bad)])
        assert exc.value.code == 2 and says in capsys.readouterr().err
    with pytest.raises(SystemExit):
        auto_shift.main(argv + ["--concurrency-from", str(tmp_path / "missing.json")])
    assert "No such file" in capsys.readouterr().err


def test_cli_refuses_an_out_that_exists_a_url_that_is_not_http_and_keeps_the_file(models, tmp_path, capsys):
    """Fresh-user finds: a failed run replaced an existing --out with its error record; --url ftp://x
    was tried (and called a server without the auto threshold)."""
    kept = tmp_path / "prev.json"
    kept.write_text('{"precious": 1}')
    for argv, says in ((["--url", "http://127.0.0.1:9", "--out", str(kept)], "exists (an earlier run"),
                       (["--url", "ftp://x", "--out", str(tmp_path / "n.json")], "expected http://HOST:PORT"),
                       (["--url", "http://127.0.0.1:9", "--out", str(tmp_path / "no" / "n.json")], "no directory")):
        with pytest.raises(SystemExit) as exc:
            auto_shift.main(["--models", str(models), *argv])
        assert exc.value.code == 2 and says in capsys.readouterr().err, argv
    assert kept.read_text() == '{"precious": 1}' and not (tmp_path / "n.json").exists()


def test_cli_calibrates_on_its_own_prompts_then_runs_the_phases_at_the_pick(models, tmp_path, capsys):
    """--calibrate: a closed loop at each level on the first family's prompts, then the concurrency
    picked from the server's auto_buckets read after (here the recorded H200 triton curve: 7), used
    for the phases; the levels' requests are oracle-checked and recorded. A server whose curve has
    no flip in range falls back to --concurrency and says why; --calibrate with --concurrency-from,
    a single level or a level of 0 is refused."""
    from pathlib import Path

    curve = auto_shift.learned_buckets(json.loads(
        (Path(__file__).parents[1] / "bench/results/h200-2026-12-02/auto/spec-gate-auto-p0.2.json").read_text()))
    fake = FakeGate(auto_shift_oracle(models), MODES, curve=curve)
    srv = serve(fake)
    out = tmp_path / "shift.json"
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    argv = ["--models", str(models), "--url", url, "--phase-seconds", "0.6", "--output-len", "16",
            "--poll-interval", "0.02", "--calibrate-seconds", "0.3"]
    try:
        code = auto_shift.main(argv + ["--out", str(out), "--calibrate", "2,4"])
        rec = json.loads(out.read_text())
        assert code == 0, rec.get("error")
        pick = rec["concurrency_pick"]
        assert pick["concurrency"] == rec["concurrency"] == 7 and pick["from"].startswith("--calibrate 2,4: family 0")
        assert [x["concurrency"] for x in pick["levels"]] == [2, 4]
        assert all(x["requests"] > 0 and x["oracle_mismatches"] == 0 and x["request_errors"] == 0
                   for x in pick["levels"])
        assert rec["oracle_match"] is True and rec["calibrate"] == [2, 4] and len(rec["phases"]) == 3
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
        assert lines[0]["concurrency"] == 7 and "between the families" in lines[0]["why"]
        fake.curve = curve[:1]  # one bucket: nothing to fit
        code = auto_shift.main(argv + ["--out", str(tmp_path / "two.json"), "--calibrate", "2,4",
                                       "--concurrency", "3"])
        rec = json.loads((tmp_path / "two.json").read_text())
        assert code == 0 and rec["concurrency"] == 3 and rec["concurrency_pick"]["fallback"] == 3
    finally:
        srv.shutdown()
        srv.server_close()
    for extra, says in ((["--calibrate", "2,4", "--concurrency-from", str(out)], "give one"),
                        (["--calibrate", "8"], "two or more concurrencies"),
                        (["--calibrate", "0,8"], "two or more concurrencies"),
                        (["--calibrate", "8,x"], "expected concurrencies"),
                        (["--calibrate", "4,4"], "two or more different concurrencies"),
                        (["--mem-fraction", "2"], "--mem-fraction must be between 0 and 1"),
                        (["--port", "0"], "--port must be 1-65535"),
                        (["--calibrate", "2,4", "--calibrate-seconds", "0"], "--calibrate-seconds must be > 0")):
        with pytest.raises(SystemExit) as exc:
            auto_shift.main(argv + ["--out", str(tmp_path / "n.json"), *extra])
        assert exc.value.code == 2 and says in capsys.readouterr().err, extra


def test_the_recorded_triton_shift_first_switches_are_the_measured_re_find():
    """bench/results/h100-2026-12-06e/auto-shift.json (one H100, 16 requests, 0 -> 1 -> 0): the
    table's first OFF came 133 decode steps after the change to the weak family (a probe 69 steps
    after it does not count), the first ON 4 steps after the change back; OFF did not hold in
    phase 1 (never settled), ON did in phase 2."""
    from pathlib import Path

    rec = json.loads((Path(__file__).parents[1] / "bench/results/h100-2026-12-06e/auto-shift.json").read_text())
    windows = [{"family": p["family"], "t_from_s": p["t_from_s"], "t_to_s": p["t_to_s"]} for p in rec["phases"]]
    again = auto_shift.analyze(rec["samples"], windows, [p["expected_mode"] for p in rec["phases"]])
    keys = ("change_step", "steady_mode", "settled_step", "steps_to_settle", "on_share", "probes")
    assert [{k: p[k] for k in keys} for p in again["phases"]] == [{k: p[k] for k in keys} for p in rec["phases"]]
    to_weak, back = again["changes"]
    assert (to_weak["first_switch_step"], to_weak["steps_to_first_switch"]) == (2432, 133)
    assert to_weak["flip_step"] is None and "never settled" in again["phases"][1]["note"]
    assert (back["first_switch_step"], back["steps_to_first_switch"]) == (5367, 4)
