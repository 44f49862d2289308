"""bench.gate_correctness's auto phase on CPU: its pure rules (rank agreement, the record, the merge
of an auto-only run, the printed line) on fake spec_gate dicts, and the whole phase against a
stand-in server (threading http.server)."""

from __future__ import annotations

import http.server
import json
import threading

import pytest

from bench import gate_correctness as gc
from bench.recovery_oracle import oracle_from_maps
from server_patch.contract import THRESHOLD_KEY


def rank(i, digest=77, switches=12, on=900, off=300, mode="auto", **proofs):
    r = {"tp_rank": i, "decisions_digest": digest, "switches": switches, "decode_steps_on": on,
         "decode_steps_off": off, "mode": mode}
    for k in gc.PROOF_KEYS:
        r[f"{k}_checks"] = proofs.get(f"{k}_checks", 70)
        r[f"{k}_mismatches"] = proofs.get(f"{k}_mismatches", 0)
    return r


def gate(ranks, **kw):
    g = {"mode": "auto", "threshold": 24, "switches": ranks[0]["switches"] if ranks else 0,
         "decode_steps_on": 900, "decode_steps_off": 300, "auto_probes": 5, "auto_probe_steps": 40,
         "auto_probe_share": 0.03, "auto_reason": "auto: OFF at batch 40 (est. ON 1 vs OFF 2 tok/s)",
         "auto_buckets": [{"lo": 32, "hi": 47, "on": False}], "ranks": ranks}
    g.update(kw)
    return g


BEFORE = {"mode": "manual", "threshold": 64, "switches": 2, "decode_steps_on": 100, "decode_steps_off": 0,
          "auto_probes": 0, "auto_probe_steps": 0}
REPLY = {"updated": True, "reason": None, "threshold": "auto", "hysteresis": 0, "decode_step": 100}


def test_ranks_agree_auto_needs_the_same_digest_switches_and_steps_on_every_rank():
    assert gc.ranks_agree_auto(gate([rank(0)])) is True  # TP = 1
    assert gc.ranks_agree_auto(gate([rank(0), rank(1)])) is True
    assert gc.ranks_agree_auto(gate([rank(0), rank(1, digest=78)])) is False
    assert gc.ranks_agree_auto(gate([rank(0), rank(1, switches=13)])) is False
    assert gc.ranks_agree_auto(gate([rank(0), rank(1, on=899, off=301)])) is False
    assert gc.ranks_agree_auto(gate([rank(0), rank(1, digest=None)])) is False
    assert gc.ranks_agree_auto(gate([rank(0), rank(1, mode="manual")])) is False
    assert gc.ranks_agree_auto(gate([])) is False and gc.ranks_agree_auto({}) is False


def test_auto_record_passes_when_every_check_holds():
    polls = [{"last_decode_batch_size": b, "spec_enabled": b < 24} for b in (1, 12, 48, 30, 2)]
    r = gc.auto_record(BEFORE, gate([rank(0), rank(1)]), REPLY, [{"match": True}] * 30, [], polls)
    assert r["ok"] is True and r["failed"] == []
    assert (r["probes"], r["probe_steps"], r["switches"]) == (5, 40, 10)
    assert (r["decode_steps_on"], r["decode_steps_off"]) == (800, 300)
    assert r["decisions_digest"] == [77, 77] and r["decisions_digest_equal"] is True
    assert r["mismatches"] == {k: [0, 0] for k in gc.PROOF_KEYS} and r["checks"]["off_kv_only"] == [70, 70]
    assert r["crossover"] == 24 and r["auto_buckets"] == [{"lo": 32, "hi": 47, "on": False}]
    assert r["batch_sizes_seen"] == [1, 48] and (r["polls_on"], r["polls_off"]) == (3, 2)


