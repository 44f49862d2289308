"""server_patch/auto_trace.py (the opt-in record of decode results) and bench/auto_trace.py (what the
auto threshold's samples were made of)."""

from __future__ import annotations

import gzip
import json
import types

import pytest

from bench import auto_trace as bench_trace
from server_patch import auto_threshold as auto
from server_patch import auto_trace, proof, scheduler_hooks


def test_the_record_is_off_unless_asked_for_and_only_on_tp_rank_0(tmp_path):
    path = tmp_path / "trace.jsonl"
    assert auto_trace.open_for(0, {}) is None
    assert auto_trace.open_for(1, {auto_trace.ENV: str(path)}) is None
    assert auto_trace.open_for(0, {auto_trace.ENV: str(tmp_path / "no" / "such" / "dir" / "t")}) is None  # warned
    assert auto_trace.open_for(0, {auto_trace.ENV: str(path)}) is not None


def test_each_decode_result_is_one_line_with_what_the_step_timer_saw(tmp_path):
    """GateRuntime.on_decode_result writes the result's forward iteration, the moment, its kind,
    batch size, KV tokens, output tokens, whether a proof check ran and whether the table was rebuilt."""
    path = tmp_path / "trace.jsonl"
    rt = types.SimpleNamespace(step_timer=auto.StepTimer(), step_tokens=7, _checks_at_result=proof.checks_run(),
                               gate=types.SimpleNamespace(record_step=lambda *a: None, record_period=lambda *a: None),
                               trace=auto_trace.StepTrace(str(path)), _table_rebuilt=False)
    on = types.SimpleNamespace()
    off = types.SimpleNamespace(**{scheduler_hooks.OFF_RESULT_ATTR: True})
    batch = types.SimpleNamespace(forward_iter=10, batch_size=lambda: 4, seq_lens_sum=2_000)
    scheduler_hooks.GateRuntime.on_decode_result(rt, batch, on)
    rt._table_rebuilt = True  # sync_table ran before the next batch
    proof.note_check()
    scheduler_hooks.GateRuntime.on_decode_result(rt, types.SimpleNamespace(**{**vars(batch), "forward_iter": 11}), off)
    rt.trace.flush()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(d["i"], d["k"], d["bs"], d["ctx"], d["tok"], d["clean"], d["tbl"]) for d in lines] == [
        (10, "on", 4, 2_000, 7, True, False), (11, "off", 4, 2_000, 4, False, True)]
    assert lines[1]["t"] >= lines[0]["t"] and rt._table_rebuilt is False


def test_the_context_of_an_overlap_scheduler_copy_comes_from_seq_lens_cpu():
    """The batch the overlap scheduler processes a result with is ScheduleBatch.copy(): no
    seq_lens_sum (None), only seq_lens_cpu (07e's record had a null context on every line)."""
    torch = pytest.importorskip("torch")
    copy = types.SimpleNamespace(seq_lens_sum=None, seq_lens_cpu=torch.tensor([300, 500, 1_200]))
    assert auto_trace.context_tokens(copy) == 2_000
    assert auto_trace.context_tokens(types.SimpleNamespace(seq_lens_sum=77, seq_lens_cpu=None)) == 77
    assert auto_trace.context_tokens(types.SimpleNamespace()) is None
    assert auto_trace.context_tokens(types.SimpleNamespace(seq_lens_cpu="not a tensor")) is None


def test_values_it_cannot_write_never_reach_the_scheduler_as_an_error(tmp_path, caplog):
    """A tensor or an object where a number was expected is written as null; something that cannot
    even be turned into a float stops the record with a warning instead of raising."""
    trace = auto_trace.StepTrace(str(tmp_path / "t.jsonl"))
    trace.add(1, 1.0, "on", 4, object(), 2.5, True, False)
    trace.flush()
    assert json.loads((tmp_path / "t.jsonl").read_text())["ctx"] is None
    trace.add(2, object(), "on", 4, 10, 8, True, False)  # now_s not a number
    assert trace._file is None and "stopped" in caplog.text


def test_a_write_that_fails_stops_the_record_and_the_server_goes_on(tmp_path, caplog):
    trace = auto_trace.StepTrace(str(tmp_path / "t.jsonl"))
    trace._file.close()  # as a full disk or a closed file would: the write raises
    for i in range(auto_trace.FLUSH_LINES + 1):
        trace.add(i, float(i), "on", 1, 10, 2, True, False)
    assert trace._file is None and "stopped" in caplog.text


def _write(path, steps, gz=False):
    text = "\n".join(json.dumps(d) for d in steps) + "\n"
    if gz:
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)


