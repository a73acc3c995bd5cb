"""Run an untrusted Python snippet: bubblewrap namespaces, prlimit limits, an unprivileged uid.

The snippet sees a read-only /usr (the interpreter and its libraries), its user's workspace as the
only writable directory, a small /tmp, no network, no host processes, no environment. Limits are
set hard and soft alike, so the snippet cannot raise them, and hold for an unprivileged uid only.
When the worker is root, each user's snippets run as a host uid of their own (the owner of their
workspace, LOOP_SANDBOX_UID_BASE + user id), so the process limit, which the kernel counts per
uid, is each user's own budget. Memory is bounded per snippet (all its processes and its tmpfs
together) and per person by cgroups, where the machine has them, and per process by RLIMIT_AS
everywhere. A wall-clock timeout kills the whole tree, and output is read with a byte cap. A
stopped run's snippets are killed at once from any thread, their writes saved as at a timeout.

One object holds a process's sandboxes: `host.SandboxHost`, which the worker (or an in-process
runner, or a command) makes, hands to run_code through the tools' context, and closes as it
stops. By concern:

    host.py          SandboxHost: the parts below, the configured sandbox, kill_run, close
    policies.py      what a snippet may do: its Limits, as rlimits and prlimit options
    chain.py         the steps before the snippet: cgroup, setpriv, the quota's overlay
    bubblewrap.py    the isolated sandbox (bwrap), and what bwrap's failures say
    unisolated.py    LOOP_SANDBOX=subprocess: limits only, no isolation
    interpreter.py   the snippet's interpreter, its program on stdin
    launcher.py      the one thread that forks every sandbox
    process.py       a sandbox process: given its program, waited for, killed, reaped;
                     the snippets running now, by run
    reaper.py        reaping what outlives its sandbox
    pool.py          sandboxes started ahead for a workspace's next call
    cgroups.py       memory bounds per snippet and per person
    overlay.py       the quota's overlay (run by the system interpreter, standard library only)
    overlay_save.py  its saver: what a snippet wrote, saved within the quota
    fence.py         a claimed run's fence on its snippets' saves, and the saver's channel
"""
