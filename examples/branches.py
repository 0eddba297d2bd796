"""A static split whose branches meet in a join."""

from metaflow import FlowSpec, step


class BranchesFlow(FlowSpec):
    @step
    def start(self):
        self.x = 1
        self.next(self.left, self.right)

    @step
    def left(self):
        self.x += 10
        self.next(self.join)

    @step
    def right(self):
        self.x += 100
        self.next(self.join)

    @step
    def join(self, inputs):
        self.total = sum(i.x for i in inputs)
        self.next(self.end)

    @step
    def end(self):
        print("total", self.total)


if __name__ == "__main__":
    BranchesFlow()
