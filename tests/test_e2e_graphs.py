"""E2E: graph shapes Metaflow accepts, compiled by mfargo, run by the local runner and
read back with Metaflow's client: the tasks each join or merge saw, and task ids."""
from __future__ import annotations

import pytest

from test_e2e_support import compile_flow, mf_env_for, tail  # noqa: F401

SWITCH_IN_FOREACH = """
from metaflow import FlowSpec, step

class SwitchInForeach(FlowSpec):
    @step
    def start(self):
        self.xs = [0, 1, 2]
        self.next(self.body, foreach="xs")

    @step
    def body(self):
        self.x = self.input
        self.kind = "even" if self.input % 2 == 0 else "odd"
        self.next({"even": self.even, "odd": self.odd}, condition="kind")

    @step
    def even(self):
        self.v = "even-%d" % self.x
        self.next(self.join)

    @step
    def odd(self):
        self.v = "odd-%d" % self.x
        self.next(self.join)

    @step
    def join(self, inputs):
        self.vs = [i.v for i in inputs]
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    SwitchInForeach()
"""

LOOP_AT_BRANCH_END = """
from metaflow import FlowSpec, Parameter, step

class LoopAtBranchEnd(FlowSpec):
    route = Parameter("route", default="loop")

    @step
    def start(self):
        self.way = self.route
        self.i = 0
        self.next({"a": self.a, "loop": self.loop}, condition="way")

    @step
    def a(self):
        self.came = "a"
        self.next(self.merge)

    @step
    def loop(self):
        self.i += 1
        self.came = "loop"
        self.state = "again" if self.i < 3 else "done"
        self.next({"again": self.loop, "done": self.merge}, condition="state")

    @step
    def merge(self):
        self.seen = [self.came, self.i]
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    LoopAtBranchEnd()
"""

SWITCH_TO_END = """
from metaflow import FlowSpec, Parameter, step

class SwitchToEnd(FlowSpec):
    route = Parameter("route", default="a")

    @step
    def start(self):
        self.way = self.route
        self.came = "start"
        self.next({"a": self.a, "end": self.end}, condition="way")

    @step
    def a(self):
        self.came = "a"
        self.next(self.end)

    @step
    def end(self):
        self.final = self.came

if __name__ == "__main__":
    SwitchToEnd()
"""

CUSTOM_START_END = """
from metaflow import FlowSpec, current, step

class CustomEnds(FlowSpec):
    @step(start=True)
    def begin(self):
        self.next(self.left, self.right)

    @step
    def left(self):
        self.tid = current.task_id
        self.next(self.join)

    @step
    def right(self):
        self.tid = current.task_id
        self.next(self.join)

    @step
    def join(self, inputs):
        self.tids = sorted(i.tid for i in inputs)
        self.next(self.finish)

    @step(end=True)
    def finish(self):
        self.tids_at_end = self.tids

if __name__ == "__main__":
    CustomEnds()
"""

SINGLE_STEP = """
from metaflow import FlowSpec, current, step

class OneStep(FlowSpec):
    @step(start=True, end=True)
    def only(self):
        self.tid = current.task_id

if __name__ == "__main__":
    OneStep()
"""

READ = """
run = Run(sys.argv[1])
out = {"ok": run.successful, "ids": {s.id: sorted(t.id for t in s) for s in run}}
for name in sys.argv[2:]:
    step, attr = name.split(".")
    out[name] = run[step].task.data.__getattr__(attr)
print(json.dumps(out))
"""


def _run(s3_server, tmp_path_factory, source, flow, reads, params=None):
    tmp = tmp_path_factory.mktemp(flow.lower())
    c = compile_flow(tmp, mf_env_for(s3_server, tmp), source)
    result, rec = c.run(params or {})
    assert result.status == "Succeeded", tail(result, rec)
    return c.client(READ, "%s/%s" % (flow, result.run_id), *reads)


def test_switch_inside_foreach_meets_at_the_foreach_join(s3_server, tmp_path_factory):
    got = _run(s3_server, tmp_path_factory, SWITCH_IN_FOREACH, "SwitchInForeach", ["join.vs"])
    assert got["ok"] is True
    assert got["join.vs"] == ["even-0", "odd-1", "even-2"]
    assert got["ids"]["even"] == ["even-0", "even-2"] and got["ids"]["odd"] == ["odd-1"]
    assert got["ids"]["body"] == ["body-0", "body-1", "body-2"] and got["ids"]["join"] == ["join"]