@pytest.mark.parametrize("change, failed", [
    (dict(results=[{"match": True}, {"match": False, "first_mismatch": 3}]), ["oracle_match"]),
    (dict(errors=["ReadTimeout: x"]), ["oracle_match"]),
    (dict(results=[]), ["oracle_match"]),
    (dict(reply={"updated": False, "reason": "nope"}), ["set_auto"]),
    (dict(after=gate([rank(0)], mode="manual")), ["mode_auto"]),
    (dict(after=gate([rank(0)], auto_probes=0)), ["probed"]),
    (dict(after=gate([rank(0, switches=2)])), ["switched"]),
    (dict(after=gate([rank(0), rank(1, off_kv_only_mismatches=1)])), ["mismatches_zero"]),
    (dict(after=gate([rank(0, off_attention_mismatches=2)])), ["mismatches_zero"]),
    (dict(after=gate([rank(0, off_early_seq_lens_mismatches=1)])), ["mismatches_zero"]),
    (dict(after=gate([rank(0), rank(1, digest=5)])), ["ranks_agree_auto"]),
    (dict(after=gate([], switches=12)), ["mismatches_zero", "ranks_agree_auto"]),
])
def test_auto_record_names_the_check_that_failed(change, failed):
    args = dict(before=BEFORE, after=gate([rank(0), rank(1)]), reply=REPLY, results=[{"match": True}] * 4,
                errors=[], polls=[])
    args.update(change)
    r = gc.auto_record(**args)
    assert r["ok"] is False and r["failed"] == failed


def test_auto_learned_waits_for_a_probe_and_a_switch():
    assert gc.auto_learned(BEFORE, gate([rank(0)])) is True
    assert gc.auto_learned(BEFORE, gate([rank(0)], auto_probes=0)) is False
    assert gc.auto_learned(BEFORE, gate([rank(0)], switches=2)) is False


def entry(config="v2-topk1", tp=1, **kw):
    e = {"config": config, "tp": tp, "phases": {"A_forced_on": {"oracle_match": True}}, "oracle_match": True,
         "oracle_match_a_to_f": True, "switches": 1500}
    e.update(kw)
    return e


def auto_only(ok=True, config="v2-topk1", tp=1, error=None):
    auto = {"oracle_match": ok, "ok": ok, "ranks_agree_auto": True}
    r = {"config": config, "tp": tp, "phases": {}, "auto": auto, "auto_ok": ok, "ranks_agree_auto": True,
         "oracle_match": ok}
    if error:
        r = {"config": config, "tp": tp, "phases": {}, "error": error, "oracle_match": False}
    return r


def test_an_auto_only_run_merges_into_the_entry_with_phases_a_to_f(tmp_path):
    out = tmp_path / "gc.json"
    gc.write_json(out, [entry(), entry("v1-topk1")])
    gc.merge_result(out, auto_only(), gc.AUTO_ENTRY_KEYS)
    got = json.loads(out.read_text())
    assert [e["config"] for e in got] == ["v2-topk1", "v1-topk1"]
    assert got[0]["switches"] == 1500 and got[0]["phases"] and got[0]["auto_ok"] is True
    assert got[0]["oracle_match"] is True and "auto" not in got[1]
    # a failing auto phase turns the entry's verdict; a passing one later turns it back (A-F's own stays)
    gc.merge_result(out, auto_only(ok=False), gc.AUTO_ENTRY_KEYS)
    assert json.loads(out.read_text())[0]["oracle_match"] is False
    gc.merge_result(out, auto_only(), gc.AUTO_ENTRY_KEYS)
    assert json.loads(out.read_text())[0]["oracle_match"] is True
    # a run that failed outright says so in the entry
    gc.merge_result(out, auto_only(error="RuntimeError: exited"), gc.AUTO_ENTRY_KEYS)
    e = json.loads(out.read_text())[0]
    assert e["auto_error"] == "RuntimeError: exited" and e["auto_ok"] is False and e["oracle_match"] is False
    assert e["switches"] == 1500
    # an entry written before the auto phase existed: its oracle_match is A-F's
    gc.write_json(out, [{k: v for k, v in entry().items() if k != "oracle_match_a_to_f"}])
    gc.merge_result(out, auto_only(), gc.AUTO_ENTRY_KEYS)
    assert json.loads(out.read_text())[0]["oracle_match"] is True


