"""``bench.trace_summary``: GPU busy time, gaps and CPU syncs from a profiler trace."""

import gzip
import json

import pytest

from bench import trace_summary


def ev(cat, name, ts, dur):
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur}


TRACE = [
    ev("kernel", "gemm", 0, 100), ev("kernel", "attn", 50, 100),  # overlap: busy 0-150
    ev("gpu_memcpy", "DtoH", 200, 10),                            # gap 50 us
    ev("kernel", "gemm", 1210, 90),                               # gap 1000 us
    ev("cuda_runtime", "cudaGraphLaunch", 0, 5), ev("cuda_runtime", "cudaGraphLaunch", 1200, 5),
    ev("cuda_runtime", "cudaEventSynchronize", 300, 800),
    ev("cuda_runtime", "cudaMemcpyAsync", 210, 3),                # short async copy: not a sync
    ev("cpu_op", "ProfilerStep#1", 0, 600), ev("cpu_op", "ProfilerStep#2", 600, 700),
    {"ph": "M", "name": "process_name"},
]


def test_busy_gaps_launches_and_syncs():
    s = trace_summary.summarize(TRACE, gap_us=20)
    assert s["window_ms"] == 1.3 and s["gpu_busy_ms"] == 0.25
    assert s["gpu_busy_frac"] == pytest.approx(0.25 / 1.3, abs=1e-4)
    assert s["gaps"] == {"threshold_us": 20, "count": 2, "total_ms": 1.05, "longest_ms": 1.0}
    assert s["graph_launches"] == 2 and s["steps"] == 2
    assert s["syncs"] == {"cudaEventSynchronize": {"count": 1, "total_ms": 0.8}}
    assert s["top_gpu"] == [  # by total time: gemm 100 + 90 us, then attn, then the copy
        {"name": "gemm", "count": 2, "total_ms": 0.19, "mean_us": 95.0},
        {"name": "attn", "count": 1, "total_ms": 0.1, "mean_us": 100.0},
        {"name": "DtoH", "count": 1, "total_ms": 0.01, "mean_us": 10.0},
    ]
    assert [k["name"] for k in trace_summary.summarize(TRACE, top=1)["top_gpu"]] == ["gemm"]


def test_cpu_only_trace_is_refused():
    with pytest.raises(ValueError, match="no GPU activity"):
        trace_summary.summarize([ev("cpu_op", "aten::mm", 0, 5)])


def test_cli_reads_gz_by_content(tmp_path, capsys):
    path = tmp_path / "x-TP-0.trace.json"  # gzip content whatever the name
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": TRACE}, f)
    trace_summary.main([str(path)])
    assert json.loads(capsys.readouterr().out)[str(path)]["graph_launches"] == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"nope": 1}')
    with pytest.raises(SystemExit, match="not a Chrome trace"):
        trace_summary.main([str(bad)])


def test_profile_decode_records_and_summarizes_the_server_trace(tmp_path, monkeypatch):
    """``bench.throughput run --profile C``: load in the background, /start_profile, then the
    trace SGLang wrote is summarized (server and bench_serving stubbed)."""
    import httpx

    from bench import throughput

    monkeypatch.setattr(throughput, "PROFILE_DELAY_S", 0.0)
    monkeypatch.setattr(throughput, "bench_serving", lambda *a, **k: {"output_throughput": 1.0})
    posted = {}

    def fake_post(url, timeout, json):  # noqa: A002 - httpx's keyword
        posted.update(url=url, body=json)
        out = tmp_path / "out" / "profile-gate-c128"
        with gzip.open(out / "123-TP-0.trace.json.gz", "wt") as f:
            import json as j
            j.dump({"traceEvents": TRACE}, f)
        return httpx.Response(200)

    monkeypatch.setattr(httpx, "post", fake_post)
    monkeypatch.setattr("time.sleep", lambda s: None)
    rec = throughput.profile_decode("http://h:1", 1, "gate", 128, tmp_path / "out", tmp_path)
    assert posted["url"] == "http://h:1/start_profile"
    assert posted["body"]["activities"] == ["CPU", "GPU"] and posted["body"]["num_steps"] == throughput.PROFILE_STEPS
    # SGLang records Python stacks unless told not to (a 340 MB trace that stalled a server)
    assert posted["body"]["with_stack"] is False and posted["body"]["record_shapes"] is False
    assert rec["start_profile"] == 200
    assert rec["summaries"]["123-TP-0.trace.json.gz"]["graph_launches"] == 2