@pytest.mark.parametrize("route, seen, loop_ids", [("loop", ["loop", 3], ["loop-r0", "loop-r1", "loop-r2"]),
                                                   ("a", ["a", 0], None)])
def test_recursive_loop_at_the_end_of_a_switch_branch(s3_server, tmp_path_factory, route, seen, loop_ids):
    got = _run(s3_server, tmp_path_factory, LOOP_AT_BRANCH_END, "LoopAtBranchEnd", ["merge.seen"], {"route": route})
    assert got["ok"] is True and got["merge.seen"] == seen
    assert got["ids"].get("loop") == loop_ids and got["ids"]["merge"] == ["merge"]
    assert ("a" in got["ids"]) == (route == "a")


@pytest.mark.parametrize("route, final", [("a", "a"), ("end", "start")])
def test_switch_straight_to_end_beside_a_branch(s3_server, tmp_path_factory, route, final):
    got = _run(s3_server, tmp_path_factory, SWITCH_TO_END, "SwitchToEnd", ["end.final"], {"route": route})
    assert got["ok"] is True and got["end.final"] == final
    assert got["ids"]["end"] == ["end"]


def test_custom_start_and_end_steps_and_split_branches_get_their_own_task_ids(s3_server, tmp_path_factory):
    got = _run(s3_server, tmp_path_factory, CUSTOM_START_END, "CustomEnds", ["finish.tids_at_end"])
    assert got["ok"] is True
    assert got["ids"] == {"begin": ["begin"], "left": ["left"], "right": ["right"], "join": ["join"],
                          "finish": ["finish"]}
    assert got["finish.tids_at_end"] == ["left", "right"]  # two branches, two current.task_id


def test_single_step_flow(s3_server, tmp_path_factory):
    got = _run(s3_server, tmp_path_factory, SINGLE_STEP, "OneStep", ["only.tid"])
    assert got["ok"] is True and got["ids"] == {"only": ["only"]} and got["only.tid"] == "only"


SWITCH_TO_FOREACH = """from metaflow import FlowSpec, step
class SwitchToForeach(FlowSpec):
    @step
    def start(self):
        self.w = "fe"
        self.next({"fe": self.fe, "b": self.b}, condition="w")
    @step
    def fe(self):
        self.xs = [1, 2]
        self.next(self.body, foreach="xs")
    @step
    def body(self):
        self.next(self.j)
    @step
    def j(self, inputs):
        self.next(self.merge)
    @step
    def b(self):
        self.next(self.merge)
    @step
    def merge(self):
        self.next(self.end)
    @step
    def end(self):
        pass
if __name__ == "__main__":
    SwitchToForeach()
"""

NESTED_SWITCH = """from metaflow import FlowSpec, step
class NestedSwitch(FlowSpec):
    @step
    def start(self):
        self.w = "a"
        self.next({"a": self.a, "b": self.b}, condition="w")
    @step
    def a(self):
        self.v = "c"
        self.next({"c": self.c, "d": self.d}, condition="v")
    @step
    def c(self):
        self.next(self.m1)
    @step
    def d(self):
        self.next(self.m1)
    @step
    def m1(self):
        self.next(self.m)
    @step
    def b(self):
        self.next(self.m)
    @step
    def m(self):
        self.path = [self.w, self.v]
        self.next(self.end)
    @step
    def end(self):
        pass
if __name__ == "__main__":
    NestedSwitch()
"""

LOOP_IN_FOREACH = """from metaflow import FlowSpec, step
class LoopInForeach(FlowSpec):
    @step
    def start(self):
        self.xs = [1, 2]
        self.next(self.prep, foreach="xs")
    @step
    def prep(self):
        self.i = 0
        self.next(self.loop)
    @step
    def loop(self):
        self.i += 1
        self.s = "again" if self.i < 2 else "done"
        self.next({"again": self.loop, "done": self.after}, condition="s")
    @step
    def after(self):
        self.seen = (self.input, self.i)
        self.next(self.join)
    @step
    def join(self, inputs):
        self.seen = [list(i.seen) for i in inputs]
        self.next(self.end)
    @step
    def end(self):
        pass
if __name__ == "__main__":
    LoopInForeach()
"""


