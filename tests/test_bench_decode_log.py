"""``bench.decode_log``: per-step decode speed from SGLang's ``Decode batch`` lines."""

import gzip
import json
from pathlib import Path

import pytest

from bench import decode_log

#: what a real SGLang 0.5.12 server logged on the H200 (recorded, see the folder's README)
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sglang-0.5.12-h200"

LINE = ("[2026-11-30 07:05:41] Decode batch, #running-req: {bs}, #token: 21033, token usage: 0.02, "
        "accept len: 2.95, accept rate: 0.65, cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0")


def log(*entries):
    return [e if isinstance(e, str) else LINE.format(bs=e[0], tps=e[1]) for e in entries]


def test_window_between_markers_and_step_times():
    lines = log((64, 1000.0), "spec_gate: threshold 24 -> 1", (64, 8000.0), (64, 6400.0), (64, 8000.0),
                (128, 12800.0), "spec_gate: threshold 1 -> 12", (64, 99999.0))
    got = decode_log.summarize(decode_log.decode_lines(lines, "threshold 24 -> 1", "threshold 1 -> 12"), [64, 128, 32])
    assert set(got) == {"64", "128"}
    assert got["64"]["lines"] == 3 and got["64"]["median_tok_s"] == 8000.0
    assert got["64"]["step_ms_median"] == 8.0  # 64 requests / 8000 tok/s
    assert got["128"]["step_ms_at_p75_tok_s"] == 10.0


def test_whole_log_without_markers_and_zero_lines_ignored():
    got = decode_log.summarize(decode_log.decode_lines(log((16, 0.34), (16, 3200.0), (16, 0.0))), [16])
    assert got["16"]["lines"] == 2  # 0.0 dropped; 0.34 (the first, idle interval) kept in the median


def test_cli_reads_gz_and_refuses_an_empty_window(tmp_path, capsys):
    p = tmp_path / "server.log.gz"
    with gzip.open(p, "wt") as f:
        f.write("\n".join(log((32, 6400.0), (32, 6000.0))))
    decode_log.main([str(p), "--sizes", "32"])
    out = json.loads(capsys.readouterr().out)
    assert out["by_running_req"]["32"]["lines"] == 2
    with pytest.raises(SystemExit, match="no Decode batch lines"):
        decode_log.main([str(p), "--sizes", "64"])
    with pytest.raises(SystemExit):
        decode_log.main([str(p), "--sizes", "sixty"])


