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
