"""Injection: user text and run-time values stay data through bash, Argo's `{{...}}`
substitution, Kubernetes' `$(VAR)` expansion and the JobSet manifest. A flow with a plain
step and a gang is compiled with payloads in tags, parameter defaults, @environment values
and @kubernetes annotations, run with payload parameter values, and read back with
Metaflow's client: every value intact, no file created by a payload."""
import yaml

from flowtools import compile_file, gang_flow, linear_flow, templates, write_flow
from mfargo.runner.pod import k8s_expand
from test_e2e_support import compile_flow, mf_env, tail  # noqa: F401 - fixture

ENV_PAYLOAD = "e$(METAFLOW_INIT_A)$$y '; touch pwned_env; echo ' `touch pwned_env2` $(touch pwned_env3)"
DEFAULT_PAYLOAD = "d'$(METAFLOW_USER)$$x \"q\" `touch pwned_default` ; touch pwned_default2\nline2: [yaml]\n"
ANNOTATION_PAYLOAD = "n$(METAFLOW_USER) '; touch pwned_ann"
TAGS = ("k$(METAFLOW_INIT_A)", "t'; touch pwned_tag; echo '", "u$$v", "w`touch pwned_tag2`")

# Run-time values: shell, Kubernetes, YAML and Argo syntax, unicode, edge whitespace.
VALUES = {
    "a": "'; touch pwned_a; echo '",
    "b": "a$$b $(METAFLOW_USER) ${HOME} $((1+1))",
    "c": "x\n  - name: INJECTED\n    value: 'yes'\nkind: Pod\n",
    "d": "{{workflow.name}} {{=sprig.env(\"HOME\")}} {{inputs.parameters.ctx}} {{retries}}",
    "e": "h\u00e9llo \u2713 \u65e5\u672c \"dq\" 'sq' `touch pwned_e` $(touch pwned_e2) \\ \\n %s %%",
    "f": "\n\n  trailing  \n\n",
}

FLOW = """
import os
from metaflow import FlowSpec, Parameter, step, parallel, environment, kubernetes

NAMES = %(names)r

class InjectFlow(FlowSpec):
%(params)s
    dflt = Parameter("dflt", default=%(default)r)

    @environment(vars={"WHO": %(env)r})
    @kubernetes(annotations={"note": %(ann)r})
    @step
    def start(self):
        self.params = {k: getattr(self, k) for k in NAMES + ["dflt"]}
        self.who = os.environ["WHO"]
        self.next(self.train, num_parallel=2)

    @environment(vars={"WHO": %(env)r})
    @kubernetes(annotations={"note": %(ann)r})
    @parallel
    @step
    def train(self):
        self.who = os.environ["WHO"]
        self.injected = "INJECTED" in os.environ
        self.next(self.join)

    @step
    def join(self, inputs):
        self.gang = sorted([i.who, i.injected, i.params] for i in inputs)
        self.merge_artifacts(inputs, include=["params"])
        self.next(self.end)

    @step
    def end(self):
        pass

if __name__ == "__main__":
    InjectFlow()
""" % {
    "names": sorted(VALUES),
    "params": "\n".join('    %s = Parameter("%s", default="x")' % (n, n) for n in sorted(VALUES)),
    "default": DEFAULT_PAYLOAD,
    "env": ENV_PAYLOAD,
    "ann": ANNOTATION_PAYLOAD,
}

READ = """
run = Run(sys.argv[1])
start, join = run["start"].task, run["join"].task
print(json.dumps({"ok": run.successful, "params": start.data.params, "who": start.data.who,
                  "gang": join.data.gang, "tags": sorted(run.user_tags)}))
"""


