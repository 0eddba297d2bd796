"""A nightly report: @schedule makes the bundle carry a CronWorkflow that runs the template.

`argo-workflows create --output-file scheduled.yaml` writes the WorkflowTemplate and the
CronWorkflow (Argo 4 `schedules:`; `--argo-version 3.7` writes 3.x's `schedule:`).
"""

from metaflow import FlowSpec, Parameter, schedule, step


@schedule(cron="0 3 * * *", timezone="Europe/Berlin")
class NightlyReportFlow(FlowSpec):
    days = Parameter("days", default=7, type=int, help="How many days the report covers.")

    @step
    def start(self):
        self.window = list(range(self.days))
        self.next(self.end)

    @step
    def end(self):
        print("report over %d days" % len(self.window))


if __name__ == "__main__":
    NightlyReportFlow()