@pytest.mark.parametrize("content", ["[1, 2, 3]", '{"traceEvents": ["x"]}', '{"traceEvents": [{"ph": "X", "cat": "kernel", "ts": "a", "dur": 1}]}'])
def test_malformed_traces_are_one_line_errors_naming_the_file_once(tmp_path, content):
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(SystemExit) as exc:
        trace_summary.main([str(path)])
    message = str(exc.value.code)
    assert message.count(str(path)) == 1 and "\n" not in message


def test_bad_flags_and_a_directory_are_usage_errors(tmp_path, capsys):
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": TRACE}))
    for argv, says in (([str(tmp_path)], "is a directory"), ([str(path), "--gap-us", "-1"], "--gap-us must be"),
                       ([str(path), "--gap-us", "nan"], "--gap-us must be"), ([str(path), "--top", "0"], "--top must be")):
        with pytest.raises(SystemExit) as exc:
            trace_summary.main(argv)
        assert exc.value.code == 2 and says in capsys.readouterr().err


def test_non_finite_times_are_refused_and_good_files_are_still_summarized(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"traceEvents": TRACE}))
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": -5}]}')
    with pytest.raises(SystemExit) as exc:
        trace_summary.main([str(good), str(bad)])
    assert str(bad) in str(exc.value.code) and "not a time" in str(exc.value.code)
    printed = json.loads(capsys.readouterr().out)  # valid JSON (no NaN), with the good file
    assert list(printed) == [str(good)]


# -- stages: live traffic windows, classified by SGLang's step[...] spans ------------------------------

class Kineto:
    """A small trace shaped like torch.profiler's chrome export of an SGLang 0.5.12 scheduler:
    ``user_annotation`` spans ``step[MODE bs=B]`` on the scheduler thread (pid/tid 100), launches
    (``cuda_runtime``, or ``cuda_driver`` for Triton) with a ``correlation`` id, and the GPU
    activities they launched on stream 7 carrying the same id (a CUDA graph's kernels share their
    ``cudaGraphLaunch``'s)."""

    def __init__(self):
        self.events = [{"ph": "M", "name": "process_name", "pid": 100, "args": {"name": "python"}}]
        self.corr = 0

    def span(self, name, ts, dur):
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 100, "tid": 100,
                            "ts": ts, "dur": dur, "args": {"External id": 1}})
        # torch also projects the span onto the GPU timeline; it is not GPU work
        self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": 7,
                            "ts": ts, "dur": dur})

    def launch(self, ts, kernels, name="cudaLaunchKernel", cat="cuda_runtime"):
        self.corr += 1
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": 4,
                            "args": {"correlation": self.corr, "cbid": 211}})
        self.events.append({"ph": "s", "cat": "ac2g", "name": "ac2g", "id": self.corr, "pid": 100, "tid": 100,
                            "ts": ts})
        for kname, start, dur in kernels:
            self.events.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7, "ts": start,
                                "dur": dur, "args": {"correlation": self.corr, "stream": 7, "device": 0}})

    def orphan(self, kname, start, dur):  # launched before the profiler started
        self.events.append({"ph": "X", "cat": "kernel", "name": kname, "pid": 0, "tid": 7, "ts": start,
                            "dur": dur, "args": {"correlation": 99999, "stream": 7}})


def none_trace():
    """No speculation: a prefill, then two decode steps (CUDA graphs), with sampling between."""
    k = Kineto()
    k.orphan("gemm_prev_step", 50, 50)                                     # GPU 50-100
    k.span("step[EXTEND bs=2 toks=600]", 0, 300)
    k.launch(10, [("gemm_prefill", 100, 300)])                             # GPU 100-400
    k.launch(20, [("triton_attn_prefill", 400, 200)], "cuLaunchKernel", "cuda_driver")  # 400-600
    k.launch(310, [("sample", 600, 20)])                                   # outside a span: other
    k.span("step[DECODE bs=64]", 650, 50)                                  # GPU idle 620-700
    k.launch(660, [("gemm_decode", 700, 200), ("attn_decode", 900, 100)], "cudaGraphLaunch")
    k.launch(710, [("sample", 1000, 10)])
    k.span("step[DECODE bs=64]", 1020, 30)                                 # GPU idle 1010-1050
    k.launch(1030, [("gemm_decode", 1050, 200), ("attn_decode", 1250, 100)], "cudaGraphLaunch")
    return k.events


