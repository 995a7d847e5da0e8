"""The storage parsers: fio's JSON (real captures in tests/fixtures/real/fio, see PROVENANCE.tsv), dd's summary line,
and the storage script's per-path framing (nvdeploy/collect/storage_commands.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvdeploy.parsers.storage import parse_dd, parse_fio_json, parse_storage

REAL = Path(__file__).parent.parent / "fixtures" / "real" / "fio"


def test_fio_json_after_its_text_preamble_and_before_the_normal_report():
    # fio --output-format=json,normal: job line, version, "Starting 1 process", the JSON, then the normal report.
    run = parse_fio_json((REAL / "randwrite-4k-libaio-nvme-fio-3.42-json-then-normal.txt").read_text())
    assert run.version == "fio-3.42-6-g219f"
    assert run.write_gbps == pytest.approx(5096143 / 1e9)
    assert run.read_gbps is None  # io_bytes 0: no read I/O, not a read of 0 GB/s
    assert run.error is None


@pytest.mark.parametrize("name,direction,gbps", [
    ("seq-write-1m-libaio-direct-ext4-fio-3.33.json", "write", 0.894784853),
    ("seq-read-1m-libaio-direct-ext4-fio-3.33.json", "read", 0.945195267),
])
def test_fio_json_of_nvdeploys_own_commands(name, direction, gbps):
    run = parse_fio_json((REAL / name).read_text())
    assert run.version == "fio-3.33"
    assert getattr(run, f"{direction}_gbps") == pytest.approx(gbps)
    assert getattr(run, f"{'read' if direction == 'write' else 'write'}_gbps") is None


def test_fio_job_error_is_reported():
    text = (REAL / "seq-write-1m-libaio-direct-ext4-fio-3.33.json").read_text().replace('"error" : 0', '"error" : 5')
    assert parse_fio_json(text).error == "fio job nvdeploy-write error 5"


@pytest.mark.parametrize("text", ["", "fio: engine libaio not loadable\n", '{"jobs" : [', "{not json}"])
def test_fio_without_a_json_document_says_so(text):
    run = parse_fio_json(text)
    assert run.read_gbps is None and run.write_gbps is None
    assert run.error is not None and run.error.startswith("no fio JSON")


def test_dd_summary_line_in_gb_per_second():
    text = ("1024+0 records in\n1024+0 records out\n"
            "1073741824 bytes (1.1 GB, 1.0 GiB) copied, 0.5 s, 2.1 GB/s\n")
    assert parse_dd(text) == pytest.approx(1073741824 / 0.5 / 1e9)
    assert parse_dd("dd: failed to open '/data/x': Permission denied\n") is None


def _section(path: str, body: str, end: str = "@@end 0\n") -> str:
    return f"@@nvd-storage {path}\n{body}{end}"


def test_script_output_path_by_path():
    fio_write = (REAL / "seq-write-1m-libaio-direct-ext4-fio-3.33.json").read_text()
    fio_read = (REAL / "seq-read-1m-libaio-direct-ext4-fio-3.33.json").read_text()
    text = (_section("/data", f"@@tool fio\n@@step write\n{fio_write}@@rc 0\n@@step read\n{fio_read}@@rc 0\n"
                     "@@status ok\n")
            + _section("/missing", "@@status missing\n")
            + _section("/ro", "@@status nowrite mktemp: failed to create file via template "
                       "'/ro/.nvdeploy-storage.XXXXXXXX': Read-only file system\n")
            + _section("/hung", "@@tool fio\n@@step write\nTerminated\n@@status timeout 70\n", "@@end 124\n")
            + "@@done\n")
    run = parse_storage(text)
    assert run.complete
    assert [(p.path, p.status) for p in run.paths] == [("/data", "ok"), ("/missing", "missing"), ("/ro", "nowrite"),
                                                       ("/hung", "timeout")]
    data = run.get("/data")
    assert data is not None and data.tool == "fio"
    assert data.step("write").gbps == pytest.approx(0.894784853)
    assert data.step("read").gbps == pytest.approx(0.945195267)
    assert run.get("/ro").read_only
    assert run.get("/hung").detail == "70"


def test_dd_steps_and_a_failed_step():
    text = _section("/scratch", "@@tool dd\n@@step write\n"
                    "64+0 records in\n64+0 records out\n67108864 bytes (67 MB, 64 MiB) copied, 0.1 s, 671 MB/s\n"
                    "@@rc 0\n@@step read\ndd: error reading '/scratch/.nvdeploy-storage.x': Input/output error\n"
                    "@@rc 1\n@@status ok\n") + "@@done\n"
    path = parse_storage(text).get("/scratch")
    assert path.tool == "dd"
    assert path.step("write").gbps == pytest.approx(0.67108864)
    assert path.step("read").gbps is None
    assert "Input/output error" in path.step("read").error


def test_cut_off_answer_is_incomplete():
    run = parse_storage("@@nvd-storage /data\n@@tool fio\n@@step write\n{\n  \"fio version\"")
    assert not run.complete
    assert run.paths[0].status == "incomplete"
    assert run.paths[0].step("write").gbps is None


@pytest.mark.parametrize("text", ["", "garbage\n\x00\xff", "@@end\n@@rc x\n", "@@nvd-storage \n@@status what\n"])
def test_odd_input_never_raises(text):
    parse_storage(text)
