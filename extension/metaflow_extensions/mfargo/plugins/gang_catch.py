"""``@gang_catch(var=..., print_exception=...)``: Metaflow's ``@catch``, for a ``@parallel``
step that also has ``@kubernetes``.

Metaflow's ``@kubernetes`` refuses any decorator named ``catch`` beside ``@parallel`` (its
own JobSet path cannot run the fallback), in the ``create`` process and again in every
pod. mfargo's gang can: each rank catches its own exception on its last attempt and
completes, so the JobSet succeeds and the join sees the exception in ``var``. This is the
same decorator under another name, so that check does not fire; the installed Metaflow
is not patched.

    @gang_catch(var="error")
    @kubernetes(gpu=8)
    @parallel
    @step
    def train(self): ...
"""

from metaflow.exception import MetaflowException
from metaflow.plugins.catch_decorator import CatchDecorator


class GangCatchDecorator(CatchDecorator):
    name = "gang_catch"

    def step_init(self, flow, graph, step, decos, environment, flow_datastore, logger):
        if not graph[step].parallel_step:
            raise MetaflowException("@gang_catch applies to @parallel steps only; use @catch on *%s*" % step)
        if any(d.name == "catch" for d in decos):
            raise MetaflowException("step *%s* has both @catch and @gang_catch: keep @gang_catch" % step)
        super().step_init(flow, graph, step, decos, environment, flow_datastore, logger)
