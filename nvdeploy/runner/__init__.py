"""The run: plan, execute and record a validation over many nodes.

``engine`` plans each node's collectors and runs them through a transport (forks, deadline, busy guard);
``evaluate`` turns outputs into facts and findings (in the node threads or worker processes); ``record`` streams
results to the run folder's journal; ``folders`` and ``statedir`` say where runs live; ``history_db`` is the SQLite
history of every run; ``progress`` is the status line; ``pairing`` the pairwise/bisection rounds of multi-node tests;
``signals`` how a run ends on Ctrl-C, SIGTERM and SIGHUP. It imports config, collect, parsers, checks and the
transports. Two lazy crossings are kept on purpose: ``folders`` finishes an interrupted run through the validate
phase, and ``history_db`` reads a run's versions with the report's comparison.
"""
