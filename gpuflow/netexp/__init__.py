"""gpuflow.netexp: synthetic jobs sharing one shaped link, for checking the network model.

Two (or more) synthetic jobs alternate a compute phase (a sleep) and a communication
phase (a bulk TCP transfer of a gradient's size) between two network namespaces
joined by a veth pair whose sending end is shaped with HTB (link: the namespaces and
the shaping; worker: the job and receiver processes; experiment: runs and their
iteration times). Called by bench/network_phases.py and tests/e2e/test_phases.py,
which compare the measured iteration times with controller.network.phases.
Needs root and iproute2; nothing else of the project runs it.
"""
