"""Argo's rules for a CronWorkflow's schedule and timezone (also a Sensor's reset time), as
pure functions returning None or a sentence saying what is wrong.

Why here: the controller refuses a CronWorkflow whose schedule its cron library cannot parse,
and `kubectl apply` accepts it first, so nothing fails until the schedule is due. Argo v3.7's
`workflow/validate/validate.go` (ValidateCronWorkflow) parses each schedule with robfig/cron v3's
`ParseStandard` (five fields, or a descriptor) and loads the timezone with Go's
`time.LoadLocation`; Argo Events validates a Sensor's `conditionsReset.byTime` the same way but
with a parser that knows no descriptors (`NewParser(Minute | Hour | Dom | Month | Dow)`, its
sensor validation). The facts below are robfig/cron v3's (parser.go, spec.go): field bounds,
month and weekday names, `*`/`?`, ranges, `/step` (a bare `N/step` runs to the field's end),
and the descriptors.
"""

from __future__ import annotations

import re

# (name, lowest, highest, names) for minute, hour, day of month, month, day of week.
FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {m: i for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}),
    ("day of week", 0, 6, {d: i for i, d in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}),
)
DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# Go's time.ParseDuration: a sequence of decimal numbers, each with a unit.
GO_DURATION = re.compile(r"^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$|^0$")
_INT = re.compile(r"^\+?\d+$")  # strconv.Atoi; negative numbers are refused after parsing


def cron_problem(spec: str, descriptors: bool = True) -> str | None:
    """None if Argo's cron parser accepts `spec` (five fields, or a descriptor unless
    ``descriptors`` is False, as for a Sensor's reset time)."""
    if not isinstance(spec, str) or not spec.strip():
        return "an empty schedule"
    if spec.startswith("@") and not descriptors:
        return "%r: a Sensor's reset time takes five cron fields, not a descriptor" % spec
    if spec.startswith("@"):
        if spec in DESCRIPTORS:
            return None
        if spec.startswith("@every ") and GO_DURATION.match(spec[len("@every "):]):
            return None
        return "%r is not a descriptor Argo knows (%s, @every <duration>)" % (spec, ", ".join(DESCRIPTORS))
    fields = spec.split()
    if len(fields) != 5:
        return "%r has %d fields; Argo's cron takes 5 (minute hour day-of-month month day-of-week)" \
            % (spec, len(fields))
    for text, (what, low, high, names) in zip(fields, FIELDS):
        for part in (p for p in text.split(",") if p):
            problem = _range_problem(part, low, high, names)
            if problem:
                return "%r: %s %s" % (spec, what, problem)
    return None


def _range_problem(expr: str, low: int, high: int, names: dict) -> str | None:
    range_and_step = expr.split("/")
    low_high = range_and_step[0].split("-")
    if len(range_and_step) > 2:
        return "%r has more than one '/'" % expr
    if low_high[0] in ("*", "?"):
        start, end = low, high
    else:
        if len(low_high) > 2:
            return "%r has more than one '-'" % expr
        values = [names.get(v.lower()) if v.lower() in names else _number(v) for v in low_high]
        if None in values:
            return "%r is not a number%s" % (expr, " or a name" if names else "")
        start, end = values[0], values[-1]
    if len(range_and_step) == 2:
        step = _number(range_and_step[1])
        if step is None:
            return "%r: the step is not a number" % expr
        if len(low_high) == 1:
            end = high
        if step == 0:
            return "%r: the step must be a positive number" % expr
    if start < low or end > high:
        return "%r is outside %d-%d" % (expr, low, high)
    if start > end:
        return "%r starts after it ends" % expr
    return None


def _number(text: str) -> int | None:
    return int(text) if _INT.match(text) else None


def timezone_problem(name: str) -> str | None:
    """None if Go's time.LoadLocation would load `name` (an IANA zone name, or UTC/Local).
    Checked against this machine's tz database; with none at all, nothing can be said."""
    import zoneinfo

    if name in ("", "UTC", "Local"):
        return None
    if not isinstance(name, str) or name.startswith("/") or ".." in name.split("/"):
        return "timezone %r is not an IANA time zone name" % (name,)
    try:
        zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        if not zoneinfo.available_timezones():
            return None
        return "timezone %r is not an IANA time zone name (e.g. Europe/Paris, America/New_York, UTC)" % (name,)
    return None
