"""nvdeploy: take NVIDIA GPU clusters from bare metal to a signed-off, production-ready state.

The package is laid out by pipeline stage, inventory -> plan -> collect -> parse -> evaluate -> record -> report:
``config/`` (inventories, profiles, levels, waivers), ``collect/`` (collectors and the probe), ``parsers/`` (text
to facts), ``checks/`` (facts to findings), ``runner/`` (engine, evaluation, record, history), ``report/`` (HTML,
JSON, JUnit, Prometheus, comparisons), with ``results.py`` the shared model and ``files.py`` the atomic writes.
Around them: ``transport/`` (SSH, local), ``phases/`` (install, validate, optimize, the playbook),
``actions/``, ``slurm/``, ``sizing/``, ``cli/``, and the test doubles ``sim/`` and ``testing/``. ``.importlinter``
holds the import rules between them.
"""

from nvdeploy import _moved

__version__ = "0.1.0"

_moved.install()