def test_an_auto_only_run_without_an_entry_is_added_and_a_full_run_replaces(tmp_path):
    out = tmp_path / "gc.json"
    gc.merge_result(out, auto_only(tp=2), gc.AUTO_ENTRY_KEYS)
    gc.merge_result(out, auto_only(ok=False, tp=2), gc.AUTO_ENTRY_KEYS)  # an auto-only entry is replaced
    got = json.loads(out.read_text())
    assert len(got) == 1 and got[0]["auto_ok"] is False
    gc.merge_result(out, entry(tp=2))
    got = json.loads(out.read_text())
    assert len(got) == 1 and "auto" not in got[0] and got[0]["switches"] == 1500


def test_the_printed_line():
    rec = {**entry(), "worker_class": "EAGLEWorkerV2", "auto_ok": True, "ranks_agree_auto": True,
           "auto": {"ok": True, "crossover": 24, "auto_buckets": [1, 2]}}
    full = gc.result_line(rec)
    assert full["switches"] == 1500 and full["auto"] == {"ok": True, "crossover": 24} and full["auto_ok"] is True
    assert "auto" not in gc.result_line(rec, gc.CLASSIC_ONLY)
    only = gc.result_line(rec, gc.AUTO_ONLY)
    assert "switches" not in only and only["auto"]["crossover"] == 24 and only["worker_class"] == "EAGLEWorkerV2"
    json.dumps(full)


