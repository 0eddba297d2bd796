"""`python flow.py argo-workflows heartbeat --run-id argo-...`: the run's heartbeat, as
Metaflow's own runtime sends it for a local run, so Metaflow's UI shows a run that waits
(a gang not yet scheduled, a long step of another task) as running, not failed.

It runs in the run's daemon pod (templates/heartbeat.py), first in the top DAG, for as
long as the run: it registers the run first (with the tags `init` gives it), so a run whose
first task never reaches the metadata service still has a record, then starts Metaflow's
heartbeat sidecar and sleeps until the pod is stopped (Argo stops a daemon when the DAG
that started it ends; `mfargo run` does the same).

It never fails: a failed daemon would fail the run, and a service that cannot be reached
should cost only the UI's view of the run. A step that fails is said once in the pod's log
and tried again every SLEEP_SECONDS, so a service that comes back gets its heartbeats.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from metaflow._vendor import click

# How often the keep-alive loop wakes; the sidecar beats at the service's own interval.
SLEEP_SECONDS = 10


@click.command(help="Send the run's heartbeat to Metaflow's metadata service until stopped.", hidden=True)
@click.option("--run-id", required=True, help="The run's id: argo-<workflow name>.")
@click.option("--tag", "tags", multiple=True, default=None, help="The run's tags (as `init` registers them).")
@click.pass_obj
def heartbeat(obj, run_id, tags):
    # Stopped by the engine: a clean end, so the daemon's node is not a failure, and at once:
    # a SystemExit raised inside the metadata provider's retrying requests did not end the
    # process (a terminated run's daemon pod stayed Running; Argo sends no SIGKILL after).
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    steps = [("registering the run", lambda: obj.metadata.register_run_id(run_id, list(tags) or None)),
             ("starting its heartbeat", lambda: obj.metadata.start_run_heartbeat(obj.flow.name, run_id))]
    said = set()
    while True:
        while steps:  # in order: a heartbeat needs its run
            what, call = steps[0]
            try:
                call()
            except Exception as e:  # noqa: BLE001 - whatever the provider raises, the run goes on
                if what not in said:
                    said.add(what)
                    print("mfargo: heartbeat: %s %s failed (%s: %s); trying again every %d s, the run goes on"
                          % (what, run_id, type(e).__name__, " ".join(str(e).split())[:300], SLEEP_SECONDS),
                          file=sys.stderr, flush=True)
                break
            steps.pop(0)
        time.sleep(SLEEP_SECONDS)
