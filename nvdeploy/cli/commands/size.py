"""``nvdeploy size``: which GPUs, how many, how long, at what cost, for a training or inference job.

Joins the profiles' datasheet figures (and, with ``--run``, what a validation measured) with the usual sizing
arithmetic (nvdeploy/sizing/). JSON with ``--json``; bad input is one message and exit 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from nvdeploy.sizing.units import SizingError


@click.command("size")
@click.option("--model", "model_name", default=None, help="A model of the shipped table (e.g. llama-3-70b).")
@click.option("--params", default=None, help="Parameter count, e.g. 70B (instead of --model; no shape terms).")
@click.option("--tokens", default=None, help="Training tokens, e.g. 2T.")
@click.option("--inference", is_flag=True, help="Size an inference deployment instead of training.")
@click.option("--context", default="8192", show_default=True, help="Inference context length (tokens).")
@click.option("--batch", default="1", show_default=True, help="Inference batch (concurrent sequences).")
@click.option("--precision", type=click.Choice(["bf16", "fp16", "fp8", "fp4"]), default="bf16", show_default=True)
@click.option("--optimizer", type=click.Choice(["adam", "adamw", "sgd"]), default="adamw", show_default=True)
@click.option("--sharding", type=click.Choice(["none", "zero1", "zero2", "zero3", "fsdp"]), default="zero3",
              show_default=True, help="ZeRO stage / FSDP over the data-parallel GPUs.")
@click.option("--activation-checkpointing", is_flag=True, help="Recompute activations in the backward pass.")
@click.option("--attention", type=click.Choice(["flash", "eager"]), default="flash", show_default=True,
              help="flash: memory-efficient attention (FlashAttention, PyTorch SDPA), which never stores the "
                   "attention scores, as every current training stack does; eager: a plain softmax(QK^T)V that "
                   "keeps 5*a*s^2*b bytes of scores per layer (the older, much larger estimate).")
@click.option("--seq-len", default=None, help="Training sequence length (default: the model's, else 4096).")
@click.option("--micro-batch", default="1", show_default=True, help="Sequences per GPU per step.")
@click.option("--profile", "profiles", multiple=True, help="Profile (SKU) to size for; repeatable. Default: all "
              "(with --run: the run's).")
@click.option("--gpus", default=None, help="GPU count: solve for the days.")
@click.option("--days", default=None, help="Wall-clock days: solve for the GPU count.")
@click.option("--mfu", default="0.40", show_default=True,
              help="Model FLOPs utilisation (Llama 3 405B reported 38-43%).")
@click.option("--price", "prices", multiple=True, help="PROFILE=USD_PER_GPU_HOUR; repeatable.")
@click.option("--on-prem", "on_prem", default=None, help="CAPEX_PER_NODE,YEARS,USD_PER_KWH: break-even vs --price.")
@click.option("--run", "run_dir", default=None, type=click.Path(path_type=Path),
              help="A validation run folder: use its measured bus bandwidth and power instead of the profile's.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {inputs, estimates}.")
def size_command(**options: Any) -> None:
    """Will the model fit, on how many GPUs of each SKU, how long, at what cost and energy.

    \b
    nvdeploy size --model llama-3-70b --tokens 15T --activation-checkpointing --profile h100-sxm-8x
    nvdeploy size --params 70B --tokens 2T --days 30 --price h100-sxm-8x=2.5
    nvdeploy size --model llama-3-70b --inference --context 8192 --batch 32 --precision fp8
    """
    from nvdeploy.config.yamlfile import ConfigError
    from nvdeploy.sizing.plan import plan

    try:
        inputs, estimates = plan(**options)
    except SizingError as exc:
        raise _usage(str(exc)) from None
    except ConfigError as exc:
        raise _usage(exc.render()) from None
    if options["as_json"]:
        click.echo(json.dumps({"inputs": inputs, "estimates": [e.to_dict() for e in estimates]}, indent=2))
    else:
        from nvdeploy.sizing.render import render_table

        click.echo(render_table(inputs, estimates), nl=False)


def _usage(message: str) -> click.exceptions.Exit:
    click.echo(f"nvdeploy: error: {message}", err=True)
    return click.exceptions.Exit(2)


def register(cli: click.Group) -> None:
    cli.add_command(size_command)

