"""bench/ab_collect.py: bench.ab_traffic runs into one real-traffic CSV, each server's rows averaged
over the repeats, read back by summarize-traffic."""

from __future__ import annotations

import csv
import json
import re

import pytest

from bench import ab_collect, traffic, traffic_summary


def write_run(root, name, sides, rows):
    """An ab_traffic run: ab-summary.json naming ``sides``, ``rows[(repeat, side)]`` -> list of dicts."""
    run = root / name
    run.mkdir()
    (run / "ab-summary.json").write_text(json.dumps({"servers": {s: {"config": c} for s, c in sides.items()}}))
    for (repeat, side), values in rows.items():
        d = run / f"repeat{repeat}" / side
        d.mkdir(parents=True)
        with (d / "real-traffic.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=traffic.TRAFFIC_COLUMNS)
            w.writeheader()
            for v in values:
                row = dict.fromkeys(traffic.TRAFFIC_COLUMNS, "")
                row.update(workload="varied-closed", p_wrong="0.2", worker="v2", attention_backend="fa3",
                           p99_tpot_ms="9", p99_e2e_ms="900", mean_ttft_ms="50", mean_e2e_ms="500")
                row.update(v)
                w.writerow(row)
    return run


def row(config, conc, tok, tpot, n=100, threshold=None):
    """A measured row; the threshold its configuration has unless given (off 1, auto ``auto``)."""
    threshold = {"off": "1", "auto": "auto"}.get(config, "") if threshold is None else threshold
    return {"config": config, "concurrency": str(conc), "output_tok_s": str(tok), "mean_tpot_ms": str(tpot),
            "num_requests": str(n), "completed": str(n), "threshold": threshold}


def test_each_servers_rows_are_averaged_over_the_repeats_and_summarize_traffic_reads_them(tmp_path):
    run = write_run(tmp_path, "ab-fa3", {"a": "none", "b": "off"}, {
        (0, "a"): [row("none", 32, 4000, 7.0), row("none", 128, 7500, 13.0)],
        (0, "b"): [row("off", 32, 3900, 7.2, threshold="1"), row("off", 128, 7000, 14.0, threshold="1")],
        (1, "b"): [row("off", 32, 3950, 7.4, threshold="1"), row("off", 128, 7100, 14.2, threshold="1")],
        (1, "a"): [row("none", 32, 4100, 7.1), row("none", 128, 7600, 13.2)],
    })
    out = tmp_path / "real-traffic.csv"
    assert ab_collect.main([str(run), "--csv", str(out)]) == 0
    with out.open() as f:
        got = list(csv.DictReader(f))
    assert [(r["config"], r["concurrency"], r["output_tok_s"], r["mean_tpot_ms"], r["num_requests"], r["repeats"],
             r["run"], r["side"]) for r in got] == [
        ("none", "32", "4050", "7.05", "200", "2", "ab-fa3", "a"), ("none", "128", "7550", "13.1", "200", "2", "ab-fa3", "a"),
        ("off", "32", "3925", "7.3", "200", "2", "ab-fa3", "b"), ("off", "128", "7050", "14.1", "200", "2", "ab-fa3", "b")]
    rows = traffic_summary.read_traffic_rows([out])  # a traffic CSV like any other
    assert len(rows) == 4


def test_a_gate_servers_rows_carry_what_its_gate_did_over_the_repeats(tmp_path, capsys):
    run = write_run(tmp_path, "ab-auto", {"a": "none", "c": "auto"}, {
        (0, "a"): [row("none", 4, 560, 6.5)], (0, "c"): [row("auto", 4, 559, 6.6), row("auto", 64, 4400, 11.6)],
        (1, "a"): [row("none", 4, 565, 6.4)], (1, "c"): [row("auto", 4, 580, 6.3)]})
    delta = lambda on, off, sw, probe: {"decode_steps_on": on, "decode_steps_off": off, "switches": sw,  # noqa: E731
                                        "auto_probes": probe // 8, "auto_probe_steps": probe, "on_share": None}
    for repeat, rows in ((0, [("varied-closed", 4, "", delta(300, 700, 56, 16)), ("varied-closed", 64, "", delta(8, 992, 2, 8))]),
                         (1, [("varied-closed", 4, "", delta(900, 100, 2, 0))])):
        record = {"runs": [{"rows": [{"workload": w, "concurrency": c, "request_rate": r, "spec_gate_delta": d}
                                     for w, c, r, d in rows]}]}
        (run / f"repeat{repeat}" / "c" / "traffic-auto-v2-p0.2.json").write_text(json.dumps(record))
    (run / "repeat0" / "a" / "traffic-none-v2-p0.2.json").write_text("{not json")  # a broken record: a note
    out = tmp_path / "auto-threshold.csv"
    assert ab_collect.main([str(run), "--csv", str(out)]) == 0
    assert "traffic-none-v2-p0.2.json" in capsys.readouterr().err
    with out.open() as f:
        got = {(r["config"], r["concurrency"]): r for r in csv.DictReader(f)}
    assert [got[("auto", "4")][c] for c in ab_collect.GATE_EXTRA] == ["0.6", "58", "16"]  # 1,200 ON of 2,000 steps
    assert [got[("auto", "64")][c] for c in ab_collect.GATE_EXTRA] == ["0.008", "2", "8"]
    assert [got[("none", "4")][c] for c in ab_collect.GATE_EXTRA] == ["", "", ""]  # no gate there
    tables = traffic_summary.traffic_tables(traffic_summary.read_traffic_rows([out]))
    assert "what auto's gate did during each row" in tables
    assert "| varied-closed | c=4 | v2 | fa3 | n/a | 0.6 | 58 | 16 |" in tables  # no always row: no best static
    text = out.read_text()
    for bad, says in (("7.5", "column gate_on_share: is a share of decode steps (0-1), got '7.5'"),
                      ("abc", "column gate_on_share: 'abc' is not a number"),
                      ("nan", "column gate_on_share: 'nan' is not a measurement")):
        damaged = tmp_path / f"damaged-{bad}.csv"
        damaged.write_text(text.replace(",0.6,58,16", f",{bad},58,16"))
        with pytest.raises(ab_collect.BenchError, match=re.escape(says)):
            traffic_summary.read_traffic_rows([damaged])
    piped = tmp_path / "piped.csv"
    piped.write_text(text.replace(",fa3,", ",fa|3,"))
    assert "| fa\\|3 |" in traffic_summary.traffic_tables(traffic_summary.read_traffic_rows([piped]))


def test_only_the_sides_asked_for_and_a_repeat_missing_a_row(tmp_path):
    run = write_run(tmp_path, "ab3", {"a": "none", "b": "off", "c": "off"}, {
        (0, "a"): [row("none", 64, 6000, 9.0)], (0, "b"): [row("off", 64, 5800, 9.5, threshold="1")],
        (0, "c"): [row("off", 64, 5900, 9.3, threshold="1")],
        (1, "a"): [row("none", 64, 6100, 9.1)], (1, "c"): [row("off", 64, 5950, 9.2, threshold="1")],
    })
    rows = ab_collect.collect(run, ["a", "c"])
    assert [(r["side"], r["output_tok_s"], r["repeats"]) for r in rows] == [("a", "6050", "2"), ("c", "5925", "2")]
    # all three sides: repeat 1 lacks b's row, so only repeat 0 compares them
    assert [(r["side"], r["output_tok_s"], r["repeats"]) for r in ab_collect.collect(run)] == [
        ("a", "6000", "1"), ("b", "5800", "1"), ("c", "5900", "1")]
    out = tmp_path / "x.csv"
    assert ab_collect.main([f"{run}:a,c", "--csv", str(out)]) == 0
    assert out.read_text().count("\n") == 3


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "nothing", "is not a bench.ab_traffic run"),
    (lambda p: write_run(p, "empty", {"a": "none", "b": "off"}, {}), "no rows"),
    (lambda p: str(write_run(p, "two", {"a": "none", "b": "off"}, {(0, "a"): [row("none", 8, 1, 1)]})) + ":c",
     "has no side c"),
])
def test_bad_runs_are_refused_and_no_csv_is_written(tmp_path, capsys, make, message):
    out = tmp_path / "out.csv"
    out.write_text("earlier\n")
    assert ab_collect.main([str(make(tmp_path)), "--csv", str(out)]) == 1
    assert message in capsys.readouterr().err
    assert out.read_text() == "earlier\n"  # left as it was