def test_cli_names_a_missing_log_a_directory_and_a_broken_gz(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        decode_log.main([str(tmp_path / "nope.log")])
    assert exc.value.code == 2 and f"no such file: {tmp_path / 'nope.log'}" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        decode_log.main([str(tmp_path)])
    assert exc.value.code == 2 and f"{tmp_path} is a directory" in capsys.readouterr().err
    not_gz = tmp_path / "server.log.gz"
    not_gz.write_text("\n".join(log((32, 6400.0))))  # plain text under a .gz name
    with pytest.raises(SystemExit, match=r"^cannot read .*server\.log\.gz: Not a gzipped file"):
        decode_log.main([str(not_gz)])
    truncated = tmp_path / "cut.log.gz"
    truncated.write_bytes(gzip.compress("\n".join(log((32, 6400.0))).encode())[:20])
    with pytest.raises(SystemExit, match=r"^cannot read .*cut\.log\.gz: "):
        decode_log.main([str(truncated)])


def test_cli_says_when_the_start_marker_never_occurs(tmp_path):
    p = tmp_path / "server.log"
    p.write_text("\n".join(log((32, 6400.0), "spec_gate: threshold 24 -> 1", (64, 8000.0))))
    with pytest.raises(SystemExit) as exc:
        decode_log.main([str(p), "--start", "NOPE", "--sizes", "32"])
    assert exc.value.code == f"no line contains --start 'NOPE' in {p}"
    with pytest.raises(SystemExit) as exc:  # the marker is there, the window has no 32-request lines
        decode_log.main([str(p), "--start", "threshold 24 -> 1", "--sizes", "32"])
    assert exc.value.code == f"no Decode batch lines at running-req [32] in {p} after --start 'threshold 24 -> 1'"
    with pytest.raises(SystemExit) as exc:
        decode_log.main([str(p), "--end", "spec_gate", "--sizes", "64"])
    assert exc.value.code == f"no Decode batch lines at running-req [64] in {p} before --end 'spec_gate'"
    assert "None" not in exc.value.code


def test_gzip_is_read_by_content_binary_refused_and_a_missing_end_marker_said(tmp_path, capsys):
    named_log = tmp_path / "server.log"  # gzip content without the .gz suffix
    with gzip.open(named_log, "wt") as f:
        f.write("\n".join(log((32, 6400.0))))
    decode_log.main([str(named_log), "--sizes", "32"])
    assert json.loads(capsys.readouterr().out)["by_running_req"]["32"]["lines"] == 1
    binary = tmp_path / "core.bin"
    binary.write_bytes(b"\x00\x01\x02" * 100)
    with pytest.raises(SystemExit, match="binary file"):
        decode_log.main([str(binary)])
    with pytest.raises(SystemExit, match="no line contains --end 'NOPE'"):
        decode_log.main([str(named_log), "--sizes", "32", "--end", "NOPE"])


def test_every_window_between_start_and_end_is_read():
    """``--start "speculation off" --end "speculation on"``: every OFF stretch, not only the first."""
    lines = log((64, 1.0), "spec_gate: speculation off (batch 64 >= 24)", (64, 8000.0),
                "spec_gate: speculation on (batch 1 < 22)", (64, 99999.0),
                "spec_gate: speculation off (batch 128 >= 24)", (128, 12800.0), (64, 6400.0))
    windows = []
    got = decode_log.summarize(decode_log.decode_lines(lines, "speculation off", "speculation on", windows), [64, 128])
    assert len(windows) == 2
    assert got["64"]["lines"] == 2 and got["128"]["lines"] == 1  # 99999 (an ON stretch) left out
    only_end = list(decode_log.decode_lines(lines, None, "speculation on"))
    assert only_end == [(64, 1.0), (64, 8000.0)]  # no START: from the top to the first END


def test_bad_sizes_and_a_gzip_of_random_bytes_are_refused(tmp_path, capsys):
    good = tmp_path / "s.log"
    good.write_text("\n".join(log((64, 8000.0))))
    for sizes in ("0,-1", "a", "64,0"):
        with pytest.raises(SystemExit) as exc:
            decode_log.main([str(good), "--sizes", sizes])
        assert exc.value.code == 2 and "running-request counts >= 1" in capsys.readouterr().err
    noise = tmp_path / "noise.log.gz"
    with gzip.open(noise, "wb") as f:
        f.write(bytes(range(256)) * 64)
    with pytest.raises(SystemExit) as exc:
        decode_log.main([str(noise)])
    assert "binary file" in str(exc.value.code)


def test_an_absurd_throughput_is_not_read_as_a_small_one():
    lines = [LINE.format(bs=32, tps="1e400"), LINE.format(bs=32, tps="1.6e4")]
    assert list(decode_log.decode_lines(lines)) == [(32, 16000.0)]  # 1e400 (inf) dropped, not read as 1


KEYED = ("[2026-12-07 03:52:44] Decode batch, #running-req: {bs}, #token: {tok}, token usage: 0.01, "
         "accept len: 2.90, accept rate: 0.63, cuda graph: True, gen throughput (token/s): {tps}, #queue-req: 0")


def keyed(*entries):
    return [KEYED.format(bs=bs, tok=tok, tps=tps) for bs, tok, tps in entries]


def test_lines_pair_by_running_requests_and_kv_tokens_the_nth_with_the_nth():
    a = decode_log.keyed_lines(keyed((1, 336, 300.0), (1, 455, 320.0), (1, 336, 310.0), (4, 2000, 1000.0), (1, 999, 0.0)))
    b = decode_log.keyed_lines(keyed((1, 336, 270.0), (1, 336, 310.0), (1, 455, 288.0), (1, 336, 1.0), (4, 2001, 1.0),
                                     (1, 999, 50.0)))
    pairs = decode_log.pair_lines(a, b)
    # B's first and second (1, 336) with A's first and second; its third has no partner; 2001 != 2000;
    # A's throughput 0 (an interval of no decode work) pairs with nothing
    assert pairs == [(1, 300.0, 270.0), (1, 310.0, 310.0), (1, 320.0, 288.0)]
    got = decode_log.summarize_pairs(pairs, None)
    assert got["1"]["pairs"] == 3 and got["1"]["median_ratio"] == 0.9 and got["all"]["pairs"] == 3


REAL_LOGS = (decode_log.Path(__file__).resolve().parents[1]
             / "bench/results/h100-2026-12-07b/ab-auto-triton-p0.2/server-logs")


def test_on_the_h100_logs_the_auto_servers_slow_stretch_shows_and_passes():
    """h100-2026-12-07b: the same prompts on always and on auto, both speculating at 1 request. Lines
    paired at the same #token: the auto server's c = 1 row (its first row) ran 5-10% slower, its
    time-varying load's stage at 1 request (later) as fast or faster."""
    a = decode_log.keyed_lines(decode_log.read_log(REAL_LOGS / "ab-b-always-p0.2.log.gz").splitlines())
    b = decode_log.keyed_lines(decode_log.read_log(REAL_LOGS / "ab-c-auto-p0.2.log.gz").splitlines())
    ratios = [tps_b / tps_a for bs, tps_a, tps_b in decode_log.pair_lines(a, b) if bs == 1]
    assert len(ratios) >= 50
    early, late = sorted(ratios[:20]), sorted(ratios[-20:])
    assert early[10] < 0.96 and late[10] > 0.99, (early, late)


def test_versus_cli_reports_ratios_and_says_when_nothing_pairs(tmp_path, capsys):
    a, b, c = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "c.log"
    a.write_text("\n".join(keyed((1, 336, 300.0), (4, 2000, 1000.0))))
    b.write_text("\n".join(keyed((1, 336, 270.0), (4, 2000, 1100.0))))
    c.write_text("\n".join(keyed((1, 337, 270.0))))
    decode_log.main([str(a), "--versus", str(b), "--sizes", "all"])
    out = json.loads(capsys.readouterr().out)
    assert out["by_running_req"]["1"]["median_ratio"] == 0.9 and out["by_running_req"]["4"]["median_ratio"] == 1.1
    decode_log.main([str(a), "--versus", str(b), "--sizes", "4"])
    assert set(json.loads(capsys.readouterr().out)["by_running_req"]) == {"4", "all"}
    decode_log.main([str(a), "--versus", str(b), "--sizes", "all", "--series"])
    assert json.loads(capsys.readouterr().out)["series"] == [[1, 0.9], [4, 1.1]]
    with pytest.raises(SystemExit) as exc:
        decode_log.main([str(a), "--series"])
    assert exc.value.code == 2 and "--series goes with --versus" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="has the running requests and #token of one"):
        decode_log.main([str(a), "--versus", str(c)])
    with pytest.raises(SystemExit, match="at running-req"):
        decode_log.main([str(a), "--versus", str(b), "--sizes", "64"])
    with pytest.raises(SystemExit) as exc:
        decode_log.main([str(a), "--sizes", "all"])  # 'all' only with --versus
    assert exc.value.code == 2 and "(or all, with --versus)" not in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        decode_log.main([str(a), "--versus", str(tmp_path / "nope.log")])
    assert exc.value.code == 2 and "no such file" in capsys.readouterr().err


