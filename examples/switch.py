"""A switch: one branch runs, chosen at run time."""

from metaflow import FlowSpec, Parameter, step


class SwitchFlow(FlowSpec):
    size = Parameter("size", default=5, type=int, help="Items to process.")

    @step
    def start(self):
        self.route = "big" if self.size > 10 else "small"
        self.next({"big": self.big, "small": self.small}, condition="route")

    @step
    def big(self):
        self.result = "big batch"
        self.next(self.merge)

    @step
    def small(self):
        self.result = "small batch"
        self.next(self.merge)

    @step
    def merge(self):
        self.next(self.end)

    @step
    def end(self):
        print(self.result)


if __name__ == "__main__":
    SwitchFlow()