def off_trace():
    """The EAGLE server forced off: target prefill + draft prefill (same bs and toks), an OFF step
    (TARGET_VERIFY, one token per request) and its KV-only draft extend (a graph outside any span)."""
    k = Kineto()
    k.span("step[EXTEND bs=2 toks=600]", 0, 300)
    k.launch(10, [("gemm_prefill", 100, 500)])                             # GPU 100-600
    k.launch(310, [("sample", 600, 20)])
    k.span("step[EXTEND bs=2 toks=600]", 320, 80)                          # the draft's prefill
    k.launch(330, [("draft_fc_gemm", 620, 60)])                            # GPU 620-680
    k.span("step[TARGET_VERIFY bs=64]", 700, 50)                           # GPU idle 680-750
    k.launch(710, [("gemm_decode", 750, 300)], "cudaGraphLaunch")          # 750-1050
    k.launch(760, [("kv_only_qkv", 1050, 30)], "cudaGraphLaunch")          # draft graph
    k.launch(770, [("accept", 1080, 10)])                                  # 1080-1090
    k.launch(780, [("draft_topk", 1085, 10)], "cudaGraphLaunch")           # overlaps accept: shared
    return k.events


def test_stages_of_a_window_without_speculation_sum_to_the_window():
    st = trace_summary.stage_summary(none_trace())
    assert st["speculative"] is False and st["window_ms"] == 1.3 and st["gpu_busy_ms"] == 1.18
    stages = st["stages"]
    assert {c: v["total_ms"] for c, v in stages.items()} == {
        "decode": 0.72, "prefill": 0.5, "unattributed": 0.05, "other": 0.03}
    # idle ended by the decode steps' kernels (620-700, 1010-1050) is charged to decode
    assert (stages["decode"]["busy_ms"], stages["decode"]["idle_before_ms"]) == (0.6, 0.12)
    assert stages["prefill"]["top"][0] == {"name": "gemm_prefill", "count": 1, "total_ms": 0.3}
    assert [t["name"] for t in stages["prefill"]["top"]] == ["gemm_prefill", "triton_attn_prefill"]  # cuda_driver
    assert sum(v["total_ms"] for v in stages.values()) == pytest.approx(st["window_ms"])
    steps = st["steps"]  # cut where each target forward starts on the GPU: 100, 700, 1050
    assert steps["lead_in"] == {"steps": 0, "wall_ms": 0.05, "busy_ms": 0.05, "idle_ms": 0.0, "requests": 0,
                                "modes": {}}
    assert steps["prefill"] == {"steps": 1, "wall_ms": 0.6, "busy_ms": 0.52, "idle_ms": 0.08, "requests": 2,
                                "modes": {"EXTEND": 1}}
    assert steps["decode"] == {"steps": 2, "wall_ms": 0.65, "busy_ms": 0.61, "idle_ms": 0.04, "requests": 128,
                               "modes": {"DECODE": 2}}
    # the thread's time from the prefill span's end (300) to the next forward span (650); the last decode
    # span has no next
    assert st["cpu"]["prefill"] == {"spans": 1, "span_ms": 0.3, "span_wait_ms": 0.0, "requests": 2, "tokens": 600,
                                    "modes": {"EXTEND": 1}, "to_next_ms": 0.35, "to_next_wait_ms": 0.0, "followed": 1,
                                    "ops_to_next": {}}
    assert (st["cpu"]["decode"]["to_next_ms"], st["cpu"]["decode"]["followed"]) == (0.32, 1)
    # a wait for the GPU on the scheduler thread between them (400-500, half of it inside a second one)
    waits = [{"ph": "X", "cat": "cuda_runtime", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur}
             for name, ts, dur in (("cudaEventSynchronize", 400, 100), ("cudaStreamSynchronize", 450, 20),
                                   ("cudaLaunchKernel", 520, 10))]
    # and the ATen ops run between them: top level only (a copy inside a cat is the cat's)
    ops = [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur}
           for name, ts, dur in (("aten::cat", 320, 30), ("aten::copy_", 325, 5), ("aten::cat", 360, 10),
                                 ("aten::add", 700, 5))]  # the last one after the next span's start
    waited = trace_summary.stage_summary(none_trace() + waits + ops)["cpu"]["prefill"]
    assert (waited["to_next_ms"], waited["to_next_wait_ms"], waited["span_wait_ms"]) == (0.35, 0.1, 0.0)
    assert waited["ops_to_next"] == {"aten::cat": [2, 40.0]}
    assert st["tokens"]["output_tokens"] == 130  # 64 + 64 decode, 2 first tokens of the prefill
    assert set(st["legend"]) == set(stages)


