"""Runs when data lands: @trigger makes the bundle carry an Argo Events Sensor.

An event named `data.ready` whose payload has `table` and `rows` starts a run with
`table` and `min_rows` set from them (`--only-yaml` needs no Argo Events config: the
Sensor uses Metaflow's METAFLOW_ARGO_EVENTS_* settings, or their usual defaults).
"""

from metaflow import FlowSpec, Parameter, step, trigger


@trigger(event={"name": "data.ready", "parameters": {"table": "table", "min_rows": "rows"}})
class TriggeredFlow(FlowSpec):
    table = Parameter("table", required=True, help="Table that was updated.")
    min_rows = Parameter("min_rows", default=1, type=int, help="Fail below this many rows.")

    @step
    def start(self):
        print("table %s updated (need %d rows)" % (self.table, self.min_rows))
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    TriggeredFlow()
