"""The cuda_toolkits collector's output (find markers + version.json) on real files, cut files and odd layouts."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from nvdeploy.parsers.cuda_install import parse_cuda_install

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real"
FOLDER = REAL / "cuda-toolkits"


def listing(*entries: tuple[str, str]) -> str:
    """find's output: a folder marker, then ``== path`` and the file's text per entry (as -printf/-exec print)."""
    out = []
    for path, body in entries:
        out.append(f"\n== {path}\n{body}")
    return "".join(out)


def test_every_fixture_has_a_provenance_row():
    rows = {row["file"] for row in csv.DictReader((REAL / "PROVENANCE.tsv").open(encoding="utf-8"), delimiter="\t")}
    files = {f"cuda-toolkits/{p.name}" for p in FOLDER.iterdir()}
    assert files and files <= rows


def test_apt_version_json_gives_the_update():
    text = listing(("/usr/local/cuda-11.5/", ""),
                   ("/usr/local/cuda-11.5/version.json", (FOLDER / "version-json-11.5.2-apt.json").read_text()))
    install = parse_cuda_install(text)
    [toolkit] = install.toolkits
    assert (toolkit.path, toolkit.version, toolkit.update, toolkit.major_minor) == \
        ("/usr/local/cuda-11.5", "11.5.2", 2, (11, 5))
    assert toolkit.problem is None and install.warnings == ()


def test_runfile_date_is_not_an_update_and_a_cut_file_still_gives_the_version():
    text = listing(("/usr/local/cuda-12.6/version.json",
                    (FOLDER / "version-json-12.6.3-runfile-date-partial.json").read_text()))
    [toolkit] = parse_cuda_install(text).toolkits
    assert toolkit.version == "12.6.20241114"
    assert toolkit.update is None  # a date: the update is unknown
    assert toolkit.problem == "version.json is not valid JSON"


def test_runfile_with_bundled_driver_entry():
    text = listing(("/usr/local/cuda/", ""), ("/usr/local/cuda/version.json",
                                              (FOLDER / "version-json-11.8-runfile-with-driver-partial.json")
                                              .read_text()))
    [toolkit] = parse_cuda_install(text).toolkits
    assert (toolkit.path, toolkit.version, toolkit.update) == ("/usr/local/cuda", "11.8.20220929", None)


def test_real_capture_folder_without_version_file():
    # Captured on the build machine: a CUDA 13.0 laid out from NVIDIA's wheels, no version.json.
    [toolkit] = parse_cuda_install((FOLDER / "find-usr-local-cuda-13.0-pip-layout-no-version-json.txt")
                                   .read_text()).toolkits
    assert (toolkit.path, toolkit.version) == ("/usr/local/cuda-13.0", "13.0")
    assert toolkit.problem == "no version.json; version from the folder name"


def test_compat_library_and_several_toolkits_sorted():
    text = listing(
        ("/usr/local/cuda-13.0/", ""),
        ("/usr/local/cuda-13.0/compat/libcuda.so.1", ""),
        ("/usr/local/cuda-13.0/compat/libcuda.so.580.95.05", ""),
        ("/usr/local/cuda-13.0/version.json", '{"cuda": {"name": "CUDA SDK", "version": "13.0.2"}}\n'),
        ("/usr/local/cuda-12.4/", ""),
        ("/usr/local/cuda-12.4/version.json", '{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}}'),
    )
    toolkits = parse_cuda_install(text).toolkits
    assert [(t.path, t.version, t.compat_driver) for t in toolkits] == [
        ("/usr/local/cuda-12.4", "12.4.1", None), ("/usr/local/cuda-13.0", "13.0.2", "580.95.05")]


def test_version_txt_of_old_toolkits_and_deeper_version_files_ignored():
    text = listing(("/usr/local/cuda-10.2/version.txt", "CUDA Version 10.2.89\n"),
                   ("/usr/local/cuda-10.2/nsight/version.json", '{"cuda": {"version": "99.9.9"}}'))
    [toolkit] = parse_cuda_install(text).toolkits
    assert (toolkit.path, toolkit.version) == ("/usr/local/cuda-10.2", "10.2.89")


@pytest.mark.parametrize("text", ["", "garbage\n\x00\xff", "\n== /usr/local/cuda-12.4/version.json\n{not json",
                                  "\n== relative/path\n"])
def test_odd_input_never_raises(text):
    install = parse_cuda_install(text)
    assert all(t.version is None or t.version[0].isdigit() for t in install.toolkits)
