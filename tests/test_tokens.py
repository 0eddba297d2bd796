"""mfargo.tokens and the name rules `create`, `delete` and the runs share (pure, in-process)."""

import pytest

from mfargo import deploy, tokens
from mfargo.compiler import naming


def minted(log):
    def new_token(previous):
        log.append(previous)
        return "fresh-%d" % len(log)
    return new_token


def test_strip_accepts_the_namespace_form():
    assert tokens.strip("production:abc") == "abc"
    assert tokens.strip("abc") == "abc"
    assert tokens.strip(None) is None


def test_token_prefix_is_the_name_or_the_projects_digest():
    assert tokens.token_prefix("HelloFlow", None, None) == "helloflow"
    a = tokens.token_prefix("HelloFlow", "proj", "user.me")
    assert a.startswith("mfprj-") and len(a) == len("mfprj-") + 16 and a == a.lower()
    assert a != tokens.token_prefix("HelloFlow", "proj", "prod")
    assert a == tokens.token_prefix("OtherName", "proj", "user.me")  # the project, not the name, keys it


def test_authorized():
    assert tokens.authorized(None, None, "me", None)  # nothing deployed
    assert tokens.authorized("t", "me", "me", None)  # the previous deployer
    assert tokens.authorized("t", "you", "me", "t")  # holds the token
    assert not tokens.authorized("t", "you", "me", "other")
    assert not tokens.authorized("t", "you", "me", None)


def test_deploy_token_rules():
    log = []
    assert tokens.deploy_token(None, None, False, None, minted(log)) == "fresh-1"  # first deployment
    assert log == [None]
    assert tokens.deploy_token("old", None, False, None, minted(log)) == "old"  # kept
    assert tokens.deploy_token("old", None, True, None, minted(log)) == "fresh-2"  # --generate-new-token
    assert log[-1] == "old"
    assert tokens.deploy_token("old", "production:given", False, None, minted(log)) == "given"
    with pytest.raises(tokens.TokenError, match="@project"):
        tokens.deploy_token("old", "given", False, "proj", minted(log))
    with pytest.raises(tokens.TokenError, match="--new-token"):
        tokens.deploy_token("old", None, True, None, lambda previous: None)


def test_offline_token_only_when_asked():
    log = []
    assert tokens.offline_token(None, False, None, minted(log)) is None
    assert log == []
    assert tokens.offline_token(None, True, None, minted(log)) == "fresh-1"
    assert tokens.offline_token("x", False, None, minted(log)) == "x"


def test_run_ids_and_status():
    assert deploy.workflow_name("argo-hello-abc12") == "hello-abc12"
    for bad in ("hello", "argo-", "sfn-x"):
        with pytest.raises(deploy.DeployError):
            deploy.workflow_name(bad)
    assert naming.run_id("hello-abc12") == "argo-hello-abc12"
    assert deploy.run_status(None, False) == "Pending"
    assert deploy.run_status("Error", False) == "Failed"
    assert deploy.run_status("Running", False) == "Pending"
    assert deploy.run_status("Running", True) == "Running"
    assert deploy.run_status("Succeeded", False) == "Succeeded"


def test_names_come_from_one_formula():
    assert naming.deployed_name(None, None, "HelloFlow") == "helloflow"
    assert naming.deployed_name("My.Name", None, "HelloFlow") == "my.name"
    assert naming.deployed_name(None, "proj.user.me.HelloFlow", "HelloFlow") == "proj.user.me.helloflow"
    assert naming.sensor_name("proj.user.me.helloflow") == "proj-user-me-helloflow"
    long = naming.deployed_name(None, None, "x" * 80)
    assert len(long) == naming.MAX_TEMPLATE_NAME


def test_stamp_token_marks_template_and_runs():
    template = {"metadata": {"name": "x"}, "spec": {}}
    deploy.stamp_token(template, "tok")
    assert template["metadata"]["annotations"]["metaflow/production_token"] == "tok"
    assert template["spec"]["workflowMetadata"]["annotations"]["metaflow/production_token"] == "tok"