def test_the_options_are_checked_before_a_server_starts(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(gc, "run_config", lambda *a, **k: pytest.fail("no run after a bad option"))
    for argv in (["--auto", "--skip-auto"], ["--auto-peak", "65"], ["--auto-seconds", "0"]):
        with pytest.raises(SystemExit) as exc:
            gc.main(["--models", str(tmp_path), "--out", str(tmp_path / "o.json"), *argv])
        assert exc.value.code == 2
    assert "--auto-peak must be 1..64" in capsys.readouterr().err
    # fresh-user finds of 2026-12-04: tracebacks (KeyError, ValueError, FileNotFoundError) before
    for argv, message in ((["--configs", "bogus"], "--configs: unknown bogus"), (["--parallel", "0"], "--parallel"),
                          (["--tp", "0"], "--tp"), (["--switches", "-1"], "--switches"),
                          (["--mem-fraction", "5"], "--mem-fraction"),
                          (["--out", str(tmp_path / "no" / "o.json")], "no folder")):
        args = ["--models", str(tmp_path), "--out", str(tmp_path / "o.json"), *argv]
        with pytest.raises(SystemExit) as exc:
            gc.main(args)
        assert exc.value.code == 2 and message in capsys.readouterr().err, argv


# -- the whole phase against a stand-in server ------------------------------------------------------


class FakeAutoServer:
    """Decodes by the request: every /generate adds 10 decode steps; in auto mode every 4th request
    is a probe (a switch there and back) and batches of 8+ requests run OFF."""

    def __init__(self, oracle, ranks=2, wrong_every=0, split_rank=False):
        self.oracle, self.ranks, self.wrong_every, self.split_rank = oracle, ranks, wrong_every, split_rank
        self.lock = threading.Lock()
        self.mode, self.threshold = "manual", 64
        self.on, self.off, self.switches, self.probes, self.digest = 0, 0, 0, 0, 1
        self.in_flight, self.generated, self.max_in_flight = 0, 0, 0

    def generate(self, ids, n):
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            self.generated += 1
            if self.mode == "auto":
                if self.in_flight >= 8:
                    self.off += 10
                else:
                    self.on += 10
                if self.generated % 4 == 0:
                    self.probes += 1
                    self.switches += 2
                self.digest = (self.digest * 31 + self.generated) % 1_000_003
            else:
                self.on += 10
        out = self.oracle.chain(ids[-1], n)
        if self.wrong_every and self.generated % self.wrong_every == 0:
            out[-1] = (out[-1] + 1) % self.oracle.vocab
        import time

        time.sleep(0.05)
        with self.lock:
            self.in_flight -= 1
        return out

    def snapshot(self):
        with self.lock:
            ranks = [{"tp_rank": i, "decisions_digest": self.digest + (i if self.split_rank else 0),
                      "switches": self.switches, "decode_steps_on": self.on, "decode_steps_off": self.off,
                      "mode": self.mode, **{f"{k}_{s}": (5 if s == "checks" else 0)
                                            for k in gc.PROOF_KEYS for s in ("checks", "mismatches")}}
                     for i in range(self.ranks)]
            return {"worker_class": "EAGLEWorkerV2", "spec_version": "v2", "overlap": True, "off_cuda_graph": True,
                    "max_running_requests": gc.MAX_RR,
                    "mode": self.mode, "threshold": 8 if self.mode == "auto" else self.threshold,
                    "spec_enabled": self.in_flight < 8, "switches": self.switches, "decode_steps_on": self.on,
                    "decode_steps_off": self.off, "auto_probes": self.probes, "auto_probe_steps": 8 * self.probes,
                    "auto_probe_share": 0.01, "last_decode_batch_size": max(1, self.in_flight),
                    "auto_reason": "auto: ON at batch 1", "auto_buckets": [{"lo": 8, "hi": 11, "on": False}],
                    "ranks": ranks}


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
            self.reply({"internal_states": [{"spec_gate": fake.snapshot()}]})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if self.path == "/generate":
                sp = body["sampling_params"]
                self.reply({"output_ids": fake.generate(body["input_ids"], sp["max_new_tokens"]), "meta_info": {}})
            else:
                value = body["server_args"][THRESHOLD_KEY]
                fake.mode = "auto" if value == "auto" else "manual"
                self.reply({"updated": True, "reason": None, "threshold": value, "hysteresis": 0, "decode_step": 1})

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


OPTS = gc.AutoOptions(seconds=1.2, period_s=0.6, peak=12, output_len=8, extra_s=1.0, poll_s=0.05)


def run_phase(fake, rec=None):
    srv = serve(fake)
    rec = {} if rec is None else rec
    try:
        gc._auto_phase(rec, f"http://127.0.0.1:{srv.server_address[1]}", fake.oracle, OPTS)
    finally:
        srv.shutdown()
        srv.server_close()
    return rec


@pytest.fixture(scope="module")
def oracle():
    return oracle_from_maps(512, 0.2, 0)


def test_the_auto_phase_against_a_stand_in_server(oracle):
    fake = FakeAutoServer(oracle)
    rec = run_phase(fake, {"oracle_match": True})
    a = rec["auto"]
    assert rec["auto_ok"] is True, a["failed"]
    assert rec["oracle_match"] is True and rec["ranks_agree_auto"] is True and fake.mode == "auto"
    assert a["set_reply"]["threshold"] == "auto" and a["probes"] > 0 and a["switches"] > 0
    assert a["requests"] == fake.generated and a["all_requests_ended"] is True
    assert a["crossover"] == 8 and a["decisions_digest_equal"] is True
    # the load swept up (how far towards its peak depends on the machine's speed: no timing here) ...
    assert 2 < fake.max_in_flight <= OPTS.peak
    assert a["batch_sizes_seen"][0] <= 2  # ... and back down


def test_the_auto_phase_finds_a_wrong_token_and_disagreeing_ranks(oracle):
    rec = run_phase(FakeAutoServer(oracle, wrong_every=5, split_rank=True), {"oracle_match": True})
    assert rec["auto_ok"] is False and rec["oracle_match"] is False
    assert rec["auto"]["failed"] == ["oracle_match", "ranks_agree_auto"]
    assert rec["auto"]["first_mismatch"]["first_mismatch"] == OPTS.output_len - 1
    # A-F's verdict is and-ed, not overwritten
    rec = run_phase(FakeAutoServer(oracle), {"oracle_match": False})
    assert rec["auto_ok"] is True and rec["oracle_match"] is False


def test_main_auto_runs_only_the_auto_phase_and_merges_it(oracle, tmp_path, monkeypatch, capsys):
    """``--auto`` end to end with the server start replaced by the stand-in: no phase A-F runs, the
    entry of phases A-F in --out keeps them and gains ``auto``; one JSON line per config."""
    fake = FakeAutoServer(oracle, ranks=1)
    srv = serve(fake)
    started = []

    class Stub:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        ready_s = 1.0

        def log_text(self):
            return "spec_gate: worker=EAGLEWorkerV2 spec=v2 overlap=on threshold=64 hysteresis=0"

    monkeypatch.setattr(gc, "start_server", lambda name, args, port, log_dir: started.append(args) or Stub())
    monkeypatch.setattr(gc, "wait_ready", lambda server: None)
    monkeypatch.setattr(gc, "stop_server", lambda server: 0)
    monkeypatch.setattr(gc, "_classic_phases", lambda *a: pytest.fail("--auto runs no phase A-F"))
    monkeypatch.setattr(gc, "AutoOptions", lambda **kw: OPTS)
    (tmp_path / "pair").mkdir()
    oracle.save(tmp_path / "pair" / "oracle.json")
    out = tmp_path / "gc.json"
    gc.write_json(out, [entry()])
    try:
        gc.main(["--models", str(tmp_path / "pair"), "--out", str(out), "--configs", "v2-topk1", "--auto"])
    finally:
        srv.shutdown()
        srv.server_close()
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["config"] == "v2-topk1" and line["auto_ok"] is True, line
    assert line["error"] is None and "auto_buckets" not in line["auto"]
    (e,) = json.loads(out.read_text())
    assert e["switches"] == 1500 and e["auto"]["ok"] is True and e["auto"]["auto_buckets"]
    assert e["ranks_agree_auto"] is True and e["oracle_match"] is True
    assert len(started) == 1 and "--tp-size" in started[0]


# -- phase G (variable lengths while OFF) on scripted answers ----------------------------------------

def test_the_varied_lengths_phase_checks_every_request_and_the_groups_recovery(monkeypatch, oracle):
    """The group of four (9-150 prompt tokens) is checked for exact recovery at the position the OFF
    steps left it, every background request for exact output; the gate is forced off first and on
    after the background ended."""
    calls, state = [], {"off": 10, "on": 5, "resume": 2}
    group, background = gc.varied_prompts(oracle.vocab)
    assert [len(p) for p in group] == list(gc.VARIED_GROUP_LENS) and len(background) == gc.VARIED_BACKGROUND
    assert all(4 <= len(p) <= 160 and 16 <= n <= 200 for p, n in background)

    def set_gate(url, **kw):
        calls.append(("set", kw))
        if kw["threshold"] != 1:  # ON: the resume step, then ON steps of the group
            state["resume"] += 1
            state["on"] += 40

    def spec_gate(url):
        state["off"] += 100  # OFF steps pass while the phase polls
        return {"decode_steps_off": state["off"], "decode_steps_on": state["on"], "off_resume_steps": state["resume"],
                "accept_length_first_on_step": 2.5, "accept_length_since_on": 2.75, "steps_since_on": 40}

    def check_batch(url, oracle_, prompts, n):
        calls.append(("batch", [len(p) for p in prompts], n))
        return True, [{"match": True, "spec_verify_ct": 300} for _ in prompts]

    seen = {}

    def check_recovery(oracle_, phase, num_steps, resume_steps, prompts=None):
        seen.update(phase=dict(phase), resume_steps=resume_steps, prompts=prompts)
        return {"recovery_matches_oracle": True, "committed_at_on": 1 + phase["off_steps_before_on"] + resume_steps}

    monkeypatch.setattr(gc, "set_gate", set_gate)
    monkeypatch.setattr(gc, "spec_gate", spec_gate)
    monkeypatch.setattr(gc, "check_batch", check_batch)
    monkeypatch.setattr(gc, "check_one", lambda url, o, p, n: {"match": len(p) != 13})  # one bad request
    monkeypatch.setattr(gc, "check_recovery", check_recovery)
    rec = gc.varied_lengths_phase("http://x", oracle, 3)
    assert calls[0] == ("set", {"threshold": 1, "hysteresis": 0}) and calls[-1] == ("set", {"threshold": gc.MAX_RR})
    assert ("batch", list(gc.VARIED_GROUP_LENS), gc.VARIED_GROUP_NEW_TOKENS) in calls
    assert seen["prompts"] == group and seen["resume_steps"] == 1
    assert rec["off_steps_before_on"] == state["off"] - 110 and rec["steps_counted"] == 40
    assert rec["group_ok"] is True and rec["recovery_matches_oracle"] is True
    bad = any(len(p) == 13 for p, _ in background)
    assert rec["background_ok"] is (not bad) and rec["oracle_match"] is (not bad)


# -- --forced-on-only: phase A alone, a quick check of the ON path -----------------------------------

def test_forced_on_only_runs_phase_a_alone_and_keeps_whole_entries(oracle, tmp_path, monkeypatch, capsys):
    """``--forced-on-only``: phase A against the oracle (outputs and each request's verify count),
    no phase B-F or auto; its entry carries ``only`` and never replaces a whole run's entry."""
    prompts = gc.make_prompts(oracle.vocab, 16, 32, 1)
    want = [oracle.spec_decode(p, 128, gc.CONFIGS["v1-topk1"]["num_steps"])["verify_ct"] for p in prompts]
    # the draft verifies twice as often as the oracle's trace on the third request (a stale draft)
    results = [{"match": True, "spec_verify_ct": n * (2 if i == 2 else 1)} for i, n in enumerate(want)]

    class Stub:
        url = "http://stub"
        ready_s = 1.0

        def log_text(self):
            return "spec_gate: worker=EAGLEWorker spec=v1 overlap=off threshold=64 hysteresis=0"

    g = {"worker_class": "EAGLEWorker", "spec_version": "v1", "overlap": False, "off_cuda_graph": True,
         "max_running_requests": 64, "decode_steps_on": 127, "accept_length_recent": 1.36}
    monkeypatch.setattr(gc, "start_server", lambda name, args, port, log_dir: Stub())
    monkeypatch.setattr(gc, "wait_ready", lambda server: None)
    monkeypatch.setattr(gc, "stop_server", lambda server: 0)
    monkeypatch.setattr(gc, "spec_gate", lambda url: g)
    monkeypatch.setattr(gc, "check_many", lambda url, o, p, n, c: (True, results))
    monkeypatch.setattr(gc, "_classic_phases", lambda *a: pytest.fail("--forced-on-only runs no phase B-F"))
    monkeypatch.setattr(gc, "_auto_phase", lambda *a: pytest.fail("--forced-on-only runs no auto phase"))
    (tmp_path / "pair").mkdir()
    oracle.save(tmp_path / "pair" / "oracle.json")
    out = tmp_path / "gc.json"
    gc.write_json(out, [entry(config="v1-topk1")])
    gc.main(["--models", str(tmp_path / "pair"), "--out", str(out), "--configs", "v1-topk1", "--forced-on-only"])
    (line,) = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert line["oracle_match"] is True and line["forced_on_verify_ct_matches_oracle"] is False
    assert line["accept_length_before_off"] == 1.36 and "auto_ok" not in line
    whole, quick = json.loads(out.read_text())
    assert whole["switches"] == 1500 and "only" not in whole  # the whole run's entry is kept
    assert quick["only"] == "forced-on" and list(quick["phases"]) == ["A_forced_on"]
    assert quick["phases"]["A_forced_on"]["spec_verify_ct_oracle"] == want


def test_forced_on_only_excludes_the_other_phase_options(monkeypatch, tmp_path):
    monkeypatch.setattr(gc, "run_config", lambda *a, **k: pytest.fail("no run after a bad option"))
    with pytest.raises(SystemExit) as exc:
        gc.main(["--models", str(tmp_path), "--out", str(tmp_path / "o.json"), "--forced-on-only", "--skip-auto"])
    assert exc.value.code == 2


def test_servers_on_one_gpu_start_one_at_a_time_and_a_failed_start_is_recorded(oracle, tmp_path, monkeypatch):
    """SGLang sizes a KV pool from the memory free when the server starts, so three servers starting
    at once raced (h100-2026-12-06f / 06g: the third "Not enough memory"): each start waits until
    the previous server is ready; a start that fails is that config's error, the others run."""
    import threading as th
    import time as tm

    live, most, lock = [0], [0], th.Lock()

    class Stub:
        url = "http://stub"
        ready_s = 1.0

        def __init__(self, name):
            self.name = name

        def log_text(self):
            return ""

        def log_tail(self, n):
            return "Not enough memory. Please try to increase --mem-fraction-static."

    def ready(server):
        with lock:
            live[0] += 1
            most[0] = max(most[0], live[0])
        tm.sleep(0.05)
        with lock:
            live[0] -= 1
        if "v1-topk4" in server.name:
            raise RuntimeError("gate-v1-topk4 exited with -9: Not enough memory")

    monkeypatch.setattr(gc, "start_server", lambda name, args, port, log_dir: Stub(name))
    monkeypatch.setattr(gc, "wait_ready", ready)
    monkeypatch.setattr(gc, "stop_server", lambda server: 0)
    monkeypatch.setattr(gc, "spec_gate", lambda url: {"worker_class": "EAGLEWorker", "spec_version": "v1",
                                                      "overlap": False, "off_cuda_graph": True,
                                                      "max_running_requests": 64})
    monkeypatch.setattr(gc, "_auto_phase", lambda rec, *a: rec.update(oracle_match=True))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=3) as pool:
        futs = [pool.submit(gc.run_config, n, tmp_path, oracle, 30000 + i, tmp_path, tp=1, switches_target=1,
                            mem_fraction=0.25, phases=gc.AUTO_ONLY) for i, n in enumerate(("v2-topk1", "v1-topk1", "v1-topk4"))]
        recs = [f.result() for f in futs]
    assert most[0] == 1
    assert [r.get("error") is None for r in recs] == [True, True, False]
    assert "Not enough memory" in recs[2]["error"] and recs[0]["oracle_match"] is True