def test_a_run_cut_short_without_a_summary_gives_the_rows_its_repeats_measured(tmp_path, capsys):
    """The device time ran out in repeat 1 (2026-12-05's v1 pair): no ab-summary.json; the sides
    are the repeats' folders, and a row counts only from the repeats every side measured it in
    (b's second row at 32 has no a beside it: left out, and said)."""
    run = write_run(tmp_path, "ab-v1", {"a": "none", "b": "off"}, {
        (0, "a"): [row("none", 32, 2600, 11.0), row("none", 128, 5000, 20.0)],
        (0, "b"): [row("off", 32, 2500, 11.7, threshold="1"), row("off", 128, 4400, 24.0, threshold="1")],
        (1, "b"): [row("off", 32, 2400, 12.0, threshold="1")],
    })
    (run / "ab-summary.json").unlink()
    got = [(r["side"], r["concurrency"], r["output_tok_s"], r["repeats"]) for r in ab_collect.collect(run)]
    assert got == [("a", "32", "2600", "1"), ("a", "128", "5000", "1"), ("b", "32", "2500", "1"),
                   ("b", "128", "4400", "1")]
    assert "side b: repeat1's varied-closed c=32 row left out" in capsys.readouterr().err


def test_a_block_cut_short_counts_for_no_side(tmp_path, capsys):
    """h100-2026-12-07d: the device time ran out in repeat 2 after auto's row at 128 requests (the
    rows interleaved: every side of a row before the next row). Auto's third repeat beside none's and
    always's two moved auto / none at 128 from 0.948 to 0.954; the gate record of that row goes too."""
    run = write_run(tmp_path, "ab-auto", {"a": "none", "b": "always", "c": "auto"}, {
        (r, s): [row(c, 32, tok[r], 9.0)] + ([row(c, 128, tok[r] + 1000, 12.0)] if r < 2 or s == "c" else [])
        for r in range(3) for s, c, tok in (("a", "none", (3000, 3010, 3020)), ("b", "always", (2000, 2010, 2020)),
                                            ("c", "auto", (2900, 2910, 2920)))})
    delta = {"decode_steps_on": 10, "decode_steps_off": 90, "switches": 2, "auto_probes": 1, "auto_probe_steps": 8}
    for r in range(3):
        levels = [32, 128]
        record = {"runs": [{"rows": [{"workload": "varied-closed", "concurrency": c, "request_rate": "",
                                      "spec_gate_delta": delta} for c in levels]}]}
        (run / f"repeat{r}" / "c" / "traffic-auto-v2-p0.2.json").write_text(json.dumps(record))
    got = {(r["config"], r["concurrency"]): (r["output_tok_s"], r["repeats"], r["gate_switches"])
           for r in ab_collect.collect(run)}
    assert got[("auto", "32")] == ("2910", "3", "6")
    assert got[("auto", "128")] == ("3905", "2", "4")  # not 3910 over 3 repeats, not 6 switches
    assert got[("none", "128")] == ("4005", "2", "")
    assert "side c: repeat2's varied-closed c=128 row left out" in capsys.readouterr().err


