"""Configuration, the pipeline's input: inventories (YAML, INI, Ansible-compatible), host ranges, the strict YAML
loader with file/line/key errors, GPU profiles and their schema, playbooks, levels, waivers, built-in data folders.

Everything here is read from files and checked before any node is touched. It may import the result model, the
catalogs its files name (checks, collectors, actions), the Slurm node source (an inventory group from ``sinfo``) and
the simulator's fault names; never a transport, the runner, a report or the CLI.
"""
