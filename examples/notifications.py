"""Notifications on failure and success: Slack and PagerDuty, keys from Kubernetes Secrets.

Compiled with the create options in `notifications.args`: the bundle's `spec.hooks` run a
small pod per channel that reads its webhook URL / routing key from a Secret
(`slack-webhook`, `pagerduty`); no secret value is in the YAML.
"""

from metaflow import FlowSpec, step


class NotificationsFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.end)

    @step
    def end(self):
        print("done")


if __name__ == "__main__":
    NotificationsFlow()