def test_a_bad_port_or_results_file_is_refused_before_anything_is_built(monkeypatch, capsys, tmp_path):
    """A fresh user's runs: --base-port 70000 built the models, then a traceback (OverflowError); a
    port already listened on, a traceback; an --out holding a JSON object was rewritten as a list
    (its values lost) and one holding anything else failed after every server had run."""
    import socket

    monkeypatch.setattr(gc, "load_pair", lambda ap, a: pytest.fail("nothing built after a bad option"))
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    obj, text = tmp_path / "obj.json", tmp_path / "passwd"
    obj.write_text('{"x": 1}')
    text.write_text("root:x:0:0\n")
    cases = ((["--base-port", "70000"], "must lie in 1024-65535"),
             (["--base-port", str(port), "--configs", "v1-topk1"], f"port {port} (v1-topk1's server) is already in use"),
             (["--out", str(obj)], "holds a JSON dict"),
             (["--out", str(text)], "not a gate_correctness results file"))
    try:
        for argv, message in cases:
            args = ["--models", str(tmp_path), "--out", str(tmp_path / "o.json"), *argv]
            with pytest.raises(SystemExit) as exc:
                gc.main(args)
            assert exc.value.code == 2
            assert message in capsys.readouterr().err, argv
    finally:
        taken.close()
    assert obj.read_text() == '{"x": 1}'
