"""From the command line's strings to jobs and estimates: validate every input, pick the profiles, apply a run.

Every bad input raises :class:`SizingError` with a message naming the option; nothing here prints.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

from nvdeploy.config.profiles import ProfileCatalog
from nvdeploy.sizing import cost
from nvdeploy.sizing.models import ModelShape, load_models
from nvdeploy.sizing.sku import SkuFigures, sku_figures
from nvdeploy.sizing.solve import Estimate, Job, estimate
from nvdeploy.sizing.units import SizingError, parse_quantity


def _count(text: Optional[str], what: str) -> Optional[int]:
    if text is None:
        return None
    value = parse_quantity(str(text), what)
    if value != math.floor(value):
        raise SizingError(f"{what}: {text!r} must be a whole number")
    return int(value)


def _model(model_name: Optional[str], params: Optional[str]) -> ModelShape:
    if model_name and params:
        raise SizingError("give --model or --params, not both")
    if model_name:
        table = load_models()
        if model_name not in table:
            raise SizingError(f"--model: unknown model {model_name!r} (known: {', '.join(sorted(table))})")
        return table[model_name]
    if params:
        return ModelShape(name="", params=parse_quantity(params, "--params"))
    raise SizingError("give --model NAME or --params COUNT (e.g. --params 70B)")


def _prices(items: tuple[str, ...], known: list[str]) -> dict[str, float]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise SizingError(f"--price: {item!r} must be PROFILE=USD_PER_GPU_HOUR (e.g. h100-sxm-8x=2.50)")
        if name.strip() not in known:
            raise SizingError(f"--price: unknown profile {name.strip()!r} (known: {', '.join(known)})")
        try:
            usd = float(value)
        except ValueError:
            raise SizingError(f"--price: {value!r} is not a number of USD per GPU-hour") from None
        if not math.isfinite(usd) or usd < 0:
            raise SizingError(f"--price: {value!r} must be a non-negative number of USD per GPU-hour")
        out[name.strip()] = usd
    return out


def _load_run(run_dir: Path) -> tuple[str, dict[str, Any]]:
    from nvdeploy.runner.folders import RunLoadError, load_run
    from nvdeploy.sizing.measured import measured_figures

    try:
        run = load_run(run_dir)
    except RunLoadError as exc:
        raise SizingError(f"--run: {exc}") from None
    return run.run_id, {"run": run, "measured": measured_figures(run)}


def plan(model_name: Optional[str] = None, params: Optional[str] = None, tokens: Optional[str] = None,
         inference: bool = False, context: str = "8192", batch: str = "1", precision: str = "bf16",
         optimizer: str = "adamw", sharding: str = "zero3", activation_checkpointing: bool = False,
         attention: str = "flash", seq_len: Optional[str] = None, micro_batch: str = "1",
         profiles: tuple[str, ...] = (),
         gpus: Optional[str] = None, days: Optional[str] = None, mfu: str = "0.40", prices: tuple[str, ...] = (),
         on_prem: Optional[str] = None, run_dir: Optional[Path] = None, catalog: Optional[ProfileCatalog] = None,
         **_: Any) -> tuple[dict[str, Any], list[Estimate]]:
    """The inputs as the JSON echoes them, and one estimate per profile."""
    model = _model(model_name, params)
    if gpus is not None and days is not None:
        raise SizingError("give --gpus or --days, not both: the calculator solves for the other")
    if inference:
        if tokens is not None or days is not None:
            raise SizingError("--tokens and --days are for training; --inference sizes memory (and GPUs)")
    elif tokens is None:
        raise SizingError("give --tokens COUNT (e.g. --tokens 2T) for training, or --inference")
    try:
        mfu_value = float(mfu)
    except ValueError:
        raise SizingError(f"--mfu: {mfu!r} is not a number") from None
    if not 0 < mfu_value <= 1:
        raise SizingError(f"--mfu: {mfu!r} must be a fraction in (0, 1], e.g. 0.40")
    gpu_count = _count(gpus, "--gpus")
    day_count = parse_quantity(days, "--days") if days is not None else None
    catalog = catalog or ProfileCatalog()
    known = catalog.names()
    run_id = None
    measured: dict[str, Any] = {}
    if run_dir is not None:
        run_id, loaded = _load_run(run_dir)
        measured = loaded["measured"]
        if not profiles:
            profiles = tuple(sorted(p.split("@", 1)[0] for p in loaded["run"].profiles.values()))
    chosen = list(dict.fromkeys(profiles)) or known
    for name in chosen:
        if name not in known:
            raise SizingError(f"--profile: unknown profile {name!r} (known: {', '.join(known)})")
    price_map = _prices(prices, known)
    onprem = cost.OnPrem.parse(on_prem) if on_prem else None
    job_args = dict(model=model, precision=precision, tokens=parse_quantity(tokens, "--tokens") if tokens else None,
                    inference=inference, context=_count(context, "--context"), batch=_count(batch, "--batch"),
                    optimizer=optimizer, sharding=sharding, checkpointing=activation_checkpointing,
                    attention=attention,
                    seq_len=_count(seq_len, "--seq-len"), micro_batch=_count(micro_batch, "--micro-batch"),
                    gpus=gpu_count, days=day_count, mfu=mfu_value, on_prem=onprem)
    estimates = []
    for name in chosen:
        try:
            sku: SkuFigures = sku_figures(catalog.get(name))
        except KeyError:
            raise SizingError(f"--profile: unknown profile {name!r}") from None
        if run_id is not None and name in measured:
            from nvdeploy.sizing.measured import apply_measured

            sku = apply_measured(sku, measured[name], run_id)
        estimates.append(estimate(Job(price=price_map.get(name), **job_args), sku))  # type: ignore[arg-type]
    job = Job(**job_args)  # type: ignore[arg-type]
    inputs = {"model": model.name or None, "params": model.params, "tokens": job.tokens, "inference": inference,
              "context": job.context if inference else None, "batch": job.batch if inference else None,
              "precision": precision, "optimizer": optimizer, "sharding": sharding,
              "activation_checkpointing": activation_checkpointing, "attention": attention, "seq_len": job.seq,
              "micro_batch": job.micro_batch, "profiles": chosen, "gpus": gpu_count, "days": day_count,
              "mfu": mfu_value, "prices": price_map,
              "on_prem": None if onprem is None else {"capex_per_node": onprem.capex_per_node,
                                                      "years": onprem.years, "usd_per_kwh": onprem.usd_per_kwh},
              "run": None if run_dir is None else {"run_id": run_id, "dir": str(run_dir)}}
    return inputs, estimates