def _run(t0, i0, kind, n, bs, step_s, ctx=500, first_slow=0, slow_s=0.0, tok=None):
    """``n`` contiguous decode results of one kind from iteration ``i0`` at ``t0``; the first
    ``first_slow`` periods take ``slow_s``."""
    out, t = [], t0
    for j in range(n):
        t += slow_s if j < first_slow else step_s
        out.append({"i": i0 + j, "t": t, "k": kind, "bs": bs, "ctx": (ctx + j) * bs,
                    "tok": tok if tok is not None else bs, "clean": True, "tbl": False})
    return out, t


def test_samples_soon_after_a_switch_show_apart_from_steady_ones(tmp_path):
    """A record where each ON run's first three periods take 14 ms and the rest 10 ms (as ON steps
    measured soon after a switch would if they were slower): the samples at run positions 2-4 read
    14, the steady ones 10, and the server's own estimate (the samples' EMA) sits between."""
    steps, t, i = [], 0.0, 0
    for _ in range(6):
        got, t = _run(t, i, "off", 40, 4, 0.006)
        steps += got
        i += 40
        got, t = _run(t, i, "on", 30, 4, 0.010, first_slow=4, slow_s=0.014, tok=8)
        steps += got
        i += 30
    path = tmp_path / "trace.jsonl.gz"
    _write(path, steps, gz=True)
    out = bench_trace.summarize(bench_trace.read_trace(path))
    on = next(b for b in out["buckets"] if b["mode"] == "on" and b["batch"] == "4-5")
    table = bench_trace.format_table(out)  # the same numbers as one markdown table
    assert table.splitlines()[0] == f"{out['decode_results']} decode results, {out['samples']} samples"
    assert f"| 4-5 | on | {on['samples']['n']} | {on['samples']['mean_ms']:.2f} |" in table
    short = on["by_context"]["short"]
    assert f"{short['mean_ms']:.2f} ({short['tokens_per_request'][0]}-{short['tokens_per_request'][1]})" in table
    assert on["by_run_position"]["2-4"]["median_ms"] == pytest.approx(14.0)
    assert on["by_run_position"]["17+"]["median_ms"] == pytest.approx(10.0)
    assert on["samples"]["tok_per_req"] == pytest.approx(2.0)
    off = next(b for b in out["buckets"] if b["mode"] == "off")
    assert off["samples"]["median_ms"] == pytest.approx(6.0)
    assert off["samples"]["mean_bs"] == on["samples"]["mean_bs"] == off["all_steps"]["mean_bs"] == 4
    assert off["all_steps"]["n"] == 6 * 39


def test_a_prefill_between_two_decode_steps_shows_as_its_cost_in_each_mode(tmp_path):
    """Every fifth decode result of a run comes after a prefill (its forward iteration skips one):
    ON steps 10 ms and 17 ms with the prefill, OFF steps 6 and 9 ms: the prefill costs ON 7 ms and
    OFF 3 ms (what auto's decode-step samples leave out), and no such period is a sample."""
    steps, t, i = [], 0.0, 0
    for kind, step_s, with_prefill_s in (("on", 0.010, 0.017), ("off", 0.006, 0.009)) * 3:
        for j in range(40):
            prefill = j % 5 == 4
            i += 2 if prefill else 1
            t += with_prefill_s if prefill else step_s
            steps.append({"i": i, "t": t, "k": kind, "bs": 16, "ctx": 500 * 16, "tok": 16 * (3 if kind == "on" else 1),
                          "clean": True, "tbl": False})
    path = tmp_path / "trace.jsonl"
    _write(path, steps)
    out = bench_trace.summarize(bench_trace.read_trace(path))
    got = {b["mode"]: b for b in out["buckets"]}
    assert got["on"]["one_prefill_between"]["extra_ms"] == pytest.approx(7.0)
    assert got["off"]["one_prefill_between"]["extra_ms"] == pytest.approx(3.0)
    assert got["on"]["one_prefill_between"]["n"] == 3 * 8  # 8 of each run's 40 (the first has no predecessor of its kind)
    assert got["on"]["samples"]["median_ms"] == pytest.approx(10.0) and got["off"]["samples"]["median_ms"] == pytest.approx(6.0)
    assert "| 16-23 | on |" in bench_trace.format_table(out) and "| 24, 7.00 |" in bench_trace.format_table(out)