def test_copies_unpaired_levels_split_rows_and_unlisted_sides_are_said(tmp_path, capsys):
    """A fresh user's finds: a copied ``repeat01`` beside ``repeat1`` counted twice, a level one side
    alone measured, a row whose key columns changed between repeats and a side the summary does not
    list all passed without a word."""
    import shutil

    run = write_run(tmp_path, "ab", {"a": "none", "b": "off"}, {
        (0, "a"): [row("none", 32, 3000, 9.0), row("none", 256, 9000, 20.0)], (0, "b"): [row("off", 32, 2900, 9.2)],
        (1, "a"): [row("none", 32, 3010, 9.0)], (1, "b"): [{**row("off", 32, 2950, 9.1), "attention_backend": "triton"}]})
    shutil.copytree(run / "repeat1", run / "repeat01")
    (run / "repeat0" / "c").mkdir()
    (run / "repeat0" / "c" / "real-traffic.csv").write_text((run / "repeat0" / "b" / "real-traffic.csv").read_text())
    got = [(r["side"], r["concurrency"], r["attention_backend"], r["repeats"]) for r in ab_collect.collect(run)]
    assert got == [("a", "32", "fa3", "2"), ("a", "256", "fa3", "1"), ("b", "32", "fa3", "1"), ("b", "32", "triton", "1")]
    err = capsys.readouterr().err
    assert "repeat01 is another folder of repeat 1 (left out)" in err
    assert "side(s) c have rows but ab-summary.json does not list them" in err
    assert "varied-closed c=256 measured by side a only" in err
    assert "side b: varied-closed c=32 has 2 rows that differ" in err


