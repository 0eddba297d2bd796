"""E2E: every Parameter type, passed as the strings `argo submit -p` would pass."""
import pytest

from mfargo.runner.model import WorkflowError

from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

FLOW = """
from metaflow import FlowSpec, Parameter, JSONType, step

class ParamsFlow(FlowSpec):
    s = Parameter("s", default="x")
    i = Parameter("i", default=1, type=int)
    f = Parameter("f", default=0.5, type=float)
    b = Parameter("b", default=True, type=bool)
    j = Parameter("j", default='{"z": 0}', type=JSONType)
    n = Parameter("n", default=None, type=str)
    req = Parameter("req", required=True, type=int)

    @step
    def start(self):
        self.seen = {"s": self.s, "i": self.i, "f": self.f, "b": self.b, "j": self.j, "n": self.n, "req": self.req}
        self.types = {k: type(v).__name__ for k, v in self.seen.items()}
        self.next(self.end)

    @step
    def end(self):
        assert self.seen["req"] == 42

if __name__ == "__main__":
    ParamsFlow()
"""

READ = """
run = Run(sys.argv[1])
t = run["start"].task
print(json.dumps({"ok": run.successful, "seen": t.data.seen, "types": t.data.types,
                  "ids": {s.id: [x.id for x in s] for s in run}, "params": {k: getattr(run.data, k) for k in "sifbjn"}}))
"""


def test_every_parameter_type(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, FLOW)
    declared = {p["name"]: p.get("value") for p in c.doc["spec"]["arguments"]["parameters"]}
    assert set(declared) == {"s", "i", "f", "b", "j", "n", "req", "mfargo-origin-run-id", "mfargo-resume-step"}
    with pytest.raises(WorkflowError, match="req"):  # required, no default: argo submit needs -p
        c.run({"s": "x"})
    result, rec = c.run({"s": "hello world", "i": "7", "f": "2.5", "b": "False", "j": '{"a": 1}', "req": "42"})
    assert result.status == "Succeeded", tail(result, rec)
    got = c.client(READ, "ParamsFlow/" + result.run_id)
    assert got["ok"] is True
    assert got["seen"] == {"s": "hello world", "i": 7, "f": 2.5, "b": False, "j": {"a": 1}, "n": None, "req": 42}
    assert got["types"] == {"s": "str", "i": "int", "f": "float", "b": "bool", "j": "dict", "n": "NoneType",
                            "req": "int"}
    assert got["ids"] == {"end": ["end"], "start": ["start"]}