def test_a_step_time_that_grows_with_the_context_shows_in_the_tertiles(tmp_path):
    steps, t = [], 0.0
    for j in range(90):
        ctx = 100 + 20 * j
        t += 0.010 + ctx * 1e-6  # 1 ms more per 1,000 tokens of context
        steps.append({"i": j, "t": t, "k": "on", "bs": 1, "ctx": ctx, "tok": 2, "clean": True, "tbl": False})
    path = tmp_path / "trace.jsonl"
    _write(path, steps)
    (entry,) = bench_trace.summarize(bench_trace.read_trace(path))["buckets"]
    low, mid, high = (entry["by_context"][k] for k in ("short", "middle", "long"))
    assert low["mean_ms"] < mid["mean_ms"] < high["mean_ms"]
    assert high["mean_ms"] - low["mean_ms"] == pytest.approx(1.2, abs=0.1)
    assert low["tokens_per_request"][0] < high["tokens_per_request"][1]


def test_one_context_length_still_gives_three_groups_of_the_samples(tmp_path):
    """A fresh user's find: tertiles named by their rounded range overwrote each other when the
    context hardly varied (1,998 samples, 666 shown)."""
    steps, _ = _run(0.0, 0, "on", 300, 1, 0.010, ctx=100)
    for d in steps:
        d["ctx"] = 100
    path = tmp_path / "trace.jsonl"
    _write(path, steps)
    (entry,) = bench_trace.summarize(bench_trace.read_trace(path))["buckets"]
    assert sum(g["n"] for g in entry["by_context"].values()) == entry["samples"]["n"] == 298


def test_bad_traces_say_why(tmp_path, capsys):
    assert bench_trace.main([str(tmp_path / "missing.jsonl")]) == 1
    assert "missing.jsonl" in capsys.readouterr().err
    junk = tmp_path / "junk.jsonl"
    junk.write_text("not json\n{\"t\": 1}\n")
    assert bench_trace.main([str(junk)]) == 1
    assert "no decode results" in capsys.readouterr().err
    mixed = tmp_path / "mixed.jsonl"
    steps, _ = _run(0.0, 0, "off", 20, 8, 0.005)
    _write(mixed, steps)
    mixed.write_text(mixed.read_text() + "garbage\n")
    assert bench_trace.main([str(mixed), "--min-samples", "4"]) == 0
    captured = capsys.readouterr()
    assert "1 line(s) that are not trace lines skipped" in captured.err
    assert json.loads(captured.out)["samples"] == 18


@pytest.mark.parametrize("bad", ['{"i": 1, "t": NaN, "k": "on", "bs": 1}', '{"i": 1, "t": Infinity, "k": "on", "bs": 1}',
                                 '{"i": 1, "t": 1, "k": "on", "bs": 1, "ctx": Infinity}',
                                 '{"i": 1, "t": 1, "k": "on", "bs": 1, "tok": 1' + "0" * 400 + '}',
                                 '{"i": true, "t": 1, "k": "on", "bs": 1}', '{"i": 1, "t": 1, "k": "on", "bs": true}',
                                 '{"i": 1, "t": 1, "k": "on", "bs": 1, "clean": "false"}'])
def test_a_line_with_a_number_that_is_not_finite_or_a_field_of_the_wrong_type_is_skipped(tmp_path, capsys, bad):
    """A fresh user's finds: NaN printed as invalid JSON, Infinity and 400-digit integers ended in tracebacks."""
    steps, _ = _run(0.0, 0, "off", 20, 8, 0.005)
    path = tmp_path / "trace.jsonl"
    _write(path, steps)
    path.write_text(path.read_text() + bad + "\n")
    assert bench_trace.main([str(path), "--min-samples", "4"]) == 0
    captured = capsys.readouterr()
    assert "1 line(s) that are not trace lines skipped" in captured.err
    assert json.loads(captured.out)["samples"] == 18  # strict JSON: no NaN


def test_a_damaged_gzip_and_periods_that_do_not_advance_are_said_not_tracebacks(tmp_path, capsys):
    steps, _ = _run(0.0, 0, "on", 40, 2, 0.010, tok=4)
    good = tmp_path / "good.jsonl.gz"
    _write(good, steps, gz=True)
    data = bytearray(good.read_bytes())
    data[len(data) // 2] ^= 0xFF  # inside the deflate stream
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(bytes(data))
    assert bench_trace.main([str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    backwards = [{**d, "t": 100.0 - d["t"]} for d in steps]  # time runs backwards: no positive period
    path = tmp_path / "backwards.jsonl"
    _write(path, backwards)
    assert bench_trace.main([str(path)]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["samples"] == 0 and "no bucket and mode with 8 or more samples" in captured.err


def test_two_server_runs_appended_to_one_file_are_said(tmp_path, capsys):
    first, _ = _run(0.0, 1, "off", 20, 8, 0.005)
    second, _ = _run(50.0, 1, "off", 20, 8, 0.009)
    path = tmp_path / "trace.jsonl"
    _write(path, first + second)
    assert bench_trace.main([str(path), "--min-samples", "4"]) == 0
    assert "the forward iteration went back 1 time(s)" in capsys.readouterr().err
