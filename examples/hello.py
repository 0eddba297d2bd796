"""The smallest flow: start -> hello -> end."""

from metaflow import FlowSpec, Parameter, step


class HelloFlow(FlowSpec):
    """Say hello, linearly."""

    greeting = Parameter("greeting", default="hello", help="What to say.")

    @step
    def start(self):
        self.message = "%s, world" % self.greeting
        self.next(self.hello)

    @step
    def hello(self):
        print(self.message)
        self.next(self.end)

    @step
    def end(self):
        print("done")


if __name__ == "__main__":
    HelloFlow()
