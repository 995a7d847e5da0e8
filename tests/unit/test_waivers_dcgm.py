"""A waiver naming DCGM error codes: schema-checked (file, line, key), turned into DCGM's own --ignoreErrorCodes
syntax (dcgmi/CommandLineParser.cpp, nvvs IgnoreErrorCodesHelper.cpp of NVIDIA/DCGM 4.1+), and carried by the
dcgmi diag collector's argv only for the waived node and only until the waiver's date (fixed clock)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from nvdeploy.collect.catalog import specs_for
from nvdeploy.collect.datacenter import DCGM_IGNORE_VAR
from nvdeploy.config import waivers as waiver_rules
from nvdeploy.config.inventory import load_inventory
from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.config.waivers import Waiver, dcgm_ignore_error_codes, load_waivers, parse_waivers
from nvdeploy.config.yamlfile import ConfigError, load_yaml_text
from nvdeploy.phases import validate as validate_phase
from nvdeploy.phases.validate import run_validate
from nvdeploy.runner.engine import EngineOptions
from nvdeploy.sim.transport import SimTransport

KNOWN = {"dcgm.diag_r2", "dcgm.diag_r3", "memory.remapped_rows"}
CATALOG = ProfileCatalog()
TEXT = ("waivers:\n"
        "  - check: dcgm.diag_r2\n"
        "    nodes: gpu002\n"
        "    gpus: [0, 3]\n"
        "    dcgm_error_codes: [101, 40]\n"
        "    until: 2027-01-15\n"
        "    owner: jdoe@example.com\n"
        "    reason: Xid history, RMA 4712\n")


def waiver(codes, gpus=None, until=dt.date(2027, 1, 15), nodes=("n1",)) -> Waiver:
    return Waiver("dcgm.diag_r3", frozenset(nodes), until, "o", "r", frozenset(gpus) if gpus is not None else None,
                  dcgm_error_codes=frozenset(codes))


def test_the_codes_are_read_and_kept_in_the_run_header():
    (parsed,) = parse_waivers(load_yaml_text(TEXT, "w.yaml"), "w.yaml", KNOWN)
    assert parsed.dcgm_error_codes == {40, 101} and parsed.gpus == {0, 3}
    assert Waiver.from_dict(parsed.to_dict()) == parsed
    plain = Waiver.from_dict({**parsed.to_dict(), "dcgm_error_codes": None})
    assert plain.dcgm_error_codes is None


@pytest.mark.parametrize("replace, message", [
    ("[101, 28]", "DCGM cannot be told to ignore 28"),
    ("[true]", "must be a DCGM error code"),
    ("[]", "must be a DCGM error code"),
    ("'101'", "must be a DCGM error code"),
])
def test_a_bad_code_names_file_line_and_key(tmp_path, replace, message):
    path = tmp_path / "waivers.yaml"
    path.write_text(TEXT.replace("[101, 40]", replace))
    with pytest.raises(ConfigError) as caught:
        load_waivers(path, KNOWN)
    assert (caught.value.file, caught.value.line, caught.value.key) == (str(path), 5, "dcgm_error_codes")
    assert message in caught.value.message


def test_only_a_dcgm_diag_waiver_may_name_codes(tmp_path):
    path = tmp_path / "waivers.yaml"
    path.write_text(TEXT.replace("dcgm.diag_r2", "memory.remapped_rows"))
    with pytest.raises(ConfigError) as caught:
        load_waivers(path, KNOWN)
    assert (caught.value.line, caught.value.key) == (5, "dcgm_error_codes")
    assert "only a waiver of a dcgm.diag_rN check" in caught.value.message


def test_dcgm_syntax_per_gpu_all_gpus_and_mixed():
    today = dt.date(2026, 12, 1)
    assert dcgm_ignore_error_codes([waiver({101, 40})], "n1", today) == "40,101"
    assert dcgm_ignore_error_codes([waiver({101}, [1]), waiver({80, 85}, [0, 1])], "n1", today) == \
        "gpu0:80,85;gpu1:80,85,101"
    # An all-GPU entry may not stand beside per-GPU ones in DCGM: written into every GPU's entry.
    assert dcgm_ignore_error_codes([waiver({40}), waiver({101}, [2])], "n1", today, gpu_count=4) == \
        "gpu0:40;gpu1:40;gpu2:40,101;gpu3:40"
    # Never a GPU the node does not have (DCGM rejects the whole run), never widened without the GPU count.
    assert dcgm_ignore_error_codes([waiver({101}, [9])], "n1", today, gpu_count=8) == ""
    assert dcgm_ignore_error_codes([waiver({40}), waiver({101}, [2])], "n1", today) == "gpu2:101"
    assert dcgm_ignore_error_codes([waiver({101})], "n2", today) == ""
    assert dcgm_ignore_error_codes([waiver({101}, until=dt.date(2026, 11, 30))], "n1", today) == ""
    plain = Waiver("dcgm.diag_r3", frozenset({"n1"}), dt.date(2027, 1, 1), "o", "r")
    assert dcgm_ignore_error_codes([plain], "n1", today) == ""


def test_the_collector_argv_carries_the_option_as_one_word():
    (spec,) = specs_for(["dcgm_diag_r3"], {DCGM_IGNORE_VAR: "gpu0:101;gpu3:40"}, heavy=True)
    assert spec.argv == ("dcgmi", "diag", "-r", "3", "-j", "--ignoreErrorCodes", "gpu0:101;gpu3:40")
    assert "'gpu0:101;gpu3:40'" in spec.display
    (plain,) = specs_for(["dcgm_diag_r3"], {}, heavy=True)
    assert plain.argv == ("dcgmi", "diag", "-r", "3", "-j")


def diag_argv(tmp_path: Path, monkeypatch, today: dt.date) -> dict[str, tuple[str, ...]]:
    tmp_path.mkdir()
    (tmp_path / "cluster.yaml").write_text(
        "all:\n  vars: {connection: sim, profile: h100-sxm-8x, cluster: waived}\n"
        "  hosts:\n    gpu001: {}\n    gpu002: {}\n")
    (tmp_path / "waivers.yaml").write_text(TEXT)
    seen: dict[str, tuple[str, ...]] = {}
    original = SimTransport.run_batch

    def spy(self, commands, deadline_s=None):
        for command in commands:
            if command.name == "dcgm_diag_r2":
                seen[self.scenario.name] = tuple(command.argv)
        return original(self, commands, deadline_s)

    monkeypatch.setattr(SimTransport, "run_batch", spy)
    monkeypatch.setattr(waiver_rules, "today_utc", lambda: today)
    # The waivers are judged on the day the run started (its header's started_at): the run starts ``today``.
    monkeypatch.setattr(validate_phase, "_now", lambda: f"{today.isoformat()}T12:00:00+00:00")
    waivers = tuple(load_waivers(tmp_path / "waivers.yaml", KNOWN))
    opts = EngineOptions(checks=("dcgm.diag_r2",), waivers=waivers)
    run_validate(load_inventory(tmp_path / "cluster.yaml", CATALOG), CATALOG, opts, tmp_path / "r",
                 level="standard")
    return seen


def test_only_the_waived_node_and_only_until_the_date(tmp_path, monkeypatch):
    before = diag_argv(tmp_path / "a", monkeypatch, dt.date(2027, 1, 15))
    assert before["gpu002"][-2:] == ("--ignoreErrorCodes", "gpu0:40,101;gpu3:40,101")
    assert "--ignoreErrorCodes" not in before["gpu001"]
    after = diag_argv(tmp_path / "b", monkeypatch, dt.date(2027, 1, 16))
    assert "--ignoreErrorCodes" not in after["gpu002"] and "--ignoreErrorCodes" not in after["gpu001"]


def test_a_resumed_run_gives_its_remaining_nodes_the_codes_of_the_day_it_started(tmp_path, monkeypatch):
    """--resume refuses new --waivers and keeps the header's; the nodes it still runs get their
    DCGM codes from those, judged on the run's first day (here a day before the waiver lapsed), not today's."""
    from nvdeploy.phases.validate import resume_validate

    first = diag_argv(tmp_path / "a", monkeypatch, dt.date(2027, 1, 15))
    assert first["gpu002"][-2:] == ("--ignoreErrorCodes", "gpu0:40,101;gpu3:40,101")
    run_dir = next((tmp_path / "a" / "r" / "waived").iterdir())
    journal = run_dir / "results.jsonl"
    # As if the run had stopped before gpu002 finished: only gpu001's result is in the journal.
    journal.write_text("\n".join(line for line in journal.read_text().splitlines()
                                 if '"type":"node"' not in line or '"name":"gpu001"' in line) + "\n")
    monkeypatch.setattr(waiver_rules, "today_utc", lambda: dt.date(2027, 2, 1))  # resumed after the waiver lapsed
    seen: dict[str, tuple[str, ...]] = {}
    real = SimTransport.run_batch  # diag_argv's spy: the resumed run's commands go through it to the simulator

    def spy(self, commands, deadline_s=None):
        for command in commands:
            if command.name == "dcgm_diag_r2":
                seen[self.scenario.name] = tuple(command.argv)
        return real(self, commands, deadline_s)

    monkeypatch.setattr(SimTransport, "run_batch", spy)
    inventory = load_inventory(tmp_path / "a" / "cluster.yaml", CATALOG)
    resumed = resume_validate(run_dir, inventory, CATALOG, EngineOptions(checks=("dcgm.diag_r2",)))
    assert list(seen) == ["gpu002"] and seen["gpu002"][-2:] == ("--ignoreErrorCodes", "gpu0:40,101;gpu3:40,101")
    assert resumed.run.verdict.value == "READY"
