"""``nvdeploy size``: will a model fit, on how many GPUs of which SKU, for how long, at what cost and energy.

One concept per module, pure functions over plain numbers:

- :mod:`units`     ``70B``/``2T``/``8k`` quantities and the one error type bad input raises
- :mod:`models`    the shipped model table (``checks/models.yaml``): shapes and published training runs
- :mod:`sku`       a profile's datasheet figures (dense TFLOPS, memory, NVLink, TDP, nccl floors) per GPU
- :mod:`memory`    weights, gradients, optimizer states, activations, KV cache per GPU
- :mod:`compute`   training FLOPs, GPU-hours and days at peak x MFU
- :mod:`comms`     the gradient all-reduce per step from nccl-tests bus bandwidth; scaling efficiency
- :mod:`cost`      cloud cost, energy, on-premises break-even
- :mod:`measured`  the figures a validation run measured (bus bandwidth, power) instead of datasheet ones
- :mod:`solve`     one estimate per SKU: smallest GPU count that fits, solve GPUs <-> days
- :mod:`render`    the readable table
"""