def test_draft_prefill_off_step_and_draft_graph_are_told_apart():
    st = trace_summary.stage_summary(off_trace(), tokens_per_verify=1.0)
    assert st["speculative"] is True  # from the TARGET_VERIFY span
    stages = st["stages"]
    assert stages["prefill"]["busy_ms"] == 0.5 and stages["draft_prefill"]["busy_ms"] == 0.06
    assert stages["draft_prefill"]["top"][0]["name"] == "draft_fc_gemm"
    assert (stages["decode"]["busy_ms"], stages["decode"]["idle_before_ms"]) == (0.3, 0.07)  # TARGET_VERIFY
    assert stages["draft"]["top"] == [{"name": "kv_only_qkv", "count": 1, "total_ms": 0.03},
                                      {"name": "draft_topk", "count": 1, "total_ms": 0.01}]
    # accept (other) 1080-1090 and draft_topk (draft) 1085-1095 overlap: the 5 us they share are halved
    assert stages["other"]["busy_ms"] == pytest.approx(0.02 + 0.0075, abs=6e-4)
    assert stages["draft"]["busy_ms"] == pytest.approx(0.03 + 0.0075, abs=6e-4)
    assert sum(v["total_ms"] for v in stages.values()) == pytest.approx(st["window_ms"])
    assert st["steps"]["prefill"]["steps"] == 1 and st["steps"]["decode"]["modes"] == {"TARGET_VERIFY": 1}
    assert st["cpu"]["draft_prefill"]["spans"] == 1
    assert st["tokens"]["output_tokens"] == 66 and st["tokens"]["verify_requests"] == 64
    assert trace_summary.stage_summary(off_trace())["tokens"]["output_tokens"] is None  # verify tokens unknown
    # told it does not speculate: the second EXTEND is a prefill of its own, graphs outside spans are other
    plain = trace_summary.stage_summary(off_trace(), tokens_per_verify=1.0, speculative=False)
    assert "draft_prefill" not in plain["stages"] and "draft" not in plain["stages"]


def test_extend_pairs_need_the_same_batch_and_nothing_between():
    k = Kineto()
    k.span("step[TARGET_VERIFY bs=4]", 0, 10)
    k.launch(1, [("v", 10, 10)])
    k.span("step[EXTEND bs=1 toks=100]", 20, 10)
    k.launch(21, [("p1", 30, 10)])
    k.span("step[EXTEND bs=1 toks=90]", 40, 10)                           # other toks: a target prefill
    k.launch(41, [("p2", 50, 10)])
    k.span("step[EXTEND bs=1 toks=90]", 60, 10)                           # the draft of the one before
    k.launch(61, [("d2", 70, 10)])
    k.span("step[EXTEND bs=1 toks=90]", 80, 10)                           # after a draft: a target again
    k.launch(81, [("p3", 90, 10)])
    k.span("step[DECODE bs=4]", 100, 10)                                  # DECODE on an EAGLE server: draft
    k.launch(101, [("dd", 110, 10)])
    spans, speculative = trace_summary.forward_spans(trace_summary._complete(k.events))
    assert speculative and [s["category"] for s in spans] == [
        "decode", "prefill", "prefill", "draft_prefill", "prefill", "draft"]


