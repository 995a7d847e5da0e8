"""Slurm integration: nodes from the scheduler, drain and resume, maintenance reservations, validation as a
Slurm job step (``--via slurm``) and the node health check.

One concept per module: ``client`` (the Slurm commands, each under a timeout), ``nodes`` (pure parsers of
``sinfo --json`` and ``scontrol -o show node``), ``source`` (an inventory group's hosts from Slurm), ``drain``
(the drain/resume policy and reasons), ``reservation`` (maintenance windows), ``srun`` (the batch as a job step).
"""
