"""What the cluster or Metaflow enforces on decorator attributes and create options,
checked at compile time so a bad value is one line naming the step and the decorator
instead of YAML the cluster rejects (or, worse, accepts and misreads).

Kubernetes syntax itself lives in ``mfargo.base.k8s_syntax``; this module says which field
must follow which rule.
"""

from __future__ import annotations

import ast
import math
import re
from decimal import Decimal

from metaflow.metaflow_config import MAX_ATTEMPTS  # attempts Metaflow's runtime allows a task

from mfargo.base import k8s_syntax as k8s

from .command import SCRIPT_VAR_PREFIX
from .constants import RESERVED_PREFIXES
from .errors import CompileError

MAX_MEMORY_MB = 2**30  # 1 PiB: anything larger is a typo, not a pod
TAG_MAX = 500  # Metaflow's tag rule: 1-500 characters
INT32_MAX = k8s.INT_RANGES["int32"][1]  # the Go sizes of the fields numbers land in
INT64_MAX = k8s.INT_RANGES["int64"][1]
# Argo parses a retry backoff ("<n>m") as a Go time.Duration: int64 nanoseconds.
MAX_DURATION_MINUTES = INT64_MAX // (60 * 10**9)
# Bucket names as S3 accepts them (docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html).
_S3_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP_ADDRESS = re.compile(r"^\d+\.\d+\.\d+\.\d+$")
_S3_RESERVED = (("xn--", "sthree-", "amzn-s3-demo-"), ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"))
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EXECUTABLE = re.compile(r"^[A-Za-z0-9_./+][A-Za-z0-9_./+-]*$")


def positive_number(step: str, decorator: str, key: str, value, allow_zero: bool = False) -> float:
    """A finite number > 0 (>= 0 with ``allow_zero``)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise CompileError("%s must be a number, not %r" % (key, value), step, decorator) from None
    if not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        raise CompileError("%s must be a finite number %s 0, not %r" % (key, ">=" if allow_zero else ">", value),
                           step, decorator)
    return number


def count(step: str | None, decorator: str | None, key: str, value, minimum: int = 0,
          maximum: int = INT64_MAX) -> int:
    """A whole number from ``minimum`` to ``maximum`` (bools and fractions refused, never
    rounded); the default maximum is what an int64 field holds."""
    span = ">= %d" % minimum if maximum == INT64_MAX else "from %d to %d" % (minimum, maximum)
    wanted = "%s must be a whole number %s, not %r" % (key, span, value)
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise CompileError(wanted, step, decorator)
    try:
        number = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError, OverflowError):
        raise CompileError(wanted, step, decorator) from None
    if number > maximum and maximum in (INT32_MAX, INT64_MAX):
        raise CompileError("%s=%r is more than %s, the largest number its field holds (%s)"
                           % (key, value, format(maximum, ","), "int32" if maximum == INT32_MAX else "int64"),
                           step, decorator)
    if not minimum <= number <= maximum:
        raise CompileError(wanted, step, decorator)
    return number


def start_window(step: str, value) -> int:
    """@jobset(start_window=...): whole seconds > 0 (digits as the CLI's --with passes them), at
    most what an int32 holds; anything else (a fraction, a bool, a word) in one line."""
    wanted = CompileError("@jobset(start_window=...) takes a whole number of seconds > 0 (up to %s), not %r"
                          % (format(INT32_MAX, ","), value), step, "jobset")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise wanted
    text = str(value).strip()
    if not text.isdigit() or not 0 < int(text) <= INT32_MAX:
        raise wanted
    return int(text)


def gang_size(step: str, value) -> None:
    """``num_parallel`` in ``self.next`` (an int, or the ``ast`` expression Metaflow's graph
    leaves unevaluated): when it is a constant (``4``, ``10**6``), from 1 to k8s.MAX_GANG_SIZE; a
    value known only at run time is not checked here (the runner checks the JobSet it gets)."""
    try:
        number = value if type(value) is int else _constant_int(value)
        text = str(value) if type(value) is int else ast.unparse(value)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return
    if not 1 <= number <= k8s.MAX_GANG_SIZE:
        raise CompileError("self.next(..., num_parallel=%s): a gang has from 1 to %s pods"
                           % (text, format(k8s.MAX_GANG_SIZE, ",")), step)


def _constant_int(node) -> int:
    """The value of an integer expression of literals, + - * // and small powers (ValueError otherwise)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _constant_int(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _constant_int(node.left), _constant_int(node.right)
        if isinstance(node.op, ast.Pow) and 0 <= right <= 64 and abs(left) < 2**32:
            return left ** right
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.FloorDiv: lambda a, b: a // b}
        if type(node.op) in ops and max(abs(left), abs(right)) < 2**64:
            return ops[type(node.op)](left, right)
    raise ValueError("not a constant")


def cpu(step: str, decorator: str, key: str, value) -> str:
    """CPUs as the exact Kubernetes quantity ('2', '500m'); Kubernetes counts in millicores
    and would round anything finer up, so finer values are refused, not rounded."""
    number = positive_number(step, decorator, key, value)
    exact = Decimal(str(value).strip()) if isinstance(value, str) else Decimal(repr(float(number)))
    text = str(int(exact)) if exact == exact.to_integral_value() else "%sm" % format((exact * 1000).normalize(), "f")
    problem = k8s.quantity_problem(text)
    if problem:
        raise CompileError("%s=%r: %s; give whole millicores (0.001) up to 2^63-1" % (key, value, problem),
                           step, decorator)
    return text


def megabytes(step: str, decorator: str, key: str, value) -> int:
    """A size in MB, written as '<n>M': a whole number > 0 up to 1 PiB (never truncated)."""
    number = memory_mb(step, decorator, key, value)
    if not number.is_integer():
        raise CompileError("%s=%r must be a whole number of MB (mfargo does not round it)" % (key, value),
                           step, decorator)
    return int(number)


def memory_mb(step: str, decorator: str, key: str, value) -> float:
    number = positive_number(step, decorator, key, value)
    if number > MAX_MEMORY_MB:
        raise CompileError("%s=%r MB is more than 1 PiB" % (key, value), step, decorator)
    return number


def extended_resources(step: str, decorator: str, value, gpu_resource: str | None) -> tuple[tuple[str, str], ...]:
    """@kubernetes(extended_resources={name: quantity}): resources a device plugin advertises
    (or hugepages), requested and limited alike; ``gpu_resource``: the one `gpu=` already asks for."""
    out = {}
    for name, quantity in mapping(step, decorator, "extended_resources", value).items():
        problem = k8s.container_resource_problem(name)
        if name in k8s.STANDARD_CONTAINER_RESOURCES:
            problem = "%r is set by the %s attribute" % (name, {"ephemeral-storage": "disk"}.get(name, name))
        elif name == gpu_resource:
            problem = "%r is already asked for by gpu=" % name
        if problem is None:
            text = str(quantity) if isinstance(quantity, (str, int)) and not isinstance(quantity, bool) else None
            problem = k8s.quantity_problem(text, whole=k8s.is_whole_units(name)) if text is not None else \
                "%r is not a quantity" % (quantity,)
            out[name] = text
        if problem:
            raise CompileError("extended_resources: %s" % problem, step, decorator)
    return tuple(sorted(out.items()))


def executable(step: str, decorator: str, value) -> str:
    """The interpreter a step runs with: a path or command name, one shell word with nothing
    the shell or Kubernetes would expand (it is written into the pod's command as it is)."""
    if not isinstance(value, str) or not _EXECUTABLE.match(value):
        raise CompileError("executable %r must be a path or command name of letters, digits and ._+/-" % (value,),
                           step, decorator)
    return value


def mapping(step: str, decorator: str, key: str, value) -> dict:
    if value is None or value == "":
        return {}
    if not isinstance(value, dict):
        raise CompileError("%s must be a dict, not %r" % (key, value), step, decorator)
    return value


def string_list(step: str, decorator: str, key: str, value) -> list[str]:
    """A list of names, or one comma-separated string (Metaflow accepts both)."""
    if not value:
        return []
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise CompileError("%s must be a list of names, not %r" % (key, value), step, decorator)
    return list(value)


def object_names(step: str, decorator: str, key: str, names) -> None:
    for name in names:
        if not k8s.is_dns1123_subdomain(name):
            raise CompileError("%s %r is not a Kubernetes object name (lowercase DNS-1123 subdomain)"
                               % (key, name), step, decorator)


def labels(step: str, decorator: str, key: str, pairs: dict, values_are_labels: bool = True,
           reserved: frozenset = frozenset()) -> None:
    """Label (or annotation, ``values_are_labels=False``) keys and values; ``reserved``: keys
    mfargo, Argo or the JobSet controller set themselves (the user's would replace them or be
    replaced)."""
    for k, v in pairs.items():
        problem = k8s.label_key_problem(k) if isinstance(k, str) else "keys must be strings"
        if problem is None and not isinstance(v, str):
            problem = "value of %r must be a string, not %r" % (k, v)
        if problem is None and values_are_labels:
            problem = k8s.label_value_problem(v)
        if problem is None and reserved and (k in reserved or k.startswith(RESERVED_PREFIXES)):
            problem = "%r is a key mfargo, Argo or JobSet sets itself; use another key" % k
        if problem:
            raise CompileError("%s: %s" % (key, problem), step, decorator)
    if not values_are_labels:
        problem = k8s.annotations_size_problem(pairs)
        if problem:
            raise CompileError("%s: %s" % (key, problem), step, decorator)


def env_name(step: str, decorator: str, name) -> None:
    if not isinstance(name, str) or not k8s.is_env_var_name(name):
        raise CompileError("env var name %r must match [-._a-zA-Z][-._a-zA-Z0-9]* and not start with '..' "
                           "(Kubernetes' rule)" % (name,), step, decorator)
    if name.lower().startswith(SCRIPT_VAR_PREFIX):
        raise CompileError("env var name %r: names starting with %r (in any case) are mfargo's own variables; "
                           "use another name" % (name, SCRIPT_VAR_PREFIX.upper()), step, decorator)


def attempts(step: str, decorator: str, retries: int, max_restarts: int) -> None:
    """Each Argo retry of a gang runs up to 1 + max_restarts JobSet generations, each one
    Metaflow attempt; Metaflow refuses an attempt past MAX_ATTEMPTS."""
    total = (retries + 1) * (max_restarts + 1)
    if total > MAX_ATTEMPTS:
        raise CompileError("max_restarts=%d with %d retries makes up to %d attempts, more than Metaflow's %d "
                           "(MAX_ATTEMPTS): (retries + 1) x (max_restarts + 1) must be at most %d"
                           % (max_restarts, retries, total, MAX_ATTEMPTS, MAX_ATTEMPTS), step, decorator)


# Attempts an infrastructure failure (an evicted, preempted, deleted or lost pod) may add to a
# step's @retry and @catch attempts without spending them; Metaflow's MAX_ATTEMPTS bounds all.
INFRASTRUCTURE_RETRIES = 3


def infrastructure_retries(retries: int) -> int:
    """The infrastructure budget of a step with ``retries`` (@retry + @catch): what Metaflow's
    MAX_ATTEMPTS leaves, at most INFRASTRUCTURE_RETRIES."""
    return max(0, min(INFRASTRUCTURE_RETRIES, MAX_ATTEMPTS - 1 - retries))


def s3_bucket(option: str, url: str) -> None:
    """The bucket of an s3:// URL, by S3's naming rules (else every pod fails to reach it)."""
    if not isinstance(url, str) or not url.startswith("s3://"):
        return
    bucket = url[len("s3://"):].split("/", 1)[0]
    problem = None
    if not _S3_BUCKET.match(bucket):
        problem = "3-63 lowercase letters, digits, '.' and '-', starting and ending with a letter or digit"
    elif ".." in bucket or ".-" in bucket or "-." in bucket:
        problem = "no '..', '.-' or '-.'"
    elif _IP_ADDRESS.match(bucket):
        problem = "not an IP address"
    elif bucket.startswith(_S3_RESERVED[0]) or bucket.endswith(_S3_RESERVED[1]):
        problem = "none of S3's reserved prefixes or suffixes"
    if problem:
        raise CompileError("%s %r: bucket %r is not an S3 bucket name (%s)" % (option, url, bucket, problem))


def image(step: str | None, decorator: str | None, value, key: str = "image") -> None:
    problem = k8s.image_problem(value)
    if problem:
        raise CompileError("%s: %s" % (key, problem) if key != "image" else problem, step, decorator)


def pull_policy(step: str, decorator: str, value) -> None:
    problem = k8s.pull_policy_problem(value)
    if problem:
        raise CompileError("image_pull_policy: %s" % problem, step, decorator)


def toleration(step: str, decorator: str, key: str, value) -> tuple:
    """(key, operator, value, effect, seconds) of one toleration, as the API server accepts it."""
    names = {"key", "operator", "value", "effect", "tolerationSeconds", "toleration_seconds"}
    if not isinstance(value, dict) or set(value) - names:
        raise CompileError("%s: %r is not a toleration (keys: key, operator, value, effect, tolerationSeconds)"
                           % (key, value), step, decorator)
    seconds = value.get("tolerationSeconds", value.get("toleration_seconds"))
    if seconds is not None:
        seconds = count(step, decorator, "%s tolerationSeconds" % key, seconds, minimum=-INT64_MAX - 1)
    fields = (value.get("key"), value.get("operator"), value.get("value"), value.get("effect"))
    problems = k8s.toleration_problems(*fields, seconds)
    if problems:
        raise CompileError("%s %r: %s" % (key, value, "; ".join(problems)), step, decorator)
    return fields + (seconds,)


def mount_paths(step: str, decorator: str, mounts: list[tuple[str, str]]) -> None:
    """(what, path) of every volume a pod mounts: Kubernetes refuses two at one path."""
    seen: dict[str, str] = {}
    for what, path in mounts:
        if path in seen:
            raise CompileError("%s and %s are both mounted at %r; Kubernetes allows one volume per path"
                               % (seen[path], what, path), step, decorator)
        seen[path] = what


def kubernetes_name(option: str, value, label: bool = False) -> None:
    """An object name given as an option or config: DNS-1123 (a label for namespaces)."""
    ok = isinstance(value, str) and (k8s.is_dns1123_label(value) if label else k8s.is_dns1123_subdomain(value))
    if not ok:
        raise CompileError("%s %r is not a Kubernetes %s (lowercase letters, digits and '-'%s, at most %d)"
                           % (option, value, "namespace name" if label else "object name",
                              "" if label else " and '.'", 63 if label else 253))


def secret_key(option: str, value) -> None:
    if not isinstance(value, str) or not k8s.is_config_map_key(value):
        raise CompileError("%s: %r is not a Secret key ([-._a-zA-Z0-9]+, not starting with '..')" % (option, value))


def absolute_path(step: str, decorator: str, key: str, value) -> None:
    if not isinstance(value, str) or not value.startswith("/"):
        raise CompileError("%s %r must be an absolute path" % (key, value), step, decorator)


def python_identifier(step: str, decorator: str, key: str, value) -> None:
    if value is not None and (not isinstance(value, str) or not _IDENTIFIER.match(value)):
        raise CompileError("%s %r must be a Python identifier (it names an artifact)" % (key, value),
                           step, decorator)


def cron(expression: str, decorator: str = "schedule", key: str = "cron", descriptors: bool = True) -> None:
    """As Argo's cron parser reads it (mfargo.base.cron_syntax)."""
    from mfargo.base import cron_syntax

    problem = cron_syntax.cron_problem(expression, descriptors)
    if problem:
        raise CompileError("%s: %s" % (key, problem), decorator=decorator)


def timezone(name, decorator: str = "schedule", key: str = "timezone") -> None:
    from mfargo.base import cron_syntax

    problem = cron_syntax.timezone_problem(name) if name else None
    if problem:
        raise CompileError("%s: %s" % (key, problem), decorator=decorator)


def tag(value) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= TAG_MAX:
        raise CompileError("--tag %r: Metaflow tags are 1-%d characters" % (_short(value), TAG_MAX))


def _short(value):
    return value[:40] + "..." if isinstance(value, str) and len(value) > 40 else value