def test_compare_attributes_the_gap_per_stage_per_1000_output_tokens():
    a = trace_summary.stage_summary(none_trace())
    b = trace_summary.stage_summary(off_trace(), tokens_per_verify=1.0)
    cmp = trace_summary.compare_stages(a, b)
    assert cmp["tokens"] == {"a": 130, "b": 66}
    t = cmp["total"]["window_ms"]
    assert t["a"] == pytest.approx(1.3 * 1000 / 130, abs=1e-3) and t["b"] == pytest.approx(0.995 * 1000 / 66, abs=1e-3)
    rows = {r["name"]: r for r in cmp["stages"]}
    assert rows["draft_prefill"]["total_ms"] == {"a": 0.0, "b": pytest.approx(0.06 * 1000 / 66, abs=1e-3),
                                                 "diff": pytest.approx(0.06 * 1000 / 66, abs=1e-3)}
    assert sum(r["total_ms"]["diff"] for r in cmp["stages"]) == pytest.approx(t["diff"], abs=1e-2)
    assert sum(r["share"] for r in cmp["stages"]) == pytest.approx(1.0, abs=1e-2)
    steps = {r["name"]: r for r in cmp["steps"]}
    assert steps["decode"]["steps"] == {"a": 2, "b": 1} and steps["decode"]["ms_per_step"]["a"] == 0.325
    assert steps["lead_in"]["ms_per_step"] == {"a": None, "b": None}
    text = trace_summary.format_comparison(cmp, "none", "off")
    assert "A = none: 130 output tokens in 1.3 ms" in text and "| draft_prefill | 0.00 | 0.91 | +0.91 |" in text
    assert "| step | A steps | B steps |" in text
    cpu = {r["name"]: r for r in cmp["cpu_per_span"]}
    assert cpu["prefill"]["a"] == {"spans": 1, "span_ms": 0.3, "span_wait_ms": 0.0, "to_next_ms": 0.35,
                                   "to_next_wait_ms": 0.0}
    assert cpu["prefill"]["b"]["to_next_ms"] == 0.4  # to the OFF step at 700: the draft's prefill (320) is between
    assert "| prefill | 1 | 1 | 0.300 (0.000) | 0.300 (0.000) | 0.350 (0.000) | 0.400 (0.000) |" in text
    old = {**a, "cpu": {k: {x: y for x, y in v.items() if x not in ("to_next_ms", "followed", "span_wait_ms",
                                                                  "to_next_wait_ms")}
                        for k, v in a["cpu"].items()}}  # a summary from before them: left blank
    assert "| prefill | 1 | 1 | 0.300 | 0.300 (0.000) |  | 0.400 (0.000) |" in trace_summary.format_comparison(
        trace_summary.compare_stages(old, b))
    with pytest.raises(ValueError, match="B has no output token count"):
        trace_summary.compare_stages(a, trace_summary.stage_summary(off_trace()))


def test_a_summary_recounted_at_another_tokens_per_verify():
    b = trace_summary.stage_summary(off_trace(), tokens_per_verify=2.0)
    again = trace_summary.with_tokens_per_verify(b, 1.0)
    assert again["tokens"]["output_tokens"] == trace_summary.stage_summary(off_trace(), tokens_per_verify=1.0)[
        "tokens"]["output_tokens"] and again["tokens"]["tokens_per_verify"] == 1.0
    assert b["tokens"]["tokens_per_verify"] == 2.0  # the original is left as it was
    for bad in (0, -1, float("nan"), float("inf"), "1"):
        with pytest.raises(ValueError, match="number of tokens > 0"):
            trace_summary.with_tokens_per_verify(b, bad)
    with pytest.raises(ValueError, match="no request counts"):
        trace_summary.with_tokens_per_verify({"tokens": {}}, 1.0)