def test_switch_choosing_a_foreach_then_merging(s3_server, tmp_path_factory):
    got = _run(s3_server, tmp_path_factory, SWITCH_TO_FOREACH, "SwitchToForeach", [])
    assert got["ok"] is True and "b" not in got["ids"]
    assert got["ids"]["body"] == ["body-0", "body-1"] and got["ids"]["merge"] == ["merge"]


def test_nested_switches_merge_twice(s3_server, tmp_path_factory):
    got = _run(s3_server, tmp_path_factory, NESTED_SWITCH, "NestedSwitch", ["m.path"])
    assert got["ok"] is True and got["m.path"] == ["a", "c"]
    assert sorted(got["ids"]) == ["a", "c", "end", "m", "m1", "start"]


def test_recursive_switch_inside_a_foreach_body(s3_server, tmp_path_factory):
    got = _run(s3_server, tmp_path_factory, LOOP_IN_FOREACH, "LoopInForeach", ["join.seen"])
    assert got["ok"] is True and got["join.seen"] == [[1, 2], [2, 2]]
    assert got["ids"]["loop"] == ["loop-0-r0", "loop-0-r1", "loop-1-r0", "loop-1-r1"]


LOOP_OPENS_FOREACH_BODY = """from metaflow import FlowSpec, current, step
class LoopOpensForeach(FlowSpec):
    @step
    def start(self):
        self.xs = ["p", "q", "r"]
        self.next(self.loop, foreach="xs")
    @step
    def loop(self):
        self.n = getattr(self, "n", 0) + 1
        self.got = self.input
        self.tid = current.task_id
        self.c = "again" if self.n < 2 else "done"
        self.next({"again": self.loop, "done": self.after}, condition="c")
    @step
    def after(self):
        self.seen = [self.got, self.n, self.input, self.index]
        self.after_tid = current.task_id
        self.next(self.join)
    @step
    def join(self, inputs):
        self.seen = [i.seen for i in inputs]
        self.from_tasks = [[i.tid, i.after_tid] for i in inputs]
        self.next(self.end)
    @step
    def end(self):
        pass
if __name__ == "__main__":
    LoopOpensForeach()
"""

LOOP_OPENS_SPLIT_BRANCH = """from metaflow import FlowSpec, current, step
class LoopOpensBranch(FlowSpec):
    @step
    def start(self):
        self.next(self.loop, self.b)
    @step
    def loop(self):
        self.n = getattr(self, "n", 0) + 1
        self.c = "again" if self.n < 3 else "done"
        self.tid = current.task_id
        self.next({"again": self.loop, "done": self.after}, condition="c")
    @step
    def after(self):
        self.next(self.join)
    @step
    def b(self):
        self.n = -1
        self.tid = current.task_id
        self.next(self.join)
    @step
    def join(self, inputs):
        self.seen = sorted(i.n for i in inputs)
        self.from_tasks = sorted(i.tid for i in inputs)
        self.next(self.end)
    @step
    def end(self):
        pass
if __name__ == "__main__":
    LoopOpensBranch()
"""


def test_recursive_switch_opening_a_foreach_body(s3_server, tmp_path_factory):
    """Every iteration is the same foreach child; the join gets each child's last iteration."""
    got = _run(s3_server, tmp_path_factory, LOOP_OPENS_FOREACH_BODY, "LoopOpensForeach",
               ["join.seen", "join.from_tasks"])
    assert got["ok"] is True
    assert got["join.seen"] == [["p", 2, "p", 0], ["q", 2, "q", 1], ["r", 2, "r", 2]]
    assert got["ids"]["loop"] == ["loop-%d-r%d" % (i, r) for i in range(3) for r in range(2)]
    assert got["join.from_tasks"] == [["loop-%d-r1" % i, "after-%d" % i] for i in range(3)]


def test_recursive_switch_opening_a_split_branch(s3_server, tmp_path_factory):
    got = _run(s3_server, tmp_path_factory, LOOP_OPENS_SPLIT_BRANCH, "LoopOpensBranch",
               ["join.seen", "join.from_tasks"])
    assert got["ok"] is True and got["join.seen"] == [-1, 3]
    assert got["ids"]["loop"] == ["loop-r0", "loop-r1", "loop-r2"]
    assert got["join.from_tasks"] == ["b", "loop-r2"]