def test_odd_lines_and_files_are_skipped_or_refused_without_a_traceback_or_a_hang(tmp_path, capsys):
    """A second fresh user's finds: a throughput of '1.2.3' raised ValueError; a 9 MB line of repeated
    'Decode batch' ran for minutes; a named pipe hung the read; a log with NULs at its top (a hole
    copytruncate left) was refused as binary; a throughput of 1e-320 printed Infinity (not JSON)."""
    import os

    # a line longer than MAX_LINE is not searched at all (the quadratic case), even one that would match
    long_but_valid = "x" * decode_log.MAX_LINE + LINE.format(bs=9, tps="5.0")
    odd = [LINE.format(bs=8, tps="1.2.3"), LINE.format(bs=8, tps="."), LINE.format(bs=8, tps="1e-320"),
           "Decode batch, #running-req: 1," * 300_000, long_but_valid, LINE.format(bs=8, tps="800.5")]
    assert list(decode_log.decode_lines(odd)) == [(8, 800.5)]
    assert [tps for _, tps in decode_log.keyed_lines(odd)] == [800.5]
    pipe = tmp_path / "pipe.log"
    os.mkfifo(pipe)
    with pytest.raises(SystemExit, match="is a named pipe, not a file"):
        decode_log.main([str(pipe), "--sizes", "8"])
    hole = tmp_path / "hole.log"
    hole.write_bytes(b"\0" * 8192 + "\n".join(odd).encode() + b"\n")
    decode_log.main([str(hole), "--sizes", "8"])
    out = capsys.readouterr().out
    assert json.loads(out)["by_running_req"]["8"]["lines"] == 1 and "Infinity" not in out