def test_compare_lists_the_ops_between_spans_that_grew_per_span():
    """07e: after a prefill the OFF scheduler ran 870 us more of ATen ops than none's before the next
    forward; the comparison lists them per span, the largest difference first."""
    extra = [{"ph": "X", "cat": "cpu_op", "name": name, "pid": 100, "tid": 100, "ts": ts, "dur": dur}
             for name, ts, dur in (("aten::pin_memory", 320, 50), ("aten::zeros", 400, 20), ("aten::zeros", 430, 20))]
    a = trace_summary.stage_summary(none_trace())
    b = trace_summary.stage_summary(none_trace() + extra)
    cmp = trace_summary.compare_stages(a, b)
    rows = [r for r in cmp["ops_to_next"] if r["stage"] == "prefill"]
    assert [(r["op"], r["count"], r["us"], r["diff_us"]) for r in rows] == [
        ("aten::pin_memory", [0.0, 1.0], [0.0, 50.0], 50.0), ("aten::zeros", [0.0, 2.0], [0.0, 40.0], 40.0)]
    text = trace_summary.format_comparison(cmp)
    assert "| prefill | aten::pin_memory | 0 | 1 | 0.0 | 50.0 | +50.0 |" in text


def test_cpu_speed_compares_the_same_small_ops_median_by_median():
    """07e: the OFF server's argmax, arange, add ... took 1.09x none's CPU time (geometric mean):
    slower cores or more work per op; ops that can wait for the GPU say nothing of that."""
    def ops(scale):
        events = []
        for name, us in (("aten::add", 10.0), ("aten::cat", 20.0), ("aten::item", 5.0), ("aten::rare", 1.0),
                         ("aten::lift_fresh", 0.12), ("sglang::unified_attention_with_output", 260.0)):
            n = 60 if name != "aten::rare" else 3
            events += [{"ph": "X", "cat": "cpu_op", "name": name, "ts": i, "dur": us * scale} for i in range(n)]
        return trace_summary.cpu_op_medians(events)

    a, b = ops(1.0), ops(1.21)
    assert a["aten::add"] == [60, 10.0] and a["aten::rare"] == [3, 1.0]
    sp = trace_summary.cpu_speed(a, b)
    # item waits for the GPU, rare is too rare, lift_fresh under 1 us, the attention op not ATen (it launches)
    assert sp["ratio"] == pytest.approx(1.21) and sp["ops"] == 2
    assert {r["op"] for r in sp["by_op"]} == {"aten::add", "aten::cat"}
    assert trace_summary.cpu_speed(a, {"aten::item": [99, 1.0]}) is None
    doc = {"traces": {"t": {"summary": {"cpu_ops": a}}}, "primary": "t"}
    assert trace_summary.cpu_ops_of(doc) == a and trace_summary.cpu_ops_of({"traces": {"t": {"summary": {}}}}) is None


def test_stages_of_reads_a_traffic_profile_or_a_bare_summary():
    st = trace_summary.stage_summary(none_trace())
    assert trace_summary.stages_of(st) is st
    doc = {"traces": {"1-TP-1.trace.json.gz": {"error": "x"}, "1-TP-0.trace.json.gz": {"stages": st}},
           "primary": "1-TP-0.trace.json.gz"}
    assert trace_summary.stages_of(doc) is st
    with pytest.raises(ValueError, match="no stage summary .corrupt"):
        trace_summary.stages_of({"traces": {"t": {"error": "corrupt"}}, "primary": "t"})
    with pytest.raises(ValueError, match="neither"):
        trace_summary.stages_of({"rows": []})


def test_cli_stages_flag(tmp_path, capsys):
    path = tmp_path / "1-TP-0.trace.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"traceEvents": off_trace()}, f)
    trace_summary.main([str(path), "--stages", "--tokens-per-verify", "1"])
    out = json.loads(capsys.readouterr().out)[str(path)]
    assert out["graph_launches"] == 3 and out["stages"]["tokens"]["output_tokens"] == 66
    with pytest.raises(SystemExit):
        trace_summary.main([str(path), "--stages", "--tokens-per-verify", "0"])


def test_launches_on_a_thread_without_spans_are_matched_by_time():
    events = [dict(e, tid=555) if e.get("cat") == "cuda_runtime" else e for e in none_trace()]
    st = trace_summary.stage_summary(events)
    assert {c: v["total_ms"] for c, v in st["stages"].items()} == {
        "decode": 0.72, "prefill": 0.5, "unattributed": 0.05, "other": 0.03}