def test_payloads_arrive_intact_and_run_nothing(mf_env, tmp_path):
    tag_args = [a for t in TAGS for a in ("--tag", t)]
    c = compile_flow(tmp_path, mf_env, FLOW, *tag_args)
    _assert_values_never_in_template_text(next(yaml.safe_load_all(c.yaml_path.read_text())))
    result, rec = c.run(VALUES, timeout=240)
    assert result.status == "Succeeded", tail(result, rec)
    assert len(result.jobsets) == 1
    got = c.client(READ, "InjectFlow/" + result.run_id)
    assert got["ok"] is True
    want = dict(VALUES, dflt=DEFAULT_PAYLOAD)
    assert got["params"] == want
    assert got["who"] == ENV_PAYLOAD
    assert got["gang"] == [[ENV_PAYLOAD, False, want]] * 2  # both gang pods, no env added by a value
    assert set(TAGS) <= set(got["tags"])
    assert sorted(p.name for p in tmp_path.rglob("pwned*")) == []


def _assert_values_never_in_template_text(doc):
    """The start step gets parameters only as base64 expressions; the JobSet has none of the flow's."""
    start = templates(doc)["start"]
    env = {e["name"]: e.get("value") for e in start["container"]["env"]}
    for name in VALUES:
        assert env["MFARGO_PARAM_BASE64_METAFLOW_INIT_%s" % name.upper()] == (
            '{{=toBase64(workflow.parameters["%s"])}}' % name)
    text = templates(doc)["train"]["resource"]["manifest"]
    manifest = yaml.safe_load(text.replace("{{inputs.parameters.num-parallel}}", "2"))
    # only the resume parameters (base64, plugins/resume.py) reach gang pods; no flow parameter
    dumped = yaml.safe_dump(manifest)
    assert all("workflow.parameters[\"%s\"]" % name not in dumped for name in VALUES)
    assert dumped.count("workflow.parameters") == 2
    # Kubernetes' expansion of the env value (every name defined) gives back ENV_PAYLOAD
    pod = manifest["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    who = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}["WHO"]
    assert who != ENV_PAYLOAD
    assert k8s_expand(who, {"METAFLOW_INIT_A": "!", "METAFLOW_USER": "!", "touch pwned_env3": "!"}) == ENV_PAYLOAD


REFUSED = linear_flow("RefuseFlow", members='p2 = Parameter("p2", default=%(default)r)',
                      start_decorators='@environment(vars={"WHO": %(env)r})')


def test_argo_tags_in_user_text_are_refused(tmp_path):
    cases = [
        ({"default": "x", "env": "{{workflow.parameters.p2}}"}, (), "step *start* @environment: environment WHO"),
        ({"default": "x", "env": "y"}, ("--tag", "x{{workflow.parameters.p2}}"), "--tag"),
        ({"default": "{{=sprig.env('HOME')}}", "env": "y"}, (), "parameter p2"),
    ]
    out = tmp_path / "out.yaml"
    out.write_text("kept\n")
    for values, args, where in cases:
        flow = write_flow(tmp_path, REFUSED % values)
        proc = compile_file(flow, "--output-file", str(out), "--code-in-image", "/app", *args, check=False)
        assert proc.returncode != 0
        lines = [x for x in proc.stderr.splitlines() if x.startswith("mfargo:")]
        assert len(lines) == 1 and where in lines[0] and "'{{'" in lines[0], proc.stderr
        assert "Traceback" not in proc.stderr
        assert out.read_text() == "kept\n"


GANG_SIZE = gang_flow("SizeFlow", num_parallel="self.n", members='n = Parameter("n", default=2, type=int)')


def test_num_parallel_that_is_not_a_pod_count_fails_the_splitter(mf_env, tmp_path):
    c = compile_flow(tmp_path, mf_env, GANG_SIZE)
    result, rec = c.run({"n": "0"})
    assert result.status != "Succeeded", tail(result, rec)
    assert result.jobsets == {}  # no broken JobSet was created
    logs = "\n".join(rec.lines()) + "".join(p.read_text(errors="replace") for p in tmp_path.rglob("log")
                                             if p.is_file())
    assert "step start: num_parallel must be a whole number >= 1 (the gang's pod count), not None" in logs, \
        tail(result, rec)
