"""bench.cpu_profile: py-spy recordings of the scheduler, summarized and compared per function.

The recording read here is a real one (``tests/fixtures/pyspy/``: py-spy 0.4.3 on a toy event loop
whose ``run_batch`` spins twice as long as ``process_result``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import cpu_profile

RAW = Path(__file__).parent / "fixtures" / "pyspy" / "toy-scheduler.txt"


def test_a_real_recording_is_parsed_into_stacks_outermost_first_without_line_numbers():
    stacks = cpu_profile.parse_raw(RAW.read_text())
    assert sum(n for _, n in stacks) == 399  # 2 s at 200 Hz
    frames, _ = stacks[0]
    assert frames[0] == "<module> (toy_scheduler.py)" and frames[-1] == "spin (toy_scheduler.py)"


def test_the_summary_splits_the_time_as_the_loop_spent_it():
    doc = cpu_profile.summarize(cpu_profile.parse_raw(RAW.read_text()))
    incl = {r["function"]: r for r in doc["inclusive"]}
    run, result = incl["run_batch (toy_scheduler.py)"], incl["process_result (toy_scheduler.py)"]
    assert run["inclusive_s"] / result["inclusive_s"] == pytest.approx(2.0, rel=0.15)  # 4 ms against 2 ms a turn
    assert incl["event_loop (toy_scheduler.py)"]["inclusive_share"] == 1.0
    assert doc["self"][0]["function"] == "spin (toy_scheduler.py)" and doc["self"][0]["self_share"] == 1.0
    assert doc["seconds"] == pytest.approx(2.0, rel=0.01)


def test_a_count_on_a_line_of_its_own_adds_to_the_stack_before_it():
    """py-spy 0.4.3 on the H200 wrote such lines (a real excerpt)."""
    text = (Path(__file__).parent / "fixtures" / "pyspy" / "h200-count-line.txt").read_text()
    assert [line.strip() for line in text.splitlines()][2] == "1"
    stacks = cpu_profile.parse_raw(text)
    assert [n for _, n in stacks] == [1, 1, 1] and stacks[-1][0] == ("(unknown)",)  # in the totals, no function
    assert stacks[1][0][-1] == "TritonAttnBackend.forward_extend (triton_backend.py)"


def test_a_line_that_is_not_py_spy_raw_output_is_refused_with_its_number():
    with pytest.raises(ValueError, match="line 2 is not py-spy raw output"):
        cpu_profile.parse_raw("a (x.py:1);b (x.py:2) 3\nnot a stack\n")


def _doc(counts, tokens):
    stacks = [(tuple(f.split(";")), n) for f, n in counts.items()]
    return {**cpu_profile.summarize(stacks, rate=100), "output_tokens": tokens}


def test_compare_puts_b_against_a_in_ms_per_thousand_output_tokens():
    a = _doc({"loop;decode": 100, "loop;prefill": 50}, tokens=10_000)  # 1.5 s over 10k tokens
    b = _doc({"loop;decode": 120, "loop;prefill": 100, "loop;verify": 30}, tokens=10_000)
    rows = {r["function"]: r for r in cpu_profile.compare(a, b)}
    assert rows["loop"]["a_inclusive"] == pytest.approx(150.0) and rows["loop"]["diff_inclusive"] == pytest.approx(100.0)
    assert rows["prefill"]["diff_inclusive"] == pytest.approx(50.0) and rows["verify"]["a_inclusive"] == 0.0
    assert list(rows)[0] == "loop"  # by the size of the difference


def test_compare_by_self_time_ranks_the_frame_that_does_the_work_first():
    """Inclusive differences pile up on every caller of one hot spot (h100-2026-12-07e: the hook wrapper
    around result processing led with +195 ms / 1k tokens, most of it a GPU wait below it); by self
    time the function whose own frame grew leads."""
    a = _doc({"loop;process;wait": 100, "loop;prepare": 10}, tokens=10_000)
    b = _doc({"loop;hook;process;wait": 80, "loop;prepare": 40}, tokens=10_000)
    by_inclusive = [r["function"] for r in cpu_profile.compare(a, b)]
    by_self = cpu_profile.compare(a, b, by="self")
    assert by_inclusive[0] == "hook" and by_self[0]["function"] == "prepare"
    assert by_self[0]["diff_self"] == pytest.approx(30.0)
    with pytest.raises(ValueError, match="rank by one of inclusive, self"):
        cpu_profile.compare(a, b, by="total")


def test_work_and_waits_for_the_gpu_are_told_apart_by_the_innermost_frame():
    """h100-2026-12-07e: the OFF server's scheduler waited less (175 vs 242 ms / 1k tokens) because it
    worked more (124 vs 69): the slack the overlap scheduler hides its work in."""
    doc = _doc({"loop (s.py);pop (s.py);Event.synchronize (cuda/streams.py)": 60,
                "loop (s.py);run_batch (s.py)": 30, "loop (s.py);torch.cuda.synchronize (cuda/__init__.py)": 5,
                "loop (s.py);resynchronize_clock (x.py)": 5}, tokens=10_000)
    work, wait = cpu_profile.work_and_wait(doc, 10_000)
    assert (work, wait) == (pytest.approx(35.0), pytest.approx(65.0))  # ms per 1k tokens at 100 Hz
    assert cpu_profile.work_and_wait(doc, None) == (pytest.approx(350.0), pytest.approx(650.0))  # per second
    assert not cpu_profile.is_gpu_wait("resynchronize_clock (x.py)") and cpu_profile.is_gpu_wait("synchronize")


def test_compare_without_token_counts_falls_back_to_ms_per_second_of_recording():
    a, b = _doc({"x": 100}, tokens=None), _doc({"x": 50, "y": 50}, tokens=5_000)
    rows = {r["function"]: r for r in cpu_profile.compare(a, b)}
    assert rows["x"]["a_inclusive"] == pytest.approx(1000.0) and rows["x"]["b_inclusive"] == pytest.approx(500.0)


def test_scheduler_processes_are_found_by_their_title_tp0_first(tmp_path):
    for pid, title in ((11, b"sglang::scheduler_TP1"), (12, b"sglang::scheduler_TP0"), (13, b"python3\0-m\0x"),
                       (14, b"sglang::detokenizer")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(title + b"\0")
    (tmp_path / "self").mkdir()
    assert cpu_profile.scheduler_pids(tmp_path) == [12, 11]
    assert cpu_profile.scheduler_pids(tmp_path / "missing") == []


def test_a_missing_py_spy_is_an_error_in_the_record_not_an_exception(monkeypatch, tmp_path):
    monkeypatch.setattr(cpu_profile.shutil, "which", lambda name: None)
    out = cpu_profile.record(123, 8, tmp_path / "x.txt")
    assert out["ok"] is False and "py-spy is not installed" in out["error"]
    assert out["argv"][:3] == ["py-spy", "record", "--pid"] and "--nonblocking" in out["argv"]


def test_the_cli_summarizes_and_compares(tmp_path, capsys):
    assert cpu_profile.main(["summarize", str(RAW)]) == 0
    assert "run_batch (toy_scheduler.py)" in capsys.readouterr().out
    meta = {"config": "off", "workload": "varied-closed", "level": 64.0}
    a = cpu_profile.profile_row(_copy(RAW, tmp_path / "a.txt"), 5000.0, 2, meta)
    assert a["output_tokens"] == 10_000.0 and (tmp_path / "a.json").is_file()
    assert cpu_profile.main(["compare", str(tmp_path / "a.json"), str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    assert "ms/1k tok" in out and "| run_batch (toy_scheduler.py) |" in out and "+0.00" in out
    assert "scheduler work (samples outside GPU waits): A " in out and "B - A +0.0 ms/1k tok" in out
    assert cpu_profile.main(["compare", str(tmp_path / "a.json"), str(tmp_path / "missing.json")]) == 2
    assert "error" in capsys.readouterr().err
    json.loads((tmp_path / "a.json").read_text())


def _copy(src: Path, dst: Path) -> Path:
    dst.write_text(src.read_text())
    return dst


@pytest.mark.parametrize("content", ['{"a": 1}', "[]", '{"all": {}, "rate_hz": "x", "seconds": 1}', "not json"])
def test_compare_names_a_file_that_is_not_a_summary_and_does_not_raise(content, tmp_path, capsys):
    bad = tmp_path / "j.json"
    bad.write_text(content)
    assert cpu_profile.main(["compare", str(bad), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err


def test_a_traffic_runs_recording_is_summarized_again_from_its_gzipped_raw_file(tmp_path):
    import gzip

    raw = tmp_path / "cpu-profile-off-v1-p0.2-varied-closed-c64.txt.gz"
    with gzip.open(raw, "wt") as f:
        f.write(RAW.read_text())
    prof = {"config": "off", "worker": "v1", "p_wrong": 0.2, "workload": "varied-closed", "level": 64.0,
            "delay_s": 4.0, "seconds": 2, "ok": False, "raw": "/tmp/run/v1/cpu-profile-off-v1-p0.2-varied-closed-c64.txt"}
    rows = [{"workload": "varied-closed", "concurrency": 32, "output_tok_s": 1.0},
            {"workload": "varied-closed", "concurrency": 64, "output_tok_s": 1000.0}]
    traffic = tmp_path / "traffic-off-v1-p0.2.json"
    traffic.write_text(json.dumps({"runs": [{"cpu_profile": prof, "rows": rows}]}))
    doc = cpu_profile.resummarize(traffic)
    assert doc["output_tokens"] == 2000.0 and doc["samples"] == 399 and doc["worker"] == "v1"
    assert cpu_profile.load_summary(tmp_path / "cpu-profile-off-v1-p0.2-varied-closed-c64.json")["samples"] == 399
    traffic.write_text(json.dumps({"runs": [{"cpu_profile": None, "rows": rows}]}))
    with pytest.raises(ValueError, match="has no CPU profile"):
        cpu_profile.resummarize(traffic)


@pytest.mark.parametrize("doc, message", [
    ({"runs": [1]}, "has no CPU profile"), ({"runs": {}}, "is not a traffic run file"), ({"a": 1}, "is not a traffic run file"), ([1, 2], "is not a traffic run file"),
    ({"runs": [{"cpu_profile": {"raw": 3}}]}, "has no CPU profile"),
    ({"runs": [{"cpu_profile": {"raw": "x.txt", "workload": "varied-closed"}}]}, "lacks a workload, level or seconds"),
])
def test_resummarize_refuses_a_broken_traffic_json_with_one_line(doc, message, tmp_path, capsys):
    path = tmp_path / "traffic.json"
    path.write_text(json.dumps(doc))
    assert cpu_profile.main(["resummarize", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and err.count("\n") == 1


def test_a_broken_gzip_recording_is_one_line_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "cpu-profile-x.txt.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00garbage")
    assert cpu_profile.main(["summarize", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err


def _fake_proc(tmp_path, procs, listening):
    """A /proc with ``procs`` {pid: (title, ppid, [socket inodes])} and a tcp table listening on
    ``listening`` {port: inode}."""
    import os

    for pid, (title, ppid, inodes) in procs.items():
        d = tmp_path / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "cmdline").write_bytes(title + b"\0")
        (d / "stat").write_text(f"{pid} ({title.decode()} (odd) name) S {ppid} 1 1 0")
        for n, inode in enumerate(inodes):
            os.symlink(f"socket:[{inode}]", d / "fd" / str(n + 3))
    (tmp_path / "net").mkdir()
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    rows = [f"   {i}: 00000000:{port:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 {inode}"
            for i, (port, inode) in enumerate(listening.items())]
    rows.append(f"   9: 0100007F:{30001:04X} 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 777")
    (tmp_path / "net" / "tcp").write_text(head + "\n".join(rows) + "\n")


def test_with_two_servers_up_only_the_schedulers_of_the_one_on_the_port_are_sampled(tmp_path):
    """bench.ab_traffic keeps two servers up: sampling the lowest-PID scheduler profiled the idle
    server (2 samples on 2026-12-05); the port picks the measured one's, TP 0 first."""
    _fake_proc(tmp_path, {
        100: (b"python3", 1, [5001]), 101: (b"sglang::scheduler_TP0", 100, []),
        200: (b"python3", 1, [5002, 777]), 201: (b"sglang::scheduler_TP1", 200, []),
        202: (b"sglang::scheduler_TP0", 200, []), 203: (b"sglang::detokenizer", 200, []),
    }, {30000: 5001, 30001: 5002})
    assert cpu_profile.scheduler_pids(tmp_path) == [101, 202, 201]
    assert cpu_profile.scheduler_pids(tmp_path, port=30001) == [202, 201]
    assert cpu_profile.scheduler_pids(tmp_path, port=30000) == [101]
    assert cpu_profile.scheduler_pids(tmp_path, port=30002) == []  # nothing listens there
    assert cpu_profile.listening_pids(30001, tmp_path) == {200}  # the connected socket 777 is not listening
    assert cpu_profile.ancestors(202, tmp_path) == [202, 200]


def test_a_socket_listening_in_this_process_is_found_in_the_real_proc():
    import os
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert os.getpid() in cpu_profile.listening_pids(s.getsockname()[1])
