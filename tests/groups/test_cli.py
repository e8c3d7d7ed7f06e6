"""kbroker groups: argument parsing, durations and reset plans (no broker needed)."""
import argparse

import pytest

from kbroker.groups import cli


def parse(*argv):
    p = argparse.ArgumentParser()
    cli.add_parser(p.add_subparsers(dest="cmd"))
    return p.parse_args(["groups", *argv])


@pytest.mark.parametrize("text,ms", [
    ("PT1H", 3_600_000), ("PT1H30M", 5_400_000), ("P1D", 86_400_000), ("P1DT2H3M4S", 93_784_000),
    ("PT0.5S", 500), ("pt10m", 600_000), ("-PT1M", -60_000), ("PT-1M", -60_000), ("PT1.25S", 1_250),
])
def test_durations_like_java_time_duration(text, ms):
    assert cli.parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["P", "PT", "1H", "P1H", "PT1D", "P1DT", "PTxS", ""])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        cli.parse_duration_ms(text)


def test_reset_plan_csv_single_and_multi_group(tmp_path):
    f = tmp_path / "plan.csv"
    f.write_text("t,0,5\nt,1,7\n")
    assert cli._read_plan(str(f), ["g"]) == {"g": {("t", 0): 5, ("t", 1): 7}}
    f.write_text("g1,t,0,5\ng2,t,0,9\n\n")
    assert cli._read_plan(str(f), ["g1", "g2"]) == {"g1": {("t", 0): 5}, "g2": {("t", 0): 9}}
    f.write_text("t,0,5\n")
    with pytest.raises(ValueError):
        cli._read_plan(str(f), ["g1", "g2"])       # which group? ambiguous without the column


def test_argument_shapes():
    a = parse("describe", "--all-groups", "--members", "--verbose")
    assert a.all_groups and a.members and a.verbose and a.group is None
    a = parse("describe", "g", "--group", "h", "--state")
    assert a.group == "g" and a.groups == ["h"] and a.state
    a = parse("reset-offsets", "--group", "g", "--all-topics", "--by-duration", "PT1H", "--export")
    assert a.all_topics and a.by_duration == "PT1H" and a.export and not a.execute
    a = parse("list", "--state", "Stable,Empty")
    assert a.state == "Stable,Empty"
    with pytest.raises(SystemExit):
        parse("reset-offsets", "g", "--to-earliest", "--to-latest")
    with pytest.raises(SystemExit):
        parse("reset-offsets", "g", "--to-current", "--execute", "--dry-run")
