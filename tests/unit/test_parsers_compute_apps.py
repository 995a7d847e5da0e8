"""nvidia-smi --query-compute-apps parsing: idle, busy, N/A memory, odd names, garbage."""

from __future__ import annotations

from nvdeploy.parsers.compute_apps import ComputeProcess, parse_compute_apps


def test_idle_node_prints_nothing():
    apps = parse_compute_apps(b"")
    assert apps.processes == () and not apps.busy and apps.warnings == ()


def test_older_drivers_say_no_running_processes():
    assert not parse_compute_apps("No running processes found\n").busy


def test_processes_with_memory():
    apps = parse_compute_apps("41230, /usr/bin/python3, 30512 MiB\n41231, python3, 1024 MiB\n")
    assert apps.processes == (ComputeProcess(41230, "/usr/bin/python3", 30512), ComputeProcess(41231, "python3", 1024))
    assert apps.processes[0].label() == "pid 41230 /usr/bin/python3 (30512 MiB)"


def test_header_and_nounits_are_accepted():
    apps = parse_compute_apps("pid, process_name, used_gpu_memory [MiB]\n7, train, 512\n")
    assert apps.processes == (ComputeProcess(7, "train", 512),)


def test_unknown_memory_still_counts_as_busy():
    apps = parse_compute_apps("99, python3, [N/A]\n100, torchrun, [Insufficient Permissions]\n")
    assert [p.used_mib for p in apps.processes] == [None, None]
    assert apps.busy
    assert apps.processes[0].label() == "pid 99 python3 (memory unknown)"


def test_a_process_on_two_gpus_is_listed_once_with_its_total_memory():
    apps = parse_compute_apps("5, python3, 100 MiB\n5, python3, 200 MiB\n")
    assert apps.processes == (ComputeProcess(5, "python3", 300),)


def test_a_name_with_a_comma_keeps_pid_and_memory():
    apps = parse_compute_apps("5, /opt/a, b/run, 10 MiB\n")
    assert apps.processes == (ComputeProcess(5, "/opt/a, b/run", 10),)


def test_garbage_is_a_warning_not_a_process():
    apps = parse_compute_apps("Failed to initialize NVML: Unknown Error\n\x00\x1b[31m")
    assert apps.processes == ()
    assert any("not understood" in w for w in apps.warnings)