def test_an_unreadable_summary_is_said_and_the_sides_come_from_the_folders(tmp_path, capsys):
    """A fresh user's find: a corrupt ab-summary.json was passed over in silence."""
    run = write_run(tmp_path, "ab", {"a": "none", "b": "off"}, {
        (0, "a"): [row("none", 32, 2600, 11.0)], (0, "b"): [row("off", 32, 2500, 11.7, threshold="1")]})
    (run / "ab-summary.json").write_text("{bad")
    assert [r["side"] for r in ab_collect.collect(run)] == ["a", "b"]
    assert "ab-summary.json is unreadable" in capsys.readouterr().err


def test_the_no_speculation_rows_take_the_draft_of_the_runs_speculative_sides(tmp_path):
    """A run of none (the p = 0.2 pair) beside always / auto on the p = 0.5 draft of the same target:
    the none rows are that draft's baseline and are labelled 0.5; a run with two drafts keeps its labels."""
    p05 = dict(p_wrong="0.5")
    run = write_run(tmp_path, "ab-auto-p0.5", {"a": "none", "b": "always", "c": "auto"}, {
        (0, "a"): [row("none", 64, 4700, 11)], (0, "b"): [{**row("always", 64, 5900, 9), **p05}],
        (0, "c"): [{**row("auto", 64, 5800, 9, threshold="auto"), **p05}]})
    assert [(r["config"], r["p_wrong"]) for r in ab_collect.collect(run)] == [
        ("none", "0.5"), ("always", "0.5"), ("auto", "0.5")]
    mixed = write_run(tmp_path, "ab-two-drafts", {"a": "none", "b": "off", "c": "off"}, {
        (0, "a"): [row("none", 64, 4700, 11)], (0, "b"): [row("off", 64, 4600, 11)],
        (0, "c"): [{**row("off", 64, 4500, 11), **p05}]})
    assert [r["p_wrong"] for r in ab_collect.collect(mixed)] == ["0.2", "0.2", "0.5"]


def test_a_side_without_its_csv_in_a_repeat_is_said(tmp_path, capsys):
    """Fresh-user find: a side that ab-summary.json lists, its CSV gone, vanished from the output
    without a word (18 rows instead of 27, rc 0)."""
    run = write_run(tmp_path, "ab", {"a": "none", "b": "off", "c": "auto"}, {
        (0, "a"): [row("none", 8, 1, 1)], (0, "b"): [row("off", 8, 1, 1)], (1, "a"): [row("none", 8, 1, 1)],
        (1, "b"): [row("off", 8, 1, 1)], (1, "c"): [row("auto", 8, 1, 1)]})
    (run / "repeat0" / "c").mkdir()
    (run / "repeat1" / "c" / "real-traffic.csv").unlink()
    assert [r["side"] for r in ab_collect.collect(run)] == ["a", "b"]
    assert f"note: {run} side c: no real-traffic.csv in repeat0, repeat1 (the side is left out)" in capsys.readouterr().err
    (run / "repeat1" / "b" / "real-traffic.csv").unlink()
    assert [(r["side"], r["repeats"]) for r in ab_collect.collect(run, ["b"])] == [("b", "1")]
    assert f"note: {run} side b: no real-traffic.csv in repeat1\n" in capsys.readouterr().err