PREFILL = ("[2026-12-07 19:02:23] Prefill batch, #new-seq: 1, #new-token: {tok}, #cached-token: 0, token usage: 0.01, "
           "#running-req: 31, #queue-req: 0, #pending-token: 0, cuda graph: True, input throughput (token/s): 14.13")


def test_by_prefills_groups_each_line_by_the_prefills_logged_since_the_previous_one():
    lines = log((32, 4000.0), PREFILL.format(tok=300), (32, 3200.0), PREFILL.format(tok=100),
                PREFILL.format(tok=200), PREFILL.format(tok=600), (32, 2000.0), (32, 0.0),
                PREFILL.format(tok=50), (16, 2000.0))
    got = decode_log.summarize_by_prefills(decode_log.decode_lines_with_prefills(lines), [32, 16, 64])
    assert got["32"]["0"] == {"lines": 1, "step_ms_median": 8.0, "mean_prefills": 0.0, "mean_prefill_tokens": 0.0}
    assert got["32"]["1-2"] == {"lines": 1, "step_ms_median": 10.0, "mean_prefills": 1.0, "mean_prefill_tokens": 300.0}
    assert got["32"]["3+"] == {"lines": 1, "step_ms_median": 16.0, "mean_prefills": 3.0, "mean_prefill_tokens": 900.0}
    # the idle 0 tok/s line is no measurement but still closes its interval: the 50-token prefill is 16's
    assert got["16"] == {"1-2": {"lines": 1, "step_ms_median": 8.0, "mean_prefills": 1.0, "mean_prefill_tokens": 50.0}}
    assert "64" not in got


def test_cli_by_prefills_on_a_real_log_and_not_with_versus(tmp_path, capsys):
    fixture = FIXTURES / "server-no-spec.log"
    decode_log.main([str(fixture), "--sizes", "1,2,4,8,16,32,64,128", "--by-prefills"])
    out = json.loads(capsys.readouterr().out)
    groups = out["by_prefills"]
    assert groups and set(groups) <= set(out["by_running_req"])
    for size, by_group in groups.items():  # the groups split exactly the lines the plain summary counts
        assert sum(g["lines"] for g in by_group.values()) == out["by_running_req"][size]["lines"]
    with pytest.raises(SystemExit) as exc:
        decode_log.main([str(fixture), "--versus", str(fixture), "--by-prefills"])
    assert exc.value.code == 2 and "--by-prefills reads one log" in capsys.readouterr().err