def test_sync_and_idle_sites_name_the_cpu_ops_around_them():
    """A sync inside ``aten::item`` of a prefill span and a gap ended by a launch from a decode span
    are placed under those ops; one outside every op is ``(no CPU op)``."""
    def at(e, tid=1, **args):
        return {**e, "pid": 7, "tid": tid, **({"args": args} if args else {})}

    trace = [
        at(ev("user_annotation", "step[EXTEND bs=2 toks=900]", 0, 500)),
        at(ev("cpu_op", "aten::item", 100, 300)),
        at(ev("cpu_op", "aten::_local_scalar_dense", 110, 280)),
        at(ev("cuda_runtime", "cudaStreamSynchronize", 120, 250)),
        at(ev("cuda_runtime", "cudaLaunchKernel", 10, 5), correlation=1),
        at(ev("kernel", "prefill_gemm", 20, 200), tid=99, correlation=1),
        at(ev("user_annotation", "step[TARGET_VERIFY bs=2]", 600, 100)),
        at(ev("cpu_op", "aten::mm", 610, 20)),
        at(ev("cuda_runtime", "cudaLaunchKernel", 612, 5), correlation=2),
        at(ev("kernel", "decode_gemm", 700, 50), tid=99, correlation=2),     # gap 220-700: its launch was in aten::mm
        at(ev("cuda_runtime", "cudaEventSynchronize", 800, 40)),             # under no op
        at(ev("cuda_runtime", "cudaFree", 850, 30)), at(ev("cuda_runtime", "cudaMalloc", 880, 10)),
        at(ev("cuda_runtime", "cudaMalloc", 890, 10)),
    ]
    s = trace_summary.summarize(trace, gap_us=20)
    assert s["sync_sites"] == [
        {"site": "step[EXTEND] > aten::item > aten::_local_scalar_dense", "call": "cudaStreamSynchronize",
         "count": 1, "total_ms": 0.25},
        {"site": "(no CPU op)", "call": "cudaEventSynchronize", "count": 1, "total_ms": 0.04},
    ]
    assert s["allocations"] == {"cudaFree": {"count": 1, "total_ms": 0.03},
                                "cudaMalloc": {"count": 2, "total_ms": 0.02}}
    assert s["idle_sites"] == [{"site": "step[TARGET_VERIFY] > aten::mm", "call": "cudaLaunchKernel",
                                "count": 1, "total_ms": 0.48}]


def test_site_of_walks_past_ops_that_ended_before_the_event():
    ops = trace_summary.cpu_ops_by_thread(trace_summary._complete([
        {**ev("user_annotation", "step[EXTEND bs=2 toks=900]", 0, 500), "tid": 1},
        {**ev("cpu_op", "aten::item", 100, 300), "tid": 1},
        {**ev("cpu_op", "aten::_local_scalar_dense", 110, 280), "tid": 1},
    ]))
    assert trace_summary.site_of(ops, {**ev("cuda_runtime", "cudaStreamSynchronize", 450, 20), "tid": 1}) \
        == "step[EXTEND]"
    assert trace_summary.site_of(ops, {**ev("cuda_runtime", "cudaStreamSynchronize", 450, 20), "tid": 2}) \
        == "(no CPU op)"


def test_compare_sites_per_1000_tokens_largest_difference_first():
    site = lambda name, n, ms: {"site": name, "call": "cudaStreamSynchronize", "count": n, "total_ms": ms}
    a = {"sync_sites": [site("step[EXTEND] > aten::item", 2, 1.0)], "idle_sites": []}
    b = {"sync_sites": [site("step[EXTEND] > aten::item", 4, 2.0), site("(no CPU op)", 10, 8.0)], "idle_sites": []}
    cmp = trace_summary.compare_sites(a, b, tokens_a=500, tokens_b=1000)
    first, second = cmp["sync_sites"]
    assert first["site"] == "(no CPU op)" and first["count"] == {"a": 0, "b": 10} and first["ms"] == {"a": 0.0, "b": 8.0}
    assert second["ms"] == {"a": 2.0, "b": 2.0}  # 1 ms per 500 tokens = 2 per 1000
    text = trace_summary.format_sites(cmp)
    assert "| (no CPU op) | cudaStreamSynchronize | 0 | 10 | 0.00 | 8.00 | +8.00 |" in text
    assert trace_summary.sites_of({"traces": {"t": {"summary": {"syncs": {}}}}}) is None  # recorded before sites