def test_damaged_runs_are_read_as_far_as_they_can_be_and_said(tmp_path, capsys):
    """A second fresh user's finds: a named pipe in a run hung ab_collect; ab-summary.json's
    'servers' null crashed it and {} lost every row; a copied traffic record doubled the gate
    columns; a row twice in one CSV counted as two repeats silently; 'repeat²' crashed it."""
    import os

    def fresh(name):
        run = write_run(tmp_path, name, {"a": "none", "c": "auto"}, {
            (0, "a"): [row("none", 4, 560, 6.5)], (0, "c"): [row("auto", 4, 559, 6.6)]})
        record = {"runs": [{"rows": [{"workload": "varied-closed", "concurrency": 4, "request_rate": "",
                                      "spec_gate_delta": {"decode_steps_on": 10, "decode_steps_off": 30,
                                                          "switches": 3, "auto_probe_steps": 8}}]}]}
        (run / "repeat0" / "c" / "traffic-auto-v2-p0.2.json").write_text(json.dumps(record))
        return run

    run = fresh("pipes")
    os.mkfifo(run / "repeat0" / "c" / "traffic-auto-v2-p0.2 copy.json")
    (run / "ab-summary.json").unlink()
    os.mkfifo(run / "ab-summary.json")
    got = {r["config"]: r for r in ab_collect.collect(run)}  # returns: nothing waits for a writer
    assert got["auto"]["gate_switches"] == "3"
    err = capsys.readouterr().err
    assert "is a named pipe, not a file (not read)" in err and "ab-summary.json is a named pipe" in err
    for servers in (None, {}, ["a", "c"], 5):
        run = fresh(f"servers-{json.dumps(servers)}".replace("[", "").replace("]", "").replace(",", "").replace('"', ""))
        (run / "ab-summary.json").write_text(json.dumps({"servers": servers}))
        assert [r["side"] for r in ab_collect.collect(run)] == ["a", "c"], servers  # from the repeat folders
        assert "its sides taken from the repeat folders" in capsys.readouterr().err
    run = fresh("copied")
    c = run / "repeat0" / "c"
    (c / "traffic-auto-v2-p0.2 copy.json").write_text((c / "traffic-auto-v2-p0.2.json").read_text())
    (run / "repeat²").mkdir()
    assert [r["gate_switches"] for r in ab_collect.collect(run) if r["config"] == "auto"] == ["3"]  # not 6
    with (c / "real-traffic.csv").open() as f:
        lines = f.read().splitlines()
    (c / "real-traffic.csv").write_text("\n".join(lines + lines[1:]) + "\n")
    auto = [r for r in ab_collect.collect(run) if r["config"] == "auto"][0]
    assert auto["repeats"] == "2" and "varied-closed c=4 2 times (each counted as a repeat)" in capsys.readouterr().err
    out = tmp_path / "out.csv"
    (tmp_path / "out.csv.tmp").write_text("someone else's\n")
    assert ab_collect.main([str(run), "--csv", str(out)]) == 0
    assert (tmp_path / "out.csv.tmp").read_text() == "someone else's\n"  # never touched
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.csv.")]  # no temporary left


