"""Functions run after the workflow ends: @exit_hook adds spec.hooks and one pod per function.

`notify` runs when the run succeeds, `page` when it fails; each gets the finished Run.
"""

from metaflow import FlowSpec, exit_hook, step


def notify(run=None):
    print("run %s succeeded" % (run.pathspec if run else "?"))


def page(run=None):
    print("run %s failed" % (run.pathspec if run else "?"))


@exit_hook(on_success=[notify], on_error=[page])
class ExitHooksFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    ExitHooksFlow()
