"""Kernel-log parser against real Xid/SXid captures (tests/fixtures/real/xid-logs, see PROVENANCE.tsv)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from nvdeploy.parsers.kmsg import AerEvent, KmsgFacts, SxidEvent, XidEvent, parse_kmsg

XID_DIR = Path(__file__).parent.parent / "fixtures" / "real" / "xid-logs"

# file -> expected: xid_counts, number of sxid events, and per-event fields {position: {...}}
EXPECT: dict[str, dict[str, Any]] = {
    "dmesg-T-xid119-gsp-rpc-timeout-h100-xe9680-rpc-history-stacktrace.log": {
        "counts": {"119": 5}, "sxid": 0,
        "xid": {0: {"pci": "0000:9b:00", "pid": 2024380},
                3: {"pid": 1263500, "text": "Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected "
                                            "function 76 (GSP_RM_CONTROL) (0x20801813 0x4c)."},
                4: {"pid": 1240590}},
    },
    "dmesg-T-xid43-xid31-mmu-fault-xid94-contained-535.183.01.log": {
        "counts": {"31": 1, "43": 2, "94": 1}, "sxid": 0,
        "xid": {0: {"xid": 43, "pci": "0000:00:05", "pid": 1045242, "text": "Ch 00000008"},
                2: {"xid": 31, "pci": "0000:00:07", "pid": 2512125},
                3: {"xid": 94, "pci": "0000:00:08", "pid": None, "text": "Contained: SM (0x1). RST: No, D-RST: No"}},
    },
    "dmesg-ctime-xid13-sm-exceptions-then-xid109-ctx-switch-timeout.log": {
        "counts": {"13": 3, "109": 1}, "sxid": 0,
        "xid": {0: {"xid": 13, "pid": None, "pci": "0000:cb:00"},
                3: {"xid": 109, "pid": 1797828, "text": "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"}},
    },
    "dmesg-nvswitch-sxid12028-nonfatal-link-error.log": {
        "counts": {}, "sxid": 1,
        "sxid_events": {0: {"sxid": 12028, "device": "0000:85:00.0",
                            "text": "Non-fatal, Link 61 egress non-posted PRIV error (First)"}},
    },
    # One SXid event is its main line plus the Severity and Data lines after it: counted once.
    "dmesg-nvswitch-sxid22013-severity-data-continuation-lines.log": {
        "counts": {}, "sxid": 1,
        "sxid_events": {0: {"sxid": 22013, "device": "0000:08:00.0", "switch": "nvidia-nvswitch3", "fatal": False,
                            "link": 60, "text": "Non-fatal, Link 60 Minion Link DLREQ interrupt",
                            "details": ("Severity 0 Engine instance 60 Sub-engine instance 00",
                                        "Data {0x0000003c, 0x0000003c, 0x00000000, 0x0000003c, 0x80000302, "
                                        "0x00000000, 0x00000000, 0x00000000, 0x00000000}")}},
    },
    "dmesg-rminitadapter-failed-0x11-0x45-2525-two-gpus-interleaved-EXCERPT.log": {
        "counts": {}, "sxid": 0,
        "init": [("0000:04:01.0", "0x11:0x45:2525")] * 3 + [("0000:04:02.0", "0x11:0x45:2525")] * 3,
    },
    "dmesg-xid62-hex-payload-then-xid45-no-timestamps.log": {
        "counts": {"45": 1, "62": 1}, "sxid": 0,
        "xid": {0: {"xid": 62, "pid": None, "pci": "0000:01:00",
                    "text": "023f0f30 00000000 00000000 202c0ffe 202bc4b6 2029bdb6 202bccb8 20297b2a"},
                1: {"xid": 45, "pid": 9684, "text": "channel 0x00000015"}},
    },
    "dmesg-xid64-row-remapper-all-reserved-rows-remapped.log": {
        "counts": {"64": 1}, "sxid": 0,
        "xid": {0: {"pid": None, "pci": "0000:0f:00",
                    "text": "Row Remapper Error: (0x00000002eebc4100) - All reserved rows for bank are remapped"}},
    },
    "dmesg-xid74-nvlink-fatal-link14-7-registers-hopper-DOCEXAMPLE.log": {
        "counts": {"74": 1}, "sxid": 0,
        "xid": {0: {"pci": "0003:00:00", "pid": None}},
    },
    "dmesg-xid94-contained-ecc-h100-cluster.log": {
        "counts": {"94": 1}, "sxid": 0, "xid": {0: {"pid": 2503421, "text": "Ch 00000008"}},
    },
    "journalctl-xid79-fallen-off-bus-continuation-lines.log": {
        "counts": {"79": 1}, "sxid": 0,
        "xid": {0: {"pci": "0000:03:00", "pid": None, "text": "GPU has fallen off the bus."}},
    },
    "kmsg-gb200-nvlink5-xid145-xid149-lines-COLLECTION.log": {
        "counts": {"145": 7, "149": 7}, "sxid": 0,
        "xid": {0: {"xid": 149, "pci": "0018:01:00", "pid": None}, 1: {"xid": 145, "pid": 876767},
                7: {"xid": 145, "pci": "0008:01:00", "pid": 11436}},
    },
    "syslog-xid8-legacy-no-pid-gt220-340.96.log": {
        "counts": {"8": 1}, "sxid": 0, "xid": {0: {"pci": "0000:02:00", "pid": None, "text": "Channel 00000001"}},
    },
    "syslog-rminitadapter-failed-0x24-0x72-1568-gpu-0a-repeated-EXCERPT.log": {
        "counts": {}, "sxid": 0, "init": [("0000:0a:00.0", "0x24:0x72:1568")] * 6,
    },
    "xid63-row-remapper-a100-single-line.log": {
        "counts": {"63": 1}, "sxid": 0,
        "xid": {0: {"pci": "0000:10:1c", "pid": 1896,
                    "text": "Row Remapper: New row marked for remapping, reset gpu to activate."}},
    },
}


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace")


def test_every_fixture_has_expectations() -> None:
    assert sorted(p.name for p in XID_DIR.iterdir()) == sorted(EXPECT)


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_real_xid_logs(name: str) -> None:
    raw = _read(XID_DIR / name)
    facts = parse_kmsg(raw)
    expected = EXPECT[name]
    assert facts.xid_counts == expected["counts"]
    assert sum(facts.xid_counts.values()) == len(facts.xid_events)
    assert len(facts.sxid_events) == expected["sxid"]
    assert facts.aer_events == ()
    assert facts.warnings == ()
    for pos, fields in expected.get("xid", {}).items():
        for key, value in fields.items():
            assert getattr(facts.xid_events[pos], key) == value, (pos, key)
    for pos, fields in expected.get("sxid_events", {}).items():
        for key, value in fields.items():
            assert getattr(facts.sxid_events[pos], key) == value, (pos, key)
    if "init" in expected:
        assert sorted((e.pci, e.code) for e in facts.init_failures) == sorted(expected["init"])
    else:
        assert facts.init_failures == ()
    for event in facts.xid_events:
        assert event.line in raw.splitlines()
    json.dumps(facts.to_dict())


def test_sxid_is_never_counted_as_xid() -> None:
    facts = parse_kmsg(_read(XID_DIR / "dmesg-nvswitch-sxid12028-nonfatal-link-error.log"))
    assert facts.xid_events == () and facts.xid_counts == {}
    assert isinstance(facts.sxid_events[0], SxidEvent)


def test_continuation_lines_do_not_create_events() -> None:
    facts = parse_kmsg(_read(XID_DIR / "journalctl-xid79-fallen-off-bus-continuation-lines.log"))
    assert len(facts.xid_events) == 1 and facts.xid_events[0].xid == 79


def test_prefix_variants() -> None:
    body = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
    lines = [
        body,
        f"[  888.328156] {body}",
        f"[Sun Feb 23 16:24:18 2025] {body}",
        f"Oct 30 09:49:36 node1 kernel: {body}",
        f"2024-10-30T09:49:36.123456+00:00 node1 kernel: {body}",
        f"kern  :warn  : [Wed Jul 31 23:14:18 2024] {body}",
        f"<4>[12345.6789] {body}",
    ]
    facts = parse_kmsg("\n".join(lines))
    assert facts.xid_counts == {"79": len(lines)}
    for event in facts.xid_events:
        assert (event.xid, event.pci, event.pid, event.text) == (79, "0000:3b:00", 1234, "GPU has fallen off the bus.")


def test_legacy_and_unknown_pid_forms() -> None:
    facts = parse_kmsg(
        "NVRM: Xid (0000:01:00): 8, Channel 00000010\n"
        "NVRM: Xid (PCI:0000:0f:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error\n"
        "NVRM: Xid (PCI:0000:0f:00): 13, pid=<unknown>, name=x, Graphics Exception\n"
    )
    assert [(e.xid, e.pci, e.pid, e.text) for e in facts.xid_events] == [
        (8, "0000:01:00", None, "Channel 00000010"),
        (48, "0000:0f:00", None, "An uncorrectable double bit error"),
        (13, "0000:0f:00", None, "Graphics Exception"),
    ]


def test_sxid_variants() -> None:
    facts = parse_kmsg(
        "nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error\n"
        "nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 12028, Data {0x00000000, 0x00000000}\n"
        "[ 1.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 10 LTSSM Fault Up\n"
    )
    assert facts.xid_events == ()
    # The Data line continues the 12028 event above it: one event, not two.
    assert [(e.sxid, e.device) for e in facts.sxid_events] == [(12028, "0000:86:00.0"), (20034, "0000:05:00.0")]
    assert facts.sxid_events[0].text == "Non-fatal, Link 32 egress non-posted PRIV error"
    assert facts.sxid_events[0].details == ("Data {0x00000000, 0x00000000}",)


AER_LOG = """\
[ 12.3] pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0
[ 12.3] nvidia 0000:01:00.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)
[ 12.3] nvidia 0000:01:00.0:   device [10de:2330] error status/mask=00000001/0000e000
[ 12.3] nvidia 0000:01:00.0:    [ 0] RxErr                  (First)
[ 13.0] pcieport 0000:00:03.1: AER: Uncorrected (Fatal) error received: 0000:3b:00.0
[ 13.0] pcieport 0000:00:03.1: AER: Multiple Uncorrectable (Non-Fatal) error message received from 0000:3c:00.0
[ 14.0] pcieport 0000:00:1c.0: AER: Corrected error received: id=00e0
[ 15.0] pcieport 0000:00:1c.0: AER: enabled with IRQ 122
[ 16.0] nvidia 0000:9b:00.0: AER: Correctable error message received from 0000:9b:00.0
"""


def test_aer_lines() -> None:
    facts = parse_kmsg(AER_LOG)
    assert [(e.device, e.severity) for e in facts.aer_events] == [
        ("0000:01:00.0", "corrected"),
        ("0000:01:00.0", "corrected"),
        ("0000:3b:00.0", "uncorrected_fatal"),
        ("0000:3c:00.0", "uncorrected_nonfatal"),
        ("0000:00:1c.0", "corrected"),
        ("0000:9b:00.0", "corrected"),
    ]
    assert all(isinstance(e, AerEvent) for e in facts.aer_events)
    assert facts.xid_events == ()


def test_mixed_log_keeps_order_and_counts() -> None:
    text = "\n".join(_read(XID_DIR / n) for n in sorted(EXPECT)) + "\n" + AER_LOG
    facts = parse_kmsg(text)
    total: dict[str, int] = {}
    for exp in EXPECT.values():
        for k, v in exp["counts"].items():
            total[k] = total.get(k, 0) + v
    assert facts.xid_counts == total
    assert list(facts.xid_counts) == sorted(facts.xid_counts, key=int)
    assert len(facts.sxid_events) == sum(exp["sxid"] for exp in EXPECT.values()) and len(facts.aer_events) == 6
    assert len(facts.init_failures) == sum(len(exp.get("init", ())) for exp in EXPECT.values())


BAD = {
    "empty": "",
    "blank": "\n \n\t\n",
    "nul": "\x00\x00\x00",
    "invalid-utf8": b"\xff\xfe\x80 NVRM: \xc3".decode("utf-8", errors="replace"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_warns(name: str) -> None:
    facts = parse_kmsg(BAD[name])
    assert isinstance(facts, KmsgFacts)
    assert facts.xid_events == () and facts.xid_counts == {}
    assert facts.warnings


def test_garbage_gives_nothing() -> None:
    facts = parse_kmsg("lorem ipsum\n<xml/>\n{json: 1}\n" + bytes(range(1, 256)).decode("latin-1"))
    assert facts.xid_events == () and facts.sxid_events == () and facts.aer_events == ()


def test_nul_bytes_inside_xid_line() -> None:
    facts = parse_kmsg("NVRM: Xid (PCI:0000:3b:00): 79,\x00 pid=1, name=x, GPU has fallen off the bus.\n")
    assert facts.xid_counts == {"79": 1}
    assert any("NUL" in w for w in facts.warnings)


def test_unparseable_xid_line_warns() -> None:
    facts = parse_kmsg("NVRM: Xid (PCI:0000:3b:00): \nNVRM: Xid truncated")
    assert facts.xid_events == ()
    assert len(facts.warnings) == 2


def test_permission_error_warns() -> None:
    facts = parse_kmsg("dmesg: read kernel buffer failed: Operation not permitted\n")
    assert any("incomplete" in w for w in facts.warnings)


def test_truncated_lines_never_raise() -> None:
    rng = random.Random(7)
    texts = [_read(p) for p in sorted(XID_DIR.iterdir())] + [AER_LOG]
    for text in texts:
        for _ in range(30):
            cut = text[: rng.randrange(len(text) + 1)]
            assert isinstance(parse_kmsg(cut), KmsgFacts)


def test_event_types_and_to_dict() -> None:
    facts = parse_kmsg(_read(XID_DIR / "xid63-row-remapper-a100-single-line.log"))
    assert isinstance(facts.xid_events[0], XidEvent)
    d = facts.to_dict()
    assert d["xid_counts"] == {"63": 1}
    assert d["xid_events"][0]["pid"] == 1896 and d["sxid_events"] == [] and d["aer_events"] == []


def test_sxid_severity_switch_and_link_are_read() -> None:
    real = parse_kmsg(_read(XID_DIR / "dmesg-nvswitch-sxid12028-nonfatal-link-error.log")).sxid_events[0]
    assert (real.sxid, real.device, real.switch, real.fatal, real.link) == (
        12028, "0000:85:00.0", "nvidia-nvswitch2", False, 61)
    fatal = parse_kmsg("nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 20034, Fatal, Link 48 LTSSM Fault Up\n")
    assert (fatal.sxid_events[0].fatal, fatal.sxid_events[0].link) == (True, 48)
    assert fatal.to_dict()["sxid_events"][0]["switch"] == "nvidia-nvswitch3"
    bare = parse_kmsg("SXid (PCI:0000:c4:00.0): 10002, Severity 5 Engine instance 00\n").sxid_events[0]
    assert (bare.switch, bare.fatal, bare.link, bare.device) == (None, None, None, "0000:c4:00.0")


def test_partial_first_line_of_a_cut_log_is_dropped() -> None:
    cut = "ci:0000:2a:00): 79, pid='<unknown>', GPU has fallen off the bus.\n[ 9.0] NVRM: Xid (PCI:0000:18:00): 13, x\n"
    whole = parse_kmsg(cut)
    assert [e.xid for e in whole.xid_events] == [13]  # the fragment is not an Xid line either way
    tail = parse_kmsg("(PCI:0000:2a:00): 79, GPU has fallen off the bus.\nNVRM: Xid (PCI:0000:18:00): 13, x\n",
                      partial_first_line=True)
    assert [e.xid for e in tail.xid_events] == [13]
    assert tail.dropped_first_line.startswith("(PCI:0000:2a:00): 79")
    assert parse_kmsg("only a fragment", partial_first_line=True).xid_events == ()