def test_a_csv_that_is_a_device_or_a_pipe_is_refused_and_a_symlink_is_written_through(tmp_path, capsys):
    """Fresh-user find (run as root): --csv /dev/null wrote /dev/null.tmp and renamed it over the
    device node, so /dev/null became a regular file; a named pipe and a symlink were replaced too."""
    import os
    import stat

    run = write_run(tmp_path, "ab", {"a": "none", "b": "off"}, {(0, "a"): [row("none", 8, 1, 1)]})
    pipe = tmp_path / "pipe.csv"
    os.mkfifo(pipe)
    # /dev/null itself only asked (a regression here must not replace this machine's /dev/null)
    assert ab_collect.not_a_regular_file(ab_collect.Path("/dev/null")) == "is a device, not a file"
    with pytest.raises(SystemExit) as e:
        ab_collect.main([str(run), "--csv", str(pipe)])
    assert e.value.code == 2 and f"--csv {pipe} is a named pipe, not a file" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
    with pytest.raises(OSError, match="is a named pipe"):
        ab_collect.write_csv([], pipe)  # the writer itself refuses too
    real, link = tmp_path / "real.csv", tmp_path / "link.csv"
    real.write_text("old\n")
    link.symlink_to(real)
    assert ab_collect.main([str(run), "--csv", str(link)]) == 0
    assert link.is_symlink() and real.read_text().startswith("config,")  # written through, the link kept


def test_a_csv_that_is_a_directory_empty_or_unwritable_is_refused_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    run = write_run(tmp_path, "ab", {"a": "none", "b": "off"}, {(0, "a"): [row("none", 8, 1, 1)]})
    for csv_arg, message in ((str(tmp_path), "a directory, not a file"), ("", "give a file name")):
        with pytest.raises(SystemExit) as e:
            ab_collect.main([str(run), "--csv", csv_arg])
        assert e.value.code == 2 and message in capsys.readouterr().err
    def refuse(self, target):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(ab_collect.Path, "replace", refuse)  # e.g. /proc/version: the rename fails
    assert ab_collect.main([str(run), "--csv", str(tmp_path / "out.csv")]) == 1
    assert "cannot write --csv" in capsys.readouterr().err and not list(tmp_path.rglob("*.tmp"))


def test_a_run_given_twice_is_refused_but_its_sides_may_come_one_by_one(tmp_path, capsys):
    run = write_run(tmp_path, "ab", {"a": "none", "b": "off"},
                    {(0, "a"): [row("none", 8, 1, 1)], (0, "b"): [row("off", 8, 1, 1)]})
    out = tmp_path / "out.csv"
    assert ab_collect.main([str(run), str(run), "--csv", str(out)]) == 1
    assert "already given" in capsys.readouterr().err and not out.exists()
    assert ab_collect.main([f"{run}:a", f"{run}:b", "--csv", str(out)]) == 0
    assert ab_collect.main([f"{run}:", "--csv", str(out)]) == 1
    assert "no side after ':'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ab_collect.main(["", "--csv", str(out)])
    assert "empty string" in capsys.readouterr().err


def test_share_none_gives_a_run_without_a_none_server_the_other_runs_baseline(tmp_path, capsys):
    """p = 0.5's always / auto measured without a none server of their own (the same target as the
    p = 0.2 run): with --share-none its rows get p = 0.2's none rows as their baseline, labelled 0.5;
    without it they have none; none rows of two p cannot say which is the baseline."""
    p05 = dict(p_wrong="0.5")
    first = write_run(tmp_path, "ab-p0.2", {"a": "none", "b": "always", "c": "auto"}, {
        (0, "a"): [row("none", 64, 4700, 11)], (0, "b"): [row("always", 64, 4000, 12)],
        (0, "c"): [row("auto", 64, 4650, 11, threshold="auto")]})
    second = write_run(tmp_path, "ab-p0.5", {"a": "always", "b": "auto"}, {
        (0, "a"): [{**row("always", 64, 3500, 13), **p05}], (0, "b"): [{**row("auto", 64, 4600, 11), **p05}]})
    out = tmp_path / "auto.csv"
    assert ab_collect.main([str(first), str(second), "--csv", str(out), "--share-none"]) == 0
    with out.open() as f:
        got = [(r["config"], r["p_wrong"], r["output_tok_s"], r["run"]) for r in csv.DictReader(f)]
    assert got == [("none", "0.2", "4700", "ab-p0.2"), ("always", "0.2", "4000", "ab-p0.2"),
                   ("auto", "0.2", "4650", "ab-p0.2"), ("always", "0.5", "3500", "ab-p0.5"),
                   ("auto", "0.5", "4600", "ab-p0.5"), ("none", "0.5", "4700", "ab-p0.2")]
    assert ab_collect.main([str(first), str(second), "--csv", str(out)]) == 0
    with out.open() as f:
        assert [r["p_wrong"] for r in csv.DictReader(f) if r["config"] == "none"] == ["0.2"]
    rows = [{"config": "none", "p_wrong": "0.2"}, {"config": "none", "p_wrong": "0.3"},
            {"config": "always", "p_wrong": "0.5"}]
    with pytest.raises(ab_collect.BenchError, match="none rows of 2 p"):
        ab_collect.share_none(rows)
    with pytest.raises(ab_collect.BenchError, match="no none rows"):
        ab_collect.share_none(rows[2:])


