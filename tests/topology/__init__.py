"""Loop on several hosts, built on this machine with Linux network namespaces.

`hosts.py` makes the hosts (a namespace each, joined by veth pairs to one bridge) and starts the
parts on them: PostgreSQL with pgvector, Redis, daphne on two web hosts, a worker on two worker
hosts. `client.py` is the person: it runs on a host of its own, logs in, sends a task, and watches
the run on a socket to each web host, printing what it sees as JSON lines.
tests/test_topology.py proves the site across hosts with them; bench/topology.py measures it.
"""
