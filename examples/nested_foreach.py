"""A foreach inside a foreach: every (letter, number) pair runs once."""

from metaflow import FlowSpec, step


class NestedForeachFlow(FlowSpec):
    @step
    def start(self):
        self.letters = ["a", "b"]
        self.next(self.per_letter, foreach="letters")

    @step
    def per_letter(self):
        self.letter = self.input
        self.numbers = [1, 2, 3]
        self.next(self.per_number, foreach="numbers")

    @step
    def per_number(self):
        self.pair = "%s%d" % (self.letter, self.input)
        self.next(self.join_numbers)

    @step
    def join_numbers(self, inputs):
        self.pairs = sorted(i.pair for i in inputs)
        self.next(self.join_letters)

    @step
    def join_letters(self, inputs):
        self.pairs = sorted(p for i in inputs for p in i.pairs)
        self.next(self.end)

    @step
    def end(self):
        print(self.pairs)


if __name__ == "__main__":
    NestedForeachFlow()