def test_a_csv_inside_a_run_or_a_side_csv_that_is_not_a_traffic_csv_is_refused(tmp_path, capsys):
    """--csv pointed at a run's own side CSV would have replaced a measurement with the collected
    rows; a side CSV that is not UTF-8 or has a cell that is not a measurement is named with its
    line; a side CSV without rows (a run cut short) is left out with a note."""
    run = write_run(tmp_path, "ab", {"a": "none", "b": "off"}, {
        (0, "a"): [row("none", 64, 4700, 11)], (0, "b"): [row("off", 64, 4600, 11)]})
    side = run / "repeat0" / "a" / "real-traffic.csv"
    before = side.read_bytes()
    with pytest.raises(SystemExit) as e:
        ab_collect.main([str(run), "--csv", str(side)])
    assert e.value.code == 2 and "is inside the run" in capsys.readouterr().err and side.read_bytes() == before
    out = tmp_path / "out.csv"
    (run / "repeat0" / "b" / "real-traffic.csv").write_bytes(b"x\xff\n")
    assert ab_collect.main([str(run), "--csv", str(out)]) == 1
    assert "not a text CSV (not UTF-8" in capsys.readouterr().err and not out.exists()
    bad = write_run(tmp_path, "ab-bad", {"a": "none", "b": "off"}, {
        (0, "a"): [row("none", 64, "abc", 11)], (0, "b"): [row("off", 64, 4600, 11)]})
    assert ab_collect.main([str(bad), "--csv", str(out)]) == 1
    assert "real-traffic.csv:2: column output_tok_s: 'abc' is not a number" in capsys.readouterr().err
    (run / "repeat0" / "b" / "real-traffic.csv").write_text("")
    assert ab_collect.main([str(run), "--csv", str(out)]) == 0
    assert "has no rows (left out)" in capsys.readouterr().err


RESULTS = ab_collect.Path(__file__).resolve().parents[1] / "bench" / "results"


def test_share_none_refuses_a_baseline_started_unlike_the_runs_it_stands_for(tmp_path, capsys):
    """A fresh user's find: the none rows of a run with 131,072-token pools stood as the baseline of
    one with 49,152 (auto 0.716x 'the better static' at 128 requests; 0.977x against its own run's)."""
    p05 = RESULTS / "h100-2026-12-07b" / "ab-auto-triton-p0.5"
    ok = [str(RESULTS / "h100-2026-12-07b" / "ab-auto-triton-p0.2"), str(p05)]
    assert ab_collect.main([*ok, "--share-none", "--csv", str(tmp_path / "ok.csv")]) == 0  # the same run's
    out = tmp_path / "bad.csv"
    assert ab_collect.main([str(RESULTS / "h100-2026-12-05" / "ab-triton"), str(p05), "--share-none",
                            "--csv", str(out)]) == 1
    err = capsys.readouterr().err
    assert "was started unlike" in err and "--max-total-tokens 131072 vs 49152" in err and not out.exists()

