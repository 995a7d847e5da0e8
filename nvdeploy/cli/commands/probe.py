"""``nvdeploy probe``: run the NVML node probe on this machine and print its facts as JSON."""

from __future__ import annotations

import io
import json
import subprocess

import click


@click.command("probe")
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds for nvidia-smi when NVML cannot be used.")
def probe_command(timeout: float) -> None:
    """Gather this machine's GPU facts from NVML (pynvml); fall back to `nvidia-smi -q -x` when NVML fails.

    Prints the facts as JSON, with "source" saying which path supplied them. Exit 0 with facts, 1 when neither
    NVML nor nvidia-smi could report (the JSON says why).
    """
    from nvdeploy.collect.probe import nvml_probe
    from nvdeploy.parsers.nvidia_smi import parse_xml
    from nvdeploy.parsers.nvml_json import parse_probe_json

    buffer = io.StringIO()
    nvml_probe.main(out=buffer)
    facts = parse_probe_json(buffer.getvalue())
    if facts.gpus:
        click.echo(json.dumps({"source": "nvml", **facts.to_dict()}, indent=2))
        return
    try:
        done = subprocess.run(["nvidia-smi", "-q", "-x"], capture_output=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        click.echo(json.dumps({"source": None, "error": f"NVML: {list(facts.warnings)}; nvidia-smi: {exc}"},
                              indent=2))
        raise click.exceptions.Exit(1) from None
    fallback = parse_xml(done.stdout.decode("utf-8", errors="replace"))
    result = {"source": "nvidia-smi", "nvidia_smi_rc": done.returncode, "probe_warnings": list(facts.warnings),
              **fallback.to_dict()}
    click.echo(json.dumps(result, indent=2))
    if not fallback.gpus:
        raise click.exceptions.Exit(1)


def register(cli: click.Group) -> None:
    cli.add_command(probe_command)
